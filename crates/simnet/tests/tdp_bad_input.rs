//! What the Template Provider does with bad input: every case ends that connection cleanly
//! (or answers with the protocol's error), and the endpoint keeps serving other clients.

mod tdp_support;

use std::time::Duration;

use binary_sv2::{B016MOwned, B064KOwned};
use common_messages_sv2::Protocol;
use events::{EventKind, EventSink};
use simnet::tdp::{TdpConfig, TdpKeys, TransportError};
use tdp_support::*;
use template_distribution_sv2::{
    SubmitSolutionOwned, MESSAGE_TYPE_NEW_TEMPLATE, MESSAGE_TYPE_REQUEST_TRANSACTION_DATA,
    MESSAGE_TYPE_SUBMIT_SOLUTION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads until the server closes; panics if it does not within `WAIT`.
async fn drains_to_close(s: &mut TcpStream) -> usize {
    let mut total = 0;
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(WAIT, s.read(&mut buf)).await {
            Err(_) => panic!("the server kept a bad connection open"),
            Ok(Ok(0)) | Ok(Err(_)) => return total,
            Ok(Ok(n)) => total += n,
        }
    }
}

/// A client that does everything right still gets served.
async fn still_serves(server: &Server) {
    let mut c = Client::connect_reference(server.addr).await;
    let (t, _) = c.start(60).await;
    assert!(t.future_template);
}

#[tokio::test]
async fn garbage_before_the_handshake_closes_only_that_connection() {
    let server = Server::start(quiet_config(21), TdpConfig::default()).await;

    // Plain text where the initiator's ephemeral key belongs: 64 bytes of it read as a key
    // (any 64 bytes do), the rest fails to decrypt as a frame.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(10))
        .await
        .unwrap();
    drains_to_close(&mut s).await;

    // A few bytes, then end of stream.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"\x00\x01\x02").await.unwrap();
    s.shutdown().await.unwrap();
    assert_eq!(drains_to_close(&mut s).await, 0);

    // A JSON-RPC line, as a misconfigured SV1 pool would send.
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    s.write_all(b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[]}\n")
        .await
        .unwrap();
    s.shutdown().await.unwrap();
    drains_to_close(&mut s).await;

    still_serves(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let config = TdpConfig {
        handshake_timeout: Duration::from_millis(300),
        setup_timeout: Duration::from_millis(600),
        ..TdpConfig::default()
    };
    let server = Server::start(quiet_config(22), config).await;
    let started = std::time::Instant::now();
    let mut s = TcpStream::connect(server.addr).await.unwrap();
    drains_to_close(&mut s).await;
    assert!(started.elapsed() < Duration::from_secs(5));

    // Past the handshake but never sending SetupConnection: dropped at the setup deadline.
    let mut c = Client::connect_reference(server.addr).await;
    assert!(c.expect_close().await.is_empty());

    still_serves(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn a_client_expecting_another_authority_fails_its_handshake() {
    let server = Server::start(quiet_config(23), TdpConfig::default()).await;
    // Any other valid authority key: the certificate does not verify against it.
    let other = TdpKeys::from_secret("SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF")
        .unwrap()
        .public_bytes();
    assert_ne!(other, TdpKeys::reference().public_bytes());
    match Client::connect(server.addr, other).await {
        Err(TransportError::Handshake(_)) => {}
        Err(e) => panic!("expected a handshake failure, got {e}"),
        Ok(_) => panic!("the handshake succeeded with the wrong authority key"),
    }
    still_serves(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn garbage_after_the_handshake_closes() {
    let (server, mut c) = Server::with_client(24).await;
    c.conn.send_raw(&[0x5a; 100]).await.unwrap();
    c.expect_close().await;

    // Same after setup, in the middle of serving.
    let mut c = Client::connect_reference(server.addr).await;
    c.start(60).await;
    c.conn.send_raw(&[0xff; 22]).await.unwrap();
    c.expect_close().await;

    still_serves(&server).await;
    server.stop().await;
}

#[tokio::test]
async fn oversized_frames_are_cut_off() {
    let (server, mut c) = Server::with_client(25).await;
    c.start(60).await;
    // A 1 MB frame (the default limit is 128 KiB): the server stops reading and closes. Our
    // write may fail when it does, which is fine.
    let big = B016MOwned::new(vec![0xab; 1 << 20]).unwrap();
    let _ = c.conn.send(MESSAGE_TYPE_SUBMIT_SOLUTION, big).await;
    c.expect_close().await;

    // With a small limit, even a well-formed SubmitSolution over it is cut off.
    let config = TdpConfig {
        max_frame_bytes: 4096,
        ..TdpConfig::default()
    };
    let small = Server::start(quiet_config(26), config).await;
    let mut c = Client::connect_reference(small.addr).await;
    let (t, _) = c.start(60).await;
    let _ = c
        .conn
        .send(
            MESSAGE_TYPE_SUBMIT_SOLUTION,
            SubmitSolutionOwned {
                template_id: t.template_id,
                version: 0x2000_0000,
                header_timestamp: 0,
                header_nonce: 0,
                coinbase_tx: B064KOwned::new(vec![0; 10_000]).unwrap(),
            },
        )
        .await;
    c.expect_close().await;

    still_serves(&server).await;
    still_serves(&small).await;
    server.stop().await;
    small.stop().await;
}

#[tokio::test]
async fn unknown_and_misdirected_messages_close_unknown_extensions_are_ignored() {
    let events_file = tempfile::NamedTempFile::new().unwrap();
    let sink = EventSink::create(events_file.path(), "simnet", "").unwrap();
    let config = TdpConfig {
        events: sink.clone(),
        ..TdpConfig::default()
    };
    let server = Server::start(quiet_config(27), config).await;

    // An unknown message type of the base protocol.
    let mut c = Client::connect_reference(server.addr).await;
    c.setup().await;
    c.send(0x55, 7u32).await;
    c.expect_close().await;

    // A server-to-client message sent by the client.
    let mut c = Client::connect_reference(server.addr).await;
    c.start(60).await;
    c.send(MESSAGE_TYPE_NEW_TEMPLATE, 7u64).await;
    c.expect_close().await;

    // A truncated message of a known type.
    let mut c = Client::connect_reference(server.addr).await;
    c.start(60).await;
    c.send(MESSAGE_TYPE_REQUEST_TRANSACTION_DATA, 7u16).await;
    c.expect_close().await;

    // Anything before SetupConnection.
    let mut c = Client::connect_reference(server.addr).await;
    c.constraints(60, 4).await;
    c.expect_close().await;

    // A message of an unknown extension is discarded (spec 3.4) and the connection goes on.
    let mut c = Client::connect_reference(server.addr).await;
    c.setup().await;
    c.conn.send_extension(0x4001, 0x01, 7u32).await.unwrap();
    c.constraints(60, 4).await;
    c.future_pair().await;

    still_serves(&server).await;
    server.stop().await;

    sink.flush().unwrap();
    let log = events::read_file(events_file.path()).unwrap();
    let mut opened = 0;
    let mut reasons = Vec::new();
    for e in &log.events {
        match e.kind {
            EventKind::ConnectionOpened(o) => {
                assert_eq!(o.label.as_str(), "tdp");
                opened += 1;
            }
            EventKind::ConnectionClosed(c) => reasons.push(c.reason.as_str().to_owned()),
            _ => {}
        }
    }
    assert_eq!(opened, 6);
    assert_eq!(
        reasons.iter().filter(|r| *r == "protocol").count(),
        4,
        "{reasons:?}"
    );
}

#[tokio::test]
async fn setup_connection_errors_carry_the_spec_codes() {
    let server = Server::start(quiet_config(28), TdpConfig::default()).await;
    for (protocol, min, max, flags, code) in [
        (Protocol::MiningProtocol, 2, 2, 0, "unsupported-protocol"),
        (
            Protocol::JobDeclarationProtocol,
            2,
            2,
            0,
            "unsupported-protocol",
        ),
        (
            Protocol::TemplateDistributionProtocol,
            3,
            5,
            0,
            "protocol-version-mismatch",
        ),
        (
            Protocol::TemplateDistributionProtocol,
            2,
            2,
            0b11,
            "unsupported-feature-flags",
        ),
    ] {
        let mut c = Client::connect_reference(server.addr).await;
        c.setup_with(protocol, min, max, flags).await;
        let (got, got_flags) = c.setup_error().await;
        assert_eq!(got, code);
        assert_eq!(got_flags, flags);
        c.expect_close().await;
    }
    // A version range that includes 2 is fine.
    let mut c = Client::connect_reference(server.addr).await;
    c.setup_with(Protocol::TemplateDistributionProtocol, 1, 3, 0)
        .await;
    let mut f = c.recv().await;
    assert_eq!(
        f.msg_type(),
        common_messages_sv2::MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS
    );
    let ok: common_messages_sv2::SetupConnectionSuccess =
        binary_sv2::from_bytes(&mut f.payload).unwrap();
    assert_eq!(ok.used_version, 2);
    server.stop().await;
}

#[tokio::test]
async fn bad_solutions_are_dropped_and_the_connection_stays() {
    let (server, mut c) = Server::with_client(29).await;
    let (t, p) = c.start(60).await;
    // An unknown template id, a coinbase that is not a transaction, a block that misses the
    // target: none has an answer in the protocol; the connection carries on.
    let mut solved = solve(&t, &p, &[3; 8]);
    let good = solved.coinbase.clone();
    solved.template_id += 99;
    c.submit(&solved).await;
    solved.template_id = t.template_id;
    solved.coinbase = vec![1, 2, 3];
    c.submit(&solved).await;
    solved.coinbase = good;
    let target = primitives::Target::from_le_bytes(&p.target.to_array());
    while target.is_met_by(&solved.header.block_hash().0) {
        solved.header.nonce = solved.header.nonce.wrapping_add(1);
    }
    c.submit(&solved).await;
    // Still answering on this connection; the tip did not move.
    let (txs, excess) = c.transaction_data(t.template_id).await.unwrap();
    check_transaction_data(&t, &txs, &excess);
    assert_eq!(server.node.stats().submitted_blocks, 0);
    server.stop().await;
}
