//! Extensions 0x0001 (negotiation) and 0x0002 (a `user_identity` TLV on SubmitSharesExtended):
//! the bytes are what the reference crates write and read.

use binary_sv2::{to_bytes, B032Owned, Seq064KOwned};
use extensions_sv2 as r;
use sv2::messages::extensions::extension;
use sv2::messages::mining::SubmitSharesExtended;
use sv2::messages::{
    extensions::{RequestExtensions, RequestExtensionsError, RequestExtensionsSuccess},
    DecodeError, EncodeError, Extensions, Message, Mining, Sv2Message,
};
use sv2::noise::extension_type;
use sv2::tlv;

fn seq(v: &[u16]) -> Seq064KOwned<u16> {
    Seq064KOwned::new(v.to_vec()).unwrap()
}

fn samples() -> Vec<(Message, Vec<u8>)> {
    vec![
        (
            RequestExtensions {
                request_id: 7,
                requested_extensions: vec![2, 0x4001],
            }
            .into(),
            to_bytes(r::RequestExtensionsOwned {
                request_id: 7,
                requested_extensions: seq(&[2, 0x4001]),
            })
            .unwrap(),
        ),
        (
            RequestExtensionsSuccess {
                request_id: 7,
                supported_extensions: vec![2],
            }
            .into(),
            to_bytes(r::RequestExtensionsSuccessOwned {
                request_id: 7,
                supported_extensions: seq(&[2]),
            })
            .unwrap(),
        ),
        (
            RequestExtensionsError {
                request_id: 8,
                unsupported_extensions: vec![0x4001],
                required_extensions: vec![2],
            }
            .into(),
            to_bytes(r::RequestExtensionsErrorOwned {
                request_id: 8,
                unsupported_extensions: seq(&[0x4001]),
                required_extensions: seq(&[2]),
            })
            .unwrap(),
        ),
    ]
}

#[test]
fn negotiation_messages_are_the_reference_crates_under_extension_1() {
    for (m, mut theirs) in samples() {
        let mut ours = Vec::new();
        assert_eq!(m.encode(&mut ours), Ok(m.msg_type()));
        assert_eq!(ours, theirs, "{} encodes as extensions_sv2 does", m.name());
        assert_eq!(m.extension_type(), extension_type(1, false));
        let back = Message::decode_frame(1, m.msg_type(), &mut theirs).unwrap();
        assert_eq!(back, Some(m.clone()), "{} decodes", m.name());
    }
    assert_eq!(
        Extensions::TYPES,
        &[
            (
                r::MESSAGE_TYPE_REQUEST_EXTENSIONS,
                false,
                "RequestExtensions"
            ),
            (
                r::MESSAGE_TYPE_REQUEST_EXTENSIONS_SUCCESS,
                false,
                "RequestExtensions.Success"
            ),
            (
                r::MESSAGE_TYPE_REQUEST_EXTENSIONS_ERROR,
                false,
                "RequestExtensions.Error"
            ),
        ]
    );
    assert_eq!(
        extension::WORKER_HASHRATE_TRACKING,
        r::EXTENSION_TYPE_WORKER_HASHRATE_TRACKING
    );
    assert_eq!(tlv::USER_IDENTITY.1, r::TLV_FIELD_TYPE_USER_IDENTITY);
    assert_eq!(tlv::MAX_USER_IDENTITY_LEN, r::MAX_USER_IDENTITY_LENGTH);
}

#[test]
fn frames_are_read_by_their_extension() {
    // Message type 0 is SetupConnection under extension 0 and RequestExtensions under 1.
    let (m, bytes) = samples().remove(0);
    assert!(matches!(
        Message::decode_frame(1, 0, &mut bytes.clone()),
        Ok(Some(Message::Extensions(Extensions::RequestExtensions(_))))
    ));
    assert_eq!(m.msg_type(), 0);
    assert!(Message::decode_frame(0, 0, &mut bytes.clone()).is_err());
    // Extensions this crate has no messages of are skipped, not errors.
    assert_eq!(Message::decode_frame(2, 0, &mut bytes.clone()), Ok(None));
    assert_eq!(Message::decode_frame(0x4001, 0x77, &mut [1, 2]), Ok(None));
    assert_eq!(
        Message::decode_frame(1, 0x09, &mut [0; 4]),
        Err(DecodeError::UnknownType(0x09))
    );
    assert!(matches!(
        Message::decode_frame(1, 0, &mut [7]),
        Err(DecodeError::Malformed { .. })
    ));
}

fn share(user_identity: Option<&str>) -> SubmitSharesExtended {
    SubmitSharesExtended {
        channel_id: 3,
        sequence_number: 9,
        job_id: 4,
        nonce: 0xdead_beef,
        ntime: 1_700_000_000,
        version: 0x2000_0000,
        extranonce: vec![1, 2, 3, 4],
        user_identity: user_identity.map(str::to_owned),
    }
}

fn reference_core(s: &SubmitSharesExtended) -> Vec<u8> {
    to_bytes(mining_sv2::SubmitSharesExtendedOwned {
        channel_id: s.channel_id,
        sequence_number: s.sequence_number,
        job_id: s.job_id,
        nonce: s.nonce,
        ntime: s.ntime,
        version: s.version,
        extranonce: B032Owned::new(s.extranonce.clone()).unwrap(),
    })
    .unwrap()
}

#[test]
fn a_user_identity_is_a_tlv_after_the_core_fields() {
    let s = share(Some("farm.rig-17"));
    let mut ours = Vec::new();
    s.encode(&mut ours).unwrap();
    let core = reference_core(&s);
    assert_eq!(&ours[..core.len()], &core[..]);
    let mut want = vec![0x02, 0x00, 0x01, 11, 0x00];
    want.extend_from_slice(b"farm.rig-17");
    assert_eq!(&ours[core.len()..], &want[..]);
    // The reference decoder reads the core fields and leaves the TLV.
    let mut copy = ours.clone();
    let theirs: mining_sv2::SubmitSharesExtended = binary_sv2::from_bytes(&mut copy).unwrap();
    assert_eq!(theirs.nonce, s.nonce);
    assert_eq!(SubmitSharesExtended::decode(&mut ours).unwrap(), s);
    // Without one, the bytes are the reference's alone.
    let plain = share(None);
    let mut b = Vec::new();
    plain.encode(&mut b).unwrap();
    assert_eq!(b, reference_core(&plain));
    assert_eq!(SubmitSharesExtended::decode(&mut b).unwrap(), plain);
}

#[test]
fn other_tlvs_and_names_the_extension_does_not_allow_are_skipped() {
    let s = share(None);
    let mut b = reference_core(&s);
    tlv::write(0x4001, 1, b"ignored", &mut b).unwrap();
    tlv::write(2, 0x7f, b"unknown field", &mut b).unwrap();
    tlv::write(2, 1, b"w1", &mut b).unwrap();
    assert_eq!(
        SubmitSharesExtended::decode(&mut b)
            .unwrap()
            .user_identity
            .as_deref(),
        Some("w1")
    );

    // A name over 32 bytes, or not UTF-8, names nobody: the share is read without it.
    let mut long = reference_core(&s);
    tlv::write(2, 1, &[b'x'; 33], &mut long).unwrap();
    assert_eq!(SubmitSharesExtended::decode(&mut long).unwrap(), s);
    let mut not_text = reference_core(&s);
    tlv::write(2, 1, &[0xff, 0xfe], &mut not_text).unwrap();
    assert_eq!(SubmitSharesExtended::decode(&mut not_text).unwrap(), s);

    // Bytes after the message that are not whole TLVs are ignored, as before the extension.
    let mut cut = reference_core(&s);
    tlv::write(2, 1, b"abcdef", &mut cut).unwrap();
    cut.truncate(cut.len() - 2);
    assert_eq!(SubmitSharesExtended::decode(&mut cut).unwrap(), s);

    assert_eq!(
        share(Some(&"y".repeat(33))).encode(&mut Vec::new()),
        Err(EncodeError::FieldTooLong {
            name: "SubmitSharesExtended",
            field: "user_identity",
            len: 33,
            max: 32
        })
    );
    let m: Message = share(Some("a")).into();
    assert!(matches!(
        m,
        Message::Mining(Mining::SubmitSharesExtended(_))
    ));
}
