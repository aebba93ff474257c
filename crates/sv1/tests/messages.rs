//! Messages in the forms real miners send them, and the lines a pool writes back.

use primitives::Hash256;
use sv1::message::{parse_line, Authorize, Configure, Method, Notify, Submit, Subscribe};
use sv1::write::{self, ConfigureReply, NotifyFields};
use sv1::ErrorCode;

fn method(line: &str) -> Method<'_> {
    parse_line(line.as_bytes()).unwrap().1.unwrap()
}

#[test]
fn handshakes_of_common_miners_parse() {
    // cgminer: params first in submit, subscribe with a user agent.
    let (e, m) =
        parse_line(br#"{"id": 0, "method": "mining.subscribe", "params": ["cgminer/4.11.1"]}"#)
            .unwrap();
    assert_eq!(m, Some(Method::Subscribe));
    assert_eq!(
        Subscribe::parse(&e).unwrap().user_agent.as_deref(),
        Some("cgminer/4.11.1")
    );
    let (e, _) =
        parse_line(br#"{"params": ["acct.rig1", "x"], "id": 1, "method": "mining.authorize"}"#)
            .unwrap();
    let a = Authorize::parse(&e).unwrap();
    assert_eq!(a.account_and_worker(), ("acct", Some("rig1")));
    // Bitaxe: configure first with a full mask.
    let (e, m) = parse_line(br#"{"id": 1, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff"}]}"#).unwrap();
    assert_eq!(m, Some(Method::Configure));
    let c = Configure::parse(&e).unwrap();
    assert_eq!(c.extensions, ["version-rolling"]);
    assert_eq!(c.version_rolling_mask, Some(0xffff_ffff));
    // bfgminer: suggest_difficulty as a notification, possibly before subscribe.
    let (e, m) =
        parse_line(br#"{"id": null, "method": "mining.suggest_difficulty", "params": [0.5]}"#)
            .unwrap();
    assert_eq!(m, Some(Method::SuggestDifficulty));
    assert_eq!(e.id(), None);
    assert_eq!(sv1::message::suggested_difficulty(&e), Ok(0.5));
    // cpuminer: subscribe without params, ckpool's alias for authorize.
    assert_eq!(
        method(r#"{"id":1,"method":"mining.subscribe","params":[]}"#),
        Method::Subscribe
    );
    assert_eq!(
        method(r#"{"id":2,"method":"mining.auth","params":["u","p"]}"#),
        Method::Authorize
    );
    assert_eq!(
        method(r#"{"id":3,"method":"mining.extranonce.subscribe","params":[]}"#),
        Method::ExtranonceSubscribe
    );
    assert_eq!(
        method(r#"{"id":3,"method":"mining.frobnicate","params":[]}"#),
        Method::Unknown("mining.frobnicate")
    );
}

#[test]
fn submit_with_and_without_version_bits() {
    let line = br#"{"params": ["acct.rig1", "6512ab3400000001", "0000000100000002", "5f5e1000", "1a2b3c4d"], "id": 4, "method": "mining.submit"}"#;
    let (e, _) = parse_line(line).unwrap();
    let s = Submit::parse(&e).unwrap();
    assert_eq!(s.job_id, "6512ab3400000001");
    assert_eq!(s.extranonce2(), [0, 0, 0, 1, 0, 0, 0, 2]);
    assert_eq!(s.ntime, 0x5f5e1000);
    assert_eq!(s.nonce, 0x1a2b3c4d);
    assert_eq!(s.version_bits, None);
    let line = br#"{"id":5,"method":"mining.submit","params":["w","j","00","5f5e1000","1a2b3c4d","00002000"]}"#;
    let (e, _) = parse_line(line).unwrap();
    assert_eq!(Submit::parse(&e).unwrap().version_bits, Some(0x2000));
}

#[test]
fn malformed_submits_name_the_parameter() {
    let cases = [
        (r#"["w","j","00","5f5e1000"]"#, "nonce"),
        (r#"["w","j","0","5f5e1000","1a2b3c4d"]"#, "extranonce2"),
        (r#"["w","j","zz","5f5e1000","1a2b3c4d"]"#, "extranonce2"),
        (r#"["w","j","00","5f5e100","1a2b3c4d"]"#, "ntime"),
        (r#"["w","j","00","5f5e1000",12345]"#, "nonce"),
        (r#"[1,"j","00","5f5e1000","1a2b3c4d"]"#, "worker"),
        (
            r#"["w","j","00","5f5e1000","1a2b3c4d","xyz"]"#,
            "version_bits",
        ),
        (
            r#"["w","j","00","5f5e1000","1a2b3c4d","00002000","extra"]"#,
            "params",
        ),
    ];
    for (params, name) in cases {
        let line = format!(r#"{{"id":1,"method":"mining.submit","params":{params}}}"#);
        let (e, _) = parse_line(line.as_bytes()).unwrap();
        assert_eq!(Submit::parse(&e).unwrap_err().name, name, "{params}");
    }
    let too_long = format!(
        r#"{{"id":1,"method":"mining.submit","params":["w","j","{}","5f5e1000","1a2b3c4d"]}}"#,
        "00".repeat(33)
    );
    let (e, _) = parse_line(too_long.as_bytes()).unwrap();
    assert_eq!(Submit::parse(&e).unwrap_err().name, "extranonce2");
}

#[test]
fn difficulty_hints_in_passwords() {
    let a = |p: &str| {
        Authorize {
            user: "u".into(),
            password: Some(p.to_owned().into()),
        }
        .difficulty_hint()
    };
    assert_eq!(a("d=0.5"), Some(0.5));
    assert_eq!(a("x,d=1024"), Some(1024.0));
    assert_eq!(a("x"), None);
    assert_eq!(a("d=-1"), None);
    assert_eq!(a("d=abc"), None);
}

#[test]
fn replies_are_valid_json_with_the_customary_shapes() {
    let mut out = Vec::new();
    write::reply_bool(&mut out, "7", true);
    write::reply_error(&mut out, "\"x\"", ErrorCode::JobNotFound);
    write::reply_subscribe(&mut out, "1", "deadbeef", &[0x08, 0, 0, 2], 4);
    write::reply_pong(&mut out, "9");
    write::set_difficulty(&mut out, 0.001);
    write::set_extranonce(&mut out, &[1, 2], 6);
    write::reconnect(&mut out, "127.0.0.1", 3333, 5);
    write::set_version_mask(&mut out, 0x1fffe000);
    let lines: Vec<serde_json::Value> = std::str::from_utf8(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0],
        serde_json::json!({"id": 7, "result": true, "error": null})
    );
    assert_eq!(
        lines[1],
        serde_json::json!({"id": "x", "result": null, "error": [21, "Job not found", null]})
    );
    assert_eq!(
        lines[2],
        serde_json::json!({"id": 1, "result": [[["mining.set_difficulty", "deadbeef"], ["mining.notify", "deadbeef"]], "08000002", 4], "error": null})
    );
    assert_eq!(lines[3]["result"], "pong");
    assert_eq!(
        lines[4],
        serde_json::json!({"id": null, "method": "mining.set_difficulty", "params": [0.001]})
    );
    assert_eq!(lines[5]["params"], serde_json::json!(["0102", 6]));
    assert_eq!(
        lines[6]["params"],
        serde_json::json!(["127.0.0.1", 3333, 5])
    );
    assert_eq!(lines[7]["params"], serde_json::json!(["1fffe000"]));
}

#[test]
fn configure_reply_answers_every_requested_extension() {
    let requested = vec![
        "version-rolling".to_owned(),
        "minimum-difficulty".to_owned(),
        "info".to_owned(),
    ];
    let mut out = Vec::new();
    write::reply_configure(
        &mut out,
        "1",
        &ConfigureReply {
            version_rolling: Some(0x1fffe000),
            minimum_difficulty: true,
            subscribe_extranonce: false,
            requested: &requested,
        },
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["result"],
        serde_json::json!({"version-rolling": true, "version-rolling.mask": "1fffe000", "minimum-difficulty": true, "info": false})
    );
    let mut out = Vec::new();
    write::reply_configure(
        &mut out,
        "1",
        &ConfigureReply {
            requested: &requested[..1],
            ..ConfigureReply::default()
        },
    );
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["result"], serde_json::json!({"version-rolling": false}));
}

#[test]
fn notify_round_trips_through_writer_and_reader() {
    let prev = Hash256::from_display_hex(
        "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
    )
    .unwrap();
    let branch = [primitives::sha256d(b"a"), primitives::sha256d(b"b")];
    let fields = NotifyFields {
        job_id: "1f",
        prev_hash: &prev,
        coinb1: &[1, 2, 3],
        coinb2: &[4, 5],
        merkle_branch: &branch,
        version: 0x2000_0000,
        nbits: 0x1d00ffff,
        ntime: 0x504e86b9,
        clean_jobs: true,
    };
    let mut out = Vec::new();
    write::notify(&mut out, &fields);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["params"][1],
        "4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000"
    );
    assert_eq!(v["params"][5], "20000000");
    assert_eq!(v["params"][6], "1d00ffff");
    let (e, m) = parse_line(out.strip_suffix(b"\n").unwrap()).unwrap();
    assert_eq!(m, Some(Method::Notify));
    let n = Notify::parse(&e).unwrap();
    assert_eq!(n.prev_hash, prev);
    assert_eq!(n.merkle_branch, branch);
    assert_eq!(
        (n.coinb1.as_slice(), n.coinb2.as_slice()),
        (&[1u8, 2, 3][..], &[4u8, 5][..])
    );
    assert_eq!(
        (n.version, n.nbits, n.ntime, n.clean_jobs),
        (0x2000_0000, 0x1d00ffff, 0x504e86b9, true)
    );
}

#[test]
fn miner_side_requests_parse_back() {
    let mut out = Vec::new();
    write::submit(
        &mut out,
        12,
        "acct.rig\"1",
        "j1",
        &[0xab, 0xcd],
        0x5f5e1000,
        7,
        Some(0x4000),
    );
    let (e, m) = parse_line(out.strip_suffix(b"\n").unwrap()).unwrap();
    assert_eq!(m, Some(Method::Submit));
    let s = Submit::parse(&e).unwrap();
    assert_eq!(s.worker.to_cow(), "acct.rig\"1");
    assert_eq!(
        (s.extranonce2(), s.nonce, s.version_bits),
        (&[0xab, 0xcd][..], 7, Some(0x4000))
    );
    out.clear();
    write::request(&mut out, 1, "mining.subscribe", &["stratumlab/0.1"]);
    let (e, _) = parse_line(out.strip_suffix(b"\n").unwrap()).unwrap();
    assert_eq!(
        e.params.get(0).and_then(|v| v.as_str()),
        Some("stratumlab/0.1")
    );
    assert_eq!(e.method_str(), Some("mining.subscribe"));
    assert_eq!(e.id(), Some("1"));
}
