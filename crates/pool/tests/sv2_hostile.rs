//! Hostile input on the SV2 pool's port: one pool in process against simnet's
//! Template Provider, and on their own connections, one after the other, peers that send
//! garbage before and after the Noise handshake, expect another authority, declare frames over
//! the limit, send unknown message types, skip `SetupConnection`, ask for what the pool does not
//! speak, address channels never opened and flood. Each gets the spec's error or a clean close
//! (the pool ends the connection; we read end of stream or a reset), and afterwards a
//! well-behaved miner still gets its channel and first job.
//!
//! Unknown message types: the spec (03-Protocol-Overview, 3.4) says frames of an unknown
//! *extension* type that are for the receiver "MUST be discarded and ignored", and the pool
//! ignores them. It says nothing of an unknown message type within extension 0, whose types the
//! spec defines itself and whose version both sides agreed in `SetupConnection`; there is no
//! error message for it either. The pool treats one as a peer speaking another protocol and
//! closes the connection; the test holds it to that.
//!
//! The pool admits two connections at a time (`max_connections: 2`): at the end, with the
//! well-behaved miner connected, one more must get in and a third must not, so an admission
//! slot leaked by any case shows.

#[allow(dead_code)]
mod support;
mod sv2_support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use edge::Admission;
use edge::Rate;
use events::EventKind;
use pool::service::{PoolSettings, RunningPool, Sv2Settings};
use primitives::{sha256d, Target};
use support::setup_connection;
use sv2::keys::AuthorityKeys;
use sv2::messages::common::{error_code as setup_error, mining_flags, SetupConnection};
use sv2::messages::mining::{
    error_code, CloseChannel, OpenStandardMiningChannel, SubmitSharesExtended,
    SubmitSharesStandard, UpdateChannel,
};
use sv2::messages::{Common, Mining};
use sv2::noise::{extension_type, NoiseInitiator};
use sv2::{Limits, Message, NoiseConn, TransportError};
use sv2_support::{recv, serving, until, WAIT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The pool's handshake timeout here: short, so that the stalled handshake ends quickly.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(600);
/// The pool's per-connection message budget here: `BURST` at once, `RATE` a second after.
const BURST: usize = 40;
const RATE: f64 = 20.0;
/// What the pool's frame limit is (8 KiB on the wire) is its business; this is well over it.
const OVERSIZE_PAYLOAD: usize = 1 << 20;

fn settings(tp: SocketAddr, dir: &Path) -> PoolSettings {
    PoolSettings {
        events: Some(dir.join("pool.ev")),
        events_config: "sv2-hostile".into(),
        admission: Admission {
            max_connections: 2,
            message_rate: Rate {
                per_second: RATE,
                burst: BURST as f64,
            },
            handshake_timeout: HANDSHAKE_TIMEOUT,
            ..Admission::default()
        },
        sv2: Sv2Settings {
            keys: AuthorityKeys::reference(),
            ..Sv2Settings::default()
        },
        ..sv2_support::pool_settings(tp, &dir.join("pool.sqlite"), 0x66)
    }
}

fn pool_authority() -> [u8; 32] {
    AuthorityKeys::reference().public_bytes()
}

/// Deterministic bytes that look random.
fn junk(seed: u8, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 32);
    let mut h = sha256d(&[seed]);
    while out.len() < len {
        out.extend_from_slice(&h.0);
        h = sha256d(&h.0);
    }
    out.truncate(len);
    out
}

/// A Noise connection to the pool. A connection the pool refuses at once (a slot not yet
/// released by the previous case's task) is retried; a slot that never comes back is not.
async fn connect(addr: SocketAddr) -> NoiseConn {
    for _ in 0..50 {
        let stream = TcpStream::connect(addr).await.unwrap();
        match tokio::time::timeout(
            WAIT,
            NoiseConn::connect_to_authority(stream, pool_authority(), Limits::default()),
        )
        .await
        .expect("handshake in time")
        {
            Ok(conn) => return conn,
            Err(e) if refused(&e) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("handshake with the pool: {e}"),
        }
    }
    panic!("the pool keeps refusing connections: an admission slot leaked");
}

/// The pool dropped the connection before answering the handshake: end of stream, or a reset
/// when our handshake bytes were still unread.
fn refused(e: &TransportError) -> bool {
    matches!(e, TransportError::Closed | TransportError::Io(_))
}

fn open_standard(request_id: u32) -> Message {
    OpenStandardMiningChannel {
        request_id,
        user_identity: "mallory".into(),
        nominal_hash_rate: 0.0,
        max_target: Target::from_le_bytes(&[0xff; 32]),
    }
    .into()
}

async fn send(conn: &mut NoiseConn, m: Message) {
    conn.send_message(&m)
        .await
        .expect("the pool takes our bytes");
}

/// A connection past `SetupConnection`.
async fn set_up(addr: SocketAddr) -> NoiseConn {
    let mut conn = connect(addr).await;
    send(
        &mut conn,
        setup_connection(0, mining_flags::REQUIRES_STANDARD_JOBS),
    )
    .await;
    assert!(matches!(
        recv(&mut conn).await,
        Message::Common(Common::SetupConnectionSuccess(_))
    ));
    conn
}

/// Reads until the pool ends the connection; the messages it sent before.
async fn until_closed(conn: &mut NoiseConn) -> Vec<Message> {
    tokio::time::timeout(WAIT, async {
        let mut got = Vec::new();
        loop {
            match conn.read_message().await {
                Ok(Some(m)) => got.push(m),
                Ok(None) => {}
                Err(TransportError::Closed | TransportError::Io(_)) => return got,
                Err(e) => panic!("the pool sent something broken: {e}"),
            }
        }
    })
    .await
    .expect("the pool closes the connection")
}

/// Reads raw bytes until the pool ends the connection; how many came.
async fn raw_until_closed(stream: &mut TcpStream) -> usize {
    tokio::time::timeout(WAIT, async {
        let mut buf = [0u8; 4096];
        let mut total = 0;
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .expect("the pool closes the connection")
}

/// Waits until the pool counts `n` miner connections.
async fn gauge_settles(pool: &RunningPool, n: u64) {
    let connections = || {
        pool.engine
            .stats
            .snapshot(pool::Timestamp::from_millis(0))
            .connections
    };
    until(Duration::from_millis(5), || connections() == n)
        .await
        .unwrap_or_else(|_| panic!("connection gauge stays at {}, not {n}", connections()));
}

// ---- The cases -------------------------------------------------------------------------------

/// An HTTP request where the handshake should be: its first 64 bytes pass for an ephemeral
/// key (every 64-byte string is an ElligatorSwift encoding), so the pool answers the handshake,
/// and the rest is a frame that does not decrypt.
async fn garbage_instead_of_the_handshake(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: scanner\r\n\r\n".to_vec();
    request.extend(junk(1, 400));
    stream.write_all(&request).await.unwrap();
    raw_until_closed(&mut stream).await;
}

/// Half an ephemeral key, then nothing: closed once the handshake timeout passes.
async fn a_stalled_handshake(addr: SocketAddr) {
    let began = tokio::time::Instant::now();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(&junk(2, 30)).await.unwrap();
    assert_eq!(
        raw_until_closed(&mut stream).await,
        0,
        "no answer to half a key"
    );
    assert!(
        began.elapsed() >= HANDSHAKE_TIMEOUT,
        "closed for the timeout, not for the bytes"
    );
}

/// A miner configured with another pool's authority key refuses our certificate and leaves.
async fn a_client_expecting_another_authority(addr: SocketAddr) {
    // Another valid x-only key: the x coordinate of secp256k1's generator.
    let other: [u8; 32] = [
        0x79, 0xbe, 0x66, 0x7e, 0xf9, 0xdc, 0xbb, 0xac, 0x55, 0xa0, 0x62, 0x95, 0xce, 0x87, 0x0b,
        0x07, 0x02, 0x9b, 0xfc, 0xdb, 0x2d, 0xce, 0x28, 0xd9, 0x59, 0xf2, 0x81, 0x5b, 0x16, 0xf8,
        0x17, 0x98,
    ];
    assert_ne!(other, pool_authority());
    let stream = TcpStream::connect(addr).await.unwrap();
    let refused = tokio::time::timeout(
        WAIT,
        NoiseConn::connect_to_authority(stream, other, Limits::default()),
    )
    .await
    .expect("handshake ends in time");
    assert!(
        matches!(refused, Err(TransportError::Handshake(_))),
        "the client refuses the pool's certificate"
    );
}

async fn random_bytes_after_the_handshake(addr: SocketAddr) {
    let mut conn = connect(addr).await;
    conn.send_raw(&junk(3, 200)).await.unwrap();
    assert!(until_closed(&mut conn).await.is_empty());
}

/// Only the encrypted header of a frame declaring 1 MiB goes out: the pool must close on the
/// header alone, neither waiting for nor buffering the payload.
async fn a_frame_over_the_limit(addr: SocketAddr) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut noise = NoiseInitiator::new(pool_authority(), 1 << 16).unwrap();
    let mut wire = Vec::new();
    noise.take_handshake_bytes(&mut wire);
    stream.write_all(&wire).await.unwrap();
    let mut buf = [0u8; 4096];
    while !noise.handshake_done() {
        let n = tokio::time::timeout(WAIT, stream.read(&mut buf))
            .await
            .expect("handshake reply in time")
            .unwrap();
        assert!(n > 0, "the pool refused the connection");
        noise.feed(&buf[..n]).unwrap();
    }
    let payload = vec![0u8; OVERSIZE_PAYLOAD];
    wire.clear();
    let setup_type = setup_connection(0, 0).msg_type();
    noise.encrypt(setup_type, 0, &payload, &mut wire).unwrap();
    // The encrypted header: six bytes and their MAC.
    stream.write_all(&wire[..22]).await.unwrap();
    assert_eq!(raw_until_closed(&mut stream).await, 0);
}

/// A frame of an unknown extension is ignored (spec 3.4); an unknown message type of
/// extension 0 closes (see the module documentation).
async fn unknown_extension_then_unknown_message_type(addr: SocketAddr, pool: &RunningPool) {
    let mut conn = set_up(addr).await;
    // An experimental extension (0x4000..=0x7fff), for us and for a channel.
    conn.send_payload(0x10, extension_type(0x4001, false), &junk(4, 40))
        .await
        .unwrap();
    conn.send_payload(0x10, extension_type(0x4001, true), &junk(5, 40))
        .await
        .unwrap();
    send(&mut conn, open_standard(7)).await;
    let Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) = recv(&mut conn).await
    else {
        panic!("the connection survived the unknown extension");
    };
    assert_eq!(ok.request_id, 7);
    drop(conn);
    gauge_settles(pool, 0).await;

    let mut conn = set_up(addr).await;
    let unused = 0x7f;
    assert!(!sv2::messages::message_types().any(|(t, _, _)| t == unused));
    conn.send_payload(unused, 0, &junk(6, 40)).await.unwrap();
    assert!(until_closed(&mut conn).await.is_empty());
}

async fn mining_before_setup_connection(addr: SocketAddr) {
    let mut conn = connect(addr).await;
    send(&mut conn, open_standard(1)).await;
    assert!(
        until_closed(&mut conn).await.is_empty(),
        "SetupConnection must come first: no channel, no reply"
    );
}

/// `SetupConnection.Error` with the spec's code (and the offending flags), then a close.
async fn setup_refused(addr: SocketAddr, m: Message, code: &str, flags: u32) {
    let mut conn = connect(addr).await;
    send(&mut conn, m).await;
    let got = until_closed(&mut conn).await;
    match got.as_slice() {
        [Message::Common(Common::SetupConnectionError(e))] => {
            assert_eq!(e.error_code, code);
            assert_eq!(e.flags, flags);
        }
        other => panic!("expected one SetupConnection.Error, got {other:?}"),
    }
}

async fn setup_for_what_the_pool_does_not_speak(addr: SocketAddr) {
    let Message::Common(Common::SetupConnection(base)) = setup_connection(0, 0) else {
        unreachable!()
    };
    let tdp = SetupConnection {
        protocol: 2,
        ..base.clone()
    };
    setup_refused(addr, tdp.into(), setup_error::UNSUPPORTED_PROTOCOL, 0).await;
    let v3 = SetupConnection {
        min_version: 3,
        max_version: 3,
        ..base.clone()
    };
    setup_refused(addr, v3.into(), setup_error::PROTOCOL_VERSION_MISMATCH, 0).await;
    let custom_work = SetupConnection {
        flags: mining_flags::REQUIRES_WORK_SELECTION | mining_flags::REQUIRES_STANDARD_JOBS,
        ..base
    };
    setup_refused(
        addr,
        custom_work.into(),
        setup_error::UNSUPPORTED_FEATURE_FLAGS,
        mining_flags::REQUIRES_WORK_SELECTION,
    )
    .await;
}

/// Shares, updates and closes for a channel never opened: the spec's errors where it has one
/// (none for `CloseChannel`), and the connection goes on.
async fn messages_on_a_channel_never_opened(addr: SocketAddr, pool: &RunningPool) {
    let mut conn = set_up(addr).await;
    let never = 4242;
    send(
        &mut conn,
        SubmitSharesStandard {
            channel_id: never,
            sequence_number: 1,
            job_id: 1,
            nonce: 0,
            ntime: 0,
            version: 0x2000_0000,
        }
        .into(),
    )
    .await;
    send(
        &mut conn,
        SubmitSharesExtended {
            channel_id: never,
            sequence_number: 2,
            job_id: 1,
            nonce: 0,
            ntime: 0,
            version: 0x2000_0000,
            extranonce: vec![0; 4],
            user_identity: None,
        }
        .into(),
    )
    .await;
    send(
        &mut conn,
        UpdateChannel {
            channel_id: never,
            nominal_hash_rate: 1e9,
            maximum_target: Target::from_le_bytes(&[0xff; 32]),
        }
        .into(),
    )
    .await;
    send(
        &mut conn,
        CloseChannel {
            channel_id: never,
            reason_code: "bye".into(),
        }
        .into(),
    )
    .await;
    for seq in [1, 2] {
        let Message::Mining(Mining::SubmitSharesError(e)) = recv(&mut conn).await else {
            panic!("SubmitShares.Error for share {seq}");
        };
        assert_eq!(
            (e.channel_id, e.sequence_number, e.error_code.as_str()),
            (never, seq, error_code::INVALID_CHANNEL_ID)
        );
    }
    let Message::Mining(Mining::UpdateChannelError(e)) = recv(&mut conn).await else {
        panic!("UpdateChannel.Error");
    };
    assert_eq!(
        (e.channel_id, e.error_code.as_str()),
        (never, error_code::INVALID_CHANNEL_ID)
    );
    // Still served: a channel opens and its work comes.
    send(&mut conn, open_standard(2)).await;
    let Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) = recv(&mut conn).await
    else {
        panic!("the connection survived: a channel opens");
    };
    assert_ne!(ok.channel_id, never);
    assert!(matches!(
        recv(&mut conn).await,
        Message::Mining(Mining::NewMiningJob(_))
    ));
    drop(conn);
    gauge_settles(pool, 0).await;
}

/// Far more messages at once than the budget allows: closed, having been answered for at most
/// the budget (the burst, and what refilled while the flood went on).
async fn a_flood_over_the_message_rate(addr: SocketAddr) {
    let mut conn = set_up(addr).await;
    let began = tokio::time::Instant::now();
    let flood = BURST * 10;
    let writing = async {
        for i in 0..flood {
            let m: Message = UpdateChannel {
                channel_id: 9_000 + i as u32,
                nominal_hash_rate: 1e9,
                maximum_target: Target::from_le_bytes(&[0xff; 32]),
            }
            .into();
            // The pool stops reading and closes part way: later writes may fail.
            if conn.send_message(&m).await.is_err() {
                break;
            }
        }
    };
    tokio::time::timeout(WAIT, writing)
        .await
        .expect("the flood is written or refused in time");
    let answered = until_closed(&mut conn).await;
    let budget = BURST + (RATE * began.elapsed().as_secs_f64()).ceil() as usize;
    assert!(
        answered.len() <= budget && answered.len() < flood,
        "{} of {flood} answered before the close (budget {budget})",
        answered.len()
    );
    assert!(answered
        .iter()
        .all(|m| matches!(m, Message::Mining(Mining::UpdateChannelError(_)))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_peers_get_errors_or_clean_closes_and_a_miner_is_still_served() {
    let (_node, tp_addr, stop_tp) = sv2_support::template_provider(6, 20).await;
    let dir = tempfile::tempdir().unwrap();
    let pool = RunningPool::start(settings(tp_addr, dir.path()))
        .await
        .unwrap();
    let addr = pool.sv2_addr.expect("sv2 bound");
    serving(&pool).await;

    // Each case ends with the pool's side of its connection gone.
    garbage_instead_of_the_handshake(addr).await;
    gauge_settles(&pool, 0).await;
    a_stalled_handshake(addr).await;
    a_client_expecting_another_authority(addr).await;
    gauge_settles(&pool, 0).await;
    random_bytes_after_the_handshake(addr).await;
    gauge_settles(&pool, 0).await;
    a_frame_over_the_limit(addr).await;
    gauge_settles(&pool, 0).await;
    unknown_extension_then_unknown_message_type(addr, &pool).await;
    gauge_settles(&pool, 0).await;
    mining_before_setup_connection(addr).await;
    gauge_settles(&pool, 0).await;
    setup_for_what_the_pool_does_not_speak(addr).await;
    gauge_settles(&pool, 0).await;
    messages_on_a_channel_never_opened(addr, &pool).await;
    a_flood_over_the_message_rate(addr).await;
    gauge_settles(&pool, 0).await;

    // After all of it, a well-behaved miner.
    let mut conn = set_up(addr).await;
    send(&mut conn, open_standard(1)).await;
    let Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) = recv(&mut conn).await
    else {
        panic!("channel opened");
    };
    let Message::Mining(Mining::NewMiningJob(job)) = recv(&mut conn).await else {
        panic!("a job");
    };
    assert_eq!(job.channel_id, ok.channel_id);
    let Message::Mining(Mining::SetNewPrevHash(prev)) = recv(&mut conn).await else {
        panic!("its prev hash");
    };
    assert_eq!(prev.job_id, job.job_id);
    gauge_settles(&pool, 1).await;
    // Exactly one slot is taken: one more connection gets in, and then none.
    let second = connect(addr).await;
    let third = TcpStream::connect(addr).await.unwrap();
    let third = tokio::time::timeout(
        WAIT,
        NoiseConn::connect_to_authority(third, pool_authority(), Limits::default()),
    )
    .await
    .expect("refused in time");
    assert!(
        matches!(third, Err(e) if refused(&e)),
        "max_connections holds"
    );
    drop(second);
    gauge_settles(&pool, 1).await;

    pool.shutdown().await.unwrap();
    let _ = stop_tp.send(());
    drop(conn);

    // Why the pool closed each connection that got past the handshake, in order.
    let log = events::read_file(dir.path().join("pool.ev")).unwrap();
    let reasons: Vec<String> = log
        .events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ConnectionClosed(c) => Some(c.reason.as_str().to_owned()),
            _ => None,
        })
        .collect();
    let expected = [
        "protocol", // garbage instead of the handshake: the bytes after the "key"
        "eof",      // the client that refused our certificate
        "protocol", // random bytes after the handshake
        "oversize", // the frame over the limit
        "eof",      // unknown extension: ignored; we left
        "protocol", // unknown message type
        "protocol", // mining before SetupConnection
        "setup",    // unsupported protocol
        "setup",    // version mismatch
        "setup",    // unsupported flags
        "eof",      // a channel never opened: answered; we left
        "rate",     // the flood
        "eof",      // the second connection of the slot check
        "shutdown", // the well-behaved miner
    ];
    // Where we left, the pool saw the end of the stream: an orderly EOF, or a reset when our
    // side closed with bytes it had not read (which the kernel answers with RST). Either way
    // the pool did not close it for a reason of its own.
    let seen: Vec<&str> = reasons
        .iter()
        .zip(expected)
        .map(|(r, e)| {
            if e == "eof" && r == "reset" {
                "eof"
            } else {
                r.as_str()
            }
        })
        .collect();
    assert_eq!(seen, expected, "{reasons:?}");
}
