//! The sans-IO Noise connection: both sides in memory, through good and bad bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sv2::fuzz_support::{handshake_pair, wire_len};
use sv2::noise::{
    extension_type, CertificateProblem, NoiseError, NoiseInitiator, NoiseResponder,
    MAX_FRAME_BYTES, MAX_PAYLOAD_LEN,
};
use sv2::AuthorityKeys;

/// Another valid authority (32 bytes of 0x01 in base58check), not the reference pair.
const OTHER_SECRET: &str = "SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF";

fn unix_now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

fn server(validity: Duration, max: usize) -> NoiseResponder {
    NoiseResponder::new(&AuthorityKeys::reference(), validity, max).unwrap()
}

fn client(max: usize) -> NoiseInitiator {
    NoiseInitiator::new(AuthorityKeys::reference().public_bytes(), max).unwrap()
}

/// Runs the two handshake messages between `c` and `s`; returns the client's verdict.
fn handshake(c: &mut NoiseInitiator, s: &mut NoiseResponder) -> Result<(), NoiseError> {
    let mut wire = Vec::new();
    assert!(c.take_handshake_bytes(&mut wire));
    s.feed(&wire).unwrap();
    wire.clear();
    assert!(s.take_handshake_bytes(&mut wire));
    c.feed(&wire)
}

#[test]
fn handshake_then_frames_both_ways() {
    let mut c = client(MAX_FRAME_BYTES);
    let mut s = server(Duration::from_secs(3600), MAX_FRAME_BYTES);
    assert!(!c.handshake_done() && !s.handshake_done());

    let mut hello = Vec::new();
    assert!(c.take_handshake_bytes(&mut hello));
    assert_eq!(hello.len(), 64, "an ElligatorSwift ephemeral key");
    assert!(!c.take_handshake_bytes(&mut hello), "sent once");
    // The key in two pieces: nothing until it is whole.
    s.feed(&hello[..40]).unwrap();
    assert!(!s.handshake_done());
    s.feed(&hello[40..]).unwrap();
    assert!(s.handshake_done());

    let mut reply = Vec::new();
    assert!(s.take_handshake_bytes(&mut reply));
    assert_eq!(reply.len(), 234, "key, static key and certificate");
    for b in reply.chunks(7) {
        assert!(!c.handshake_done());
        c.feed(b).unwrap();
    }
    assert!(c.handshake_done());
    assert_eq!(
        c.heap_bytes() + s.heap_bytes(),
        0,
        "nothing held once established"
    );

    let mut wire = Vec::new();
    c.encrypt(0x00, 0, b"setup", &mut wire).unwrap();
    c.encrypt(
        0x1a,
        extension_type(0, true),
        &7u32.to_le_bytes(),
        &mut wire,
    )
    .unwrap();
    assert_eq!(wire.len(), wire_len(5) + wire_len(4));
    s.feed(&wire).unwrap();
    let f = s.next_frame().unwrap().unwrap();
    assert_eq!(
        (f.msg_type(), f.extension(), f.channel_msg()),
        (0x00, 0, false)
    );
    assert_eq!(f.payload, b"setup");
    let f = s.next_frame().unwrap().unwrap();
    assert_eq!(
        (f.msg_type(), f.channel_msg(), f.channel_id()),
        (0x1a, true, Some(7))
    );
    assert!(s.next_frame().is_none());

    wire.clear();
    s.encrypt(0x01, 0, b"ok", &mut wire).unwrap();
    c.feed(&wire).unwrap();
    assert_eq!(c.next_frame().unwrap().unwrap().payload, b"ok");
}

#[test]
fn a_server_that_answers_at_once_sends_its_handshake_reply_first() {
    let mut c = client(MAX_FRAME_BYTES);
    let mut s = server(Duration::from_secs(60), MAX_FRAME_BYTES);
    let mut wire = Vec::new();
    c.take_handshake_bytes(&mut wire);
    s.feed(&wire).unwrap();
    // No take_handshake_bytes: encrypt puts the reply in front.
    wire.clear();
    s.encrypt(0x01, 0, b"first", &mut wire).unwrap();
    assert_eq!(wire.len(), 234 + wire_len(5));
    c.feed(&wire).unwrap();
    assert!(c.handshake_done());
    assert_eq!(c.next_frame().unwrap().unwrap().payload, b"first");
}

#[test]
fn a_certificate_from_another_authority_is_refused() {
    let other = AuthorityKeys::from_secret(OTHER_SECRET).unwrap();
    let mut c = NoiseInitiator::new(other.public_bytes(), MAX_FRAME_BYTES).unwrap();
    let mut s = server(Duration::from_secs(3600), MAX_FRAME_BYTES);
    assert_eq!(
        handshake(&mut c, &mut s),
        Err(NoiseError::Certificate(CertificateProblem::Signature))
    );
    assert!(!c.handshake_done());
    assert_eq!(
        c.encrypt(0, 0, b"x", &mut Vec::new()),
        Err(NoiseError::Failed)
    );
    assert_eq!(c.feed(b"more"), Err(NoiseError::Failed));
    assert!(c.next_frame().is_none());

    // The same server is accepted by a client expecting its authority.
    let mut c = client(MAX_FRAME_BYTES);
    let mut s = server(Duration::from_secs(3600), MAX_FRAME_BYTES);
    assert_eq!(handshake(&mut c, &mut s), Ok(()));
}

#[test]
fn expired_and_not_yet_valid_certificates_are_refused() {
    let now = unix_now();
    // Valid for one second from the handshake, checked an hour later.
    let mut c = client(MAX_FRAME_BYTES).with_now(now + 3600);
    let mut s = server(Duration::from_secs(1), MAX_FRAME_BYTES);
    match handshake(&mut c, &mut s) {
        Err(NoiseError::Certificate(CertificateProblem::Expired {
            not_valid_after,
            now: checked,
        })) => {
            assert!(not_valid_after >= now && not_valid_after <= now + 5);
            assert_eq!(checked, now + 3600);
        }
        other => panic!("expected an expired certificate, got {other:?}"),
    }
    // Checked an hour before it was issued.
    let mut c = client(MAX_FRAME_BYTES).with_now(now - 3600);
    let mut s = server(Duration::from_secs(3600), MAX_FRAME_BYTES);
    assert!(matches!(
        handshake(&mut c, &mut s),
        Err(NoiseError::Certificate(
            CertificateProblem::NotYetValid { .. }
        ))
    ));
    // Within its validity, clock drift included.
    let mut c = client(MAX_FRAME_BYTES).with_now(now + 5);
    let mut s = server(Duration::from_secs(1), MAX_FRAME_BYTES);
    assert_eq!(handshake(&mut c, &mut s), Ok(()));
}

#[test]
fn garbage_before_the_handshake_is_an_error_not_a_panic() {
    // Any 64 bytes read as a key, so a responder "completes"; the rest cannot decrypt.
    let mut s = server(Duration::from_secs(60), 4096);
    let junk = b"GET / HTTP/1.1\r\nHost: example\r\n\r\n".repeat(8);
    s.feed(&junk).unwrap();
    assert!(s.handshake_done());
    assert!(matches!(s.next_frame(), Some(Err(NoiseError::Decrypt(_)))));
    assert!(s.next_frame().is_none(), "nothing after a read error");
    assert_eq!(s.buffered(), 0, "the rest is dropped, not kept");

    // A reply that is not a responder's: the certificate cannot verify.
    let mut c = client(4096);
    let reply = [0x5au8; 234];
    assert!(c.feed(&reply[..233]).is_ok(), "incomplete: no verdict yet");
    assert!(c.feed(&reply[233..]).is_err());
    assert!(!c.handshake_done());
}

#[test]
fn truncated_frames_wait_and_complete() {
    let (mut c, mut s) = handshake_pair(MAX_FRAME_BYTES);
    let mut wire = Vec::new();
    c.encrypt(0x1c, extension_type(0, true), &[9; 300], &mut wire)
        .unwrap();
    for (i, b) in wire.iter().enumerate() {
        assert!(s.next_frame().is_none(), "whole after {i} bytes?");
        s.feed(std::slice::from_ref(b)).unwrap();
    }
    let f = s.next_frame().unwrap().unwrap();
    assert_eq!(f.payload, vec![9; 300]);

    // A stream that stops mid-frame leaves it pending, not failed.
    wire.clear();
    c.encrypt(0x1c, 0, &[1; 50], &mut wire).unwrap();
    s.feed(&wire[..wire.len() - 1]).unwrap();
    assert!(s.next_frame().is_none());
    assert!(s.buffered() > 0);
    s.feed(&wire[wire.len() - 1..]).unwrap();
    assert_eq!(s.next_frame().unwrap().unwrap().payload, vec![1; 50]);
}

#[test]
fn frames_over_several_chunks_and_many_frames_per_read() {
    let (mut c, mut s) = handshake_pair(MAX_FRAME_BYTES);
    let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    let mut wire = Vec::new();
    c.encrypt(0x74, 0, &big, &mut wire).unwrap();
    for i in 0..100u8 {
        c.encrypt(0x1a, 0, &[i; 24], &mut wire).unwrap();
    }
    s.feed(&wire).unwrap();
    assert_eq!(s.next_frame().unwrap().unwrap().payload, big);
    for i in 0..100u8 {
        assert_eq!(s.next_frame().unwrap().unwrap().payload, [i; 24]);
    }
    assert!(s.next_frame().is_none());
    assert_eq!(s.buffered(), 0);
}

#[test]
fn oversized_frames_are_cut_off_at_their_header() {
    let limit = 1000;
    let (mut c, mut s) = handshake_pair(limit);
    // Exactly at the limit passes.
    let fits = limit - wire_len(0) - 16;
    assert_eq!(wire_len(fits), limit);
    let mut wire = Vec::new();
    c.encrypt(0x76, 0, &vec![3; fits], &mut wire).unwrap();
    s.feed(&wire).unwrap();
    assert_eq!(s.next_frame().unwrap().unwrap().payload.len(), fits);

    // One byte more is refused once its 22-byte header is in: the payload is never buffered.
    wire.clear();
    c.encrypt(0x76, 0, &vec![3; fits + 1], &mut wire).unwrap();
    s.feed(&wire[..22]).unwrap();
    assert_eq!(
        s.next_frame().unwrap().unwrap_err(),
        NoiseError::FrameTooLarge { limit }
    );
    s.feed(&wire[22..]).unwrap();
    assert_eq!(s.buffered(), 0, "nothing is kept after the error");
    assert!(s.next_frame().is_none());

    // A frame declaring 1 MB with a 128 KiB limit: refused before its third chunk.
    let limit = 128 * 1024;
    let (mut c, mut s) = handshake_pair(limit);
    wire.clear();
    c.encrypt(0x76, 0, &vec![0; 1 << 20], &mut wire).unwrap();
    let mut fed = 0;
    let err = loop {
        s.feed(&wire[fed..fed + 4096]).unwrap();
        fed += 4096;
        if let Some(r) = s.next_frame() {
            break r.unwrap_err();
        }
    };
    assert_eq!(err, NoiseError::FrameTooLarge { limit });
    assert!(fed <= limit, "cut off after {fed} bytes");
}

#[test]
fn tampered_or_garbage_frames_fail_to_decrypt() {
    let (mut c, mut s) = handshake_pair(MAX_FRAME_BYTES);
    let mut wire = Vec::new();
    c.encrypt(0x00, 0, b"one", &mut wire).unwrap();
    let first = wire.len();
    c.encrypt(0x00, 0, b"two", &mut wire).unwrap();
    wire[first + 30] ^= 1;
    s.feed(&wire).unwrap();
    assert_eq!(s.next_frame().unwrap().unwrap().payload, b"one");
    assert!(matches!(s.next_frame(), Some(Err(NoiseError::Decrypt(_)))));
    assert!(s.next_frame().is_none());
    // Later bytes, even genuine ones, are not read: the cipher lost its place.
    let mut more = Vec::new();
    c.encrypt(0x00, 0, b"three", &mut more).unwrap();
    s.feed(&more).unwrap();
    assert!(s.next_frame().is_none());
    // The sending side still works (to say goodbye).
    assert!(s.encrypt(0x02, 0, b"bye", &mut Vec::new()).is_ok());

    let (_, mut s) = handshake_pair(MAX_FRAME_BYTES);
    s.feed(&[0xff; 22]).unwrap();
    assert!(matches!(s.next_frame(), Some(Err(NoiseError::Decrypt(_)))));
}

#[test]
fn misuse_is_an_error() {
    let mut c = client(MAX_FRAME_BYTES);
    assert_eq!(
        c.encrypt(0, 0, b"early", &mut Vec::new()),
        Err(NoiseError::HandshakeIncomplete)
    );
    assert!(c.next_frame().is_none());
    let (mut c, _) = handshake_pair(MAX_FRAME_BYTES);
    let mut out = Vec::new();
    assert_eq!(
        c.encrypt(0, 0, &vec![0; MAX_PAYLOAD_LEN + 1], &mut out),
        Err(NoiseError::PayloadTooLarge {
            len: MAX_PAYLOAD_LEN + 1,
            max: MAX_PAYLOAD_LEN
        })
    );
    assert!(out.is_empty());
    assert_eq!(
        NoiseInitiator::new([0; 32], 100).err(),
        Some(NoiseError::InvalidAuthorityKey)
    );
}
