//! The tap terminating SV2's Noise on both legs (`--sv2-terminate`), between an SV2 server and
//! client of our own on 127.0.0.1: messages cross unchanged under the link's delay, the tap
//! reports them, counts the client's bytes, and survives clients that are not SV2.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use events::{Direction, EventKind, JobId, Reason, Verdict};
use primitives::Difficulty;
use sv2::messages::common::{SetupConnection, SetupConnectionSuccess};
use sv2::messages::mining::{
    NewMiningJob, OpenStandardMiningChannelSuccess, SetNewPrevHash, SetTarget, SubmitSharesError,
    SubmitSharesStandard, SubmitSharesSuccess,
};
use sv2::messages::Mining;
use sv2::{AuthorityKeys, Limits, Message, NoiseConn, TransportError};
use tap::{LinkConfig, Sv2Terminate, TapConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use support::{log_events, Running, LIMIT};

const DELAY: Duration = Duration::from_millis(50);
/// A Noise transport frame on the wire: the 6-byte header and its MAC, the payload and its MAC
/// (payloads under 64 KiB are one chunk).
const FRAME_OVERHEAD: u64 = 6 + 16 + 16;
const SHARES: u32 = 12;

/// Another valid authority secret (32 bytes of 0x01, base58check): the server's, not the tap's.
const SERVER_SECRET: &str = "SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF";

fn server_keys() -> AuthorityKeys {
    AuthorityKeys::from_secret(SERVER_SECRET).unwrap()
}

fn terminating(upstream: SocketAddr, upstream_authority: [u8; 32]) -> TapConfig {
    let mut c = TapConfig::new("127.0.0.1:0".parse().unwrap(), upstream);
    c.link = LinkConfig::symmetric(DELAY);
    let mut sv2 = Sv2Terminate::new(AuthorityKeys::reference(), Some(upstream_authority));
    sv2.handshake_timeout = Duration::from_millis(500);
    c.sv2 = Some(sv2);
    c
}

fn wire_size(m: &Message) -> u64 {
    let mut payload = Vec::new();
    m.encode(&mut payload).unwrap();
    payload.len() as u64 + FRAME_OVERHEAD
}

/// What the server saw of the one connection that spoke SV2 to it.
#[derive(Debug)]
enum Seen {
    Received(Message, Instant),
    Sent(Message, Instant),
}

/// An SV2 server certified by [`server_keys`]. On each connection it waits for
/// `SetupConnection`, answers it and opens a channel with a future job, its prev hash and a
/// target, then answers every share (odd sequence numbers refused as stale); it reports what
/// it received and sent.
async fn server() -> (SocketAddr, mpsc::UnboundedReceiver<Seen>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = NoiseConn::accept_with_keys(
                    s,
                    &server_keys(),
                    Duration::from_secs(3600),
                    Limits::default(),
                )
                .await
                else {
                    return;
                };
                let _ = serve(&mut conn, &tx).await;
            });
        }
    });
    (addr, rx)
}

async fn serve(
    conn: &mut NoiseConn,
    tx: &mpsc::UnboundedSender<Seen>,
) -> Result<(), TransportError> {
    loop {
        let Some(m) = conn.read_message().await? else {
            continue;
        };
        let _ = tx.send(Seen::Received(m.clone(), Instant::now()));
        let replies: Vec<Message> = match m {
            Message::Common(sv2::messages::Common::SetupConnection(_)) => vec![
                SetupConnectionSuccess {
                    used_version: 2,
                    flags: 0,
                }
                .into(),
                OpenStandardMiningChannelSuccess {
                    request_id: 1,
                    channel_id: 5,
                    target: Difficulty::new(2.0).unwrap().to_target(),
                    extranonce_prefix: vec![1, 2, 3, 4],
                    group_channel_id: 0,
                }
                .into(),
                NewMiningJob {
                    channel_id: 5,
                    job_id: 1,
                    min_ntime: None,
                    version: 0x2000_0000,
                    merkle_root: [7; 32],
                }
                .into(),
                SetNewPrevHash {
                    channel_id: 5,
                    job_id: 1,
                    prev_hash: [9; 32],
                    min_ntime: 0x6600_0000,
                    nbits: 0x207f_ffff,
                }
                .into(),
                SetTarget {
                    channel_id: 5,
                    maximum_target: Difficulty::new(4.0).unwrap().to_target(),
                }
                .into(),
            ],
            Message::Mining(Mining::SubmitSharesStandard(s)) if s.sequence_number % 2 == 1 => {
                vec![SubmitSharesError {
                    channel_id: s.channel_id,
                    sequence_number: s.sequence_number,
                    error_code: "stale-share".into(),
                }
                .into()]
            }
            Message::Mining(Mining::SubmitSharesStandard(s)) => vec![SubmitSharesSuccess {
                channel_id: s.channel_id,
                last_sequence_number: s.sequence_number,
                new_submits_accepted_count: 1,
                new_shares_sum: 4,
            }
            .into()],
            _ => vec![],
        };
        for r in replies {
            let _ = tx.send(Seen::Sent(r.clone(), Instant::now()));
            conn.send_message(&r).await?;
        }
    }
}

fn share(seq: u32) -> SubmitSharesStandard {
    SubmitSharesStandard {
        channel_id: 5,
        sequence_number: seq,
        job_id: 1,
        nonce: 1000 + seq,
        ntime: 0x6600_0000,
        version: 0x2000_0000,
    }
}

fn setup() -> Message {
    SetupConnection {
        endpoint_host: "127.0.0.1".into(),
        endpoint_port: 3333,
        vendor: "stratumlab".into(),
        hardware_version: "test".into(),
        firmware: "0".into(),
        device_id: "tap-test".into(),
        ..SetupConnection::new(0)
    }
    .into()
}

async fn trusting_client(tap: SocketAddr) -> NoiseConn {
    let s = TcpStream::connect(tap).await.unwrap();
    NoiseConn::connect_to_authority(
        s,
        AuthorityKeys::reference().public_bytes(),
        Limits::default(),
    )
    .await
    .expect("the tap's certificate")
}

async fn read_one(client: &mut NoiseConn) -> (Message, Instant) {
    let m = tokio::time::timeout(LIMIT, client.read_message())
        .await
        .expect("a message in time")
        .expect("a message")
        .expect("extension 0");
    (m, Instant::now())
}

/// One client session: setup, then shares one at a time, every message checked unchanged at
/// the other end, with the one-way delays each way.
struct Session {
    /// Wire bytes the client wrote and read, handshake included.
    written: u64,
    read: u64,
    up_delays: Vec<Duration>,
    down_delays: Vec<Duration>,
}

impl Session {
    async fn run(
        addr: SocketAddr,
        authority: [u8; 32],
        seen: &mut mpsc::UnboundedReceiver<Seen>,
    ) -> Session {
        let s = TcpStream::connect(addr).await.unwrap();
        let mut client = NoiseConn::connect_to_authority(s, authority, Limits::default())
            .await
            .expect("a trusted certificate");
        let (mut read, mut written) = client.handshake_bytes();
        let mut up_sent = Vec::new();
        let mut sent_at = Vec::new();
        let mut received = Vec::new();
        let setup = setup();
        up_sent.push(setup.clone());
        sent_at.push(Instant::now());
        client.send_message(&setup).await.unwrap();
        for _ in 0..5 {
            received.push(read_one(&mut client).await);
        }
        for seq in 0..SHARES {
            let m: Message = share(seq).into();
            up_sent.push(m.clone());
            sent_at.push(Instant::now());
            client.send_message(&m).await.unwrap();
            received.push(read_one(&mut client).await);
            tokio::time::sleep(Duration::from_millis(7)).await;
        }
        written += up_sent.iter().map(wire_size).sum::<u64>();
        read += received.iter().map(|(m, _)| wire_size(m)).sum::<u64>();
        client.shutdown().await;
        assert!(matches!(
            tokio::time::timeout(LIMIT, client.read_frame())
                .await
                .unwrap(),
            Err(TransportError::Closed)
        ));
        let mut server_got = Vec::new();
        let mut server_sent = Vec::new();
        while let Ok(s) = seen.try_recv() {
            match s {
                Seen::Received(m, t) => server_got.push((m, t)),
                Seen::Sent(m, t) => server_sent.push((m, t)),
            }
        }
        let got: Vec<&Message> = server_got.iter().map(|(m, _)| m).collect();
        assert_eq!(got, up_sent.iter().collect::<Vec<_>>(), "up unchanged");
        let sent: Vec<&Message> = server_sent.iter().map(|(m, _)| m).collect();
        let came: Vec<&Message> = received.iter().map(|(m, _)| m).collect();
        assert_eq!(came, sent, "down unchanged");
        let up_delays = server_got
            .iter()
            .zip(&sent_at)
            .map(|((_, at), sent)| at.duration_since(*sent))
            .collect();
        let down_delays = received
            .iter()
            .zip(&server_sent)
            .map(|((_, at), (_, sent))| at.duration_since(*sent))
            .collect();
        Session {
            written,
            read,
            up_delays,
            down_delays,
        }
    }

    fn p50s(&self) -> (Duration, Duration) {
        (
            median(self.up_delays.clone()),
            median(self.down_delays.clone()),
        )
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_cross_unchanged_delayed_counted_and_reported() {
    let (upstream, mut seen) = server().await;
    let mut cfg = terminating(upstream, server_keys().public_bytes());
    let (_dir, path, sink) = log_events(&mut cfg);
    cfg.report_interval = Duration::from_millis(100);
    let tap = Running::start(cfg).await;

    // The same exchange straight to a server of its own first: what the endpoints themselves
    // take (encryption in a debug build, wake-ups), measured in the same run.
    let (direct_upstream, mut direct_seen) = server().await;
    let direct = Session::run(
        direct_upstream,
        server_keys().public_bytes(),
        &mut direct_seen,
    )
    .await;
    let (direct_up, direct_down) = direct.p50s();
    // Through the tap; the client trusts the tap's key.
    let through = Session::run(
        tap.addr,
        AuthorityKeys::reference().public_bytes(),
        &mut seen,
    )
    .await;
    let summary = tap.stop().await;
    sink.finish().unwrap();
    let Session { written, read, .. } = through;
    let (up_p50, down_p50) = through.p50s();
    eprintln!(
        "one-way delay p50 through the tap: up {up_p50:?}, down {down_p50:?}; direct: up {direct_up:?}, down {direct_down:?}; link {DELAY:?}; tap applied: up {}, down {}",
        summary.applied(Direction::Up),
        summary.applied(Direction::Down)
    );
    // End to end, a dozen messages also carry the tap's decrypt and re-encrypt and the
    // wake-ups of a loaded machine: a loose bound that still catches a delay applied twice or
    // not at all. The tap's own applied delay, below, is held to the 1 ms bar.
    // Below too: the direct exchange is measured apart, and a slow moment in it (CI: the tap
    // "added" 49.84 ms of a 50 ms delay) makes the difference a little short.
    let tolerance = Duration::from_millis(5);
    for (name, tapped, direct) in [("up", up_p50, direct_up), ("down", down_p50, direct_down)] {
        let added = tapped.saturating_sub(direct);
        assert!(
            added + Duration::from_millis(2) >= DELAY && added < DELAY + tolerance,
            "{name}: the tap added {added:?} at p50"
        );
    }
    for dir in [Direction::Up, Direction::Down] {
        let applied = summary.applied(dir);
        assert!(
            applied.p50_ns >= 50_000_000 && applied.p50_ns < 51_000_000,
            "{applied}"
        );
    }

    // Bytes: the client's leg as the client wrote and read them, handshake included; the
    // upstream leg carries as many.
    let log = events::read_file(&path).unwrap();
    let good_conn = 0;
    let mut sums = [0u64; 2];
    let mut closed = Vec::new();
    for e in &log.events {
        match e.kind {
            EventKind::LinkBytes(b) if b.conn == good_conn => {
                sums[matches!(b.direction, Direction::Down) as usize] += b.bytes
            }
            EventKind::ConnectionClosed(c) => closed.push((c.conn, c.reason.as_str().to_owned())),
            _ => {}
        }
    }
    assert_eq!(sums, [written, read], "LinkBytes of the client's leg");
    assert_eq!(
        (summary.bytes(Direction::Up), summary.bytes(Direction::Down)),
        (written, read)
    );
    assert_eq!(
        (
            summary.upstream_bytes(Direction::Up),
            summary.upstream_bytes(Direction::Down)
        ),
        (written, read),
        "the upstream's leg carries as many bytes"
    );
    assert_eq!(closed, [(0, "eof".to_owned())]);
    assert_eq!((summary.sv2_connections, summary.sv2_failures), (1, 0));

    // The message view, from the good connection.
    let mine: Vec<EventKind> = log
        .events
        .iter()
        .map(|e| e.kind)
        .filter(|k| match k {
            EventKind::JobSent(j) => j.conn == good_conn,
            EventKind::JobActivated(a) => a.conn == good_conn,
            EventKind::TargetChanged(t) => t.conn == good_conn,
            EventKind::ShareSent(s) => s.device == good_conn,
            EventKind::ShareResult(r) => r.conn == good_conn,
            _ => false,
        })
        .collect();
    let jobs: Vec<_> = mine
        .iter()
        .filter_map(|k| match k {
            EventKind::JobSent(j) => Some(j),
            _ => None,
        })
        .collect();
    assert_eq!(jobs.len(), 1);
    assert!(jobs[0].future && jobs[0].channel == Some(5) && jobs[0].job_id == JobId::Num(1));
    assert!((jobs[0].difficulty() - 2.0).abs() < 1e-6);
    assert!(mine.iter().any(|k| matches!(k,
        EventKind::JobActivated(a) if a.prev_hash.0 == [9; 32])));
    assert!(mine.iter().any(|k| matches!(k,
        EventKind::TargetChanged(t) if (t.difficulty() - 4.0).abs() < 1e-6)));
    let shares = mine
        .iter()
        .filter(|k| matches!(k, EventKind::ShareSent(s) if (s.difficulty - 4.0).abs() < 1e-6))
        .count();
    assert_eq!(shares, SHARES as usize);
    let verdicts: Vec<(u64, Verdict)> = mine
        .iter()
        .filter_map(|k| match k {
            EventKind::ShareResult(r) => Some((r.seq, r.verdict)),
            _ => None,
        })
        .collect();
    let expected: Vec<(u64, Verdict)> = (0..SHARES as u64)
        .map(|s| {
            let v = if s % 2 == 1 {
                Verdict::Rejected(Reason::Stale)
            } else {
                Verdict::Accepted
            };
            (s, v)
        })
        .collect();
    assert_eq!(verdicts, expected);
    let down = summary.sv2(Direction::Down);
    assert_eq!((down.jobs, down.accepted, down.rejected), (1, 6, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_do_not_speak_sv2_to_the_tap_are_closed_and_others_served() {
    let (upstream, _seen) = server().await;
    let mut cfg = terminating(upstream, server_keys().public_bytes());
    let (_dir, path, sink) = log_events(&mut cfg);
    let tap = Running::start(cfg).await;
    // A good client that stays connected throughout.
    let mut steady = trusting_client(tap.addr).await;
    steady.send_message(&setup()).await.unwrap();
    assert!(matches!(read_one(&mut steady).await.0, Message::Common(_)));

    let mut garbage = TcpStream::connect(tap.addr).await.unwrap();
    garbage.write_all(&[0x5a; 300]).await.unwrap();
    let mut sink_buf = Vec::new();
    let closed = tokio::time::timeout(LIMIT, garbage.read_to_end(&mut sink_buf)).await;
    assert!(closed.is_ok(), "the tap closes a client sending garbage");
    let s = TcpStream::connect(tap.addr).await.unwrap();
    let wrong =
        NoiseConn::connect_to_authority(s, server_keys().public_bytes(), Limits::default()).await;
    assert!(
        matches!(wrong, Err(TransportError::Handshake(_))),
        "the client checks the tap's certificate, not the server's: {:?}",
        wrong.err()
    );
    let mut silent = TcpStream::connect(tap.addr).await.unwrap();
    let closed = tokio::time::timeout(LIMIT, silent.read_to_end(&mut sink_buf)).await;
    assert!(
        closed.is_ok(),
        "a silent client is dropped after the handshake timeout"
    );

    // Both the client that was there and a new one are served.
    let m: Message = share(2).into();
    steady.send_message(&m).await.unwrap();
    // Past the channel, job, prev hash and target that followed the setup.
    let mut reply = read_one(&mut steady).await.0;
    for _ in 0..4 {
        reply = read_one(&mut steady).await.0;
    }
    assert!(
        matches!(reply, Message::Mining(Mining::SubmitSharesSuccess(_))),
        "{reply:?}"
    );
    let mut fresh = trusting_client(tap.addr).await;
    fresh.send_message(&setup()).await.unwrap();
    assert!(matches!(read_one(&mut fresh).await.0, Message::Common(_)));
    drop((steady, fresh));
    let summary = tap.stop().await;
    sink.finish().unwrap();
    assert_eq!(summary.sv2_connections, 5);
    let log = events::read_file(&path).unwrap();
    let mut closed: Vec<(u64, String)> = log
        .events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::ConnectionClosed(c) => Some((c.conn, c.reason.as_str().to_owned())),
            _ => None,
        })
        .collect();
    closed.sort();
    assert_eq!(closed.len(), 5, "{closed:?}");
    assert_eq!(closed[1].1, "protocol", "garbage: {closed:?}");
    assert_eq!(closed[3].1, "timeout", "silent: {closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_with_the_wrong_certificate_is_refused() {
    let (upstream, _seen) = server().await;
    // The tap expects the reference authority upstream; the server signs with another.
    let cfg = terminating(upstream, AuthorityKeys::reference().public_bytes());
    let tap = Running::start(cfg).await;
    for _ in 0..2 {
        let s = TcpStream::connect(tap.addr).await.unwrap();
        let r = tokio::time::timeout(
            LIMIT,
            NoiseConn::connect_to_authority(
                s,
                AuthorityKeys::reference().public_bytes(),
                Limits::default(),
            ),
        )
        .await
        .expect("ends in time");
        assert!(r.is_err(), "the client is not let through");
    }
    let s = tap.stop().await;
    assert_eq!((s.sv2_connections, s.sv2_failures), (2, 2));
}
