//! Aggregated mode's split of the channel's extranonce among devices.
//!
//! The upstream channel rolls `extranonce_size` bytes after its prefix. The translator keeps the
//! first `device_bytes` of them for itself and gives each device its own value there (spec
//! 5.1.2.1, the "locally reserved" bytes); the device rolls the rest as its SV1 extranonce2. So
//! a device's SV1 `extranonce1` is `channel prefix || device bytes`, every device gets the same
//! `coinb1`/`coinb2`, and a share's SV2 extranonce is `device bytes || extranonce2`.
//!
//! A device's value is unique among the connected devices. Freed values are reused last-freed
//! last (a queue), so a value comes back as late as possible: a departed device's shares still
//! in flight upstream never share an extranonce with a newcomer's unless the space is full.

use std::collections::VecDeque;

/// The channel's extranonce cannot be split among devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// The channel rolls too few bytes to give devices the least extranonce2 configured.
    #[error("the channel rolls {channel} extranonce bytes; devices need at least {min_extranonce2} of their own")]
    TooSmall {
        /// Bytes the channel rolls (its extranonce size).
        channel: usize,
        /// The least extranonce2 a device must be left (`min_extranonce2_size`).
        min_extranonce2: usize,
    },
}

/// How the channel's rolled extranonce bytes are split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The translator's per-device bytes (0: room for one device only).
    pub device_bytes: usize,
    /// What each device rolls (SV1 `extranonce2_size`).
    pub extranonce2_size: usize,
}

impl Layout {
    /// Gives devices `want_device_bytes` of the channel's `channel_size` bytes, fewer if the
    /// devices would be left less than `min_extranonce2`.
    pub fn new(
        channel_size: usize,
        want_device_bytes: usize,
        min_extranonce2: usize,
    ) -> Result<Layout, LayoutError> {
        if channel_size < min_extranonce2.max(1) {
            return Err(LayoutError::TooSmall {
                channel: channel_size,
                min_extranonce2,
            });
        }
        let device_bytes = want_device_bytes
            .min(channel_size - min_extranonce2.max(1))
            .min(4);
        Ok(Layout {
            device_bytes,
            extranonce2_size: channel_size - device_bytes,
        })
    }

    /// How many devices can be connected at once.
    pub fn capacity(&self) -> u64 {
        1u64 << (8 * self.device_bytes)
    }
}

/// A device's value in the translator's bytes, big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceExtranonce {
    value: u32,
    len: u8,
}

impl DeviceExtranonce {
    /// The value big-endian in a 4-byte array, and how many of its last bytes are the device's.
    pub fn bytes(&self) -> ([u8; 4], usize) {
        (self.value.to_be_bytes(), self.len as usize)
    }

    /// Appends the device's bytes to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        let (b, n) = self.bytes();
        out.extend_from_slice(&b[4 - n..]);
    }

    /// The value as a number.
    pub fn value(&self) -> u32 {
        self.value
    }
}

/// Hands out device values, unique among those held.
#[derive(Debug)]
pub struct ExtranonceAllocator {
    layout: Layout,
    /// Values never handed out start here.
    fresh: u64,
    freed: VecDeque<u32>,
    held: usize,
}

impl ExtranonceAllocator {
    /// An allocator with nothing handed out, over `layout`.
    pub fn new(layout: Layout) -> Self {
        ExtranonceAllocator {
            layout,
            fresh: 0,
            freed: VecDeque::new(),
            held: 0,
        }
    }

    /// The split the values are handed out under.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// How many values are handed out and not yet freed.
    pub fn held(&self) -> usize {
        self.held
    }

    /// A value for a new device; `None` when every value is held.
    pub fn allocate(&mut self) -> Option<DeviceExtranonce> {
        let value = if self.fresh < self.layout.capacity() {
            self.fresh += 1;
            (self.fresh - 1) as u32
        } else {
            self.freed.pop_front()?
        };
        self.held += 1;
        Some(DeviceExtranonce {
            value,
            len: self.layout.device_bytes as u8,
        })
    }

    /// The device left: its value may be handed out again, after every value freed before it.
    pub fn release(&mut self, e: DeviceExtranonce) {
        debug_assert!(!self.freed.contains(&e.value), "released twice");
        self.freed.push_back(e.value);
        self.held -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn layout_keeps_the_devices_minimum() {
        let l = Layout::new(8, 2, 4).unwrap();
        assert_eq!((l.device_bytes, l.extranonce2_size), (2, 6));
        assert_eq!(l.capacity(), 65_536);
        // Our pool's extended channels roll 4 bytes: two for devices, two for us.
        let l = Layout::new(4, 2, 2).unwrap();
        assert_eq!((l.device_bytes, l.extranonce2_size), (2, 2));
        let l = Layout::new(4, 2, 4).unwrap();
        assert_eq!((l.device_bytes, l.extranonce2_size), (0, 4));
        assert_eq!(l.capacity(), 1);
        assert!(Layout::new(3, 2, 4).is_err());
        assert!(Layout::new(0, 0, 0).is_err());
    }

    #[test]
    fn values_are_unique_while_held_and_reused_oldest_freed_first() {
        let mut a = ExtranonceAllocator::new(Layout::new(3, 1, 2).unwrap());
        let mut held: Vec<DeviceExtranonce> = (0..256).map(|_| a.allocate().unwrap()).collect();
        let distinct: HashSet<u32> = held.iter().map(|e| e.value()).collect();
        assert_eq!(distinct.len(), 256);
        assert_eq!(a.allocate(), None, "one byte: 256 devices");
        let first = held.remove(10);
        let second = held.remove(20);
        a.release(first);
        a.release(second);
        assert_eq!(a.allocate(), Some(first));
        assert_eq!(a.allocate(), Some(second));
        assert_eq!(a.allocate(), None);
        assert_eq!(a.held(), 256);
        let mut out = Vec::new();
        first.write(&mut out);
        assert_eq!(out, [first.value() as u8]);
    }
}
