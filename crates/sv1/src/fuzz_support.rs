//! The Stratum V1 read path under arbitrary bytes, shared by the cargo-fuzz target `line`
//! (crates/sv1/fuzz) and the stable test that replays its corpus (tests/fuzz_corpus.rs).
//!
//! An input is two control bytes and then the byte stream a peer sends:
//!
//! - byte 0: the line limit, `LIMITS[byte & 7]` (so the ASCII digits `'0'`..`'7'` pick it);
//! - byte 1: the seed of the chunking (how the stream is cut into reads, and when the reader
//!   drains lines); with its high bit clear, reads go through [`LineBuffer::feed`] or
//!   [`LineBuffer::split`] (which sometimes breaks off mid-read), mixed on one buffer; with it
//!   set, through `feed` or [`LineBuffer::spare`] and [`LineBuffer::commit`] as documented.
//!
//! The stream goes through a [`LineBuffer`] in those chunks, checked against a model of the
//! framing (lines split at `\n`, one `\r` dropped, blank lines skipped, lines over the limit
//! reported and never returned, a pending line refused once it cannot end within the limit).
//! Then the stream cut at other random points goes through `split` alone, which must give the
//! lines one `feed` of the whole stream gives, lend the lines that lie within a read from the
//! read itself, and hold no allocation whenever nothing is pending. Every line returned, and
//! the whole stream once as a single line, then goes through [`parse_line`] and every typed
//! parser, checking that nothing panics, that every borrowed slice lies within the line, and
//! that a line which is also valid JSON to serde_json reads the same (id, method, params,
//! result, error). A violated check panics: the fuzzer's crash.

use std::collections::HashSet;
use std::ops::ControlFlow;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::json::{self, Envelope, MAX_PARAMS};
use crate::line::{LineBuffer, LineTooLong};
use crate::message::{
    parse_line, suggested_difficulty, Authorize, Configure, Method, Notify, Submit, Subscribe,
    MAX_EXTRANONCE2,
};
use crate::Value;

/// The line limits an input picks from: tiny ones reach the limit paths, large ones hold whole
/// `mining.notify` lines.
pub const LIMITS: [usize; 8] = [16, 64, 160, 512, 1024, 4096, 16384, 65536];

/// The framing and parsing of `data` (control bytes, then the stream). Panics on a violated
/// invariant.
pub fn line(data: &[u8]) {
    let Some((&[sel, seed], stream)) = data.split_first_chunk::<2>() else {
        return;
    };
    let limit = LIMITS[usize::from(sel & 7)];
    let use_spare = seed & 0x80 != 0;
    let mut rng = Rng::new(u64::from(seed) | u64::from(sel) << 8 | (stream.len() as u64) << 16);
    // Its own generator, so that the chunking of the inputs written before `split` is theirs.
    let mut how = Rng::new(rng.0 ^ 0x5370_6c69_7421);
    split_matches_one_feed(stream, limit, &mut how);
    let mut lb = LineBuffer::new(limit);
    let mut model = Model {
        stream,
        fed: 0,
        consumed: 0,
        limit,
    };
    while model.fed < stream.len() {
        let rest = stream.len() - model.fed;
        let n = match rng.next() % 8 {
            0 | 1 => 1,
            2 | 3 => 1 + rng.below(16),
            4 | 5 => 1 + rng.below(256),
            6 => 1 + rng.below(4096),
            _ => rest,
        }
        .min(rest);
        let chunk = &stream[model.fed..model.fed + n];
        model.fed += n;
        if use_spare && rng.next() & 1 == 1 {
            let room = lb.spare(n + rng.below(64));
            assert!(
                room.len() >= n,
                "spare gave {} bytes, asked {n}",
                room.len()
            );
            room[..n].copy_from_slice(chunk);
            lb.commit(n);
        } else if !use_spare && how.next().is_multiple_of(3) {
            if !split(&mut lb, chunk, &mut model, &mut how) {
                check_line(stream);
                return;
            }
        } else {
            lb.feed(chunk);
        }
        model.check_pending(&lb, "after a read");
        // A reader usually drains after every read; sometimes it reads twice first.
        if rng.next() & 3 != 0 && !drain(&mut lb, &mut model) {
            check_line(stream);
            return;
        }
    }
    drain(&mut lb, &mut model);
    // The whole stream as one line: JSON whitespace may include `\n` there.
    check_line(stream);
}

/// One read through [`LineBuffer::split`] (the model has been told of it), checking every line
/// and the outcome against the model, and breaking off now and then. `false` when the buffer
/// refused a pending partial line.
fn split(lb: &mut LineBuffer, chunk: &[u8], model: &mut Model<'_>, how: &mut Rng) -> bool {
    let limit = model.limit;
    let r = lb.split(chunk, |line| {
        assert!(line.len() <= limit, "split a line over the limit");
        model.expect_line(line);
        check_line(line);
        match how.next() % 8 {
            0 => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    });
    match r {
        Ok(None) => model.expect_none(),
        // The rest is kept for the next read or drain.
        Ok(Some(())) => {}
        Err(e) => {
            if !model.expect_error(e) {
                return false;
            }
        }
    }
    model.check_pending(lb, "after split");
    if lb.pending() == 0 {
        assert_eq!(lb.heap_size(), 0, "an idle buffer holds an allocation");
    }
    true
}

/// The stream cut at random points (and broken off at random lines) through `split` alone gives
/// what one `feed` of it and `next_line` give, up to the first line over the limit; complete
/// lines within a read come from the read, and nothing pending means nothing allocated.
fn split_matches_one_feed(stream: &[u8], limit: usize, rng: &mut Rng) {
    let mut whole = LineBuffer::new(limit);
    whole.feed(stream);
    let mut want = Vec::new();
    let mut want_err = false;
    while let Some(line) = whole.next_line() {
        match line {
            Ok(line) => want.push(line.to_vec()),
            Err(_) => {
                want_err = true;
                break;
            }
        }
    }
    let mut lb = LineBuffer::new(limit);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut got_err = false;
    let mut rest = stream;
    'reads: while !rest.is_empty() {
        let n = match rng.next() % 4 {
            0 => 1,
            1 => 1 + rng.below(8),
            2 => 1 + rng.below(512),
            _ => 1 + rng.below(limit * 2 + 2),
        }
        .min(rest.len());
        let (chunk, after) = rest.split_at(n);
        rest = after;
        let range = chunk.as_ptr_range();
        let mut data = chunk;
        loop {
            let pending_before = lb.pending();
            let mut first = true;
            let r = lb.split(data, |line| {
                // A line is lent from the read unless it began before it (only the first one
                // can have).
                let lent = range.contains(&line.as_ptr());
                assert!(
                    lent || (first && pending_before > 0) || data.is_empty(),
                    "a line within the read was copied"
                );
                first = false;
                got.push(line.to_vec());
                match rng.next() % 16 {
                    0 => ControlFlow::Break(()),
                    _ => ControlFlow::Continue(()),
                }
            });
            match r {
                Ok(None) => break,
                // Take the rest the break left before the next read.
                Ok(Some(())) => data = &[],
                Err(_) => {
                    got_err = true;
                    break 'reads;
                }
            }
        }
        if lb.pending() == 0 {
            assert_eq!(lb.heap_size(), 0, "an idle buffer holds an allocation");
        }
        assert!(
            lb.pending() <= limit + 1,
            "a pending line over the limit kept"
        );
    }
    assert_eq!(
        got, want,
        "split at random points and one feed give other lines"
    );
    assert_eq!(
        got_err, want_err,
        "split and one feed disagree on a line over the limit"
    );
    if !want_err {
        assert_eq!(lb.pending(), whole.pending(), "pending at the end");
    }
}

/// Takes every line the buffer has, checking each against the model. `false` when the buffer
/// refused a pending partial line (the caller closes the connection).
fn drain(lb: &mut LineBuffer, model: &mut Model<'_>) -> bool {
    loop {
        match lb.next_line() {
            None => {
                model.expect_none();
                model.check_pending(lb, "at None");
                return true;
            }
            Some(Ok(line)) => {
                assert!(line.len() <= model.limit, "returned a line over the limit");
                model.expect_line(line);
                check_line(line);
            }
            Some(Err(e)) => {
                if !model.expect_error(e) {
                    return false;
                }
            }
        }
        model.check_pending(lb, "after a line");
    }
}

/// What the framing must do, from the whole stream.
struct Model<'a> {
    stream: &'a [u8],
    /// Bytes given to the buffer so far.
    fed: usize,
    /// Where the bytes not yet returned (or skipped) start.
    consumed: usize,
    limit: usize,
}

enum Next<'a> {
    Line(&'a [u8]),
    TooLong,
    /// No complete line; the partial one is this.
    Partial(&'a [u8]),
}

impl<'a> Model<'a> {
    /// The next complete non-blank line, consuming it (and the blank lines before it).
    fn next(&mut self) -> Next<'a> {
        loop {
            let avail = &self.stream[self.consumed..self.fed];
            let Some(nl) = avail.iter().position(|&b| b == b'\n') else {
                return Next::Partial(avail);
            };
            let mut line = &avail[..nl];
            self.consumed += nl + 1;
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            if line.len() > self.limit {
                return Next::TooLong;
            }
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Next::Line(line);
            }
        }
    }

    fn expect_line(&mut self, got: &[u8]) {
        match self.next() {
            Next::Line(want) => assert_eq!(got, want, "returned a different line"),
            Next::TooLong => panic!("returned a line the model finds over the limit"),
            Next::Partial(_) => panic!("returned a line before its newline"),
        }
    }

    fn expect_none(&mut self) {
        match self.next() {
            Next::Line(l) => panic!("a complete line was not returned: {l:?}"),
            Next::TooLong => panic!("a line over the limit was not reported"),
            Next::Partial(p) => assert!(
                !self.partial_too_long(p),
                "a partial line of {} bytes (limit {}) was not reported",
                p.len(),
                self.limit
            ),
        }
    }

    /// `true` when a complete line was over the limit (reading may go on), `false` when the
    /// partial line already is (the stream ends there).
    fn expect_too_long(&mut self) -> bool {
        match self.next() {
            Next::Line(l) => panic!("reported a line within the limit as too long: {l:?}"),
            Next::TooLong => true,
            Next::Partial(p) => {
                assert!(
                    self.partial_too_long(p),
                    "reported a partial line of {} bytes as too long (limit {})",
                    p.len(),
                    self.limit
                );
                false
            }
        }
    }

    /// The buffer refused a line: `true` as for [`Model::expect_too_long`].
    fn expect_error(&mut self, e: LineTooLong) -> bool {
        assert_eq!(e.limit, self.limit);
        self.expect_too_long()
    }

    fn check_pending(&self, lb: &LineBuffer, when: &str) {
        assert_eq!(lb.pending(), self.fed - self.consumed, "pending {when}");
    }

    /// A partial line can no longer end within the limit: over it by more than a `\r`.
    fn partial_too_long(&self, p: &[u8]) -> bool {
        p.len() > self.limit + 1 || (p.len() == self.limit + 1 && p.last() != Some(&b'\r'))
    }
}

/// xorshift64*: deterministic chunking from the input's own bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Whether `s` lies within `line` (a borrowed slice of it).
fn within(line: &[u8], s: &str) -> bool {
    let (l, p) = (line.as_ptr() as usize, s.as_ptr() as usize);
    p >= l && p + s.len() <= l + line.len()
}

fn offset(line: &[u8], s: &str) -> usize {
    assert!(within(line, s), "{s:?} is not a slice of the line");
    s.as_ptr() as usize - line.as_ptr() as usize
}

/// One line through the JSON reader and every typed parser. Panics on a violated invariant.
pub fn check_line(line: &[u8]) {
    // The counting of messages by kind reads any bytes and names them from its list.
    let kind = crate::kind::line_kind(line);
    assert!(
        crate::kind::METHODS.contains(&kind)
            || kind == crate::kind::RESPONSE
            || kind == crate::kind::OTHER,
        "line_kind gave {kind:?}"
    );
    let ours = parse_line(line);
    compare_with_serde(line, ours.as_ref().map(|(e, _)| e));
    check_fast_submit(line, ours.as_ref().ok().map(|(e, _)| e));
    let Ok((env, method)) = ours else {
        return;
    };
    check_spans(line, &env);
    match (method, env.method) {
        (None, None) => {}
        (Some(m), Some(name)) => match name.as_str() {
            Some(s) => assert_eq!(m, Method::from_name(s)),
            None => assert_eq!(m, Method::Unknown(name.raw())),
        },
        (m, name) => panic!("method {m:?} for a method field {name:?}"),
    }
    assert_eq!(
        env.id(),
        env.id.filter(|id| *id != "null"),
        "id() is the id unless null"
    );
    check_typed(line, &env);
}

fn check_value(line: &[u8], v: Value<'_>) {
    // The accessors never panic, whatever the value.
    let _ = (v.as_str(), v.as_u64(), v.as_bool(), v.is_null());
    if let Some(f) = v.as_f64() {
        assert!(
            !f.is_nan() || matches!(v, Value::Str(_)),
            "a JSON number read as NaN"
        );
    }
    match v {
        Value::Null | Value::Bool(_) => {}
        Value::Num(n) => {
            let at = offset(line, n);
            assert!(!n.is_empty() && n.parse::<f64>().is_ok(), "number {n:?}");
            assert!(!line[at + n.len()..].first().is_some_and(u8::is_ascii_digit));
        }
        Value::Str(s) => {
            let at = offset(line, s.raw());
            assert_eq!(line.get(at.wrapping_sub(1)), Some(&b'"'), "string opens");
            assert_eq!(line.get(at + s.raw().len()), Some(&b'"'), "string closes");
            match s.as_str() {
                Some(plain) => {
                    assert_eq!(plain, s.raw());
                    assert!(!plain.contains('\\'));
                    assert_eq!(s.to_cow(), plain);
                }
                None => {
                    assert!(s.raw().contains('\\'), "escaped without a backslash");
                    let _ = s.to_cow();
                }
            }
        }
        Value::Array(raw) => {
            offset(line, raw);
            assert!(raw.starts_with('[') && raw.ends_with(']'), "array {raw:?}");
        }
        Value::Object(raw) => {
            offset(line, raw);
            assert!(raw.starts_with('{') && raw.ends_with('}'), "object {raw:?}");
        }
    }
}

fn check_spans(line: &[u8], env: &Envelope<'_>) {
    if let Some(id) = env.id {
        offset(line, id);
        assert!(!id.is_empty());
    }
    if let Some(m) = env.method {
        check_value(line, Value::Str(m));
    }
    assert!(env.params.len() <= MAX_PARAMS);
    for i in 0..env.params.len() {
        check_value(line, env.params.get(i).expect("within len"));
    }
    assert_eq!(env.params.get(env.params.len()), None);
    assert_eq!(env.params.get(MAX_PARAMS), None);
    if let Some(named) = env.params.named {
        check_value(line, Value::Object(named));
    }
    for v in [env.result, env.error].into_iter().flatten() {
        check_value(line, v);
    }
}

fn check_typed(line: &[u8], env: &Envelope<'_>) {
    if let Ok(s) = Submit::parse(env) {
        assert!((5..=6).contains(&env.params.len()));
        offset(line, s.job_id);
        offset(line, s.worker.raw());
        let en2 = env
            .params
            .get(2)
            .and_then(|v| v.as_str())
            .expect("a string");
        assert_eq!(s.extranonce2().len() * 2, en2.len());
        assert!(s.extranonce2().len() <= MAX_EXTRANONCE2);
        assert_eq!(
            crate::hex::encode(s.extranonce2()),
            en2.to_ascii_lowercase()
        );
        let u32_at = |i: usize| {
            let text = env
                .params
                .get(i)
                .and_then(|v| v.as_str())
                .expect("a string");
            crate::hex::decode_u32(text).expect("decoded once already")
        };
        assert_eq!(s.ntime, u32_at(3));
        assert_eq!(s.nonce, u32_at(4));
        match env.params.get(5) {
            None | Some(Value::Null) => assert_eq!(s.version_bits, None),
            Some(_) => assert_eq!(s.version_bits, Some(u32_at(5))),
        }
    }
    if let Ok(s) = Subscribe::parse(env) {
        if let Some(session) = s.session {
            offset(line, session);
        }
        if let Some(std::borrow::Cow::Borrowed(ua)) = s.user_agent {
            offset(line, ua);
        }
    }
    if let Ok(a) = Authorize::parse(env) {
        let (account, worker) = a.account_and_worker();
        match worker {
            Some(w) => assert_eq!(format!("{account}.{w}"), a.user),
            None => assert_eq!(account, a.user),
        }
        if let Some(d) = a.difficulty_hint() {
            assert!(d.is_finite() && d > 0.0);
        }
    }
    if let Ok(c) = Configure::parse(env) {
        assert!(c.version_rolling_min_bit_count.is_none_or(|n| n <= 32));
        assert!(c
            .minimum_difficulty
            .is_none_or(|d| d.is_finite() && d > 0.0));
    }
    if let Ok(n) = Notify::parse(env) {
        offset(line, n.job_id);
        assert_eq!(
            env.params.get(8).and_then(|v| v.as_bool()),
            Some(n.clean_jobs)
        );
    }
    if let Ok(d) = suggested_difficulty(env) {
        assert!(d.is_finite() && d > 0.0);
    }
}

/// The fast submit reader accepts only what the general reader accepts, with the same fields
/// (extranonce2 aside: the fast path leaves its hex to the caller).
fn check_fast_submit(line: &[u8], general: Option<&Envelope<'_>>) {
    let Some(f) = crate::fast::parse_submit(line) else {
        return;
    };
    for s in [f.id, f.worker, f.job_id, f.extranonce2] {
        offset(line, s);
    }
    let env = general.unwrap_or_else(|| panic!("fast path accepted what parse_line refuses"));
    assert_eq!(env.method_str(), Some("mining.submit"), "fast path: method");
    assert_eq!(env.id, Some(f.id), "fast path: id");
    match Submit::parse(env) {
        Ok(s) => {
            assert_eq!(s.worker.as_str(), Some(f.worker), "fast path: worker");
            assert_eq!(s.job_id, f.job_id, "fast path: job_id");
            assert_eq!(
                crate::hex::encode(s.extranonce2()),
                f.extranonce2.to_ascii_lowercase(),
                "fast path: extranonce2"
            );
            assert_eq!(
                (s.ntime, s.nonce, s.version_bits),
                (f.ntime, f.nonce, f.version_bits),
                "fast path: ntime, nonce, version bits"
            );
        }
        Err(e) => assert_eq!(
            e.name, "extranonce2",
            "fast path accepted a submit Submit::parse refuses: {e}"
        ),
    }
}

/// The envelope keys whose readings are compared with serde_json's.
const ENVELOPE_KEYS: [&str; 5] = ["id", "method", "params", "result", "error"];

/// Why our reader may refuse a line serde_json accepts as an object: Stratum's stricter shape
/// and bounds, not JSON syntax.
const STRICTER: [&str; 4] = [
    "method must be a string",
    "params must be an array or an object",
    "too many params",
    "nesting too deep",
];

/// A line both readers accept reads the same; a line serde_json accepts as an object is refused
/// by ours only for Stratum's own rules; a line ours accepts is refused by serde_json only for
/// what serde_json cannot represent (numbers beyond f64, lone surrogates).
fn compare_with_serde(line: &[u8], ours: Result<&Envelope<'_>, &json::JsonError>) {
    let theirs = serde_json::from_slice::<serde_json::Value>(line);
    let theirs = match (ours, theirs) {
        (_, Ok(serde_json::Value::Object(map))) => map,
        (Ok(_), Ok(other)) => panic!("we accepted a line serde_json reads as {other}"),
        (Err(_), Ok(_)) | (Err(_), Err(_)) => return,
        (Ok(_), Err(e)) => {
            let msg = e.to_string();
            assert!(
                msg.contains("number out of range")
                    || msg.contains("surrogate")
                    || msg.contains("hex escape")
                    || msg.contains("unicode code point"),
                "we accepted a line serde_json refuses: {msg}"
            );
            return;
        }
    };
    // Keys written with escapes or twice are read differently by design (ours matches a key's
    // raw text; serde_json keeps the last of duplicates): compare only the clean envelopes.
    let Ok(TopKeys(keys)) = serde_json::from_slice::<TopKeys>(line) else {
        panic!("serde_json read an object but not its keys");
    };
    let mut seen = HashSet::new();
    for (key, escaped) in &keys {
        let envelope_key = ENVELOPE_KEYS.contains(&key.as_str());
        if envelope_key && (*escaped || !seen.insert(key.as_str())) {
            return;
        }
    }
    let env = match ours {
        Ok(env) => env,
        Err(e) => {
            assert!(
                STRICTER.contains(&e.what),
                "we refused a valid JSON object: {e}"
            );
            return;
        }
    };
    match (env.id, theirs.get("id")) {
        (None, None) => {}
        (Some(raw), Some(v)) => assert_eq!(&parse_json(raw), v, "id"),
        (a, b) => panic!("id: ours {a:?}, serde_json {b:?}"),
    }
    match (env.method, theirs.get("method")) {
        (None, None | Some(serde_json::Value::Null)) => {}
        (Some(m), Some(serde_json::Value::String(s))) => assert_eq!(&m.to_cow(), s, "method"),
        (a, b) => panic!("method: ours {a:?}, serde_json {b:?}"),
    }
    match theirs.get("params") {
        None | Some(serde_json::Value::Null) => {
            assert!(
                env.params.is_empty() && env.params.named.is_none(),
                "params"
            )
        }
        Some(serde_json::Value::Array(items)) => {
            assert_eq!(env.params.len(), items.len(), "param count");
            assert_eq!(env.params.named, None);
            for (i, item) in items.iter().enumerate() {
                assert_same(env.params.get(i).expect("counted"), item);
            }
        }
        Some(obj @ serde_json::Value::Object(_)) => {
            assert!(env.params.is_empty(), "named params and positional ones");
            assert_eq!(&parse_json(env.params.named.expect("named params")), obj);
        }
        Some(other) => panic!("we accepted params {other}"),
    }
    for (key, v) in [("result", env.result), ("error", env.error)] {
        match (v, theirs.get(key)) {
            (None, None) => {}
            (Some(ours), Some(theirs)) => assert_same(ours, theirs),
            (a, b) => panic!("{key}: ours {a:?}, serde_json {b:?}"),
        }
    }
}

fn parse_json(raw: &str) -> serde_json::Value {
    serde_json::from_str(raw).unwrap_or_else(|e| panic!("{raw:?} is not JSON alone: {e}"))
}

fn assert_same(ours: Value<'_>, theirs: &serde_json::Value) {
    use serde_json::Value as J;
    let same = match (ours, theirs) {
        (Value::Null, J::Null) => true,
        (Value::Bool(a), J::Bool(b)) => a == *b,
        (Value::Num(n), J::Number(_)) => &parse_json(n) == theirs,
        (Value::Str(s), J::String(t)) => s.to_cow() == t.as_str(),
        (Value::Array(raw), J::Array(_)) | (Value::Object(raw), J::Object(_)) => {
            &parse_json(raw) == theirs
        }
        _ => false,
    };
    assert!(same, "ours {ours:?}, serde_json {theirs}");
}

/// A top-level object's keys in order, each with whether it was written with escapes.
struct TopKeys(Vec<(String, bool)>);

impl<'de> de::Deserialize<'de> for TopKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = TopKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(Key(k, escaped)) = map.next_key()? {
                    map.next_value::<IgnoredAny>()?;
                    keys.push((k, escaped));
                }
                Ok(TopKeys(keys))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// A key, and whether serde_json had to unescape it (it lends unescaped strings borrowed).
struct Key(String, bool);

impl<'de> de::Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct K;
        impl<'de> Visitor<'de> for K {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Key, E> {
                Ok(Key(s.to_owned(), false))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(Key(s.to_owned(), true))
            }
        }
        d.deserialize_str(K)
    }
}
