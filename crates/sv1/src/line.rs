//! Line framing: Stratum V1 messages are JSON objects separated by `\n`.
//!
//! Bytes go in as they arrive; complete lines come out as borrowed slices, so parsing a line
//! costs no copy beyond the one into this buffer. A line longer than the limit is an error the
//! caller answers by closing: a peer that sends megabytes without a newline is not a miner.

/// Why the buffer refuses to frame more input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line longer than {limit} bytes")]
pub struct LineTooLong {
    pub limit: usize,
}

pub struct LineBuffer {
    buf: Vec<u8>,
    /// Start of the bytes not yet returned.
    start: usize,
    /// How far the search for `\n` has got (avoids rescanning a long partial line).
    scanned: usize,
    limit: usize,
    /// Where the room handed out by the last `spare` starts.
    spare_start: usize,
}

impl LineBuffer {
    /// `limit`: the longest line accepted, newline excluded.
    pub fn new(limit: usize) -> Self {
        LineBuffer {
            buf: Vec::with_capacity(limit.min(4096) + 1),
            start: 0,
            scanned: 0,
            limit,
            spare_start: 0,
        }
    }

    /// Appends received bytes.
    pub fn feed(&mut self, data: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(data);
    }

    /// Room to read into directly (at least `min` bytes); follow with [`LineBuffer::commit`].
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        self.compact();
        let len = self.buf.len();
        self.spare_start = len;
        if self.buf.capacity() - len < min {
            self.buf.reserve(min);
        }
        let cap = self.buf.capacity();
        self.buf.resize(cap, 0);
        &mut self.buf[len..]
    }

    /// Keeps `n` of the bytes written into the last [`LineBuffer::spare`] and drops the rest.
    /// (`spare` may move the buffered data, so it records where its room starts.)
    pub fn commit(&mut self, n: usize) {
        let end = (self.spare_start + n).min(self.buf.len());
        self.buf.truncate(end);
    }

    /// Length of the buffered data, where [`LineBuffer::spare`]'s slice starts.
    pub fn filled(&self) -> usize {
        self.buf.len()
    }

    /// The next complete line without its `\n` (and `\r`), skipping empty lines. `None` when no
    /// complete line is buffered; `Err` when the pending line exceeds the limit.
    pub fn next_line(&mut self) -> Option<Result<&[u8], LineTooLong>> {
        loop {
            let from = self.start.max(self.scanned);
            match self.buf[from..].iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let end = from + i;
                    let line_start = self.start;
                    self.start = end + 1;
                    self.scanned = self.start;
                    let mut line = &self.buf[line_start..end];
                    if let [rest @ .., b'\r'] = line {
                        line = rest;
                    }
                    if line.len() > self.limit {
                        return Some(Err(LineTooLong { limit: self.limit }));
                    }
                    if line.iter().all(|b| b.is_ascii_whitespace()) {
                        continue;
                    }
                    // Re-borrow so the returned slice ties to `self` only for this call.
                    let (s, e) = (line_start, line_start + line.len());
                    return Some(Ok(&self.buf[s..e]));
                }
                None => {
                    self.scanned = self.buf.len();
                    if self.buf.len() - self.start > self.limit + 1 {
                        return Some(Err(LineTooLong { limit: self.limit }));
                    }
                    return None;
                }
            }
        }
    }

    /// Bytes received but not yet returned as lines.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.start
    }

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
}
