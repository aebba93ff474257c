//! `stratumlab simnet` as a process: endpoints bind where asked, print their addresses, serve,
//! and everything stops cleanly on SIGTERM with a summary.

use std::io::{Read, Write};

use base64::Engine as _;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;

mod support;

struct Simnet;

impl Simnet {
    fn start(args: &[&str]) -> support::Role {
        support::Role::start("simnet", args)
    }
}

fn rpc(addr: SocketAddr, auth_b64: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {auth_b64}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

#[test]
fn rpc_with_password_and_cookie_then_clean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let datadir = dir.path().to_str().unwrap();
    let sn = Simnet::start(&[
        "--rpc-listen",
        "127.0.0.1:0",
        "--rpc-user",
        "alice",
        "--rpc-password",
        "secret",
        "--datadir",
        datadir,
        "--zmq-listen",
        "127.0.0.1:0",
        "--block-interval",
        "0",
    ]);
    let rpc_addr: SocketAddr = sn.line("rpc listening on").parse().unwrap();
    let zmq_addr: SocketAddr = sn.line("zmq listening on").parse().unwrap();
    assert!(rpc_addr.ip().is_loopback() && rpc_addr.port() != 0);
    assert!(zmq_addr.ip().is_loopback() && zmq_addr.port() != 0);

    // alice:secret
    let (status, body) = rpc(
        rpc_addr,
        "YWxpY2U6c2VjcmV0",
        r#"{"jsonrpc":"2.0","id":1,"method":"getblockcount","params":[]}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(
        body,
        r#"{"jsonrpc":"2.0","result":900000,"id":1}"#.to_owned() + "\n"
    );
    // The cookie works too.
    let cookie = std::fs::read_to_string(dir.path().join("regtest/.cookie")).unwrap();
    assert!(cookie.starts_with("__cookie__:"));
    let b64 = base64::engine::general_purpose::STANDARD.encode(cookie.trim());
    let (status, _) = rpc(
        rpc_addr,
        &b64,
        r#"{"id":1,"method":"getbestblockhash","params":[]}"#,
    );
    assert_eq!(status, 200);
    let (status, _) = rpc(
        rpc_addr,
        "YWxpY2U6d3Jvbmc=",
        r#"{"id":1,"method":"getblockcount"}"#,
    );
    assert_eq!(status, 401);

    let rest = sn.stop();
    assert!(
        rest.iter().any(|l| l.starts_with("simnet ran for")),
        "{rest:?}"
    );
    assert!(
        !dir.path().join("regtest/.cookie").exists(),
        "cookie removed on stop"
    );
}

#[test]
fn rpc_without_credentials_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["simnet", "--rpc-listen", "127.0.0.1:0", "--duration", "5s"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--rpc-listen needs credentials"), "{err}");
}

#[test]
fn events_written_by_simnet_read_back_with_the_events_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    let ev = dir.path().join("simnet.ev");
    let ev_arg = ev.to_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args([
            "simnet",
            "--block-interval",
            "50ms",
            "--duration",
            "500ms",
            "--seed",
            "4",
            "--events",
            ev_arg,
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("simnet ran for"), "{stdout}");

    let summary = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "summary", ev_arg])
        .output()
        .unwrap();
    assert!(
        summary.status.success(),
        "{}",
        String::from_utf8_lossy(&summary.stderr)
    );
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(
        text.contains("role \"simnet\"") && text.contains("template_created"),
        "{text}"
    );

    let dump = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "dump", "--kind", "tip_changed", ev_arg])
        .output()
        .unwrap();
    assert!(dump.status.success());
    let tips: Vec<serde_json::Value> = String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        !tips.is_empty(),
        "no network block in 500 ms at a 50 ms mean"
    );
    assert!(tips
        .iter()
        .all(|t| t["kind"] == "tip_changed" && t["source"] == "network"));
    let heights: Vec<u64> = tips.iter().map(|t| t["height"].as_u64().unwrap()).collect();
    assert_eq!(
        heights,
        (900_001..900_001 + tips.len() as u64).collect::<Vec<_>>()
    );

    // A reader that stops early (`| head -1`) ends the dump quietly, not with an error.
    let mut head = Command::new(env!("CARGO_BIN_EXE_stratumlab"))
        .args(["events", "dump", ev_arg])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(head.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    let out = head.wait_with_output().unwrap();
    assert!(first.starts_with('{'), "{first}");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
