//! A fast path for the one message a pool reads thousands of times a second: `mining.submit`.
//!
//! Miners send it in one of a few fixed shapes: an object with `id`, `method` and `params` in
//! any order, `params` an array of short hex strings. This reader accepts exactly that shape and
//! nothing else; anything unusual (escapes, non-ASCII text, extra keys, nesting, numbers as
//! params) returns `None`, and the caller falls back to the general reader ([`crate::parse_line`]),
//! which also produces the precise error. So the fast path never decides what is valid on its
//! own: it only recognises the common case of what the general reader would accept.
//!
//! It reads a line in up to three ways, fastest first, each accepting only lines the next one
//! accepts with the same result (the tests check this on every shape, truncation and one-byte
//! change of many lines): [`parse_common`] matches the two layouts miners actually send byte for
//! byte; [`parse_plain`] reads any other line of plain bytes (printable ASCII, no backslash) as
//! strings between consecutive quotes, located sixteen bytes at a time; [`parse_bytewise`]
//! reads the rest byte by byte. On x86-64 the scans use SSE2, which every such CPU has.

/// The fields of a `mining.submit`, as spans of the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastSubmit<'a> {
    /// The id's raw text, to echo verbatim.
    pub id: &'a str,
    /// `params[0]`: the worker name as sent (no escapes, or the fast path would not take it).
    pub worker: &'a str,
    /// `params[1]`: the job id from `mining.notify`.
    pub job_id: &'a str,
    /// Hex, not yet decoded: its length is checked against the session's extranonce2 size.
    pub extranonce2: &'a str,
    /// `params[3]`: the header time in Unix seconds, sent as 8 hex digits (big-endian).
    pub ntime: u32,
    /// `params[4]`: the header nonce, sent as 8 hex digits (big-endian).
    pub nonce: u32,
    /// `params[5]`: BIP310 version bits; `None` when the miner does not roll the version.
    pub version_bits: Option<u32>,
}

/// Reads `line` if it is a plain `mining.submit`; `None` otherwise (use the general reader).
#[inline]
pub fn parse_submit<'a>(line: &'a [u8]) -> Option<FastSubmit<'a>> {
    if let Some(s) = parse_common(line) {
        return Some(s);
    }
    let quotes = plain_quotes(line);
    if let Some(q) = &quotes {
        if let Some(s) = parse_plain(line, q) {
            return Some(s);
        }
    }
    parse_bytewise(line, quotes)
}

/// The two layouts nearly every miner sends, byte for byte: cgminer's (and the firmware built
/// on it), `{"params": ["w", "j", "e", "t", "n"], "id": 1, "method": "mining.submit"}`, and
/// the compact `{"id":1,"method":"mining.submit","params":["w","j","e","t","n"]}` (both with
/// an optional sixth parameter, the id a plain integer, every parameter plain: see
/// [`plain_quotes`]). The fixed parts are compared whole and each parameter is scanned sixteen
/// bytes at a time to its closing quote. `None` for any other layout ([`parse_plain`] and
/// [`parse_bytewise`] read those).
#[inline]
fn parse_common<'a>(line: &'a [u8]) -> Option<FastSubmit<'a>> {
    let (mut at, sep, close): (usize, &[u8], &[u8]);
    let (id, tail_len);
    if line.starts_with(br#"{"params": [""#) {
        // cgminer: the id and method come after the parameters.
        const TAIL: &[u8] = br#", "method": "mining.submit"}"#;
        (at, sep, close) = (13, br#"", ""#, br#""], "id": "#);
        id = None;
        tail_len = TAIL.len();
        if !line.ends_with(TAIL) {
            return None;
        }
    } else if line.starts_with(br#"{"id":"#) {
        const MID: &[u8] = br#","method":"mining.submit","params":[""#;
        let (scalar, rest) = Gap(&line[6..]).scalar()?;
        if !rest.0.starts_with(MID) {
            return None;
        }
        (at, sep, close) = (6 + scalar.len() + MID.len(), br#"",""#, br#""]}"#);
        id = Some(scalar);
        tail_len = 0;
    } else {
        return None;
    }
    let mut p: [&[u8]; 6] = [b""; 6];
    let mut count = 0;
    let after = loop {
        let end = plain_string_end(line, at)?;
        *p.get_mut(count)? = line.get(at..end)?;
        count += 1;
        let rest = line.get(end..)?;
        if rest.starts_with(sep) {
            at = end + sep.len();
        } else if rest.starts_with(close) {
            break end + close.len();
        } else {
            return None;
        }
    };
    let id = match id {
        Some(id) => {
            // Compact: the line ends with the parameters.
            if after != line.len() {
                return None;
            }
            id
        }
        None => {
            // cgminer: the id, then the tail checked above.
            let (scalar, rest) = Gap(line.get(after..line.len() - tail_len)?).scalar()?;
            if !rest.done() {
                return None;
            }
            scalar
        }
    };
    assemble(id, &p, count, |b| {
        // SAFETY: the id is digits, `-` or `null`, and every parameter was scanned to be plain
        // (no byte from 0x80): ASCII.
        Some(unsafe { std::str::from_utf8_unchecked(b) })
    })
}

/// The submit of `id` and the first `count` of `p`, its strings made by `text`; `None` unless
/// there are five or six parameters, the time and nonce (and version bits) are 8 hex digits,
/// and `text` takes every string.
#[inline]
fn assemble<'a>(
    id: &'a [u8],
    p: &[&'a [u8]; 6],
    count: usize,
    text: impl Fn(&'a [u8]) -> Option<&'a str>,
) -> Option<FastSubmit<'a>> {
    if !(5..=6).contains(&count) {
        return None;
    }
    let version_bits = if count == 6 {
        Some(hex_u32(p[5])?)
    } else {
        None
    };
    Some(FastSubmit {
        id: text(id)?,
        worker: text(p[0])?,
        job_id: text(p[1])?,
        extranonce2: text(p[2])?,
        ntime: hex_u32(p[3])?,
        nonce: hex_u32(p[4])?,
        version_bits,
    })
}

/// Any other plain line (see [`plain_quotes`]): its strings are the spans between consecutive
/// quotes, so the line is read as strings and the short gaps between them. Accepts
/// only lines that [`parse_bytewise`] accepts, with the same result; `None` for anything less
/// usual (including some lines that `parse_bytewise` accepts, such as repeated keys).
#[inline]
fn parse_plain<'a>(line: &'a [u8], quotes: &Quotes) -> Option<FastSubmit<'a>> {
    let mut q = Cursor {
        quotes,
        word: 0,
        bits: quotes[0],
    };
    // Just after the last string read.
    let mut pos = 0;
    // The gap before the next string and the string (with its quotes), or the rest of the line
    // and `None`.
    macro_rules! follow {
        () => {
            match q.next() {
                Some(open) => {
                    let close = q.next()?;
                    let gap = line.get(pos..open)?;
                    let quoted = line.get(open..close + 1)?;
                    pos = close + 1;
                    (gap, Some(quoted))
                }
                None => (line.get(pos..)?, None),
            }
        };
    }
    let unquote = |s: &'a [u8]| &s[1..s.len() - 1];

    let (open, first) = follow!();
    if !punct_only(open, b'{') {
        return None;
    }
    let mut key = unquote(first?);
    let mut id: Option<&[u8]> = None;
    let mut method_ok = false;
    let mut params: Option<([&[u8]; 6], usize)> = None;
    loop {
        // What follows the member's value: the gap up to the next key (or to the end of the
        // line), and that key.
        let (tail, next): (Gap<'a>, Option<&'a [u8]>);
        match key {
            b"method" if !method_ok => {
                let (colon, value) = follow!();
                if !punct_only(colon, b':') || value? != b"\"mining.submit\"" {
                    return None;
                }
                method_ok = true;
                let (g, n) = follow!();
                (tail, next) = (Gap(g), n);
            }
            b"id" if id.is_none() => {
                let (g, value) = follow!();
                if punct_only(g, b':') {
                    // A string id, echoed with its quotes.
                    id = Some(value?);
                    let (g, n) = follow!();
                    (tail, next) = (Gap(g), n);
                } else {
                    let (scalar, rest) = Gap(g).punct(b':').scalar()?;
                    id = Some(scalar);
                    (tail, next) = (rest, value);
                }
            }
            b"params" if params.is_none() => {
                let (open, value) = follow!();
                if !Gap(open).punct(b':').punct(b'[').done() {
                    return None;
                }
                let mut p: [&[u8]; 6] = [b""; 6];
                p[0] = unquote(value?);
                let mut count = 1;
                loop {
                    let (g, n) = follow!();
                    if punct_only(g, b',') {
                        // Another string.
                        *p.get_mut(count)? = unquote(n?);
                        count += 1;
                        continue;
                    }
                    let comma = Gap(g).punct(b',');
                    let close = if count == 5 && comma.0.first() == Some(&b'n') {
                        // A sixth parameter of null counts as absent.
                        comma.word(b"null")
                    } else {
                        Gap(g)
                    };
                    (tail, next) = (close.punct(b']'), n);
                    break;
                }
                params = Some((p, count));
            }
            _ => return None,
        }
        match next {
            Some(k) if punct_only(tail.0, b',') => key = unquote(k),
            None if punct_only(tail.0, b'}') => break,
            _ => return None,
        }
    }
    let (p, n_params) = params?;
    if !method_ok {
        return None;
    }
    assemble(id?, &p, n_params, |b| {
        // SAFETY: every field is part of a plain line, which has no byte from 0x80 (see
        // `plain_quotes`): ASCII.
        Some(unsafe { std::str::from_utf8_unchecked(b) })
    })
}

/// The quotes of a plain line in order.
struct Cursor<'q> {
    quotes: &'q Quotes,
    /// The quotes not read yet: the rest of word `word`, then the following words.
    word: usize,
    bits: u64,
}

impl Cursor<'_> {
    #[inline(always)]
    fn next(&mut self) -> Option<usize> {
        while self.bits == 0 {
            self.word += 1;
            self.bits = *self.quotes.get(self.word)?;
        }
        let at = self.word * 64 + self.bits.trailing_zeros() as usize;
        self.bits &= self.bits - 1;
        Some(at)
    }
}

/// Whether `g` is spaces, `c` and spaces, with the usual forms first.
#[inline(always)]
fn punct_only(g: &[u8], c: u8) -> bool {
    match *g {
        [x] | [x, b' '] => x == c,
        [b' ', x] => x == c,
        _ => Gap(g).punct(c).done(),
    }
}

/// What is left of a gap between two strings of a plain line: spaces and punctuation, maybe
/// an id or a `null`. A failed match leaves a gap that is never [`Gap::done`].
#[derive(Clone, Copy)]
struct Gap<'a>(&'a [u8]);

impl<'a> Gap<'a> {
    /// Never done: a gap that did not match.
    const FAILED: Gap<'static> = Gap(b"!");

    #[inline(always)]
    fn ws(self) -> Gap<'a> {
        let n = self.0.iter().take_while(|&&c| c == b' ').count();
        Gap(&self.0[n..])
    }

    /// Spaces, then `c`, then spaces.
    #[inline(always)]
    fn punct(self, c: u8) -> Gap<'a> {
        match self.ws().0.split_first() {
            Some((&first, rest)) if first == c => Gap(rest).ws(),
            _ => Gap::FAILED,
        }
    }

    /// Spaces, then `w`, then spaces.
    #[inline(always)]
    fn word(self, w: &[u8]) -> Gap<'a> {
        match self.ws().0.strip_prefix(w) {
            Some(rest) => Gap(rest).ws(),
            None => Gap::FAILED,
        }
    }

    #[inline(always)]
    fn done(self) -> bool {
        self.0.is_empty()
    }

    /// A plain integer or `null` (what [`Reader::scalar`] reads outside strings), and the rest.
    #[inline(always)]
    fn scalar(self) -> Option<(&'a [u8], Gap<'a>)> {
        let b = self.0;
        let len = match *b.first()? {
            b'n' => b.starts_with(b"null").then_some(4)?,
            c @ (b'0'..=b'9' | b'-') => {
                let sign = usize::from(c == b'-');
                let digits = b[sign..].iter().take_while(|c| c.is_ascii_digit()).count();
                // At least one digit, and a leading zero only as the number 0 itself.
                if digits == 0 || b[sign] == b'0' && digits > 1 {
                    return None;
                }
                sign + digits
            }
            _ => return None,
        };
        Some((&b[..len], Gap(&b[len..])))
    }
}

/// [`parse_submit`] reading byte by byte, for lines [`parse_plain`] does not take (with the
/// quotes of a plain line, strings still need no scanning).
#[inline]
fn parse_bytewise(line: &[u8], quotes: Option<Quotes>) -> Option<FastSubmit<'_>> {
    let mut r = Reader {
        b: line,
        i: 0,
        quotes,
    };
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
    if r.i != r.b.len() || !method_ok {
        return None;
    }
    let p = params?;
    let id = id?;
    // Every byte of the line was read and checked to be ASCII, so this cannot fail; one pass
    // over the whole line is cheaper than one call per field, and a plain line was checked
    // whole already.
    let text = match r.quotes {
        // SAFETY: a plain line has no byte from 0x80 (see `plain_quotes`): it is ASCII.
        Some(_) => unsafe { std::str::from_utf8_unchecked(line) },
        None => std::str::from_utf8(line).ok()?,
    };
    assemble(id, &p, n_params, |b| {
        let start = b.as_ptr() as usize - line.as_ptr() as usize;
        text.get(start..start + b.len())
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
#[inline(always)]
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
    crate::json::quote_backslash_control(w) | (w & 0x8080_8080_8080_8080)
}

/// The longest line whose quotes are located up front.
const PLAIN_MAX: usize = 512;

/// The quotes of a line (bit `i % 64` of word `i / 64` for byte `i`).
type Quotes = [u64; PLAIN_MAX / 64];

/// Where the quotes of `line` are, if every byte of it is plain: printable ASCII (0x20 to 0x7f)
/// other than a backslash, as in nearly every `mining.submit`. In such a line a string ends at
/// the next quote, so strings need no scanning; `None` for any other line (and for one longer
/// than [`PLAIN_MAX`]), which is read byte by byte.
#[inline]
fn plain_quotes(line: &[u8]) -> Option<Quotes> {
    #[cfg(target_arch = "x86_64")]
    return plain_quotes_sse2(line);
    #[cfg(not(target_arch = "x86_64"))]
    return plain_quotes_swar(line);
}

/// Bit masks of the quotes and of the bytes that are not plain among the 16 bytes at `p`.
///
/// # Safety
///
/// `p` points to 16 readable bytes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn masks(p: *const u8) -> (u64, u32) {
    use std::arch::x86_64::*;
    // SAFETY: an unaligned load of 16 readable bytes (the caller's promise); the rest is SSE2,
    // which every x86-64 CPU has.
    unsafe {
        let v = _mm_loadu_si128(p.cast());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        // Signed: below 0x20, or from 0x80 (negative).
        let control = _mm_cmplt_epi8(v, _mm_set1_epi8(0x20));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        (
            _mm_movemask_epi8(quote) as u32 as u64,
            _mm_movemask_epi8(_mm_or_si128(control, backslash)) as u32,
        )
    }
}

/// Where the plain string starting at `from` ends: the first quote from there, if every byte
/// before it is plain (see [`plain_quotes`]); `None` if a byte that is not plain, or the end of
/// the line, comes first.
#[inline(always)]
fn plain_string_end(line: &[u8], from: usize) -> Option<usize> {
    let mut at = from;
    #[cfg(target_arch = "x86_64")]
    while at + 16 <= line.len() {
        // SAFETY: at + 16 <= len: 16 readable bytes.
        let (quote, bad) = unsafe { masks(line.as_ptr().add(at)) };
        let stop = quote | bad as u64;
        if stop != 0 {
            let i = stop.trailing_zeros();
            return (quote >> i & 1 == 1).then_some(at + i as usize);
        }
        at += 16;
    }
    for (i, &c) in line.get(at..)?.iter().enumerate() {
        match c {
            b'"' => return Some(at + i),
            b'\\' | 0..=0x1f | 0x80..=0xff => return None,
            _ => {}
        }
    }
    None
}

/// [`plain_quotes`] sixteen bytes at a time (SSE2 is part of x86-64).
#[cfg(target_arch = "x86_64")]
#[inline]
fn plain_quotes_sse2(line: &[u8]) -> Option<Quotes> {
    if line.len() > PLAIN_MAX {
        return None;
    }
    let len = line.len();
    if len < 16 {
        let mut padded = [b' '; 16];
        padded[..len].copy_from_slice(line);
        // SAFETY: `padded` is 16 readable bytes.
        let (q, b) = unsafe { masks(padded.as_ptr()) };
        let mut quotes = [0u64; PLAIN_MAX / 64];
        quotes[0] = q;
        return (b == 0).then_some(quotes);
    }
    let mut quotes = [0u64; PLAIN_MAX / 64];
    let mut bad = 0;
    let mut off = 0;
    while off + 16 <= len {
        // SAFETY: off + 16 <= len: 16 readable bytes.
        let (q, b) = unsafe { masks(line.as_ptr().add(off)) };
        quotes[off / 64] |= q << (off % 64);
        bad |= b;
        off += 16;
    }
    if off < len {
        // The last 16 bytes, overlapping what was read already (the same bits again).
        let at = len - 16;
        // SAFETY: len >= 16: the 16 bytes from len - 16 are readable.
        let (q, b) = unsafe { masks(line.as_ptr().add(at)) };
        let (word, shift) = (at / 64, at % 64);
        quotes[word] |= q << shift;
        if shift > 48 {
            // Straddles two words; len <= PLAIN_MAX, so the next word exists.
            quotes[word + 1] |= q >> (64 - shift);
        }
        bad |= b;
    }
    (bad == 0).then_some(quotes)
}

/// [`plain_quotes`] eight bytes at a time, in portable code.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plain_quotes_swar(line: &[u8]) -> Option<Quotes> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const LOWS: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    if line.len() > PLAIN_MAX {
        return None;
    }
    let mut quotes = [0u64; PLAIN_MAX / 64];
    let mut bad = 0u64;
    let mut padded = [b' '; 8];
    let mut chunks = line.chunks_exact(8);
    let rest = chunks.remainder();
    padded[..rest.len()].copy_from_slice(rest);
    for (k, chunk) in (&mut chunks)
        .chain((!rest.is_empty()).then_some(&padded[..]))
        .enumerate()
    {
        let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        // Any byte below 0x20, from 0x80, or a backslash (borrows only start at such a byte).
        let backslash = w ^ (ONES * b'\\' as u64);
        bad |= (w.wrapping_sub(ONES * 0x20) & !w) | w | (backslash.wrapping_sub(ONES) & !backslash);
        // Exactly the quote bytes (no borrows): the high bit of each byte equal to '"'...
        let x = w ^ (ONES * b'"' as u64);
        let eq = !(((x & LOWS) + LOWS) | x) & HIGHS;
        // ...gathered into the low 8 bits, byte i to bit i.
        let bits = (eq >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
        quotes[k / 8] |= bits << (k % 8 * 8);
    }
    (bad & HIGHS == 0).then_some(quotes)
}

struct Reader<'a> {
    b: &'a [u8],
    i: usize,
    /// The line's quotes, if it is plain (see [`plain_quotes`]).
    quotes: Option<Quotes>,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn ws(&mut self) {
        while let Some(&c) = self.b.get(self.i) {
            if !matches!(c, b' ' | b'\t' | b'\r' | b'\n') {
                break;
            }
            self.i += 1;
        }
    }

    #[inline(always)]
    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    #[inline(always)]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.next()? == c).then_some(())
    }

    /// A string of printable ASCII without escapes; returns its contents.
    #[inline(always)]
    fn string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        if let Some(quotes) = &self.quotes {
            // A plain line: the string ends at the next quote.
            let mut k = start / 64;
            let mut bits = *quotes.get(k)? & (!0u64 << (start % 64));
            while bits == 0 {
                k += 1;
                bits = *quotes.get(k)?;
            }
            let end = k * 64 + bits.trailing_zeros() as usize;
            self.i = end + 1;
            return self.b.get(start..end);
        }
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
    #[inline(always)]
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
    #[inline(always)]
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

    /// Submit lines in many shapes: key orders, spacing, ids, five or six parameters.
    fn shapes() -> Vec<String> {
        let mut lines = Vec::new();
        let orders = [
            ["id", "method", "params"],
            ["id", "params", "method"],
            ["method", "id", "params"],
            ["method", "params", "id"],
            ["params", "id", "method"],
            ["params", "method", "id"],
        ];
        let ids = ["4", "0", "-3", "\"s-9\"", "null", "12345678901", "\"\""];
        let params = [
            r#"["w.1","2f","0011aabb","6752a1b0","0badf00d"]"#,
            r#"["bc1qxyz.rig1", "6512ab34", "00000001", "5f5e1000", "1a2b3c4d", "00002000"]"#,
            r#"[ "w", "1", "", "00000001", "00000002" , null ]"#,
        ];
        for order in orders {
            for id in ids {
                for p in params {
                    for (colon, comma, pad) in [(":", ",", ""), (": ", ", ", " ")] {
                        let member = |k: &str| match k {
                            "id" => format!("\"id\"{colon}{id}"),
                            "method" => format!("\"method\"{colon}\"mining.submit\""),
                            _ => format!("\"params\"{colon}{p}"),
                        };
                        let body: Vec<String> = order.iter().map(|k| member(k)).collect();
                        lines.push(format!("{pad}{{{pad}{}{pad}}}{pad}", body.join(comma)));
                    }
                }
            }
        }
        lines
    }

    #[test]
    fn the_plain_reader_takes_the_usual_shapes_and_agrees_with_the_bytewise_one() {
        for l in shapes() {
            let b = l.as_bytes();
            let q = plain_quotes(b).expect("plain");
            let plain = parse_plain(b, &q);
            assert!(plain.is_some(), "{l}");
            let common = parse_common(b);
            if common.is_some() {
                assert_eq!(common, plain, "{l}");
            }

            assert_eq!(plain, parse_bytewise(b, None), "{l}");
            assert_eq!(plain, parse_bytewise(b, Some(q)), "{l}");
            assert_eq!(fast(&l), general(&l), "{l}");
        }
    }

    #[test]
    fn the_two_common_layouts_take_the_shortest_path() {
        for l in [
            r#"{"params": ["bc1qxyz.rig1", "6512ab34", "00000001", "5f5e1000", "1a2b3c4d", "00002000"], "id": 4123, "method": "mining.submit"}"#,
            r#"{"params": ["w", "1", "", "00000001", "00000002"], "id": 0, "method": "mining.submit"}"#,
            r#"{"id":7,"method":"mining.submit","params":["w.1","2f","0011aabb","6752a1b0","0badf00d"]}"#,
            r#"{"id":null,"method":"mining.submit","params":["w","2f","00","6752a1b0","0badf00d","1fffe000"]}"#,
        ] {
            let b = l.as_bytes();
            let common = parse_common(b);
            assert!(common.is_some(), "{l}");
            assert_eq!(common, parse_bytewise(b, None), "{l}");
            assert_eq!(fast(l), general(l), "{l}");
        }
    }

    #[test]
    fn the_plain_reader_never_differs_from_the_bytewise_one() {
        // Truncations and single-byte changes of every shape: whatever the plain reader takes,
        // the bytewise reader takes with the same fields.
        let check = |b: &[u8]| {
            if let Some(q) = plain_quotes(b) {
                if let Some(p) = parse_plain(b, &q) {
                    assert_eq!(
                        Some(p),
                        parse_bytewise(b, None),
                        "{}",
                        String::from_utf8_lossy(b)
                    );
                }
            }
            if let Some(p) = parse_common(b) {
                assert_eq!(
                    Some(p),
                    parse_bytewise(b, None),
                    "{}",
                    String::from_utf8_lossy(b)
                );
            }
        };
        for l in shapes() {
            let base = l.as_bytes();
            for cut in 0..base.len() {
                check(&base[..cut]);
            }
            for i in 0..base.len() {
                for c in [
                    b'"', b',', b'[', b']', b'{', b'}', b':', b'0', b'-', b'n', b' ', b'x',
                ] {
                    let mut b = base.to_vec();
                    b[i] = c;
                    check(&b);
                    b.insert(i, c);
                    check(&b);
                }
                let mut b = base.to_vec();
                b.remove(i);
                check(&b);
            }
        }
        // Repeated keys and parameter lists the plain reader leaves to the bytewise one.
        for l in [
            r#"{"id":1,"id":2,"method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","method":"mining.submit","params":["w","1","00","00000001","00000002"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002"],"params":["w","1","00","00000001","00000003"]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002",null,null]}"#,
            r#"{"id":1,"method":"mining.submit","params":["w","1","00","00000001","00000002",null,"00002000"]}"#,
        ] {
            let b = l.as_bytes();
            assert_eq!(parse_plain(b, &plain_quotes(b).unwrap()), None, "{l}");
            assert_eq!(parse_submit(b), parse_bytewise(b, None), "{l}");
        }
    }

    #[test]
    fn plain_lines_are_found_alike_sixteen_and_eight_bytes_at_a_time() {
        let base = br#"{"id":7,"method":"mining.submit","params":["w.1","2f","0011aabb","6752a1b0","0badf00d","00002000"]}"#;
        for len in 0..=base.len() {
            let line = &base[..len];
            let expect = plain_quotes_swar(line);
            assert_eq!(plain_quotes(line), expect, "{len}");
            if let Some(q) = expect {
                for (i, &c) in line.iter().enumerate() {
                    assert_eq!(q[i / 64] >> (i % 64) & 1 == 1, c == b'"', "{len} {i}");
                }
            }
            for i in 0..len {
                for c in [0x00, 0x1f, b'\t', b'\\', 0x7f, 0x80, 0xff, b'"', b' '] {
                    let mut l = line.to_vec();
                    l[i] = c;
                    let got = plain_quotes(&l);
                    assert_eq!(got, plain_quotes_swar(&l), "{len} {i} {c:#x}");
                    assert_eq!(got.is_some(), (0x20..0x80).contains(&c) && c != b'\\');
                }
            }
        }
        let long = [b'a'; PLAIN_MAX + 1];
        assert_eq!(plain_quotes(&long[..PLAIN_MAX]), Some([0; PLAIN_MAX / 64]));
        assert_eq!(plain_quotes(&long), None);
        assert_eq!(plain_quotes_swar(&long), None);
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
                let mut r = Reader {
                    b: &b,
                    i: 0,
                    quotes: None,
                };
                let got = r.string();
                let mut plain = Reader {
                    b: &b,
                    i: 0,
                    quotes: plain_quotes(&b),
                };
                if plain.quotes.is_some() {
                    assert_eq!(plain.string(), got, "len {len} byte {c:#x}, plain");
                }
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
