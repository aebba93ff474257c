//! Bytes fed to a connection that the decoder has not taken yet.
//!
//! codec_sv2's decoder asks for its input one window at a time (a handshake message, an
//! encrypted header, a payload chunk) and each window has to be filled whole, so bytes that
//! arrive ahead of the window they belong to wait here. The buffer is given back whenever it
//! drains, so that an idle connection holds no heap: thousands of them live in one fleet
//! process, and one allocation per socket read is small next to codec_sv2's per frame.

#[derive(Debug, Default)]
pub(crate) struct Input {
    buf: Vec<u8>,
    /// Bytes before this offset have been consumed.
    start: usize,
}

impl Input {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > self.buf.len() / 2 {
            // Most of the buffer is consumed: move the rest to the front rather than growing.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    pub(crate) fn available(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub(crate) fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.len());
        self.start += n;
        if self.start == self.buf.len() {
            self.buf = Vec::new();
            self.start = 0;
        }
    }

    /// Heap bytes held (capacity), for footprint reports.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buf.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_out_in_order_across_pushes_and_partial_consumes() {
        let mut input = Input::default();
        input.push(b"abcdef");
        input.consume(4);
        input.push(b"gh");
        assert_eq!(input.available(), b"efgh");
        input.consume(1);
        input.push(b"ij");
        assert_eq!(input.available(), b"fghij");
        input.consume(5);
        assert_eq!(input.len(), 0);
    }

    #[test]
    fn memory_is_released_once_drained() {
        let mut input = Input::default();
        input.push(&vec![7; 100_000]);
        assert!(input.heap_bytes() >= 100_000);
        input.consume(99_999);
        assert!(input.heap_bytes() >= 100_000, "not drained yet");
        input.consume(1);
        assert_eq!(input.heap_bytes(), 0);
        input.push(&[1; 100]);
        input.consume(100);
        assert_eq!(input.heap_bytes(), 0);
    }
}
