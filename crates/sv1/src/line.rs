//! Line framing: Stratum V1 messages are JSON objects separated by `\n`.
//!
//! The one framer of every SV1 reader (the pool, the translator's both sides, the fleet's
//! devices, the tap). Two ways in:
//!
//! - [`LineBuffer::split`]: a chunk just read goes through a callback, line by line. The lines
//!   complete within the chunk are lent from the chunk itself (no copy); only a line cut by the
//!   end of a read is kept, and the buffer allocates only while it holds one: an idle
//!   connection holds no heap memory. For servers holding thousands of connections.
//! - [`LineBuffer::feed`] (or [`LineBuffer::spare`] and [`LineBuffer::commit`]) and then
//!   [`LineBuffer::next_line`]: the bytes are copied in and the lines taken one at a time,
//!   whenever the reader wants them (across an `.await`, say). The buffer keeps its capacity,
//!   so a steady stream allocates nothing.
//!
//! Both frame the same way: lines end at `\n`, one `\r` before it is dropped, lines of nothing
//! but whitespace are skipped, and a line longer than the limit (newline and `\r` excluded) is
//! an error the caller answers by closing: a peer that sends megabytes without a newline is not
//! a miner. A pending line is refused as soon as it cannot end within the limit any more.

use std::ops::ControlFlow;

/// Why the buffer refuses to frame more input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line longer than {limit} bytes")]
pub struct LineTooLong {
    /// The buffer's limit: the longest line it frames, in bytes, newline and `\r` excluded.
    pub limit: usize,
}

/// One stream's framing. Two words (a pool's connection task embeds one) and, made by
/// [`LineBuffer::new`] or left by [`LineBuffer::split`] with nothing pending, no allocation.
pub struct LineBuffer {
    /// The bytes held, boxed so that a buffer holding none is small.
    held: Option<Box<Held>>,
    limit: usize,
}

#[derive(Default)]
struct Held {
    buf: Vec<u8>,
    /// Start of the bytes not yet returned.
    start: usize,
    /// How far the search for `\n` has got (avoids rescanning a long partial line).
    scanned: usize,
    /// Where the room handed out by the last `spare` starts.
    spare_start: usize,
}

impl LineBuffer {
    /// `limit`: the longest line accepted, newline excluded. Allocates nothing.
    pub const fn new(limit: usize) -> Self {
        LineBuffer { held: None, limit }
    }

    /// Frames `data`, the bytes just read, calling `on_line` with every complete line in order
    /// (without its `\n` and `\r`, blank lines skipped). A line that ends within `data` is lent
    /// from `data`; one that began in an earlier read is completed in the buffer. What follows
    /// the last newline is kept for the next call, and once no bytes are kept the buffer holds
    /// no allocation.
    ///
    /// `Ok(None)`: `data` is framed. `Ok(Some(b))`: `on_line` returned `Break(b)`; the bytes
    /// after that line are kept, for the next `split` (`&[]` will do) or `next_line`.
    /// `Err`: a complete line over the limit (it is dropped, the bytes after it kept: framing
    /// may go on) or a pending one that can no longer end within it. The lines before it were
    /// handed over. The outcome is that of [`LineBuffer::feed`] and then `next_line` until
    /// `None`, `Break` or `Err`; only the copies differ.
    pub fn split<B>(
        &mut self,
        mut data: &[u8],
        mut on_line: impl FnMut(&[u8]) -> ControlFlow<B>,
    ) -> Result<Option<B>, LineTooLong> {
        if self.pending() > 0 {
            // A line began in an earlier read: complete it here (and hand over any complete
            // lines a `Break` left), then go on in `data` itself.
            let cut = match memchr_nl(data) {
                Some(i) => i + 1,
                None => data.len(),
            };
            self.feed(&data[..cut]);
            data = &data[cut..];
            loop {
                let flow = match self.next_line() {
                    None => break,
                    Some(Err(e)) => Err(e),
                    Some(Ok(line)) => match on_line(line) {
                        ControlFlow::Continue(()) => continue,
                        ControlFlow::Break(b) => Ok(Some(b)),
                    },
                };
                self.keep(data);
                return flow;
            }
            if self.pending() > 0 {
                // No newline in `data`: it all went to the pending line.
                debug_assert!(data.is_empty());
                return Ok(None);
            }
        }
        while let Some(i) = memchr_nl(data) {
            let line = strip_cr(&data[..i]);
            data = &data[i + 1..];
            if line.len() > self.limit {
                self.keep(data);
                return Err(self.error());
            }
            if is_blank(line) {
                continue;
            }
            if let ControlFlow::Break(b) = on_line(line) {
                self.keep(data);
                return Ok(Some(b));
            }
        }
        self.keep(data);
        if let Some(held) = self.held.as_deref_mut() {
            // The tail has no newline: no need to search it again.
            held.scanned = held.buf.len();
        }
        if partial_too_long(data, self.limit) {
            return Err(self.error());
        }
        Ok(None)
    }

    /// Keeps `rest`, the bytes after those `split` framed; with nothing to keep, gives the
    /// buffer back.
    fn keep(&mut self, rest: &[u8]) {
        if !rest.is_empty() {
            self.feed(rest);
        } else if self.pending() == 0 {
            self.held = None;
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let held = self.held.get_or_insert_with(Box::default);
        held.compact();
        held.buf.extend_from_slice(data);
    }

    /// Room to read into directly (at least `min` bytes); follow with [`LineBuffer::commit`].
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        let held = self.held.get_or_insert_with(Box::default);
        held.compact();
        let len = held.buf.len();
        held.spare_start = len;
        if held.buf.capacity() - len < min {
            held.buf.reserve(min);
        }
        let cap = held.buf.capacity();
        held.buf.resize(cap, 0);
        &mut held.buf[len..]
    }

    /// Keeps `n` of the bytes written into the last [`LineBuffer::spare`] and drops the rest.
    /// (`spare` may move the buffered data, so it records where its room starts.)
    pub fn commit(&mut self, n: usize) {
        if let Some(held) = self.held.as_deref_mut() {
            let end = (held.spare_start + n).min(held.buf.len());
            held.buf.truncate(end);
        }
    }

    /// Length of the buffered data, where [`LineBuffer::spare`]'s slice starts.
    pub fn filled(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.buf.len())
    }

    /// The next complete line without its `\n` (and `\r`), skipping empty lines. `None` when no
    /// complete line is buffered; `Err` when the pending line exceeds the limit.
    pub fn next_line(&mut self) -> Option<Result<&[u8], LineTooLong>> {
        let limit = self.limit;
        let held = self.held.as_deref_mut()?;
        loop {
            let start = held.start;
            let from = start.max(held.scanned);
            match memchr_nl(&held.buf[from..]) {
                Some(i) => {
                    let end = from + i;
                    held.start = end + 1;
                    held.scanned = held.start;
                    let line = strip_cr(&held.buf[start..end]);
                    if line.len() > limit {
                        return Some(Err(LineTooLong { limit }));
                    }
                    if is_blank(line) {
                        continue;
                    }
                    // Re-borrow so the returned slice ties to `self` only for this call.
                    let len = line.len();
                    return Some(Ok(&held.buf[start..start + len]));
                }
                None => {
                    held.scanned = held.buf.len();
                    if partial_too_long(&held.buf[start..], limit) {
                        return Some(Err(LineTooLong { limit }));
                    }
                    return None;
                }
            }
        }
    }

    /// Bytes received but not yet returned as lines.
    pub fn pending(&self) -> usize {
        self.held.as_ref().map_or(0, |h| h.buf.len() - h.start)
    }

    /// The heap memory the buffer holds, in bytes: 0 after [`LineBuffer::split`] left nothing
    /// pending.
    pub fn heap_size(&self) -> usize {
        self.held
            .as_ref()
            .map_or(0, |h| std::mem::size_of::<Held>() + h.buf.capacity())
    }

    fn error(&self) -> LineTooLong {
        LineTooLong { limit: self.limit }
    }
}

impl Held {
    fn compact(&mut self) {
        if self.start == 0 {
            return;
        }
        self.buf.copy_within(self.start.., 0);
        self.buf.truncate(self.buf.len() - self.start);
        self.scanned -= self.start;
        self.start = 0;
    }
}

/// Whether an unfinished line can no longer end within `limit`: it is longer, unless by one
/// `\r` that a `\n` may still follow.
fn partial_too_long(partial: &[u8], limit: usize) -> bool {
    let n = partial.len();
    n > limit && !(n - limit == 1 && partial.last() == Some(&b'\r'))
}

fn memchr_nl(data: &[u8]) -> Option<usize> {
    data.iter().position(|&b| b == b'\n')
}

fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(lb: &mut LineBuffer) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(l) = lb.next_line() {
            out.push(String::from_utf8(l.unwrap().to_vec()).unwrap());
        }
        out
    }

    /// What `split` hands over for `data`: the lines, then the result as text.
    fn split_all(lb: &mut LineBuffer, data: &[u8]) -> (Vec<String>, Result<(), LineTooLong>) {
        let mut out = Vec::new();
        let r = lb.split(data, |l| {
            out.push(String::from_utf8(l.to_vec()).unwrap());
            ControlFlow::<()>::Continue(())
        });
        (out, r.map(|b| assert!(b.is_none())))
    }

    #[test]
    fn splits_on_newlines_across_reads() {
        let mut lb = LineBuffer::new(100);
        lb.feed(b"{\"a\":1}\n{\"b\"");
        assert_eq!(lines(&mut lb), ["{\"a\":1}"]);
        lb.feed(b":2}\r\n\n  \n{\"c\":3}\n");
        assert_eq!(lines(&mut lb), ["{\"b\":2}", "{\"c\":3}"]);
        assert_eq!(lb.pending(), 0);
    }

    #[test]
    fn byte_at_a_time_gives_the_same_lines() {
        let input = b"one\ntwo\r\nthree\n";
        let mut lb = LineBuffer::new(100);
        let mut got = Vec::new();
        for b in input {
            lb.feed(std::slice::from_ref(b));
            got.extend(lines(&mut lb));
        }
        assert_eq!(got, ["one", "two", "three"]);
    }

    #[test]
    fn long_lines_are_refused_with_or_without_newline() {
        let mut lb = LineBuffer::new(8);
        lb.feed(b"123456789\n");
        assert_eq!(lb.next_line(), Some(Err(LineTooLong { limit: 8 })));
        let mut lb = LineBuffer::new(8);
        lb.feed(b"12345678");
        assert_eq!(
            lb.next_line(),
            None,
            "exactly at the limit, newline may still come"
        );
        lb.feed(b"9a");
        assert_eq!(lb.next_line(), Some(Err(LineTooLong { limit: 8 })));
        let mut lb = LineBuffer::new(8);
        lb.feed(b"12345678\n");
        assert_eq!(lb.next_line(), Some(Ok(&b"12345678"[..])));
        // One byte over is refused at once, unless it is the `\r` of a `\r\n`.
        let mut lb = LineBuffer::new(8);
        lb.feed(b"12345678\r");
        assert_eq!(lb.next_line(), None);
        lb.feed(b"\n");
        assert_eq!(lb.next_line(), Some(Ok(&b"12345678"[..])));
        let mut lb = LineBuffer::new(8);
        lb.feed(b"123456789");
        assert_eq!(lb.next_line(), Some(Err(LineTooLong { limit: 8 })));
    }

    #[test]
    fn reading_into_spare_room() {
        let mut lb = LineBuffer::new(100);
        let room = lb.spare(16);
        room[..4].copy_from_slice(b"ab\nc");
        lb.commit(4);
        assert_eq!(lines(&mut lb), ["ab"]);
        assert_eq!(lb.pending(), 1);
        // `spare` compacts the consumed line away; the room must still follow the data.
        let room = lb.spare(16);
        room[..2].copy_from_slice(b"d\n");
        lb.commit(2);
        assert_eq!(lines(&mut lb), ["cd"]);
        assert_eq!(lb.pending(), 0);
    }

    #[test]
    fn split_lends_complete_lines_from_the_chunk() {
        let data = b"{\"a\":1}\r\n \n{\"b\":2}\n{\"c\"";
        let range = data.as_ptr_range();
        let mut lb = LineBuffer::new(100);
        let mut got = Vec::new();
        let r = lb.split(data, |l| {
            assert!(range.contains(&l.as_ptr()), "a line copied");
            got.push(l.to_vec());
            ControlFlow::<()>::Continue(())
        });
        assert_eq!(r, Ok(None));
        assert_eq!(got, [&b"{\"a\":1}"[..], b"{\"b\":2}"]);
        assert_eq!(lb.pending(), 4, "the cut line is kept");
        assert_eq!(
            split_all(&mut lb, b":3}\n{\"d\":4}\n"),
            (vec!["{\"c\":3}".into(), "{\"d\":4}".into()], Ok(()))
        );
    }

    #[test]
    fn split_holds_no_allocation_when_idle() {
        let mut lb = LineBuffer::new(100);
        assert_eq!(lb.heap_size(), 0, "new allocates nothing");
        split_all(&mut lb, b"one\ntwo\n").1.unwrap();
        assert_eq!(lb.heap_size(), 0, "complete lines are never copied");
        split_all(&mut lb, b"thr").1.unwrap();
        assert!(lb.heap_size() >= 3, "a cut line is kept");
        assert_eq!(split_all(&mut lb, b"ee").0, Vec::<String>::new());
        assert_eq!(split_all(&mut lb, b"\nfo").0, ["three"]);
        assert!(lb.heap_size() > 0);
        assert_eq!(split_all(&mut lb, b"ur\n").0, ["four"]);
        assert_eq!(
            (lb.pending(), lb.heap_size()),
            (0, 0),
            "released once complete"
        );
        // A buffer the pull side grew is given back too.
        lb.feed(b"five\n");
        assert_eq!(lines(&mut lb), ["five"]);
        assert!(lb.heap_size() > 0);
        split_all(&mut lb, b"six\n").1.unwrap();
        assert_eq!(lb.heap_size(), 0);
    }

    #[test]
    fn split_limits_are_exact() {
        let over = Err(LineTooLong { limit: 8 });
        let cases: [(&[u8], Result<(), LineTooLong>, usize); 8] = [
            (b"12345678\n", Ok(()), 0),
            (b"12345678\r\n", Ok(()), 0),
            (b"123456789\n", over, 0),
            (b"1234567\r\r\n", Ok(()), 0),
            (b"12345678", Ok(()), 8),
            (b"12345678\r", Ok(()), 9),
            (b"123456789", over, 9),
            (b"12345678\r\r", over, 10),
        ];
        for (data, want, pending) in cases {
            // Whole, byte by byte, and through the pull side: the same verdict.
            let mut lb = LineBuffer::new(8);
            assert_eq!(split_all(&mut lb, data).1, want, "{data:?}");
            assert_eq!(lb.pending(), pending, "{data:?}");
            let mut lb = LineBuffer::new(8);
            let mut r = Ok(());
            for b in data {
                r = r.and(split_all(&mut lb, std::slice::from_ref(b)).1);
            }
            assert_eq!(r, want, "{data:?} byte by byte");
            let mut lb = LineBuffer::new(8);
            lb.feed(data);
            let pulled = std::iter::from_fn(|| lb.next_line().map(|l| l.map(|_| ())))
                .find(Result::is_err)
                .unwrap_or(Ok(()));
            assert_eq!(pulled, want, "{data:?} pulled");
        }
        let mut lb = LineBuffer::new(8);
        split_all(&mut lb, b"1234").1.unwrap();
        assert_eq!(split_all(&mut lb, b"5678\r").1, Ok(()));
        assert_eq!(split_all(&mut lb, b"\n").0, ["12345678"]);
        split_all(&mut lb, b"1234").1.unwrap();
        assert_eq!(
            split_all(&mut lb, b"56789").1,
            over,
            "known before the newline"
        );
    }

    #[test]
    fn split_byte_at_a_time_equals_all_at_once() {
        let input: &[u8] =
            b"{\"id\":1}\n\r\n\t \n{\"id\":2}\r\n{\"id\":33333333}\n\n{\"id\":4}\ntail";
        for limit in [8, 9, 12, 15, 16, 100] {
            let mut whole = LineBuffer::new(limit);
            let want = split_all(&mut whole, input);
            let mut pulled = LineBuffer::new(limit);
            pulled.feed(input);
            let mut pull_lines = Vec::new();
            let mut pull_result = Ok(());
            while let Some(l) = pulled.next_line() {
                match l {
                    Ok(l) => pull_lines.push(String::from_utf8(l.to_vec()).unwrap()),
                    Err(e) => {
                        pull_result = Err(e);
                        break;
                    }
                }
            }
            assert_eq!(
                want,
                (pull_lines, pull_result),
                "limit {limit}: split and pull"
            );
            for step in 1..=input.len() {
                let mut lb = LineBuffer::new(limit);
                let (mut got, mut r) = (Vec::new(), Ok(()));
                for chunk in input.chunks(step) {
                    let (l, res) = split_all(&mut lb, chunk);
                    got.extend(l);
                    if res.is_err() {
                        r = res;
                        break;
                    }
                }
                assert_eq!((got, r), want, "limit {limit}, reads of {step}");
                if want.1.is_ok() {
                    assert_eq!(lb.pending(), whole.pending());
                }
            }
        }
    }

    #[test]
    fn split_stops_at_break_and_keeps_the_rest() {
        let mut lb = LineBuffer::new(100);
        let mut seen = Vec::new();
        let r = lb.split(b"a\nb\nc\nd", |l| {
            seen.push(l.to_vec());
            if l == b"b" {
                ControlFlow::Break(7)
            } else {
                ControlFlow::Continue(())
            }
        });
        assert_eq!(r, Ok(Some(7)));
        assert_eq!(seen, [b"a", b"b"]);
        assert_eq!(lb.pending(), 3, "c, its newline and d");
        assert_eq!(split_all(&mut lb, b"").0, ["c"]);
        assert_eq!(split_all(&mut lb, b"e\nf\n").0, ["de", "f"]);
        assert_eq!(lb.heap_size(), 0);
        // A line over the limit is dropped; what follows is still framed.
        let mut lb = LineBuffer::new(4);
        assert_eq!(
            split_all(&mut lb, b"ok\n12345\nnext\n"),
            (vec!["ok".into()], Err(LineTooLong { limit: 4 }))
        );
        assert_eq!(split_all(&mut lb, b"").0, ["next"]);
    }

    #[test]
    fn the_buffer_stays_small() {
        // A pool's connection task embeds one (see pool's `a_connection_task_stays_small`).
        assert!(std::mem::size_of::<LineBuffer>() <= 2 * std::mem::size_of::<usize>());
    }
}
