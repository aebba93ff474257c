//! The real `para pool` (crates.io `para` 0.6.0, the binary the lab's `sv1-para` configuration
//! runs) against an in-process simnet: its RPC and ZMQ endpoints on 127.0.0.1. para checks the
//! chain (`getblockchaininfo`), that bitcoind publishes `hashblock` on the endpoint it was given
//! (`getzmqnotifications`), takes a template, and serves Stratum: a miner that subscribes and
//! authorizes gets a `mining.notify`.
//!
//! Finds the binary where the lab does (`$STRATUMLAB_PARA`, the CI tool cache under
//! `$STRATUMLAB_TOOLS_DIR` or `$XDG_CACHE_HOME`/`~/.cache`, `stratumlab-ci/para-0.6.0/bin/para`,
//! then PATH). Ignored by default, since it starts an outside process; run on purpose (as CI
//! does, after installing para), it fails without the binary rather than pass unseen.

mod rpc_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rpc_support::*;
use serde_json::{json, Value};
use simnet::zmq::{Publisher, ZmqConfig};

fn para_binary() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let tools = env("STRATUMLAB_TOOLS_DIR").or_else(|| {
        env("XDG_CACHE_HOME")
            .or_else(|| env("HOME").map(|h| h.join(".cache")))
            .map(|c| c.join("stratumlab-ci"))
    });
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("para"));
    env("STRATUMLAB_PARA")
        .into_iter()
        .chain(tools.map(|t| t.join("para-0.6.0/bin/para")))
        .chain(on_path)
        .find(|p| p.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the child however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "runs the para binary; cargo test -p simnet --test external_para -- --ignored"]
fn para_pool_starts_serving_stratum_against_simnet() {
    let para = para_binary().expect(
        "no para binary: set STRATUMLAB_PARA or install it with `bash scripts/install-tools.sh para`",
    );
    let server = Server::start(config(41));

    // The ZMQ publisher for the same node, on its own runtime.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let zmq = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let zmq_addr = zmq.local_addr().unwrap();
    let publisher = Publisher::new(server.node.clone(), ZmqConfig::default());
    rt.spawn(publisher.serve(zmq, std::future::pending()));

    let dir = tempfile::tempdir().unwrap();
    let stratum_port = free_port();
    let child = Command::new(&para)
        .args(["pool", "--address", "127.0.0.1", "--port"])
        .arg(stratum_port.to_string())
        .args(["--chain", "regtest", "--bitcoin-rpc-port"])
        .arg(server.addr.port().to_string())
        .args(["--bitcoin-rpc-username", USER])
        .args(["--bitcoin-rpc-password", PASSWORD])
        .arg("--zmq-block-notifications")
        .arg(format!("tcp://{zmq_addr}"))
        .args(["--start-diff", "0.001", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Killed(child);
    let stderr = child.0.stderr.take().unwrap();
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let log_w = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let mut l = log_w.lock().unwrap();
            l.push_str(&line);
            l.push('\n');
        }
    });

    // Stratum comes up once para has checked the node and has a template.
    let t0 = Instant::now();
    let stream = loop {
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("para exited ({status}):\n{}", log.lock().unwrap());
        }
        if let Ok(s) = TcpStream::connect(("127.0.0.1", stratum_port)) {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "para never listened:\n{}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    for m in [
        json!({"id": 1, "method": "mining.subscribe", "params": ["simnet-test/1.0"]}),
        json!({"id": 2, "method": "mining.authorize", "params": [format!("{ADDRESS}.w1"), "x"]}),
    ] {
        w.write_all(format!("{m}\n").as_bytes()).unwrap();
    }
    let mut seen = Vec::new();
    let notify = loop {
        let mut line = String::new();
        let n = r.read_line(&mut line).unwrap_or(0);
        assert!(
            n > 0,
            "no mining.notify; got {seen:?}\n{}",
            log.lock().unwrap()
        );
        let v: Value = serde_json::from_str(line.trim()).unwrap();
        if v["method"] == "mining.notify" {
            break v;
        }
        seen.push(v);
    };
    // The job builds on simnet's tip.
    let tip = server.call("getbestblockhash", json!([])).unwrap();
    let prev = notify["params"][1].as_str().unwrap().to_owned();
    println!("para: subscribed, authorized, got mining.notify on prevhash {prev} (tip {tip})");
    assert!(
        seen.iter().any(|v| v["id"] == 1 && v["error"].is_null()),
        "subscribe answered: {seen:?}"
    );
    let log = log.lock().unwrap();
    assert!(
        !log.contains("getzmqnotifications"),
        "para complained about getzmqnotifications:\n{log}"
    );
}
