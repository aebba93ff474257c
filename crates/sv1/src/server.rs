//! How the server side of a Stratum V1 connection reads a request: one line in, the
//! [`crate::session`]'s handler called for its method, and the answers that need no session
//! written here (parse errors, unknown methods, `ping`, `client.get_version`, malformed hints).
//! [`Share`] is a `mining.submit` as the session's judges see it.

use primitives::{Difficulty, Target};

use crate::message::{suggested_difficulty, MAX_EXTRANONCE2};
use crate::{parse_line, parse_submit, write, Authorize, Configure, Envelope, Method, ParamError};
use crate::{Submit, Subscribe};

/// A `mining.submit`'s fields, whichever reader read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Share<'a> {
    /// The request id's raw text, to echo verbatim.
    pub id: &'a str,
    /// The worker name as sent (escapes resolved when the general reader read it).
    pub worker: &'a str,
    /// The job id from `mining.notify`.
    pub job_id: &'a str,
    /// `None` when the miner's extranonce2 is not an even number of hex digits that fits
    /// [`MAX_EXTRANONCE2`] bytes: a share with a malformed parameter, which the handler judges
    /// in its customary order.
    pub extranonce2: Option<&'a [u8]>,
    /// The header time the miner used, Unix seconds.
    pub ntime: u32,
    /// The header nonce the miner found.
    pub nonce: u32,
    /// BIP310 version bits, when the miner rolls the version.
    pub version_bits: Option<u32>,
}

/// What a role does with each request a miner sends.
pub(crate) trait Handler {
    /// What a line was, for the role's shell.
    type Outcome;

    /// The output replies are appended to.
    fn out(&mut self) -> &mut Vec<u8>;
    /// A malformed line or parameter: the role counts it towards closing the connection.
    fn bad_line(&mut self);
    /// Returned by `client.get_version`.
    fn version(&self) -> &str;
    /// The outcome of a line that was not a share.
    fn not_a_share(&self) -> Self::Outcome;

    /// A share whose parameters parsed (its extranonce2 may still be malformed).
    fn submit(&mut self, share: &Share<'_>) -> Self::Outcome;
    /// A submit whose parameters did not parse (`e` says which).
    fn malformed_submit(&mut self, id: &str, env: &Envelope<'_>, e: ParamError) -> Self::Outcome;
    /// `mining.subscribe` with its parameters read; the handler writes the reply.
    fn subscribe(&mut self, id: &str, s: &Subscribe<'_>);
    /// `mining.authorize` with its parameters read; the handler writes the reply.
    fn authorize(&mut self, id: &str, a: &Authorize<'_>);
    /// `mining.configure` with its parameters read; the handler writes the reply (see
    /// [`configure`]).
    fn configure(&mut self, id: &str, c: &Configure);
    /// `mining.suggest_difficulty`, or `mining.suggest_target` as a difficulty; a notification
    /// (no id) is answered with nothing.
    fn suggest(&mut self, id: &str, notification: bool, d: Difficulty);
    /// `mining.extranonce.subscribe` (answered here).
    fn extranonce_subscribe(&mut self);
}

/// Reads one request line (without its newline) and calls `h` for it.
pub(crate) fn handle_line<H: Handler>(h: &mut H, line: &[u8]) -> H::Outcome {
    // Nearly every line is a submit in one of a few fixed shapes: read without the general
    // reader (which reads the rest, and every unusual submit, below).
    if let Some(s) = parse_submit(line) {
        let mut buf = [0u8; MAX_EXTRANONCE2];
        let extranonce2 = decode_extranonce2(s.extranonce2, &mut buf).map(|n| &buf[..n]);
        return h.submit(&Share {
            id: s.id,
            worker: s.worker,
            job_id: s.job_id,
            extranonce2,
            ntime: s.ntime,
            nonce: s.nonce,
            version_bits: s.version_bits,
        });
    }
    let (env, method) = match parse_line(line) {
        Ok(x) => x,
        Err(e) => {
            h.bad_line();
            let msg = format!("Parse error: {e}");
            write::reply_error_message(h.out(), "null", 20, &msg);
            return h.not_a_share();
        }
    };
    let id = env.id.unwrap_or("null");
    let Some(method) = method else {
        // A response to something the server sent (client.get_version, ping): nothing to do.
        return h.not_a_share();
    };
    let notification = env.id().is_none();
    match method {
        Method::Submit => {
            return match Submit::parse(&env) {
                Ok(s) => {
                    let worker = s.worker.to_cow();
                    h.submit(&Share {
                        id,
                        worker: &worker,
                        job_id: s.job_id,
                        extranonce2: Some(s.extranonce2()),
                        ntime: s.ntime,
                        nonce: s.nonce,
                        version_bits: s.version_bits,
                    })
                }
                Err(e) => h.malformed_submit(id, &env, e),
            };
        }
        Method::Subscribe => match Subscribe::parse(&env) {
            Ok(s) => h.subscribe(id, &s),
            Err(e) => param_error(h, id, e),
        },
        Method::Authorize => match Authorize::parse(&env) {
            Ok(a) => h.authorize(id, &a),
            Err(e) => param_error(h, id, e),
        },
        Method::Configure => match Configure::parse(&env) {
            Ok(c) => h.configure(id, &c),
            Err(e) => param_error(h, id, e),
        },
        Method::SuggestDifficulty => match suggested_difficulty(&env) {
            Ok(d) => h.suggest(id, notification, Difficulty::saturating(d)),
            Err(_) if notification => h.bad_line(),
            Err(e) => param_error(h, id, e),
        },
        Method::SuggestTarget => match suggested_target(&env) {
            Some(t) => h.suggest(id, notification, Difficulty::from_target(t)),
            None if notification => h.bad_line(),
            None => write::reply_error_message(h.out(), id, 20, "Bad target"),
        },
        Method::ExtranonceSubscribe => {
            h.extranonce_subscribe();
            if !notification {
                write::reply_bool(h.out(), id, true);
            }
        }
        Method::Ping => write::reply_pong(h.out(), id),
        Method::GetVersion => {
            let v = format!("\"{}\"", h.version());
            write::reply_raw(h.out(), id, &v);
        }
        Method::Unknown(_)
        | Method::Notify
        | Method::SetDifficulty
        | Method::SetExtranonce
        | Method::SetVersionMask
        | Method::Reconnect
        | Method::ShowMessage => {
            if !notification {
                write::reply_error_message(h.out(), id, 20, "Unknown method");
            }
        }
    }
    h.not_a_share()
}

/// Longest worker name a server takes (it is echoed in every submit and kept per connection).
pub(crate) const MAX_WORKER_NAME: usize = 128;

/// Whether `name` can be a worker's name: not blank, not too long, no control characters
/// (it goes into logs, events and the statistics as sent).
pub(crate) fn worker_name_ok(name: &str) -> bool {
    !name.trim().is_empty() && name.len() <= MAX_WORKER_NAME && !name.chars().any(char::is_control)
}

/// What a `mining.configure` settled.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Negotiated {
    /// The version-rolling mask granted: the miner's (all bits when it names none) AND what
    /// the server offers; `None` when not asked for, or when the server offers no bits.
    pub(crate) version_mask: Option<u32>,
    /// The floor the miner asked for with `minimum-difficulty`; `None` when not asked for.
    pub(crate) minimum_difficulty: Option<Difficulty>,
    /// Whether the miner asked for `subscribe-extranonce`, so accepts `mining.set_extranonce`.
    pub(crate) subscribe_extranonce: bool,
}

/// Answers `c` into `out` (BIP310: each extension the miner named is answered, granted or
/// not) given the version bits the server `offered`, and returns what was agreed.
pub(crate) fn configure(out: &mut Vec<u8>, id: &str, c: &Configure, offered: u32) -> Negotiated {
    let mut agreed = Negotiated::default();
    let mut reply = write::ConfigureReply {
        requested: &c.extensions,
        ..Default::default()
    };
    for ext in &c.extensions {
        match ext.as_str() {
            "version-rolling" if offered != 0 => {
                let mask = c.version_rolling_mask.unwrap_or(0xffff_ffff) & offered;
                agreed.version_mask = Some(mask);
                reply.version_rolling = Some(mask);
            }
            "minimum-difficulty" => {
                if let Some(d) = c.minimum_difficulty {
                    agreed.minimum_difficulty = Some(Difficulty::saturating(d));
                    reply.minimum_difficulty = true;
                }
            }
            "subscribe-extranonce" => {
                agreed.subscribe_extranonce = true;
                reply.subscribe_extranonce = true;
            }
            _ => {}
        }
    }
    write::reply_configure(out, id, &reply);
    agreed
}

/// A parameter that did not parse: counted, and answered with what was wrong.
fn param_error<H: Handler>(h: &mut H, id: &str, e: ParamError) {
    h.bad_line();
    write::reply_error_message(h.out(), id, 20, &e.to_string());
}

/// `mining.suggest_target`'s target: 64 hex digits, not zero.
fn suggested_target(env: &Envelope<'_>) -> Option<Target> {
    let hex = env.params.get(0)?.as_str()?;
    let bytes = primitives::hex::decode(hex).ok()?;
    let t = Target::from_be_bytes(&<[u8; 32]>::try_from(bytes).ok()?);
    (!t.is_zero()).then_some(t)
}

/// Decodes a miner's extranonce2 into `buf`, returning its length; `None` if it is not an even
/// number of hex digits that fits. (`primitives::hex::decode_into`, without a branch per
/// digit: every share has one.)
#[inline]
pub(crate) fn decode_extranonce2(hex: &str, buf: &mut [u8]) -> Option<usize> {
    let b = hex.as_bytes();
    let n = b.len() / 2;
    if b.len() & 1 != 0 || n > buf.len() {
        return None;
    }
    let mut bad = 0u8;
    for (o, pair) in buf[..n].iter_mut().zip(b.chunks_exact(2)) {
        let (hi, lo) = (NIBBLE[pair[0] as usize], NIBBLE[pair[1] as usize]);
        bad |= hi | lo;
        *o = hi << 4 | lo;
    }
    (bad & 0xf0 == 0).then_some(n)
}

/// Hex digits' values; 0xf0 for anything else.
const NIBBLE: [u8; 256] = {
    let mut t = [0xf0u8; 256];
    let mut i = 0;
    while i < 16 {
        t[b"0123456789abcdef"[i] as usize] = i as u8;
        t[b"0123456789ABCDEF"[i] as usize] = i as u8;
        i += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extranonces_decode_like_the_standard_decoder() {
        for s in [
            "",
            "00",
            "0a1B",
            "deadBEEF",
            "0011223g",
            "g0112233",
            "DEADbeef00112233",
            "00112233445566:7",
            "00\u{e9}2233",
            "0",
            "abc",
            "0g",
            "g0",
            "zz",
            "0x12",
            " 1",
            "ff\n",
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff00",
        ] {
            let mut got = [0u8; 32];
            let got = decode_extranonce2(s, &mut got).map(|n| got[..n].to_vec());
            let want = primitives::hex::decode(s).ok().filter(|v| v.len() <= 32);
            assert_eq!(got, want, "{s:?}");
        }
    }

    /// A handler that records what it was asked, for the answers the reader gives itself.
    #[derive(Default)]
    struct Recorder {
        out: Vec<u8>,
        bad: u32,
        calls: Vec<String>,
    }

    impl Handler for Recorder {
        type Outcome = bool;
        fn out(&mut self) -> &mut Vec<u8> {
            &mut self.out
        }
        fn bad_line(&mut self) {
            self.bad += 1;
        }
        fn version(&self) -> &str {
            "test/1"
        }
        fn not_a_share(&self) -> bool {
            false
        }
        fn submit(&mut self, s: &Share<'_>) -> bool {
            self.calls
                .push(format!("submit {} {:?}", s.worker, s.extranonce2));
            true
        }
        fn malformed_submit(&mut self, id: &str, _: &Envelope<'_>, e: ParamError) -> bool {
            self.calls.push(format!("malformed {id} {e}"));
            true
        }
        fn subscribe(&mut self, id: &str, _: &Subscribe<'_>) {
            self.calls.push(format!("subscribe {id}"));
        }
        fn authorize(&mut self, id: &str, a: &Authorize<'_>) {
            self.calls.push(format!("authorize {id} {}", &*a.user));
        }
        fn configure(&mut self, id: &str, _: &Configure) {
            self.calls.push(format!("configure {id}"));
        }
        fn suggest(&mut self, id: &str, notification: bool, d: Difficulty) {
            self.calls
                .push(format!("suggest {id} {notification} {}", d.as_f64()));
        }
        fn extranonce_subscribe(&mut self) {
            self.calls.push("extranonce".into());
        }
    }

    fn run(lines: &[&str]) -> Recorder {
        let mut h = Recorder::default();
        for l in lines {
            handle_line(&mut h, l.as_bytes());
        }
        h
    }

    #[test]
    fn each_method_reaches_its_handler_and_the_rest_is_answered_here() {
        let h = run(&[
            r#"{"id": 1, "method": "mining.subscribe", "params": ["cgminer/4.10"]}"#,
            r#"{"id": 2, "method": "mining.authorize", "params": ["w.1", "x"]}"#,
            r#"{"id": 3, "method": "mining.submit", "params": ["w.1", "1", "0a0B", "5f5e1000", "00000001"]}"#,
            r#"{"id": 4, "method": "mining.submit", "params": ["w.1", "1", "0g", "5f5e1000", "00000001"]}"#,
            r#"{"id": 5, "method": "mining.suggest_difficulty", "params": [512]}"#,
            r#"{"id": null, "method": "mining.suggest_target", "params": ["00000000ffff0000000000000000000000000000000000000000000000000000"]}"#,
            r#"{"id": 7, "method": "mining.extranonce.subscribe", "params": []}"#,
            r#"{"id": 8, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "1fffe000"}]}"#,
        ]);
        assert_eq!(
            h.calls,
            [
                "subscribe 1",
                "authorize 2 w.1",
                "submit w.1 Some([10, 11])",
                "submit w.1 None",
                "suggest 5 false 512",
                "suggest null true 1",
                "extranonce",
                "configure 8",
            ]
        );
        assert_eq!(h.bad, 0);
        assert_eq!(
            String::from_utf8(h.out).unwrap(),
            "{\"id\":7,\"result\":true,\"error\":null}\n"
        );
    }

    #[test]
    fn malformed_lines_and_parameters_are_counted_and_answered() {
        let h = run(&[
            "not json",
            r#"{"id": 1, "method": "mining.authorize", "params": []}"#,
            r#"{"id": 2, "method": "mining.suggest_difficulty", "params": ["x"]}"#,
            r#"{"method": "mining.suggest_difficulty", "params": [-1]}"#,
            r#"{"id": 3, "method": "mining.suggest_target", "params": ["00"]}"#,
            r#"{"id": 4, "method": "mining.submit", "params": ["w", "1", "00", "zz", "00000001"]}"#,
            r#"{"id": 5, "method": "mining.frobnicate", "params": []}"#,
            r#"{"id": 6, "method": "mining.ping", "params": []}"#,
            r#"{"id": 7, "method": "client.get_version", "params": []}"#,
            r#"{"id": 8, "result": true, "error": null}"#,
        ]);
        // The unreadable line, the authorize and both difficulty hints; the bad target is
        // answered but not counted (as the pool always did); the submit is the handler's.
        assert_eq!(h.bad, 4);
        assert_eq!(h.calls.len(), 1);
        assert!(h.calls[0].starts_with("malformed 4 "), "{:?}", h.calls);
        let out = String::from_utf8(h.out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 7, "{out}");
        assert!(lines[0].starts_with("{\"id\":null,\"result\":null,\"error\":[20,\"Parse error"));
        assert!(lines[3].contains("\"Bad target\""), "{out}");
        assert!(lines[4].contains("\"Unknown method\""), "{out}");
        assert!(lines[5].contains("\"pong\""), "{out}");
        assert!(lines[6].contains("\"test/1\""), "{out}");
    }
}
