//! Bytes on their way to one SV1 client, with a line many clients share (a job's
//! `mining.notify`) carried by reference instead of copied per client.

use std::sync::Arc;

/// Bytes on their way to one miner: the session's own (replies, difficulties, re-sent jobs) and,
/// at one point among them, a job's notify line shared by every connection that gets it. The
/// shared line is never copied into the connection's bytes: the shell writes the three parts
/// with one vectored write (a new job to thousands of miners copies nothing per miner).
#[derive(Debug, Default)]
pub struct Outbox {
    own: Vec<u8>,
    /// The shared line and where it goes among `own`.
    line: Option<(usize, Arc<[u8]>)>,
}

impl Outbox {
    /// Where the session appends its own bytes (after everything queued so far).
    pub fn own(&mut self) -> &mut Vec<u8> {
        &mut self.own
    }

    /// Queues a shared line after everything queued so far. A second one before the next
    /// write (rare) is copied in.
    pub fn push_shared(&mut self, line: Arc<[u8]>) {
        match self.line {
            None => self.line = Some((self.own.len(), line)),
            Some(_) => self.own.extend_from_slice(&line),
        }
    }

    /// Replaces `range` of the own bytes (whole lines: the shared line sits between lines,
    /// never inside the range) with `with`, keeping the shared line where it was among them.
    pub fn replace_own(&mut self, range: std::ops::Range<usize>, with: &[u8]) {
        if let Some((at, _)) = &mut self.line {
            if *at >= range.end {
                *at = *at - range.len() + with.len();
            }
        }
        self.own.splice(range, with.iter().copied());
    }

    /// Whether nothing is waiting to be written.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.line.is_none()
    }

    /// What to write, in order: the own bytes before the shared line, the line, the own bytes
    /// after it (empty slices where there is nothing).
    pub fn pending(&self) -> [&[u8]; 3] {
        match &self.line {
            Some((at, line)) => [&self.own[..*at], line, &self.own[*at..]],
            None => [&self.own, &[], &[]],
        }
    }

    /// The first `n` bytes of [`Outbox::pending`] were written.
    pub fn consume(&mut self, n: usize) {
        let Some((at, line)) = self.line.take() else {
            // All written (the usual case): no draining to do.
            if n >= self.own.len() {
                self.own.clear();
            } else {
                self.own.drain(..n);
            }
            return;
        };
        if n <= at {
            self.own.drain(..n);
            self.line = Some((at - n, line));
            return;
        }
        let into_line = n - at;
        self.own.drain(..at);
        if into_line < line.len() {
            // Part of the line went out (the socket buffer is full): the rest becomes our own.
            self.own.splice(..0, line[into_line..].iter().copied());
        } else {
            let past = (into_line - line.len()).min(self.own.len());
            self.own.drain(..past);
        }
    }

    /// Bytes of own buffer held.
    pub fn capacity(&self) -> usize {
        self.own.capacity()
    }

    /// Gives the own buffer's memory back; only when everything was written.
    pub fn release(&mut self) {
        if self.is_empty() {
            self.own = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(before: &[u8], line: &[u8], after: &[u8]) -> Outbox {
        let mut o = Outbox::default();
        o.own().extend_from_slice(before);
        o.push_shared(line.into());
        o.own().extend_from_slice(after);
        o
    }

    #[test]
    fn a_replaced_line_keeps_the_shared_line_in_its_place() {
        let mut o = outbox(b"a\nbb\n", b"N\n", b"cc\ndd\n");
        // Before the shared line, longer.
        o.replace_own(2..5, b"BBBB\n");
        assert_eq!(pending(&o), b"a\nBBBB\nN\ncc\ndd\n");
        // After it, shorter.
        o.replace_own(10..13, b"D\n");
        assert_eq!(pending(&o), b"a\nBBBB\nN\ncc\nD\n");
        o.consume(9);
        assert_eq!(pending(&o), b"cc\nD\n");
    }

    fn pending(o: &Outbox) -> Vec<u8> {
        o.pending().concat()
    }

    #[test]
    fn the_shared_line_goes_out_between_the_own_bytes_it_was_queued_among() {
        let o = outbox(b"reply\n", b"notify\n", b"after\n");
        let [a, b, c] = o.pending();
        assert_eq!(
            (a, b, c),
            (&b"reply\n"[..], &b"notify\n"[..], &b"after\n"[..])
        );
        assert_eq!(outbox(b"", b"n\n", b"").pending().concat(), b"n\n");
    }

    #[test]
    fn writes_cut_anywhere_deliver_every_byte_once_and_in_order() {
        let (before, line, after) = (&b"0123"[..], &b"abcdefg"[..], &b"XYZ"[..]);
        let whole = [before, line, after].concat();
        // Every way of writing it in two pieces, and byte by byte.
        for cut in 0..=whole.len() {
            let mut o = outbox(before, line, after);
            let mut sent = pending(&o)[..cut].to_vec();
            o.consume(cut);
            sent.extend_from_slice(&pending(&o));
            o.consume(pending(&o).len());
            assert_eq!(sent, whole, "cut at {cut}");
            assert!(o.is_empty(), "cut at {cut}");
        }
        let mut o = outbox(before, line, after);
        let mut sent = Vec::new();
        while !o.is_empty() {
            sent.push(pending(&o)[0]);
            o.consume(1);
        }
        assert_eq!(sent, whole);
    }

    #[test]
    fn bytes_queued_after_a_partial_write_follow_the_rest() {
        let mut o = outbox(b"r1", b"LINE", b"");
        o.consume(3); // "r1" and "L"
        o.own().extend_from_slice(b"r2");
        assert_eq!(pending(&o), b"INEr2");
    }

    #[test]
    fn a_second_shared_line_is_copied_after_the_first() {
        let mut o = outbox(b"a", b"L1", b"b");
        o.push_shared(b"L2".as_slice().into());
        assert_eq!(pending(&o), b"aL1bL2");
        o.consume(6);
        assert!(o.is_empty());
    }

    #[test]
    fn release_frees_only_an_empty_outbox() {
        let mut o = outbox(b"abc", b"L", b"");
        o.release();
        assert_eq!(pending(&o), b"abcL");
        o.consume(4);
        assert!(o.capacity() > 0);
        o.release();
        assert_eq!(o.capacity(), 0);
    }
}
