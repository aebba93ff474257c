//! The tokio shell on loopback: handshake, messages both ways, and the limits it enforces.

use std::time::Duration;

use sv2::messages::common::{SetupConnection, SetupConnectionSuccess};
use sv2::messages::mining::{SubmitSharesStandard, SubmitSharesSuccess};
use sv2::messages::{Common, Message, Mining};
use sv2::{AuthorityKeys, Limits, NoiseConn, TransportError};
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(10);

fn limits() -> Limits {
    Limits {
        handshake_timeout: Duration::from_millis(500),
        max_frame_bytes: 4096,
        write_timeout: Duration::from_secs(5),
    }
}

async fn listener() -> (TcpListener, std::net::SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// Accepts one connection on `l` and runs `serve` on it.
fn server<F, Fut>(l: TcpListener, serve: F) -> tokio::task::JoinHandle<Result<(), TransportError>>
where
    F: FnOnce(NoiseConn) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), TransportError>> + Send,
{
    tokio::spawn(async move {
        let (stream, _) = l.accept().await?;
        let conn = NoiseConn::accept_with_keys(
            stream,
            &AuthorityKeys::reference(),
            Duration::from_secs(60),
            limits(),
        )
        .await?;
        serve(conn).await
    })
}

/// Connects to `addr` and runs the handshake, checking the reference authority key.
async fn connect(addr: std::net::SocketAddr) -> Result<NoiseConn, TransportError> {
    let stream = TcpStream::connect(addr).await.unwrap();
    NoiseConn::connect_to_authority(stream, AuthorityKeys::reference().public_bytes(), limits())
        .await
}

/// Waits for the server task and checks that its connection ended cleanly.
async fn served(srv: tokio::task::JoinHandle<Result<(), TransportError>>) {
    tokio::time::timeout(WAIT, srv)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}

fn setup() -> Message {
    SetupConnection {
        flags: 1,
        endpoint_host: "127.0.0.1".into(),
        vendor: "test".into(),
        ..SetupConnection::new(0)
    }
    .into()
}

#[tokio::test]
async fn both_sides_count_the_same_handshake_bytes() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let (l, addr) = listener().await;
    let responder_wrote = std::sync::Arc::new(AtomicU64::new(0));
    let wrote = responder_wrote.clone();
    let srv = server(l, |conn| async move {
        // NX: the initiator's ephemeral key (64 bytes, ElligatorSwift) in, and out our
        // ephemeral key, our static key and the certificate (each encrypted with its MAC).
        let (read, written) = conn.handshake_bytes();
        assert_eq!(read, 64);
        wrote.store(written, Ordering::SeqCst);
        Ok(())
    });
    let c = connect(addr).await.unwrap();
    let (read, written) = c.handshake_bytes();
    assert_eq!(written, 64);
    served(srv).await;
    // What one side wrote the other read.
    assert_eq!(read, responder_wrote.load(Ordering::SeqCst));
    assert!(read > 64, "{read}");
}

#[tokio::test]
async fn messages_flow_both_ways_after_the_handshake() {
    let (l, addr) = listener().await;
    let srv = server(l, |mut conn| async move {
        let Some(Message::Common(Common::SetupConnection(s))) = conn.read_message().await? else {
            panic!("expected SetupConnection");
        };
        assert_eq!(s.vendor, "test");
        conn.send_message(
            &SetupConnectionSuccess {
                used_version: 2,
                flags: 0,
            }
            .into(),
        )
        .await?;
        let Some(Message::Mining(Mining::SubmitSharesStandard(share))) =
            conn.read_message().await?
        else {
            panic!("expected a share");
        };
        conn.send_message(
            &SubmitSharesSuccess {
                channel_id: share.channel_id,
                last_sequence_number: share.sequence_number,
                new_submits_accepted_count: 1,
                new_shares_sum: 1,
            }
            .into(),
        )
        .await
    });
    let mut c = connect(addr).await.unwrap();
    c.send_message(&setup()).await.unwrap();
    assert!(matches!(
        c.read_message().await.unwrap(),
        Some(Message::Common(Common::SetupConnectionSuccess(_)))
    ));
    let share = SubmitSharesStandard {
        channel_id: 4,
        sequence_number: 17,
        job_id: 1,
        nonce: 2,
        ntime: 3,
        version: 4,
    };
    c.send_message(&share.into()).await.unwrap();
    let f = c.read_frame().await.unwrap();
    assert!(f.channel_msg(), "SubmitShares.Success is a channel message");
    assert_eq!(f.channel_id(), Some(4));
    served(srv).await;
}

#[tokio::test]
async fn a_server_with_another_authority_is_refused() {
    let (l, addr) = listener().await;
    let srv = server(l, |_| async { Ok(()) });
    let other = AuthorityKeys::from_secret("SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF")
        .unwrap()
        .public_bytes();
    let stream = TcpStream::connect(addr).await.unwrap();
    let r = NoiseConn::connect_to_authority(stream, other, limits()).await;
    assert!(
        matches!(r, Err(TransportError::Handshake(_))),
        "{:?}",
        r.err()
    );
    // The server's side completed its half; it ends without hanging.
    let _ = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_silent_client_times_out_within_the_handshake_limit() {
    let (l, addr) = listener().await;
    let srv = server(l, |_| async { Ok(()) });
    let _silent = TcpStream::connect(addr).await.unwrap();
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
    assert!(matches!(r, Err(TransportError::HandshakeTimeout)), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The responder's cryptography runs on the blocking pool; with that pool taken (a wave of
/// handshakes larger than it), a connection waits there no longer than its handshake deadline.
#[test]
fn a_handshake_queued_behind_a_full_blocking_pool_ends_at_its_deadline() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .unwrap();
    rt.block_on(async {
        let (l, addr) = listener().await;
        // The pool's one thread is busy for longer than the handshake limit (500 ms).
        let (busy_tx, busy_rx) = std::sync::mpsc::channel::<()>();
        let hog = tokio::task::spawn_blocking(move || {
            let _ = busy_rx.recv_timeout(Duration::from_secs(5));
        });
        let srv = server(l, |_| async { Ok(()) });
        let client = tokio::spawn(async move { connect(addr).await });
        let started = std::time::Instant::now();
        let r = tokio::time::timeout(WAIT, srv).await.unwrap().unwrap();
        let waited = started.elapsed();
        assert!(matches!(r, Err(TransportError::HandshakeTimeout)), "{r:?}");
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        let _ = busy_tx.send(());
        hog.await.unwrap();
        // The client is told, not left waiting.
        let c = tokio::time::timeout(WAIT, client).await.unwrap().unwrap();
        assert!(c.is_err());
    });
}

#[tokio::test]
async fn oversized_frames_and_unknown_extensions() {
    let (l, addr) = listener().await;
    let srv = server(l, |mut conn| async move {
        // A frame of another extension is skipped; then a frame over the 4096-byte limit.
        assert!(conn.read_message().await?.is_none());
        match conn.read_frame().await {
            Err(TransportError::FrameTooLarge { limit: 4096 }) => Ok(()),
            other => panic!("expected an oversize error, got {other:?}"),
        }
    });
    let mut c = connect(addr).await.unwrap();
    c.send_payload(0x01, 0x4001, b"an extension message")
        .await
        .unwrap();
    // The server may close while this is still being written.
    let _ = c.send_payload(0x76, 0, &vec![0u8; 100_000]).await;
    served(srv).await;
}

/// Both ends count the connection's messages by type into their link counters: the handshake
/// once each way, then every frame with its wire and payload bytes, each in the link's
/// direction (what the client writes goes up, what the server writes goes down).
#[tokio::test]
async fn both_ends_count_messages_by_type() {
    use events::{EventKind, LinkCounter, Side};
    let (l, addr) = listener().await;
    let server_counter = LinkCounter::new("sv2");
    let counted = server_counter.clone();
    let srv = server(l, move |mut conn| async move {
        conn.count_into(counted, Side::Server);
        let Some(Message::Common(Common::SetupConnection(_))) = conn.read_message().await? else {
            panic!("expected SetupConnection");
        };
        let success: Message = SetupConnectionSuccess {
            used_version: 2,
            flags: 0,
        }
        .into();
        conn.send_message(&success).await?;
        Ok(())
    });
    let mut c = connect(addr).await.unwrap();
    let client_counter = LinkCounter::new("upstream");
    c.count_into(client_counter.clone(), Side::Client);
    c.send_message(&setup()).await.unwrap();
    let reply = tokio::time::timeout(WAIT, c.read_message())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        reply,
        Some(Message::Common(Common::SetupConnectionSuccess(_)))
    ));
    served(srv).await;
    let dir = tempfile::tempdir().unwrap();
    let mut setup_payload = Vec::new();
    setup().encode(&mut setup_payload).unwrap();
    for (counter, name) in [(&server_counter, "server"), (&client_counter, "client")] {
        let path = dir.path().join(format!("{name}.ev"));
        let sink = events::EventSink::create(&path, name, "t").unwrap();
        counter.report(&sink);
        drop(sink);
        let log = events::read_file(&path).unwrap();
        let mut got: Vec<(String, String, u64, u64, u64)> = log
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::LinkMessages(m) => Some((
                    format!("{:?}", m.direction),
                    m.message.as_str().to_owned(),
                    m.count,
                    m.bytes,
                    m.payload_bytes,
                )),
                _ => None,
            })
            .collect();
        got.sort();
        let setup_wire = sv2::noise::wire_len(setup_payload.len()) as u64;
        assert_eq!(got.len(), 4, "{name}: {got:?}");
        assert!(got.contains(&(
            "Up".into(),
            "SetupConnection".into(),
            1,
            setup_wire,
            setup_payload.len() as u64
        )));
        assert!(got
            .iter()
            .any(|g| g.0 == "Down" && g.1 == "SetupConnection.Success" && g.2 == 1));
        assert!(got
            .iter()
            .any(|g| g.0 == "Up" && g.1 == sv2::transport::HANDSHAKE && g.3 == 64));
    }
}
