//! `stratumlab simnet` with several nodes: each prints its endpoints under its name, serves its
//! own RPC and Template Provider, and its events say whose they are.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

mod support;

/// alice:secret
const AUTH: &str = "YWxpY2U6c2VjcmV0";

fn rpc(addr: SocketAddr, method: &str, params: &str) -> serde_json::Value {
    let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {AUTH}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{method}: {resp}");
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    assert!(v["error"].is_null(), "{method}: {v}");
    v["result"].clone()
}

#[test]
fn two_nodes_print_their_endpoints_by_name_and_serve_each_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("simnet.ev");
    let sn = support::Role::start(
        "simnet",
        &[
            "--node",
            "pool",
            "--node",
            "farm",
            "--relay-delay",
            "farm=50ms",
            "--rpc-listen",
            "pool=127.0.0.1:0",
            "--rpc-listen",
            "farm=127.0.0.1:0",
            "--tdp-listen",
            "pool=127.0.0.1:0",
            "--tdp-listen",
            "farm=127.0.0.1:0",
            "--rpc-user",
            "alice",
            "--rpc-password",
            "secret",
            "--block-interval",
            "300ms",
            "--tx-rate",
            "20",
            "--seed",
            "6",
            "--duration",
            "20s",
            "--events",
            ev.to_str().unwrap(),
        ],
    );
    // Node by node, in the order given.
    let addr = |s: String| -> SocketAddr { s.parse().unwrap() };
    let pool_rpc = addr(sn.line("node pool: rpc listening on"));
    let pool_tdp = addr(sn.line("node pool: tdp listening on"));
    let farm_rpc = addr(sn.line("node farm: rpc listening on"));
    let farm_tdp = addr(sn.line("node farm: tdp listening on"));
    for a in [pool_rpc, pool_tdp, farm_rpc, farm_tdp] {
        assert!(a.ip().is_loopback() && a.port() != 0, "{a}");
    }
    assert_eq!(
        [pool_rpc, pool_tdp, farm_rpc, farm_tdp]
            .iter()
            .collect::<std::collections::HashSet<_>>()
            .len(),
        4
    );

    for (name, at) in [("pool", pool_rpc), ("farm", farm_rpc)] {
        let best = rpc(at, "getbestblockhash", "[]");
        assert_eq!(best.as_str().unwrap().len(), 64, "{name}: {best}");
        let t = rpc(at, "getblocktemplate", r#"[{"rules":["segwit"]}]"#);
        assert!(t["height"].as_u64().unwrap() > 900_000, "{name}: {t}");
        assert!(t["transactions"].is_array(), "{name}");
    }
    for at in [pool_tdp, farm_tdp] {
        let mut s = TcpStream::connect(at).unwrap();
        // Half a Noise handshake is enough for the endpoint to record the connection.
        s.write_all(&[0u8; 8]).unwrap();
    }
    // Let a few network blocks and a peer traffic report happen.
    std::thread::sleep(Duration::from_millis(1500));

    let rest = sn.stop();
    let text = rest.join("\n");
    assert!(text.contains("simnet ran for"), "{text}");
    for name in ["pool", "farm"] {
        assert!(text.contains(&format!("  node {name}\n")), "{text}");
    }
    assert!(text.contains("peer traffic"), "{text}");

    let events = support::dump_events(&ev);
    let by = |kind: &str, field: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e[field].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let template_nodes = by("template_created", "node");
    for name in ["pool", "farm"] {
        assert!(
            template_nodes.iter().any(|n| n == name),
            "{template_nodes:?}"
        );
    }
    assert!(template_nodes.iter().all(|n| n == "pool" || n == "farm"));
    // The network's own tips, then each node's.
    let tip_nodes = by("tip_changed", "node");
    for name in ["network", "pool", "farm"] {
        assert!(tip_nodes.iter().any(|n| n == name), "{tip_nodes:?}");
    }
    let links = by("link_bytes", "link");
    for link in ["pool/rpc", "farm/rpc", "pool/peer", "farm/peer"] {
        assert!(links.iter().any(|l| l == link), "{link} in {links:?}");
    }
    let labels = by("connection_opened", "label");
    for label in ["pool/tdp", "farm/tdp"] {
        assert!(labels.iter().any(|l| l == label), "{label} in {labels:?}");
    }
}

#[test]
fn unknown_node_names_are_refused_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args([
            "simnet",
            "--node",
            "pool",
            "--node",
            "farm",
            "--relay-delay",
            "form=50ms",
            "--duration",
            "5s",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"form\""), "{err}");
}
