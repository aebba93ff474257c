//! A fast path for the one message a pool reads thousands of times a second: `mining.submit`.
//!
//! Miners send it in one of a few fixed shapes: an object with `id`, `method` and `params` in
//! any order, `params` an array of short hex strings. This reader accepts exactly that shape and
//! nothing else; anything unusual (escapes, non-ASCII text, extra keys, nesting, numbers as
//! params) returns `None`, and the caller falls back to the general reader ([`crate::parse_line`]),
//! which also produces the precise error. So the fast path never decides what is valid on its
//! own: it only recognises the common case of what the general reader would accept.

/// The fields of a `mining.submit`, as spans of the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastSubmit<'a> {
    /// The id's raw text, to echo verbatim.
    pub id: &'a str,
    pub worker: &'a str,
    pub job_id: &'a str,
    /// Hex, not yet decoded: its length is checked against the session's extranonce2 size.
    pub extranonce2: &'a str,
    pub ntime: u32,
    pub nonce: u32,
    pub version_bits: Option<u32>,
}

/// Reads `line` if it is a plain `mining.submit`; `None` otherwise (use the general reader).
#[inline]
pub fn parse_submit<'a>(line: &'a [u8]) -> Option<FastSubmit<'a>> {
    let mut r = Reader { b: line, i: 0 };
    r.ws();
    r.eat(b'{')?;
    let mut id = None;
    let mut method_ok = false;
    let mut params: Option<[&[u8]; 6]> = None;
    let mut n_params = 0;
    loop {
        r.ws();
        let key = r.string()?;
        r.ws();
        r.eat(b':')?;
        r.ws();
        match key {
            b"id" => id = Some(r.scalar()?),
            b"method" => {
                if r.string()? != b"mining.submit" {
                    return None;
                }
                method_ok = true;
            }
            b"params" => {
                let (p, n) = r.string_array()?;
                params = Some(p);
                n_params = n;
            }
            _ => return None,
        }
        r.ws();
        match r.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    r.ws();
    if r.i != r.b.len() || !method_ok || !(5..=6).contains(&n_params) {
        return None;
    }
    let p = params?;
    let id = id?;
    let version_bits = if n_params == 6 {
        Some(hex_u32(p[5])?)
    } else {
        None
    };
    let ntime = hex_u32(p[3])?;
    let nonce = hex_u32(p[4])?;
    // Every byte of the line was read and checked to be ASCII, so this cannot fail; one pass
    // over the whole line is cheaper than one call per field.
    let text = std::str::from_utf8(line).ok()?;
    let s = |b: &[u8]| {
        let start = b.as_ptr() as usize - line.as_ptr() as usize;
        text.get(start..start + b.len())
    };
    Some(FastSubmit {
        id: s(id)?,
        worker: s(p[0])?,
        job_id: s(p[1])?,
        extranonce2: s(p[2])?,
        ntime,
        nonce,
        version_bits,
    })
}

/// Hex digit values, 0xff for anything else.
const HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = match c as u8 {
            b'0'..=b'9' => c as u8 - b'0',
            b'a'..=b'f' => c as u8 - b'a' + 10,
            b'A'..=b'F' => c as u8 - b'A' + 10,
            _ => 0xff,
        };
        c += 1;
    }
    t
};

/// A 32-bit field as exactly 8 hex digits of its big-endian value (what
/// [`crate::hex::decode_u32`] accepts), by table.
#[inline]
fn hex_u32(s: &[u8]) -> Option<u32> {
    let s: &[u8; 8] = s.try_into().ok()?;
    let mut v = 0u32;
    let mut bad = 0u8;
    for &c in s {
        let n = HEX[c as usize];
        bad |= n;
        v = v << 4 | (n & 0x0f) as u32;
    }
    (bad & 0xf0 == 0).then_some(v)
}

/// Flags (the high bit of) every byte of `w` that ends the fast path's plain strings: `"`, `\`,
/// a control character (below 0x20) or a non-ASCII byte. Borrows only run upwards from a
/// flagged byte, so the lowest flag always marks the first such byte.
#[inline]
fn special_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = zero_byte(w ^ (ONES * b'"' as u64));
    let backslash = zero_byte(w ^ (ONES * b'\\' as u64));
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    quote | backslash | control | (w & HIGHS)
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Reader<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.i += 1;
        }
    }

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// A string of printable ASCII without escapes; returns its contents.
    #[inline]
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            // Eight bytes at a time up to the first byte that is not plain.
            if let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                let special = special_bytes(w);
                if special == 0 {
                    self.i += 8;
                    continue;
                }
                self.i += (special.trailing_zeros() / 8) as usize;
            }
            let c = *self.b.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return Some(&self.b[start..self.i - 1]),
                b'\\' | 0..=0x1f | 0x80..=0xff => return None,
                _ => {}
            }
        }
    }

    /// An id: a string (kept with its quotes, to echo), a plain integer, or `null`.
    #[inline]
    fn scalar(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        match *self.b.get(self.i)? {
            b'"' => {
                self.string()?;
            }
            b'n' => {
                if self.b.get(self.i..self.i + 4)? != b"null" {
                    return None;
                }
                self.i += 4;
            }
            b'0'..=b'9' | b'-' => {
                let digits = start + usize::from(self.b[start] == b'-');
                self.i = digits;
                while self.b.get(self.i).is_some_and(u8::is_ascii_digit) {
                    self.i += 1;
                }
                // At least one digit, and a leading zero only as the number 0 itself.
                if self.i == digits || self.b[digits] == b'0' && self.i - digits > 1 {
                    return None;
                }
            }
            _ => return None,
        }
        Some(&self.b[start..self.i])
    }

    /// `[ "a", "b", ... ]` with at most six strings; a sixth `null` counts as absent.
    #[inline]
    fn string_array(&mut self) -> Option<([&'a [u8]; 6], usize)> {
        self.eat(b'[')?;
        let mut out: [&[u8]; 6] = [b""; 6];
        let mut n = 0;
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Some((out, 0));
        }
        // Elements read, a trailing `null` sixth one included.
        let mut read = 0;
        loop {
            self.ws();
            if read == 6 {
                return None;
            }
            if read == 5 && self.b.get(self.i) == Some(&b'n') {
                self.scalar()?;
            } else {
                out[n] = self.string()?;
                n += 1;
            }
            read += 1;
            self.ws();
            match self.next()? {
                b',' => continue,
                b']' => return Some((out, n)),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{parse_line, Method, Submit};

    type Fields = (String, String, String, Vec<u8>, u32, u32, Option<u32>);

    fn general(line: &str) -> Option<Fields> {
        let (env, method) = parse_line(line.as_bytes()).ok()?;
        if !matches!(method, Some(Method::Submit)) {
            return None;
        }
        let s = Submit::parse(&env).ok()?;
        Some((
            env.id?.to_owned(),
            s.worker.as_str()?.to_owned(),
            s.job_id.to_owned(),
            s.extranonce2().to_vec(),
            s.ntime,
            s.nonce,
            s.version_bits,
        ))
    }

    fn fast(line: &str) -> Option<Fields> {
        let f = parse_submit(line.as_bytes())?;
        Some((
            f.id.to_owned(),
            f.worker.to_owned(),
            f.job_id.to_owned(),
            primitives::hex::decode(f.extranonce2).ok()?,
            f.ntime,
            f.nonce,
            f.version_bits,
        ))
    }

    #[test]
    fn common_shapes_agree_with_the_general_reader() {
        let lines = [
            r#"{"id":4,"method":"mining.submit","params":["bc1qxyz.w1","1a","00000001","6752a1b0","0badf00d"]}"#,
            r#"{"params": ["w", "ab", "ffffffff", "6752a1b0", "00000000", "1fffe000"], "id": "s-9", "method": "mining.submit"}"#,
            r#"{"method":"mining.submit","params":["w","ab","00","6752a1b0","00000000",null],"id":12345678901}"#,
            "  {\"id\":0,\"method\":\"mining.submit\",\"params\":[\"w\",\"1\",\"0000\",\"00000001\",\"00000002\"]}\r",
        ];
        for l in lines {
            let g = general(l);
            assert!(g.is_some(), "general reader rejects {l}");
            assert_eq!(fast(l), g, "{l}");
        }
    }

    #[test]
    fn unusual_lines_fall_back() {
        let lines = [
            // escapes, unicode, extra keys, numbers as params, wrong method, bad hex, trailing
            r#"{"id":1,"method":"mining.submit","params":["w\u0041","1","00","00000001","00000002"]}"#,
            "{\"id\":1,\"method\":\"mining.submit\",\"params\":[\"wé\",\"1\",\"00\",\"00000001\",\"00000002\"]}",
            r#"{"id":1,"jsonrpc":"2.0","method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w",1,"00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.authorize","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","0000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002"]} x"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002","1","2"]}"#,
            r#"{"id":01,"method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1.5,"method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":-01,"method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":-,"method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002",null,"1"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002",null,null]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002"]"#,
        ];
        for l in lines {
            assert_eq!(parse_submit(l.as_bytes()), None, "{l}");
        }
    }

    #[test]
    fn hex_fields_decode_like_decode_u32() {
        for c in 0..=255u8 {
            for pos in 0..8 {
                let mut f = *b"0aF19bC4";
                f[pos] = c;
                let want = std::str::from_utf8(&f)
                    .ok()
                    .and_then(|s| crate::hex::decode_u32(s).ok());
                assert_eq!(hex_u32(&f), want, "{f:?}");
            }
        }
        assert_eq!(hex_u32(b"0aF19bC"), None);
        assert_eq!(hex_u32(b"0aF19bC40"), None);
    }

    #[test]
    fn strings_end_at_the_first_special_byte_wherever_it_is() {
        // A special byte (or the closing quote) at every offset of an eight-byte word, behind
        // plain bytes that look special to a careless borrow (0x20, 0x7f, '!' and '#').
        for len in 0..20 {
            for c in [
                b'"', b'\\', 0x00, 0x1f, 0x80, 0xff, b' ', 0x7f, b'!', b'#', b'a',
            ] {
                let mut b = vec![b'"'];
                b.extend((0..len).map(|i| [b' ', 0x7f, b'!', b'#', b'z'][i % 5]));
                b.push(c);
                b.extend_from_slice(b"xyz\"");
                let mut r = Reader { b: &b, i: 0 };
                let got = r.string();
                let want: Option<&[u8]> = match c {
                    b'"' => Some(&b[1..1 + len]),
                    b'\\' | 0x00..=0x1f | 0x80..=0xff => None,
                    _ => Some(&b[1..b.len() - 1]),
                };
                assert_eq!(got, want, "len {len} byte {c:#x}");
            }
        }
    }

    #[test]
    fn never_accepts_what_the_general_reader_rejects() {
        // Truncations and single-byte corruptions of a valid line: whatever the fast path
        // accepts, the general reader must accept with the same fields.
        let base = r#"{"id":7,"method":"mining.submit","params":["w.1","2f","0011aabb","6752a1b0","0badf00d","00002000"]}"#;
        for cut in 0..base.len() {
            let l = &base[..cut];
            if let Some(f) = fast(l) {
                assert_eq!(Some(f), general(l), "{l}");
            }
        }
        for i in 0..base.len() {
            for c in [b'"', b',', b'[', b']', b'{', b'}', b'0', b'x', b' ', b'\\'] {
                let mut b = base.as_bytes().to_vec();
                b[i] = c;
                let l = String::from_utf8(b).unwrap();
                if let Some(f) = fast(&l) {
                    assert_eq!(Some(f), general(&l), "{l}");
                }
            }
        }
    }
}
