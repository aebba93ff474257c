//! Byte counting that reports deltas, so that a reader of `LinkBytes` events sums them.

/// Application bytes moved one way on one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByteCounter {
    total: u64,
    reported: u64,
}

impl ByteCounter {
    /// Counts `bytes` more.
    pub fn add(&mut self, bytes: usize) {
        self.total += bytes as u64;
    }

    /// Everything counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes counted since the previous call (zero when nothing moved).
    pub fn take_delta(&mut self) -> u64 {
        let delta = self.total - self.reported;
        self.reported = self.total;
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_sum_to_the_total() {
        let mut c = ByteCounter::default();
        assert_eq!(c.take_delta(), 0);
        c.add(100);
        c.add(23);
        assert_eq!(c.take_delta(), 123);
        assert_eq!(c.take_delta(), 0);
        c.add(7);
        assert_eq!(c.total(), 130);
        assert_eq!(c.take_delta(), 7);
        let mut sum = 0;
        for i in 0..1000 {
            c.add(i);
            if i % 7 == 0 {
                sum += c.take_delta();
            }
        }
        sum += c.take_delta();
        assert_eq!(sum + 130, c.total());
    }
}
