//! The JSON form `stratumlab events dump` prints.

mod common;

use common::{h, samples};
use events::*;
use serde_json::{json, Value};

fn to_json(kind: EventKind) -> Value {
    serde_json::to_value(Event { ts_ns: 5, kind }).expect("serialize")
}

#[test]
fn every_kind_is_an_object_tagged_with_its_name() {
    for kind in samples() {
        let v = to_json(kind);
        assert_eq!(v["ts_ns"], 5);
        assert_eq!(v["kind"], kind.name(), "{v}");
    }
}

#[test]
fn share_results_use_the_metrics_vocabulary() {
    let v = to_json(
        ShareResult {
            conn: 3,
            channel: None,
            seq: 9,
            job_id: JobId::text("ab"),
            nonce: 1,
            difficulty: 2.5,
            verdict: Verdict::Rejected(Reason::LowDifficulty),
            perspective: Perspective::Received,
        }
        .into(),
    );
    assert_eq!(
        v,
        json!({
            "ts_ns": 5, "kind": "share_result", "conn": 3, "channel": null, "seq": 9,
            "job_id": "ab", "nonce": 1, "difficulty": 2.5,
            "verdict": {"rejected": "low_difficulty"}, "perspective": "received"
        })
    );
    let accepted = to_json(
        ShareResult {
            verdict: Verdict::Accepted,
            job_id: JobId::Num(4),
            ..match samples().into_iter().find(|k| k.name() == "share_result") {
                Some(EventKind::ShareResult(s)) => s,
                _ => unreachable!(),
            }
        }
        .into(),
    );
    assert_eq!(accepted["verdict"], "accepted");
    assert_eq!(accepted["job_id"], 4);
}

#[test]
fn hashes_and_targets_are_display_hex() {
    let prev = h(0xaa);
    let v = to_json(
        JobSent {
            conn: 1,
            channel: Some(2),
            job_id: JobId::Num(3),
            template_id: Some(4),
            fingerprint: Some(Fingerprint(0xab)),
            prev_hash: Some(prev),
            target: Target::DIFFICULTY_1,
            clean: true,
            future: false,
        }
        .into(),
    );
    assert_eq!(v["prev_hash"], prev.to_string());
    assert!(
        v["prev_hash"].as_str().expect("str").ends_with("01"),
        "display order is reversed"
    );
    assert_eq!(
        v["target"],
        "00000000ffff0000000000000000000000000000000000000000000000000000"
    );
    assert_eq!(v["difficulty"], 1.0);
    assert_eq!(v["fingerprint"], "00000000000000ab");
    assert_eq!(v["channel"], 2);
    assert_eq!(v["template_id"], 4);

    let tip = to_json(
        TipChanged {
            node: "network".into(),
            hash: h(0xbb),
            height: 1,
            prev_hash: prev,
            source: TipSource::Submitted,
        }
        .into(),
    );
    assert_eq!(tip["hash"], h(0xbb).to_string());
    assert_eq!(tip["source"], "submitted");
    assert_eq!(tip["node"], "network");
}

#[test]
fn addresses_directions_and_header() {
    let opened = samples()
        .into_iter()
        .find(|k| k.name() == "connection_opened")
        .expect("sample");
    let v = to_json(opened);
    assert_eq!(v["peer"], "127.0.0.3:3333");
    assert_eq!(v["local"], "[::1%7]:34255");

    let bytes = to_json(
        LinkBytes {
            link: "wan".into(),
            conn: 1,
            direction: Direction::Down,
            bytes: 10,
        }
        .into(),
    );
    assert_eq!(bytes["direction"], "down");

    let header = Header::new("simnet", "A");
    let hv = serde_json::to_value(header).expect("serialize");
    assert_eq!(hv["role"], "simnet");
    assert_eq!(hv["config"], "A");
    assert_eq!(hv["schema_major"], SCHEMA_MAJOR);
    assert_eq!(hv["pid"], std::process::id());
}
