//! What kind of message a line is, cheaply, for counting messages by type on a link
//! (docs/metrics.md, "Protocol cost"): the method's name for a request or notification, and
//! `response` for an answer. Reads only as far as the `"method"` key; never decides validity.

/// The key a method's name follows.
const KEY: &[u8] = b"\"method\"";

/// The name a line is counted under: a known method's wire name, `response` for a line with no
/// method (an answer), `other` for a method this crate does not know.
pub fn line_kind(line: &[u8]) -> &'static str {
    // The key is `"method"` followed by a colon: the same text as a value (a worker called
    // "method") is passed over.
    let mut from = 0;
    let rest = loop {
        let Some(at) = find_key(&line[from..]) else {
            return if from == 0 { RESPONSE } else { OTHER };
        };
        let after = from + at + KEY.len();
        if let Some(rest) = skip_space(&line[after..]).strip_prefix(b":") {
            break rest;
        }
        from = after;
    };
    let Some(rest) = skip_space(rest).strip_prefix(b"\"") else {
        return OTHER;
    };
    let Some(end) = rest.iter().position(|&b| b == b'"') else {
        return OTHER;
    };
    let name = &rest[..end];
    METHODS
        .iter()
        .find(|m| m.as_bytes() == name)
        .copied()
        .unwrap_or(OTHER)
}

/// A line without a method: the answer to a request.
pub const RESPONSE: &str = "response";

/// A method not among [`METHODS`].
pub const OTHER: &str = "other";

/// The methods counted by name, miner's and pool's.
pub const METHODS: &[&str] = &[
    "mining.submit",
    "mining.notify",
    "mining.set_difficulty",
    "mining.subscribe",
    "mining.authorize",
    "mining.configure",
    "mining.suggest_difficulty",
    "mining.suggest_target",
    "mining.extranonce.subscribe",
    "mining.set_extranonce",
    "mining.set_version_mask",
    "mining.ping",
    "client.reconnect",
    "client.show_message",
    "client.get_version",
];

/// Where `"method"` first occurs: a vectorised search, its searcher built once (every line a
/// role reads or writes is counted by kind, a share's two lines among them).
fn find_key(hay: &[u8]) -> Option<usize> {
    static FINDER: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(KEY));
    FINDER.find(hay)
}

fn skip_space(b: &[u8]) -> &[u8] {
    let n = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    &b[n..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_named_by_method_or_as_responses() {
        let cases: [(&[u8], &str); 8] = [
            (
                br#"{"params": ["w", "j", "e", "t", "n"], "id": 1, "method": "mining.submit"}"#,
                "mining.submit",
            ),
            (
                br#"{"id":null,"method":"mining.notify","params":["1"]}"#,
                "mining.notify",
            ),
            (br#"{"id":4,"result":true,"error":null}"#, RESPONSE),
            (
                br#"{"id":5,"method" :  "mining.set_difficulty","params":[8]}"#,
                "mining.set_difficulty",
            ),
            (br#"{"id":6,"method":"mining.dance","params":[]}"#, OTHER),
            (br#"{"id":7,"method":12}"#, OTHER),
            (br#"{"id":8,"method":"mining.subscri"#, OTHER),
            (
                br#"{"params":["method","j"],"id":9,"method":"mining.submit"}"#,
                "mining.submit",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(line_kind(line), want, "{}", String::from_utf8_lossy(line));
        }
        // Every known name is found as itself.
        for m in METHODS {
            let line = format!(r#"{{"id":1,"method":"{m}","params":[]}}"#);
            assert_eq!(line_kind(line.as_bytes()), *m);
        }
    }
}
