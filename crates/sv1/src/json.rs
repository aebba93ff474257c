//! A zero-allocation reader for Stratum's JSON-RPC envelopes.
//!
//! Every Stratum V1 message is one flat object: `id`, `method`, `params` (requests and
//! notifications) or `id`, `result`, `error` (responses). The hot one, `mining.submit`, arrives
//! thousands of times a second with a params array of short hex strings. Reading it into a
//! general JSON tree would allocate per share, so this reader walks the bytes once and hands out
//! borrowed slices: strings without escapes as `&str`, numbers as their text, nested arrays and
//! objects as raw text (for the rare messages that carry them, such as `mining.configure`, which
//! then go through serde_json). Syntax is checked strictly all the same; depth and parameter
//! counts are bounded.

use std::borrow::Cow;

/// The most parameters a message may carry (`mining.notify` has 9).
pub const MAX_PARAMS: usize = 12;
const MAX_DEPTH: usize = 32;

/// Why a line is not a well-formed envelope, and where reading stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed JSON at byte {offset}: {what}")]
pub struct JsonError {
    /// Byte offset into the line where the problem was found.
    pub offset: usize,
    /// What was expected or wrong there.
    pub what: &'static str,
}

/// A JSON string's content between the quotes, escapes still in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JsonStr<'a> {
    raw: &'a str,
    escaped: bool,
}

impl<'a> JsonStr<'a> {
    /// The string when it has no escapes (the common case: no copy).
    pub fn as_str(&self) -> Option<&'a str> {
        (!self.escaped).then_some(self.raw)
    }

    /// The string with escapes resolved (allocates only if it has any).
    pub fn to_cow(&self) -> Cow<'a, str> {
        if !self.escaped {
            return Cow::Borrowed(self.raw);
        }
        // The raw text was validated as a JSON string; serde_json resolves the escapes.
        let quoted = format!("\"{}\"", self.raw);
        Cow::Owned(serde_json::from_str::<String>(&quoted).unwrap_or_default())
    }

    /// The raw content, escapes included.
    pub fn raw(&self) -> &'a str {
        self.raw
    }
}

/// One JSON value as it appears in an envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value<'a> {
    /// JSON `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number's text, parsed on demand.
    Num(&'a str),
    /// A string, escapes still in place.
    Str(JsonStr<'a>),
    /// Raw text of a nested array, brackets included.
    Array(&'a str),
    /// Raw text of a nested object, braces included.
    Object(&'a str),
}

impl<'a> Value<'a> {
    /// The string, if this is a string without escapes.
    pub fn as_str(&self) -> Option<&'a str> {
        match self {
            Value::Str(s) => s.as_str(),
            _ => None,
        }
    }

    /// The number, if this is one that parses as a u64 (no sign, fraction or exponent).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Num(n) => n.parse().ok(),
            _ => None,
        }
    }

    /// A number, or a string holding one (some miners quote their difficulties).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Num(n) => n.parse().ok(),
            Value::Str(s) => s.as_str()?.trim().parse().ok(),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// What kind of value a [`Span`] covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    True,
    False,
    Num,
    Str,
    EscapedStr,
    Array,
    Object,
}

/// A value as a range of the line: strings without their quotes, everything else whole. Twelve
/// bytes instead of a 32-byte [`Value`], so the envelope stays small to build and to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u32,
    end: u32,
    kind: Kind,
}

impl Span {
    const NULL: Span = Span {
        start: 0,
        end: 0,
        kind: Kind::Null,
    };

    fn value<'a>(&self, src: &'a str) -> Value<'a> {
        let text = &src[self.start as usize..self.end as usize];
        match self.kind {
            Kind::Null => Value::Null,
            Kind::True => Value::Bool(true),
            Kind::False => Value::Bool(false),
            Kind::Num => Value::Num(text),
            Kind::Str => Value::Str(JsonStr {
                raw: text,
                escaped: false,
            }),
            Kind::EscapedStr => Value::Str(JsonStr {
                raw: text,
                escaped: true,
            }),
            Kind::Array => Value::Array(text),
            Kind::Object => Value::Object(text),
        }
    }
}

/// The top-level parameters: a positional array (what Stratum uses), or named as an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params<'a> {
    src: &'a str,
    spans: [Span; MAX_PARAMS],
    len: u8,
    /// The raw text of `params` when it is an object (named parameters).
    pub named: Option<&'a str>,
}

impl<'a> Params<'a> {
    fn empty(src: &'a str) -> Self {
        Params {
            src,
            spans: [Span::NULL; MAX_PARAMS],
            len: 0,
            named: None,
        }
    }

    /// How many positional parameters there are.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there are no positional parameters.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Positional parameter `i` (0-based); `None` past the end.
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        self.spans[..self.len as usize]
            .get(i)
            .map(|s| s.value(self.src))
    }
}

/// A parsed message: a request or notification (`method` set) or a response (`result`/`error`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// The id's raw text, to echo back verbatim; `None` when absent.
    pub id: Option<&'a str>,
    /// `method`, for requests and notifications; `None` in responses.
    pub method: Option<JsonStr<'a>>,
    /// `params`; empty when absent.
    pub params: Params<'a>,
    /// `result` as sent (`Some(Value::Null)` for `null`); `None` when the key is absent.
    pub result: Option<Value<'a>>,
    /// `error` as sent, usually `[code, "message", null]` or `null`; `None` when the key is
    /// absent.
    pub error: Option<Value<'a>>,
}

impl<'a> Envelope<'a> {
    /// The id, unless it is absent or `null` (a notification).
    pub fn id(&self) -> Option<&'a str> {
        self.id.filter(|raw| *raw != "null")
    }

    /// The method name, unless it is absent or has escapes.
    pub fn method_str(&self) -> Option<&'a str> {
        self.method.and_then(|m| m.as_str())
    }
}

/// Parses one line.
pub fn parse(line: &[u8]) -> Result<Envelope<'_>, JsonError> {
    if u32::try_from(line.len()).is_err() {
        // Spans are 32-bit offsets; line framing bounds lines far below this anyway.
        return Err(JsonError {
            offset: 0,
            what: "line longer than 4 GiB",
        });
    }
    let text = std::str::from_utf8(line).map_err(|e| JsonError {
        offset: e.valid_up_to(),
        what: "invalid UTF-8",
    })?;
    let mut p = Parser {
        s: text,
        b: line,
        i: 0,
    };
    let env = p.envelope()?;
    p.ws();
    if p.i != p.b.len() {
        return Err(p.err("trailing characters after the object"));
    }
    Ok(env)
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn err(&self, what: &'static str) -> JsonError {
        JsonError {
            offset: self.i,
            what,
        }
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), JsonError> {
        self.ws();
        if self.b.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(self.err(what))
        }
    }

    fn envelope(&mut self) -> Result<Envelope<'a>, JsonError> {
        let mut env = Envelope {
            id: None,
            method: None,
            params: Params::empty(self.s),
            result: None,
            error: None,
        };
        self.expect(b'{', "expected an object")?;
        self.ws();
        if self.b.get(self.i) == Some(&b'}') {
            self.i += 1;
            return Ok(env);
        }
        loop {
            self.ws();
            let key = self.string()?;
            self.expect(b':', "expected ':' after a key")?;
            self.ws();
            match key.raw {
                "id" => {
                    let start = self.i;
                    self.value(0)?;
                    env.id = Some(&self.s[start..self.i]);
                }
                "method" => match self.value(0)?.value(self.s) {
                    Value::Str(s) => env.method = Some(s),
                    Value::Null => {}
                    _ => return Err(self.err("method must be a string")),
                },
                "params" => {
                    self.ws();
                    match self.b.get(self.i) {
                        Some(b'[') => env.params = self.params()?,
                        Some(b'{') => {
                            let start = self.i;
                            self.value(0)?;
                            env.params.named = Some(&self.s[start..self.i]);
                        }
                        _ => match self.value(0)?.kind {
                            Kind::Null => {}
                            _ => return Err(self.err("params must be an array or an object")),
                        },
                    }
                }
                "result" => env.result = Some(self.value(0)?.value(self.s)),
                "error" => env.error = Some(self.value(0)?.value(self.s)),
                // "jsonrpc" and anything else: validated and ignored.
                _ => {
                    self.value(0)?;
                }
            }
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(env);
                }
                _ => return Err(self.err("expected ',' or '}' in the object")),
            }
        }
    }

    fn params(&mut self) -> Result<Params<'a>, JsonError> {
        let mut p = Params::empty(self.s);
        self.i += 1; // '['
        self.ws();
        if self.b.get(self.i) == Some(&b']') {
            self.i += 1;
            return Ok(p);
        }
        loop {
            let v = self.value(1)?;
            if p.len as usize == MAX_PARAMS {
                return Err(self.err("too many params"));
            }
            p.spans[p.len as usize] = v;
            p.len += 1;
            self.ws();
            match self.b.get(self.i) {
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return Ok(p);
                }
                _ => return Err(self.err("expected ',' or ']' in params")),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Span, JsonError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.ws();
        let start = self.i;
        match self.b.get(self.i) {
            Some(b'"') => {
                let s = self.string()?;
                let end = self.i - 1;
                let kind = if s.escaped {
                    Kind::EscapedStr
                } else {
                    Kind::Str
                };
                Ok(Span {
                    start: (start + 1) as u32,
                    end: end as u32,
                    kind,
                })
            }
            Some(b'{') => {
                self.i += 1;
                self.ws();
                if self.b.get(self.i) != Some(&b'}') {
                    loop {
                        self.ws();
                        self.string()?;
                        self.expect(b':', "expected ':' after a key")?;
                        self.value(depth + 1)?;
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b'}') => break,
                            _ => return Err(self.err("expected ',' or '}' in an object")),
                        }
                    }
                }
                self.i += 1;
                Ok(self.span(start, Kind::Object))
            }
            Some(b'[') => {
                self.i += 1;
                self.ws();
                if self.b.get(self.i) != Some(&b']') {
                    loop {
                        self.value(depth + 1)?;
                        self.ws();
                        match self.b.get(self.i) {
                            Some(b',') => self.i += 1,
                            Some(b']') => break,
                            _ => return Err(self.err("expected ',' or ']' in an array")),
                        }
                    }
                }
                self.i += 1;
                Ok(self.span(start, Kind::Array))
            }
            Some(b't') => self.literal("true", Kind::True),
            Some(b'f') => self.literal("false", Kind::False),
            Some(b'n') => self.literal("null", Kind::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("unexpected character")),
            None => Err(self.err("unexpected end of input")),
        }
    }

    fn span(&self, start: usize, kind: Kind) -> Span {
        Span {
            start: start as u32,
            end: self.i as u32,
            kind,
        }
    }

    fn literal(&mut self, word: &'static str, kind: Kind) -> Result<Span, JsonError> {
        let start = self.i;
        if self.b[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(self.span(start, kind))
        } else {
            Err(self.err("invalid literal"))
        }
    }

    fn number(&mut self) -> Result<Span, JsonError> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let s = p.i;
            while p.b.get(p.i).is_some_and(u8::is_ascii_digit) {
                p.i += 1;
            }
            p.i > s
        };
        if self.b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        if self.b.get(self.i) == Some(&b'0') {
            self.i += 1;
        } else if !digits(self) {
            return Err(self.err("invalid number"));
        }
        if self.b.get(self.i) == Some(&b'.') {
            self.i += 1;
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.b.get(self.i) {
            self.i += 1;
            if let Some(b'+' | b'-') = self.b.get(self.i) {
                self.i += 1;
            }
            if !digits(self) {
                return Err(self.err("invalid number"));
            }
        }
        Ok(self.span(start, Kind::Num))
    }

    fn string(&mut self) -> Result<JsonStr<'a>, JsonError> {
        if self.b.get(self.i) != Some(&b'"') {
            return Err(self.err("expected a string"));
        }
        self.i += 1;
        let start = self.i;
        let mut escaped = false;
        loop {
            // Skip ordinary characters eight at a time: hex fields are all of them.
            while let Some(chunk) = self.b.get(self.i..self.i + 8) {
                let w = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
                if quote_backslash_control(w) != 0 {
                    break;
                }
                self.i += 8;
            }
            match self.b.get(self.i) {
                Some(b'"') => {
                    let raw = &self.s[start..self.i];
                    self.i += 1;
                    return Ok(JsonStr { raw, escaped });
                }
                Some(b'\\') => {
                    escaped = true;
                    self.i += 1;
                    match self.b.get(self.i) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.i += 1,
                        Some(b'u') => {
                            let hex = self.b.get(self.i + 1..self.i + 5);
                            if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                                return Err(self.err("invalid \\u escape"));
                            }
                            self.i += 5;
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(0..=0x1f) => return Err(self.err("control character in a string")),
                Some(_) => self.i += 1,
                None => return Err(self.err("unterminated string")),
            }
        }
    }
}

/// Flags (the high bit of) the bytes of `w` that are `"`, `\` or a control character (below
/// 0x20): the classic SWAR zero-byte test applied to `w ^ '"'`, `w ^ '\\'` and to `w` less 0x20
/// per byte. Nonzero exactly when `w` holds such a byte.
#[inline]
pub(crate) fn quote_backslash_control(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let quote = zero_byte(w ^ (ONES * b'"' as u64));
    let backslash = zero_byte(w ^ (ONES * b'\\' as u64));
    // A byte below 0x20 borrows when 0x20 is subtracted; bytes >= 0x80 are flagged too, which
    // only sends them to the byte-at-a-time path (UTF-8 was validated already).
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGHS;
    quote | backslash | control
}

/// The code of an SV1 error: `[code, "message", data]` as customary, `{"code": code, ...}` as
/// some pools send it, or a bare number.
pub fn error_code(err: Value<'_>) -> Option<i64> {
    match err {
        Value::Array(raw) => leading_int(raw.strip_prefix('[')?),
        Value::Object(raw) => {
            let after = &raw[raw.find("\"code\"")? + 6..];
            leading_int(after.trim_start().strip_prefix(':')?)
        }
        Value::Num(n) => n.trim().parse().ok(),
        _ => None,
    }
}

fn leading_int(s: &str) -> Option<i64> {
    let s = s.trim_start();
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(s.len(), |(i, _)| i);
    s[..end].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_line_borrows_everything() {
        let line = br#"{"params": ["bc1qworker.rig1", "6512ab34", "00000001", "5f5e1000", "1a2b3c4d", "00002000"], "id": 4, "method": "mining.submit"}"#;
        let e = parse(line).unwrap();
        assert_eq!(e.id(), Some("4"));
        assert_eq!(e.method_str(), Some("mining.submit"));
        assert_eq!(e.params.len(), 6);
        assert_eq!(e.params.get(0).unwrap().as_str(), Some("bc1qworker.rig1"));
        assert_eq!(e.params.get(5).unwrap().as_str(), Some("00002000"));
    }

    #[test]
    fn ids_are_echoed_verbatim_and_null_means_notification() {
        assert_eq!(
            parse(br#"{"id":"abc","method":"x","params":[]}"#)
                .unwrap()
                .id(),
            Some("\"abc\"")
        );
        let n =
            parse(br#"{"id":null,"method":"mining.suggest_difficulty","params":[0.5]}"#).unwrap();
        assert_eq!(n.id(), None);
        assert_eq!(n.id, Some("null"));
        assert_eq!(n.params.get(0).unwrap().as_f64(), Some(0.5));
        assert_eq!(parse(br#"{"method":"x"}"#).unwrap().id, None);
    }

    #[test]
    fn configure_keeps_nested_values_raw() {
        let line = br#"{"id": 1, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff", "version-rolling.min-bit-count": 16}]}"#;
        let e = parse(line).unwrap();
        assert_eq!(
            e.params.get(0),
            Some(Value::Array(r#"["version-rolling"]"#))
        );
        match e.params.get(1).unwrap() {
            Value::Object(raw) => {
                let v: serde_json::Value = serde_json::from_str(raw).unwrap();
                assert_eq!(v["version-rolling.mask"], "ffffffff");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn responses_carry_result_and_error() {
        let e = parse(br#"{"id":2,"result":[[["mining.set_difficulty","1"],["mining.notify","1"]],"08000002",4],"error":null}"#).unwrap();
        assert!(matches!(e.result, Some(Value::Array(_))));
        assert_eq!(e.error, Some(Value::Null));
        let e = parse(br#"{"id":5,"result":null,"error":[21,"Job not found",null]}"#).unwrap();
        assert!(matches!(e.error, Some(Value::Array(_))));
    }

    #[test]
    fn escapes_are_validated_and_resolved_on_demand() {
        let e =
            parse(br#"{"id":1,"method":"mining.authorize","params":["w\u00e9\n","x"]}"#).unwrap();
        let Value::Str(s) = e.params.get(0).unwrap() else {
            panic!()
        };
        assert_eq!(s.as_str(), None);
        assert_eq!(s.to_cow(), "w\u{e9}\n");
    }

    #[test]
    fn malformed_input_is_refused_with_a_position() {
        for bad in [
            &b""[..],
            b"[]",
            b"{",
            b"{\"id\":1,}",
            b"{\"id\":1 \"method\":\"x\"}",
            b"{\"id\":01}",
            b"{\"id\":-}",
            b"{\"id\":1.}",
            b"{\"id\":tru}",
            b"{\"method\":5}",
            b"{\"params\":\"x\"}",
            b"{\"id\":\"a\x01\"}",
            b"{\"id\":\"\\x\"}",
            b"{\"id\":\"\\u12\"}",
            b"{\"id\":\"open}",
            b"{\"id\":1} trailing",
            b"{\"id\":1}}",
            b"\xff\xfe",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let deep = format!("{{\"params\":[{}{}]}}", "[".repeat(100), "]".repeat(100));
        assert_eq!(parse(deep.as_bytes()).unwrap_err().what, "nesting too deep");
        let many = format!("{{\"params\":[{}1]}}", "1,".repeat(MAX_PARAMS));
        assert_eq!(parse(many.as_bytes()).unwrap_err().what, "too many params");
    }

    #[test]
    fn special_characters_are_found_at_every_offset_of_the_word_scan() {
        for pos in 0..20 {
            let mut body = "a".repeat(24);
            body.replace_range(pos..pos + 1, "\x01");
            let line = format!("{{\"id\":\"{body}\"}}");
            assert!(parse(line.as_bytes()).is_err(), "control at {pos}");
            let mut body = "a".repeat(24);
            body.replace_range(pos..pos + 1, "\\n");
            let line = format!("{{\"id\":\"{body}\"}}");
            let e = parse(line.as_bytes()).unwrap();
            assert_eq!(e.id.unwrap().len(), 24 + 1 + 2, "escape at {pos}");
            let line = format!("{{\"id\":\"{}\"}}", "é".repeat(pos));
            assert_eq!(
                parse(line.as_bytes()).unwrap().id.unwrap().len(),
                2 * pos + 2,
                "utf-8 at {pos}"
            );
        }
    }

    #[test]
    fn agrees_with_serde_json_on_what_is_valid() {
        // Every well-formed envelope serde_json accepts, we accept with the same id and params.
        let cases = [
            r#"{"id":1e3,"method":"a","params":[true,false,null,-0.5e-3,"s",[],{}]}"#,
            r#" { "id" : [1,{"a":[]}] , "x":{"y":null} , "method":"b" } "#,
            r#"{"params":{"named":1},"method":"c","id":"q"}"#,
        ];
        for c in cases {
            let ours = parse(c.as_bytes()).unwrap();
            let theirs: serde_json::Value = serde_json::from_str(c).unwrap();
            let id: serde_json::Value = serde_json::from_str(ours.id.unwrap()).unwrap();
            assert_eq!(id, theirs["id"]);
            assert_eq!(ours.method_str(), theirs["method"].as_str());
            if let Some(arr) = theirs["params"].as_array() {
                assert_eq!(ours.params.len(), arr.len());
            }
        }
    }
}
