//! What the fuzz targets of `crates/sv2/fuzz` run, here so that `tests/fuzz_corpus.rs` replays
//! the committed corpus on stable. Each function takes arbitrary bytes and panics only when an
//! invariant breaks.
//!
//! - [`frames`]: Noise connections fed hostile bytes: raw bytes to either side before the
//!   handshake, corrupted handshake messages, and after a real handshake a script of frames
//!   (arbitrary headers and payloads up to several chunks) encrypted by one side, cut into
//!   arbitrary reads, optionally corrupted, under a frame-size limit, fed to the other side.
//!   Frames come out exactly as sent until the first corrupted or oversized one, which is an
//!   error, after which nothing comes out.
//! - [`messages`]: a message type and payload through [`Message::decode`]: what decodes
//!   re-encodes to a stable form that is byte for byte what the reference struct re-encodes,
//!   and what the reference decoder refuses we refuse.

use std::time::Duration;

use crate::keys::AuthorityKeys;
use crate::messages::{DecodeError, Message, Sv2Message};
use crate::noise::{Frame, NoiseError, NoiseInitiator, NoiseResponder, MAX_FRAME_BYTES};

/// Frame-size limits the structured mode picks from: none, below a header, tiny, around the
/// one-chunk boundary, a few chunks.
pub const LIMITS: [usize; 6] = [MAX_FRAME_BYTES, 21, 200, 65_557, 65_600, 140_000];

/// A tiny deterministic generator for read sizes, seeded from the input.
struct Cuts(u32);

impl Cuts {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    /// A read size: mostly small (to split headers and chunks), sometimes large.
    fn read_len(&mut self) -> usize {
        match self.next() % 8 {
            0 => 1,
            1..=4 => 1 + (self.next() % 40) as usize,
            5 | 6 => 1 + (self.next() % 2000) as usize,
            _ => 1 + (self.next() % 100_000) as usize,
        }
    }
}

/// `wire` cut into reads of the sizes `cuts` picks.
fn cut<'a>(wire: &'a [u8], cuts: &mut Cuts) -> Vec<&'a [u8]> {
    let mut reads = Vec::new();
    let mut at = 0;
    while at < wire.len() {
        let n = cuts.read_len().min(wire.len() - at);
        reads.push(&wire[at..at + n]);
        at += n;
    }
    reads
}

pub use crate::noise::wire_len;

/// An initiator and a responder through a real handshake in memory.
pub fn handshake_pair(max_frame_bytes: usize) -> (NoiseInitiator, NoiseResponder) {
    let keys = AuthorityKeys::reference();
    let mut client = NoiseInitiator::new(keys.public_bytes(), max_frame_bytes)
        .expect("the reference public key is valid");
    let mut server = NoiseResponder::new(&keys, Duration::from_secs(3600), max_frame_bytes)
        .expect("the reference pair makes a responder");
    let mut wire = Vec::new();
    client.take_handshake_bytes(&mut wire);
    server.feed(&wire).expect("the ephemeral key is accepted");
    wire.clear();
    server.take_handshake_bytes(&mut wire);
    client.feed(&wire).expect("the certificate verifies");
    assert!(client.handshake_done() && server.handshake_done());
    (client, server)
}

/// Fuzz entry for Noise framing. `data[0]` picks the mode, `data[1..3]` seed the read sizes.
pub fn frames(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let mode = data[0] % 4;
    let mut cuts = Cuts(u32::from(data[1]) << 8 | u32::from(data[2]) | 1);
    let rest = &data[3..];
    match mode {
        0 => raw_to_responder(rest, &mut cuts),
        1 => raw_to_initiator(rest, &mut cuts),
        2 => corrupted_handshake(rest),
        _ => scripted_frames(data[0] / 4, rest, &mut cuts),
    }
}

/// Anything before and after a client's "ephemeral key": errors, never panics, and no frame
/// can come out of bytes nobody encrypted.
fn raw_to_responder(rest: &[u8], cuts: &mut Cuts) {
    let keys = AuthorityKeys::reference();
    let mut server = NoiseResponder::new(&keys, Duration::from_secs(60), 4096)
        .expect("the reference pair makes a responder");
    let mut frames = 0;
    let mut failed = false;
    for read in cut(rest, cuts) {
        if server.feed(read).is_err() {
            break;
        }
        while let Some(f) = server.next_frame() {
            match f {
                Ok(_) => frames += 1,
                Err(_) => failed = true,
            }
        }
    }
    assert_eq!(frames, 0, "a frame decrypted from bytes nobody encrypted");
    if failed {
        assert!(server.next_frame().is_none(), "frames after a read error");
    }
}

/// Anything as a server's reply: the certificate cannot verify.
fn raw_to_initiator(rest: &[u8], cuts: &mut Cuts) {
    let keys = AuthorityKeys::reference();
    let mut client =
        NoiseInitiator::new(keys.public_bytes(), 4096).expect("the reference key is valid");
    let mut out = Vec::new();
    assert!(client.take_handshake_bytes(&mut out));
    assert_eq!(out.len(), noise_sv2::ELLSWIFT_ENCODING_SIZE);
    for read in cut(rest, cuts) {
        if client.feed(read).is_err() {
            break;
        }
    }
    assert!(!client.handshake_done(), "a forged certificate verified");
    assert!(client.encrypt(0, 0, &[], &mut out).is_err());
}

/// A real handshake with one byte flipped: the client refuses the server (or, when the flip is
/// in its own key, the keys disagree and the server cannot read the client's first frame).
fn corrupted_handshake(rest: &[u8]) {
    let keys = AuthorityKeys::reference();
    let mut client =
        NoiseInitiator::new(keys.public_bytes(), 4096).expect("the reference key is valid");
    let mut server = NoiseResponder::new(&keys, Duration::from_secs(60), 4096)
        .expect("the reference pair makes a responder");
    let flip = rest.first().copied().unwrap_or(0) as usize
        | (rest.get(1).copied().unwrap_or(0) as usize) << 8;
    let mask = rest.get(2).copied().unwrap_or(1).max(1);
    let mut hello = Vec::new();
    client.take_handshake_bytes(&mut hello);
    let mut reply = Vec::new();
    let at = flip % (hello.len() + noise_sv2::INITIATOR_EXPECTED_HANDSHAKE_MESSAGE_SIZE);
    if at < hello.len() {
        hello[at] ^= mask;
    }
    server.feed(&hello).expect("any 64 bytes are a key");
    server.take_handshake_bytes(&mut reply);
    if at >= hello.len() {
        reply[at - hello.len()] ^= mask;
    }
    match client.feed(&reply) {
        Err(_) => assert!(!client.handshake_done()),
        Ok(()) => {
            // Only a flip in the client's own key can leave its handshake intact, and then the
            // two sides derived different keys.
            assert!(at < hello.len(), "a corrupted reply was accepted");
            let mut wire = Vec::new();
            client.encrypt(0x00, 0, b"hello", &mut wire).unwrap();
            server.feed(&wire).unwrap();
            assert!(matches!(
                server.next_frame(),
                Some(Err(NoiseError::Decrypt(_)))
            ));
        }
    }
}

/// One frame of a script: header fields and a payload.
struct Planned {
    msg_type: u8,
    extension_type: u16,
    payload: Vec<u8>,
}

/// Reads a frame script: per frame, a message type, an extension type, a length byte, then the
/// payload bytes (a length byte over 250 stretches the payload to several chunks by
/// repetition, to cross the 64 KiB chunk boundary).
fn script(mut rest: &[u8]) -> Vec<Planned> {
    let mut frames = Vec::new();
    let mut total = 0;
    while rest.len() >= 4 && frames.len() < 64 && total < 600_000 {
        let msg_type = rest[0];
        let extension_type = u16::from_le_bytes([rest[1], rest[2]]);
        let len = rest[3] as usize;
        rest = &rest[4..];
        let take = len.min(rest.len()).min(250);
        let mut payload = rest[..take].to_vec();
        rest = &rest[take..];
        if len > 250 {
            let target = (len - 250) * 30_000;
            let fill = if payload.is_empty() {
                vec![0xa5]
            } else {
                payload.clone()
            };
            while payload.len() < target {
                payload.extend_from_slice(&fill);
            }
            payload.truncate(target);
        }
        total += payload.len();
        frames.push(Planned {
            msg_type,
            extension_type,
            payload,
        });
    }
    frames
}

fn scripted_frames(control: u8, rest: &[u8], cuts: &mut Cuts) {
    let limit = LIMITS[(control % 8) as usize % LIMITS.len()];
    let corrupt = control & 0x20 != 0;
    let (mut client, mut server) = handshake_pair(limit);
    let (corrupt_at, rest) = if corrupt && rest.len() >= 2 {
        (
            Some(u16::from_le_bytes([rest[0], rest[1]]) as usize),
            &rest[2..],
        )
    } else {
        (None, rest)
    };
    let planned = script(rest);
    let mut wire = Vec::new();
    let mut ends = Vec::new();
    for p in &planned {
        client
            .encrypt(p.msg_type, p.extension_type, &p.payload, &mut wire)
            .expect("payloads here fit a frame");
        ends.push(wire.len());
        assert_eq!(
            wire.len() - ends.len().checked_sub(2).map_or(0, |i| ends[i]),
            wire_len(p.payload.len())
        );
    }
    let corrupt_at = corrupt_at
        .filter(|_| !wire.is_empty())
        .map(|at| at % wire.len());
    if let Some(at) = corrupt_at {
        wire[at] ^= 0x40;
    }

    let mut got: Vec<Frame> = Vec::new();
    let mut error: Option<NoiseError> = None;
    'reads: for read in cut(&wire, cuts) {
        server.feed(read).expect("the handshake is done");
        while let Some(f) = server.next_frame() {
            match f {
                Ok(f) => got.push(f),
                Err(e) => {
                    error = Some(e);
                    break 'reads;
                }
            }
        }
        // Drained: what waits undecoded is less than the decoder's next window.
        assert!(server.buffered() < framing_sv2::SV2_FRAME_CHUNK_SIZE);
    }
    if error.is_some() {
        assert!(server.next_frame().is_none(), "frames after a read error");
    }

    // Every frame that came out is the one sent at its place.
    for (f, p) in got.iter().zip(&planned) {
        assert_eq!(f.msg_type(), p.msg_type);
        assert_eq!(f.header.ext_type(), p.extension_type);
        assert_eq!(f.payload, p.payload);
    }
    assert!(got.len() <= planned.len());
    // The first frame that is too large, or that holds the corrupted byte, ends the stream
    // with the matching error; everything before it comes out.
    let oversized = planned
        .iter()
        .position(|p| wire_len(p.payload.len()) > limit);
    let corrupted = corrupt_at.map(|at| ends.iter().position(|&end| at < end).expect("in a frame"));
    let stop = match (oversized, corrupted) {
        (Some(o), Some(c)) => Some(o.min(c)),
        (o, c) => o.or(c),
    };
    match stop {
        None => {
            assert!(error.is_none(), "unexpected error {error:?}");
            assert_eq!(got.len(), planned.len());
        }
        Some(i) => {
            assert_eq!(got.len(), i, "frames before the bad one, and only those");
            match error {
                Some(NoiseError::FrameTooLarge { limit: l }) => {
                    assert_eq!(l, limit);
                    // A corrupted header does not decrypt, so it cannot declare a size.
                    assert_eq!(oversized, Some(i));
                }
                Some(NoiseError::Decrypt(_)) => assert_eq!(corrupted, Some(i)),
                other => panic!("frame {i} should fail, got {other:?}"),
            }
        }
    }
}

/// Fuzz entry for message decoding: `data[0]` is the message type, the rest the payload.
pub fn messages(data: &[u8]) {
    let Some((&msg_type, payload)) = data.split_first() else {
        return;
    };
    let ours = Message::decode(msg_type, &mut payload.to_vec());
    let theirs = reference::reencode(msg_type, &mut payload.to_vec());
    // Protocol numbers the reference enum lacks decode here on purpose (see SetupConnection).
    let unknown_protocol = msg_type == 0x00 && payload.first().is_some_and(|&p| p > 2);
    // SubmitSharesExtended may carry extension 0x0002's TLV after the fields the reference
    // struct holds: its bytes are the reference's, then that TLV.
    let extended_share = msg_type == crate::messages::mining::SubmitSharesExtended::MSG_TYPE;
    match ours {
        Ok(m) => {
            assert_eq!(m.msg_type(), msg_type);
            let mut encoded = Vec::new();
            assert_eq!(
                m.encode(&mut encoded),
                Ok(msg_type),
                "a decoded message encodes"
            );
            let again = Message::decode(msg_type, &mut encoded.clone()).expect("re-decodes");
            let mut re_encoded = Vec::new();
            again.encode(&mut re_encoded).expect("encodes again");
            assert_eq!(encoded, re_encoded, "encoding is stable");
            if extended_share {
                let Some(Ok(core)) = &theirs else {
                    panic!("the reference refuses a share we read: {theirs:?}")
                };
                assert!(encoded.starts_with(core), "the reference's fields first");
                let tail: Vec<_> = crate::tlv::read(&encoded[core.len()..]).collect();
                let named = match &m {
                    Message::Mining(crate::messages::Mining::SubmitSharesExtended(s)) => {
                        s.user_identity.clone()
                    }
                    other => panic!("type 0x1b decoded as {other:?}"),
                };
                match (&tail[..], named) {
                    ([], None) => {}
                    ([Ok(t)], Some(id)) => {
                        assert_eq!((t.extension, t.field), crate::tlv::USER_IDENTITY);
                        assert_eq!(t.value, id.as_bytes());
                    }
                    (tail, named) => panic!("after the fields {tail:?}, the share named {named:?}"),
                }
            } else if !unknown_protocol {
                assert_eq!(
                    theirs.as_ref().map(|r| r.as_deref()),
                    Some(Ok(&encoded[..])),
                    "the reference struct re-encodes the same bytes"
                );
            }
        }
        Err(DecodeError::UnknownType(t)) => {
            assert_eq!(t, msg_type);
            assert!(theirs.is_none(), "a type the reference knows");
        }
        Err(DecodeError::NotUtf8 { .. }) => {
            assert!(matches!(theirs, Some(Ok(_))) || unknown_protocol);
        }
        Err(DecodeError::Malformed { .. }) => {
            assert!(matches!(theirs, Some(Err(_))) || unknown_protocol);
        }
    }
}

/// The reference crates' own decode and re-encode, by message type.
mod reference {
    use binary_sv2::{from_bytes, to_bytes};

    macro_rules! by_type {
        ($msg_type:expr, $payload:expr, $($t:path => $ty:ty),* $(,)?) => {
            match $msg_type {
                $($t => Some(from_bytes::<$ty>($payload).map_err(|_| ()).and_then(|m| to_bytes(m).map_err(|_| ()))),)*
                _ => None,
            }
        };
    }

    /// `None` for a type the reference crates here do not define; otherwise their decode of
    /// `payload` serialized again.
    pub(super) fn reencode(msg_type: u8, payload: &mut [u8]) -> Option<Result<Vec<u8>, ()>> {
        use common_messages_sv2 as c;
        use job_declaration_sv2 as j;
        use mining_sv2 as m;
        use template_distribution_sv2 as t;
        by_type!(msg_type, payload,
            c::MESSAGE_TYPE_SETUP_CONNECTION => c::SetupConnection,
            c::MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS => c::SetupConnectionSuccess,
            c::MESSAGE_TYPE_SETUP_CONNECTION_ERROR => c::SetupConnectionError,
            c::MESSAGE_TYPE_CHANNEL_ENDPOINT_CHANGED => c::ChannelEndpointChanged,
            c::MESSAGE_TYPE_RECONNECT => c::Reconnect,
            m::MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL => m::OpenStandardMiningChannel,
            m::MESSAGE_TYPE_OPEN_STANDARD_MINING_CHANNEL_SUCCESS => m::OpenStandardMiningChannelSuccess,
            m::MESSAGE_TYPE_OPEN_MINING_CHANNEL_ERROR => m::OpenMiningChannelError,
            m::MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL => m::OpenExtendedMiningChannel,
            m::MESSAGE_TYPE_OPEN_EXTENDED_MINING_CHANNEL_SUCCESS => m::OpenExtendedMiningChannelSuccess,
            m::MESSAGE_TYPE_NEW_MINING_JOB => m::NewMiningJob,
            m::MESSAGE_TYPE_UPDATE_CHANNEL => m::UpdateChannel,
            m::MESSAGE_TYPE_UPDATE_CHANNEL_ERROR => m::UpdateChannelError,
            m::MESSAGE_TYPE_CLOSE_CHANNEL => m::CloseChannel,
            m::MESSAGE_TYPE_SET_EXTRANONCE_PREFIX => m::SetExtranoncePrefix,
            m::MESSAGE_TYPE_SUBMIT_SHARES_STANDARD => m::SubmitSharesStandard,
            m::MESSAGE_TYPE_SUBMIT_SHARES_EXTENDED => m::SubmitSharesExtended,
            m::MESSAGE_TYPE_SUBMIT_SHARES_SUCCESS => m::SubmitSharesSuccess,
            m::MESSAGE_TYPE_SUBMIT_SHARES_ERROR => m::SubmitSharesError,
            m::MESSAGE_TYPE_NEW_EXTENDED_MINING_JOB => m::NewExtendedMiningJob,
            m::MESSAGE_TYPE_MINING_SET_NEW_PREV_HASH => m::SetNewPrevHash,
            m::MESSAGE_TYPE_SET_TARGET => m::SetTarget,
            m::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB => m::SetCustomMiningJob,
            m::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_SUCCESS => m::SetCustomMiningJobSuccess,
            m::MESSAGE_TYPE_SET_CUSTOM_MINING_JOB_ERROR => m::SetCustomMiningJobError,
            m::MESSAGE_TYPE_SET_GROUP_CHANNEL => m::SetGroupChannel,
            j::MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN => j::AllocateMiningJobToken,
            j::MESSAGE_TYPE_ALLOCATE_MINING_JOB_TOKEN_SUCCESS => j::AllocateMiningJobTokenSuccess,
            j::MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS => j::ProvideMissingTransactions,
            j::MESSAGE_TYPE_PROVIDE_MISSING_TRANSACTIONS_SUCCESS => j::ProvideMissingTransactionsSuccess,
            j::MESSAGE_TYPE_DECLARE_MINING_JOB => j::DeclareMiningJob,
            j::MESSAGE_TYPE_DECLARE_MINING_JOB_SUCCESS => j::DeclareMiningJobSuccess,
            j::MESSAGE_TYPE_DECLARE_MINING_JOB_ERROR => j::DeclareMiningJobError,
            j::MESSAGE_TYPE_PUSH_SOLUTION => j::PushSolution,
            t::MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS => t::CoinbaseOutputConstraints,
            t::MESSAGE_TYPE_NEW_TEMPLATE => t::NewTemplate,
            t::MESSAGE_TYPE_SET_NEW_PREV_HASH => t::SetNewPrevHash,
            t::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA => t::RequestTransactionData,
            t::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS => t::RequestTransactionDataSuccess,
            t::MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR => t::RequestTransactionDataError,
            t::MESSAGE_TYPE_SUBMIT_SOLUTION => t::SubmitSolution,
        )
    }
}
