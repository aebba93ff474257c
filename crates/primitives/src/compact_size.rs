//! Bitcoin's CompactSize: the variable-length integer that prefixes counts and lengths in
//! transactions and blocks.

/// Appends `n` in CompactSize form.
pub fn write(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xfc => out.push(n as u8),
        0xfd..=0xffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xfe);
            out.extend_from_slice(&(n as u32).to_le_bytes());
        }
        _ => {
            out.push(0xff);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// How many bytes [`write`] takes for `n`.
pub fn len(n: u64) -> usize {
    match n {
        0..=0xfc => 1,
        0xfd..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn boundaries() {
        for (n, bytes) in [
            (0u64, &[0x00][..]),
            (0xfc, &[0xfc]),
            (0xfd, &[0xfd, 0xfd, 0x00]),
            (0xffff, &[0xfd, 0xff, 0xff]),
            (0x1_0000, &[0xfe, 0x00, 0x00, 0x01, 0x00]),
            (0x1_0000_0000, &[0xff, 0, 0, 0, 0, 1, 0, 0, 0]),
        ] {
            let mut out = Vec::new();
            super::write(&mut out, n);
            assert_eq!(out, bytes, "{n:#x}");
            assert_eq!(super::len(n), bytes.len());
        }
    }
}
