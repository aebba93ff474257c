//! The ZMQ publisher against real subscribers on 127.0.0.1: the `zeromq` crate's SUB socket (an
//! implementation independent of ours) and a hand-rolled ZMTP client for what a well-behaved
//! library would never send.

mod common;

mod zmq_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use zmq_support::{display, recv, seq, WAIT};

use common::{payout_script, Draft};
use events::EventSink;
use primitives::bitcoin::consensus::{deserialize, serialize};
use primitives::bitcoin::{Amount, Block};
use primitives::Hash256;
use simnet::zmq::{Publisher, Topic, ZmqConfig, ZmqStats};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;
use zeromq::{Socket, SocketRecv, SubSocket};

fn node(initial_txs: usize) -> Node {
    let config = SimnetConfig {
        seed: 11,
        network_difficulty: common::easy_difficulty(),
        // No network blocks and no arrivals: tips change only when a test says so.
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs,
            arrival_rate: 0.0,
            ..MempoolConfig::default()
        },
        ..SimnetConfig::default()
    };
    Node::new(Network::new(config).unwrap(), "zmq", EventSink::disabled())
}

/// A publisher on a fresh port; stops when dropped.
struct Server {
    node: Node,
    addr: SocketAddr,
    stats: ZmqStats,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    async fn start(node: Node, config: ZmqConfig) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let publisher = Publisher::new(node.clone(), config);
        let stats = publisher.stats();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(publisher.serve(listener, async {
            let _ = stopped.await;
        }));
        Server {
            node,
            addr,
            stats,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// A server on a 50-transaction node with one `hashblock` subscriber, registered.
    async fn with_hashblock_sub(config: ZmqConfig) -> (Server, SubSocket) {
        let server = Server::start(node(50), config).await;
        let s = sub(&server, &["hashblock"]).await;
        server.wait_subscribers(1, 0).await;
        (server, s)
    }

    fn endpoint(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Waits until `n` handshaken subscribers match each topic: ZMQ has no subscription
    /// acknowledgement, and a tip published before then would not reach them.
    async fn wait_subscribers(&self, hashblock: usize, rawblock: usize) {
        let t0 = Instant::now();
        while self.stats.subscribers(b"hashblock") != hashblock
            || self.stats.subscribers(b"rawblock") != rawblock
        {
            assert!(t0.elapsed() < WAIT, "subscriptions never registered");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until `n` subscribers have completed the handshake (a subscriber whose
    /// subscriptions match nothing is not seen by `wait_subscribers`).
    async fn wait_connections(&self, n: usize) {
        let t0 = Instant::now();
        while self.stats.connections() != n {
            assert!(
                t0.elapsed() < WAIT,
                "connections never completed the handshake"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, self.task.take().unwrap())
            .await
            .expect("serve returns on shutdown")
            .unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

async fn sub(server: &Server, topics: &[&str]) -> SubSocket {
    let mut s = SubSocket::new();
    s.connect(&server.endpoint()).await.unwrap();
    for t in topics {
        s.subscribe(t).await.unwrap();
    }
    s
}

/// No message within `quiet`.
async fn assert_silent(s: &mut SubSocket, quiet: Duration) {
    if let Ok(m) = tokio::time::timeout(quiet, s.recv()).await {
        panic!("unexpected message {:?}", m.map(|m| m.into_vec()));
    }
}

/// A publisher told to serve the block topics only (`-zmqpubhashblock` and
/// `-zmqpubrawblock`).
fn blocks_only() -> ZmqConfig {
    ZmqConfig {
        topics: vec![Topic::HashBlock, Topic::RawBlock],
        ..ZmqConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tip_publishes_one_hashblock_and_one_rawblock_with_per_topic_sequences() {
    let server = Server::start(node(300), blocks_only()).await;
    let mut s = sub(&server, &["hashblock", "rawblock"]).await;
    server.wait_subscribers(1, 1).await;

    let mut hashes = Vec::new();
    for i in 0..3u32 {
        let hash = server.node.mine(1, &payout_script())[0];
        hashes.push(hash);
        let m = recv(&mut s).await;
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], b"hashblock");
        assert_eq!(m[1], display(hash), "display byte order, as bitcoind");
        assert_eq!(
            Hash256::from_display_hex(&hex(&m[1])).unwrap(),
            hash,
            "the hex a user would compare with getbestblockhash"
        );
        assert_eq!(seq(&m[2]), i);

        let m = recv(&mut s).await;
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], b"rawblock");
        let block: Block = deserialize(&m[1]).expect("rawblock is a serialized block");
        assert_eq!(Hash256::from(block.block_hash()), hash);
        let stored = server.node.read(|n| n.block(&hash).unwrap().serialize());
        assert_eq!(m[1], stored);
        assert_eq!(seq(&m[2]), i);
    }
    // The first block carried the mempool's transactions.
    let first = server
        .node
        .read(|n| n.block(&hashes[0]).unwrap().tx_count());
    assert!(first > 100, "{first} transactions");
    // Exactly one message per topic per tip.
    assert_silent(&mut s, Duration::from_millis(200)).await;
    assert_eq!(server.stats.published(), 6);
    server.shutdown().await;
}

fn hex(b: &[u8]) -> String {
    primitives::hex::encode(b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_only_the_topics_their_prefixes_match() {
    let server = Server::start(node(50), blocks_only()).await;
    let mut hash_only = sub(&server, &["hashblock"]).await;
    let mut raw_prefix = sub(&server, &["raw"]).await;
    // A topic this publisher was not told to serve.
    let mut nothing = sub(&server, &["hashtx"]).await;
    server.wait_subscribers(1, 1).await;
    server.wait_connections(3).await;

    let hashes = server.node.mine(2, &payout_script());
    for (i, h) in hashes.iter().enumerate() {
        let m = recv(&mut hash_only).await;
        assert_eq!(
            (&m[0][..], &m[1], seq(&m[2])),
            (&b"hashblock"[..], &display(*h), i as u32)
        );
        let m = recv(&mut raw_prefix).await;
        assert_eq!(m[0], b"rawblock");
        assert_eq!(seq(&m[2]), i as u32);
    }
    assert_silent(&mut hash_only, Duration::from_millis(200)).await;
    assert_silent(&mut raw_prefix, Duration::from_millis(10)).await;
    assert_silent(&mut nothing, Duration::from_millis(10)).await;

    // Unsubscribing stops delivery; the sequence keeps counting what was published.
    hash_only.unsubscribe("hashblock").await.unwrap();
    server.wait_subscribers(0, 1).await;
    let h = server.node.mine(1, &payout_script())[0];
    let m = recv(&mut raw_prefix).await;
    assert_eq!(seq(&m[2]), 2);
    assert_eq!(
        Hash256::from(deserialize::<Block>(&m[1]).unwrap().block_hash()),
        h
    );
    assert_silent(&mut hash_only, Duration::from_millis(200)).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_arrives_within_milliseconds_of_the_tip_change() {
    let (server, mut s) = Server::with_hashblock_sub(ZmqConfig::default()).await;
    let mut delays = Vec::new();
    for _ in 0..10 {
        let hash = server.node.mine(1, &payout_script())[0];
        // `mine` returns once the tip changed and was published to the node's subscribers.
        let changed = Instant::now();
        let m = recv(&mut s).await;
        delays.push(changed.elapsed());
        assert_eq!(m[1], display(hash));
    }
    delays.sort();
    eprintln!("tip change to hashblock received: {delays:?}");
    assert!(
        delays[delays.len() / 2] < Duration::from_millis(10),
        "median delay {:?}",
        delays[delays.len() / 2]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reorg_publishes_its_new_tip_only() {
    let (server, mut s) = Server::with_hashblock_sub(ZmqConfig::default()).await;
    let template = server.node.read(|n| n.template().clone());
    let network_block = server.node.mine(1, &payout_script())[0];

    // A rival on the same parent (stale: no message), then its child (a reorg onto the
    // rival's branch: one message, for the child).
    let mut rival = Draft::from_template(&template);
    rival.txs.clear();
    rival.spec.payouts[0].value = Amount::from_sat(template.subsidy);
    rival.extranonce = vec![1; 8];
    let rival = rival.mine();
    let rival_hash: Hash256 = rival.block_hash().into();
    assert!(server.node.submit_block(&serialize(&rival)).is_err());
    let mut child = Draft::from_template(&template);
    child.txs.clear();
    child.prev_hash = rival_hash;
    child.spec.height = template.height + 1;
    child.spec.payouts[0].value = Amount::from_sat(template.subsidy);
    child.time = template.curtime + 1;
    let accepted = server.node.submit_block(&serialize(&child.mine())).unwrap();

    let m = recv(&mut s).await;
    assert_eq!((m[1].clone(), seq(&m[2])), (display(network_block), 0));
    let m = recv(&mut s).await;
    assert_eq!((m[1].clone(), seq(&m[2])), (display(accepted.hash), 1));
    assert_silent(&mut s, Duration::from_millis(200)).await;
    server.shutdown().await;
}

/// A ZMTP client that does exactly what it is told.
struct RawPeer {
    stream: TcpStream,
}

impl RawPeer {
    async fn connect(addr: SocketAddr) -> RawPeer {
        RawPeer {
            stream: TcpStream::connect(addr).await.unwrap(),
        }
    }

    /// Greeting (ZMTP 3.`minor`, NULL) and READY as `socket_type`; checks the server's.
    async fn handshake(&mut self, minor: u8, socket_type: &[u8]) {
        let mut greeting = [0u8; 64];
        greeting[0] = 0xff;
        greeting[9] = 0x7f;
        greeting[10] = 3;
        greeting[11] = minor;
        greeting[12..16].copy_from_slice(b"NULL");
        self.stream.write_all(&greeting).await.unwrap();
        let mut body = b"\x05READY\x0bSocket-Type".to_vec();
        body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
        body.extend_from_slice(socket_type);
        self.send_frame(0x04, &body).await;

        let mut theirs = [0u8; 64];
        self.stream.read_exact(&mut theirs).await.unwrap();
        assert_eq!(&theirs[..12], b"\xff\0\0\0\0\0\0\0\0\x7f\x03\x01");
        assert_eq!(&theirs[12..32], b"NULL\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
        let (flags, ready) = self.recv_frame().await.unwrap();
        assert_eq!(flags, 0x04);
        assert_eq!(ready, b"\x05READY\x0bSocket-Type\0\0\0\x03PUB");
    }

    async fn send_frame(&mut self, flags: u8, body: &[u8]) {
        let mut f = vec![flags, body.len() as u8];
        f.extend_from_slice(body);
        self.stream.write_all(&f).await.unwrap();
    }

    /// ZMTP 3.0's subscription message.
    async fn subscribe_message(&mut self, prefix: &[u8]) {
        self.send_frame(0x00, &[&[1u8][..], prefix].concat()).await;
    }

    /// ZMTP 3.1's SUBSCRIBE command.
    async fn subscribe_command(&mut self, prefix: &[u8]) {
        self.send_frame(0x04, &[&b"\x09SUBSCRIBE"[..], prefix].concat())
            .await;
    }

    /// The next frame's flags and body; None once the server closed the connection.
    async fn recv_frame(&mut self) -> Option<(u8, Vec<u8>)> {
        let flags = self.stream.read_u8().await.ok()?;
        let size = if flags & 0x02 != 0 {
            self.stream.read_u64().await.ok()? as usize
        } else {
            self.stream.read_u8().await.ok()? as usize
        };
        let mut body = vec![0; size];
        self.stream.read_exact(&mut body).await.ok()?;
        Some((flags, body))
    }

    async fn recv_message(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            let (flags, body) = tokio::time::timeout(WAIT, self.recv_frame())
                .await
                .expect("a frame in time")
                .expect("connection open");
            assert_eq!(flags & 0x04, 0, "a command where a message was expected");
            frames.push(body);
            if flags & 0x01 == 0 {
                return frames;
            }
        }
    }

    /// Whether the server closes the connection within `wait` (reading whatever comes first).
    async fn closed_within(&mut self, wait: Duration) -> bool {
        let mut buf = [0u8; 4096];
        tokio::time::timeout(wait, async {
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zmtp_3_0_and_3_1_subscribers_and_heartbeats() {
    let server = Server::start(node(50), ZmqConfig::default()).await;
    let mut old = RawPeer::connect(server.addr).await;
    old.handshake(0, b"SUB").await;
    old.subscribe_message(b"hashblock").await;
    let mut new = RawPeer::connect(server.addr).await;
    new.handshake(1, b"XSUB").await;
    new.subscribe_command(b"rawblock").await;
    // PING with a 2-byte context: PONG echoes it.
    new.send_frame(0x04, b"\x04PING\x00\x64hi").await;
    let (flags, pong) = new.recv_frame().await.unwrap();
    assert_eq!((flags, &pong[..]), (0x04, &b"\x04PONGhi"[..]));
    server.wait_subscribers(1, 1).await;

    let hash = server.node.mine(1, &payout_script())[0];
    let m = old.recv_message().await;
    assert_eq!(m, [b"hashblock".to_vec(), display(hash), vec![0, 0, 0, 0]]);
    let m = new.recv_message().await;
    assert_eq!(m[0], b"rawblock");
    assert_eq!(m[2], [0, 0, 0, 0]);
    server.shutdown().await;
    assert!(old.closed_within(WAIT).await, "shutdown closes connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_peers_are_dropped_alone() {
    let config = ZmqConfig {
        handshake_timeout: Duration::from_millis(300),
        ..ZmqConfig::default()
    };
    let (server, mut good) = Server::with_hashblock_sub(config).await;

    let mut garbage = RawPeer::connect(server.addr).await;
    garbage
        .stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut wrong_type = RawPeer::connect(server.addr).await;
    let mut bad_frame = RawPeer::connect(server.addr).await;
    bad_frame.handshake(1, b"SUB").await;
    let mut silent = RawPeer::connect(server.addr).await;

    assert!(garbage.closed_within(WAIT).await, "garbage greeting");
    let mut greeting = [0u8; 64];
    greeting[0] = 0xff;
    greeting[9] = 0x7f;
    greeting[10] = 3;
    greeting[12..16].copy_from_slice(b"NULL");
    wrong_type.stream.write_all(&greeting).await.unwrap();
    wrong_type
        .send_frame(0x04, b"\x05READY\x0bSocket-Type\0\0\0\x04PUSH")
        .await;
    assert!(
        wrong_type.closed_within(WAIT).await,
        "PUSH cannot subscribe"
    );
    // Reserved flag bits.
    bad_frame
        .stream
        .write_all(&[0xf0, 0x01, 0x00])
        .await
        .unwrap();
    assert!(bad_frame.closed_within(WAIT).await, "reserved flags");
    // Connected, never said a word: dropped at the handshake timeout.
    assert!(silent.closed_within(WAIT).await, "handshake timeout");

    let hash = server.node.mine(1, &payout_script())[0];
    let m = recv(&mut good).await;
    assert_eq!((m[1].clone(), seq(&m[2])), (display(hash), 0));
    assert_eq!(server.stats.connections(), 1);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_never_reads_loses_messages_and_nobody_else_does() {
    // Enough transactions for several full blocks: megabytes of rawblock messages, more than
    // the loopback socket buffers hold.
    let config = ZmqConfig {
        high_water_mark: 4,
        ..ZmqConfig::default()
    };
    let server = Server::start(node(20_000), config).await;
    // The good subscriber is the raw client: the `zeromq` crate's SUB socket (0.6) spins
    // forever receiving a message of a megabyte or so, whoever publishes it.
    let mut good = RawPeer::connect(server.addr).await;
    good.handshake(1, b"SUB").await;
    good.subscribe_message(b"hashblock").await;
    good.subscribe_command(b"rawblock").await;
    // A subscriber with a tiny receive buffer that subscribes to everything and never reads.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = RawPeer {
        stream: socket.connect(server.addr).await.unwrap(),
    };
    stalled.handshake(1, b"SUB").await;
    stalled.subscribe_message(b"").await;
    server.wait_subscribers(2, 2).await;

    let blocks = 12u32;
    let mut bytes = 0;
    for i in 0..blocks {
        let hash = server.node.mine(1, &payout_script())[0];
        let t0 = Instant::now();
        let m = good.recv_message().await;
        assert_eq!(
            m,
            [
                b"hashblock".to_vec(),
                display(hash),
                i.to_le_bytes().to_vec()
            ]
        );
        let m = good.recv_message().await;
        assert_eq!((&m[0][..], seq(&m[2])), (&b"rawblock"[..], i));
        let block: Block = deserialize(&m[1]).unwrap();
        assert_eq!(Hash256::from(block.block_hash()), hash);
        bytes += m[1].len();
        assert!(t0.elapsed() < Duration::from_secs(2), "delivery held up");
    }
    assert!(bytes > 5_000_000, "only {bytes} bytes of blocks");
    assert!(
        server.stats.dropped() > 0,
        "the stalled subscriber's queue never filled"
    );
    assert_eq!(
        server.stats.connections(),
        2,
        "a slow peer is not disconnected"
    );
    eprintln!(
        "{bytes} bytes of blocks; dropped for the stalled peer: {}",
        server.stats.dropped()
    );
    server.shutdown().await;
}

/// A subscriber for libzmq itself, through pyzmq: prints what it receives, one line a message.
const PYZMQ_SUBSCRIBER: &str = r#"
import sys, zmq, struct, hashlib
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.RCVTIMEO, 10000)
s.setsockopt(zmq.SUBSCRIBE, b"hashblock")
s.setsockopt(zmq.SUBSCRIBE, b"rawblock")
s.connect("tcp://127.0.0.1:%s" % sys.argv[1])
for _ in range(int(sys.argv[2])):
    topic, body, seq = s.recv_multipart()
    if topic == b"rawblock":
        body = hashlib.sha256(hashlib.sha256(body[:80]).digest()).digest()[::-1]
    print(topic.decode(), struct.unpack('<I', seq)[0], body.hex(), flush=True)
"#;

/// A Python with pyzmq, if this machine has one (`.ci/run` installs it).
fn python_with_pyzmq() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import zmq"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// libzmq itself as the subscriber. Needs pyzmq (`python3 -m pip install pyzmq`), so it is
/// ignored by default; CI installs pyzmq and runs it with
/// `cargo test -p simnet --test zmq_publisher -- --ignored libzmq`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs pyzmq; CI runs it"]
async fn libzmq_subscribes_too() {
    let python = python_with_pyzmq().expect("python3 with pyzmq (python3 -m pip install pyzmq)");
    // Blocks of over a megabyte: the first ones take the mempool's backlog.
    let server = Server::start(node(20_000), ZmqConfig::default()).await;
    let blocks = 3;
    let child = std::process::Command::new(python)
        .args(["-c", PYZMQ_SUBSCRIBER])
        .arg(server.addr.port().to_string())
        .arg((2 * blocks).to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    server.wait_subscribers(1, 1).await;
    let hashes = server.node.mine(blocks, &payout_script());
    let out = tokio::task::spawn_blocking(|| child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "the pyzmq subscriber failed");
    let expected: String = hashes
        .iter()
        .enumerate()
        .map(|(i, h)| format!("hashblock {i} {h}\nrawblock {i} {h}\n"))
        .collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected);
    server.shutdown().await;
}
