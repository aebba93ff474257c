//! The byte reader every structured fuzz harness in the workspace draws its choices from: a
//! fuzzer's input read front to back, and past its end every read is zero, so that any input,
//! however short, is a complete run (the committed corpora replay as the fuzzers made them).

/// A fuzzer's input, consumed front to back.
#[derive(Clone, Copy, Debug)]
pub struct FuzzInput<'a>(&'a [u8]);

impl<'a> FuzzInput<'a> {
    /// Reads `data` from its start.
    pub fn new(data: &'a [u8]) -> Self {
        FuzzInput(data)
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The next byte, or 0.
    pub fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little-endian, zeros past the end.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little-endian, zeros past the end.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next `n` bytes, or what is left.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }

    /// The bytes up to the next newline (which is consumed), or to the end.
    pub fn line(&mut self) -> &'a [u8] {
        match self.0.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = &self.0[..i];
                self.0 = &self.0[i + 1..];
                line
            }
            None => self.take(self.0.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_run_front_to_back_then_zero() {
        let mut i = FuzzInput::new(b"\x01\x02\x03ab\ncd");
        assert_eq!(i.u16(), 0x0201);
        assert_eq!(i.u8(), 3);
        assert_eq!(i.line(), b"ab");
        assert!(!i.is_empty());
        assert_eq!(i.take(5), b"cd");
        assert!(i.is_empty());
        assert_eq!((i.u8(), i.u32(), i.line()), (0, 0, &b""[..]));
    }
}
