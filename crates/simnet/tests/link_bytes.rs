//! simnet counts its own socket bytes: what each endpoint reports as `LinkBytes` in the node's
//! event log equals what crossed the wire, measured by a relay between client and endpoint.

mod tdp_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use events::{Direction, EventKind, EventSink};
use simnet::rpc::{serve_with, RpcAuth, RpcOptions};
use simnet::tdp::TdpConfig;
use simnet::zmq::{Publisher, ZmqConfig};
use simnet::{Network, Node};
use tdp_support::{quiet_config, Client, WAIT};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use zeromq::{Socket, SocketRecv, SubSocket};

/// Bytes a relay carried: toward the endpoint, and back.
#[derive(Default)]
struct Carried {
    up: AtomicU64,
    down: AtomicU64,
    /// Connections still being relayed.
    open: AtomicU64,
}

/// Relays every connection to `listen` on to `target`, counting what it carries.
async fn relay(target: SocketAddr) -> (SocketAddr, Arc<Carried>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let carried = Arc::new(Carried::default());
    let c = carried.clone();
    let task = tokio::spawn(async move {
        let mut pipes = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (client, _) = accepted.unwrap();
                    let server = TcpStream::connect(target).await.unwrap();
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let c = c.clone();
                    c.open.fetch_add(1, Ordering::SeqCst);
                    pipes.spawn(async move {
                        tokio::join!(pipe(cr, sw, &c.up), pipe(sr, cw, &c.down));
                        c.open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                // Ends once the endpoint is stopped and every pipe has drained.
                Some(_) = pipes.join_next(), if !pipes.is_empty() => {}
            }
        }
    });
    (addr, carried, task)
}

/// Copies until end of stream or an error, counting what was written on.
async fn pipe(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin, n: &AtomicU64) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(k) => {
                if to.write_all(&buf[..k]).await.is_err() {
                    break;
                }
                n.fetch_add(k as u64, Ordering::Relaxed);
            }
        }
    }
    let _ = to.shutdown().await;
}

fn http_post(addr: SocketAddr, body: &str, close: bool) -> Vec<u8> {
    let auth = base64::engine::general_purpose::STANDARD.encode("lab:lab");
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Basic {auth}\r\nContent-Type: application/json\r\nConnection: {connection}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Reads one HTTP response with a Content-Length body; returns its size on the wire.
async fn read_response(s: &mut TcpStream) -> usize {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap_or(0);
            if got.len() >= end + 4 + len {
                assert_eq!(got.len(), end + 4 + len, "nothing beyond one response");
                assert!(head.starts_with("http/1.1 200"), "{head}");
                return got.len();
            }
        }
        let n = tokio::time::timeout(WAIT, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "closed before a whole response");
        got.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_reports_the_bytes_that_crossed_its_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("simnet.ev");
    let sink = EventSink::create(&path, "simnet", "").unwrap();
    let node = Node::new(Network::new(quiet_config(5)).unwrap(), "node", sink.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let listen = || TcpListener::bind("127.0.0.1:0");
    let (rpc_l, zmq_l, tdp_l) = (
        listen().await.unwrap(),
        listen().await.unwrap(),
        listen().await.unwrap(),
    );
    let (rpc_addr, zmq_addr, tdp_addr) = (
        rpc_l.local_addr().unwrap(),
        zmq_l.local_addr().unwrap(),
        tdp_l.local_addr().unwrap(),
    );
    let mut endpoints = tokio::task::JoinSet::new();
    let auth = RpcAuth::user_password("lab", "lab");
    endpoints.spawn({
        let (node, stop) = (node.clone(), stopped());
        async move {
            serve_with(node, rpc_l, auth, RpcOptions::default(), stop)
                .await
                .unwrap()
        }
    });
    let publisher = Publisher::new(node.clone(), ZmqConfig::default());
    let zmq_stats = publisher.stats();
    endpoints.spawn(publisher.serve(zmq_l, stopped()));
    endpoints.spawn({
        let (node, stop) = (node.clone(), stopped());
        async move {
            simnet::tdp::serve(node, tdp_l, TdpConfig::default(), stop)
                .await
                .unwrap()
        }
    });
    let (rpc_relay, rpc_bytes, rpc_task) = relay(rpc_addr).await;
    let (zmq_relay, zmq_bytes, zmq_task) = relay(zmq_addr).await;
    let (tdp_relay, tdp_bytes, tdp_task) = relay(tdp_addr).await;

    // RPC: two calls on a kept-alive connection, the second closing it.
    let mut s = TcpStream::connect(rpc_relay).await.unwrap();
    let mut sent = 0;
    let mut received = 0;
    for (body, close) in [
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"getblockcount"}"#,
            false,
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"getblocktemplate","params":[{"rules":["segwit"]}]}"#,
            true,
        ),
    ] {
        let req = http_post(rpc_addr, body, close);
        s.write_all(&req).await.unwrap();
        sent += req.len();
        received += read_response(&mut s).await;
    }
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "the server closed after the last answer");
    drop(s);

    // TDP (before the ZMQ block empties the mempool): handshake, setup, the first template
    // and its transactions.
    let mut c = Client::connect_reference(tdp_relay).await;
    let (t, _) = c.start(60).await;
    // Several hundred transactions: a frame of several Noise chunks.
    let (txs, _) = c.transaction_data(t.template_id).await.unwrap();
    assert!(txs.len() > 100, "{} transactions", txs.len());
    c.conn.shutdown().await;
    c.expect_close().await;
    drop(c);

    // ZMQ: a subscriber gets one tip (hashblock and rawblock), then leaves.
    let mut sub = SubSocket::new();
    sub.connect(&format!("tcp://{zmq_relay}")).await.unwrap();
    // The block topics only: the transaction topics would send the block's transactions too.
    sub.subscribe("hashblock").await.unwrap();
    sub.subscribe("rawblock").await.unwrap();
    let t0 = Instant::now();
    while zmq_stats.subscribers(b"rawblock") == 0 || zmq_stats.subscribers(b"hashblock") == 0 {
        assert!(t0.elapsed() < WAIT, "the subscription never registered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    node.mine(1, &[0x51]);
    for _ in 0..2 {
        tokio::time::timeout(WAIT, sub.recv())
            .await
            .unwrap()
            .unwrap();
    }
    let _ = sub.close().await;

    // Every client has left: the relays drain once the endpoints close their sides too.
    let t0 = Instant::now();
    for c in [&rpc_bytes, &zmq_bytes, &tdp_bytes] {
        while c.open.load(Ordering::SeqCst) > 0 {
            assert!(t0.elapsed() < WAIT, "a relayed connection never ended");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let _ = stop_tx.send(true);
    while let Some(r) = endpoints.join_next().await {
        r.unwrap();
    }
    for t in [rpc_task, zmq_task, tdp_task] {
        t.abort();
    }
    drop(node);
    sink.finish().unwrap();

    let log = events::read_file(&path).unwrap();
    let mut reported: HashMap<(String, Direction), u64> = HashMap::new();
    for e in &log.events {
        if let EventKind::LinkBytes(b) = &e.kind {
            assert_eq!(b.conn, 0, "one aggregate per endpoint");
            *reported
                .entry((b.link.as_str().to_owned(), b.direction))
                .or_default() += b.bytes;
        }
    }
    let get = |link: &str, d: Direction| reported.get(&(link.to_owned(), d)).copied();
    let carried = |c: &Carried| {
        (
            Some(c.up.load(Ordering::Relaxed)),
            Some(c.down.load(Ordering::Relaxed)),
        )
    };

    // The client's own count and the relay's agree for RPC, and the server's matches both.
    assert_eq!(
        carried(&rpc_bytes),
        (Some(sent as u64), Some(received as u64))
    );
    for (link, c) in [
        ("rpc", &rpc_bytes),
        ("zmq", &zmq_bytes),
        ("tdp", &tdp_bytes),
    ] {
        assert_eq!(
            (get(link, Direction::Up), get(link, Direction::Down)),
            carried(c),
            "{link}: reported (up, down) against what the relay carried"
        );
    }
    // A rawblock of a block with transactions is far more than the handshake, and the
    // transaction data took more than one Noise chunk.
    assert!(zmq_bytes.down.load(Ordering::Relaxed) > 1000);
    assert!(tdp_bytes.down.load(Ordering::Relaxed) > 65_535);
}
