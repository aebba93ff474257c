//! What the SV2 device keeps to itself: the setup messages it serializes once, sequence-number
//! order, its settings' checks, its size.

use super::*;

fn at(ns: u64) -> Timestamp {
    Timestamp::from_nanos(ns)
}

#[test]
fn the_open_message_spliced_per_device_is_the_reference_encoding() {
    for prefix in [
        "",
        "stratumlab.s19-",
        "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080.rig",
    ] {
        let long = "x".repeat(MAX_WORKER_PREFIX);
        let prefix = if prefix.is_empty() {
            long.as_str()
        } else {
            prefix
        };
        let shared = Sv2Shared::new(Sv2Config {
            worker_prefix: Some(prefix.to_owned()),
            nominal_hash_rate: Some(123_456.0),
            max_target: Difficulty::ONE.to_target(),
            ..Sv2Config::default()
        })
        .unwrap();
        for index in [0, 7, 10, 12_345, u32::MAX] {
            let mut spliced = b"earlier bytes stay".to_vec();
            shared.write_open(index, &mut spliced);
            let mut encoded = b"earlier bytes stay".to_vec();
            OpenStandardMiningChannel {
                request_id: REQUEST_ID,
                user_identity: format!("{prefix}{index}"),
                nominal_hash_rate: 123_456.0,
                max_target: Difficulty::ONE.to_target(),
            }
            .encode(&mut encoded)
            .unwrap();
            assert_eq!(spliced, encoded, "{prefix:?} {index}");
            assert_eq!(shared.user_identity(index), format!("{prefix}{index}"));
        }
    }
}

#[test]
fn setup_connection_is_serialized_once_as_the_reference_encodes_it() {
    let shared = Sv2Shared::new(Sv2Config {
        profile: Profile::Bitaxe,
        endpoint: Some("127.0.0.2:3336".parse().unwrap()),
        ..Sv2Config::default()
    })
    .unwrap();
    let mut payload = shared.setup.clone();
    let m = SetupConnection::decode(&mut payload).unwrap();
    assert_eq!(m.protocol, protocol::MINING);
    assert_eq!(m.flags, mining_flags::REQUIRES_STANDARD_JOBS);
    assert_eq!(m.flags, shared.setup_flags());
    assert_eq!(
        (m.endpoint_host.as_str(), m.endpoint_port),
        ("127.0.0.2", 3336)
    );
    assert!(m.firmware.starts_with("stratumlab-fleet/"));
}

#[test]
fn sequence_numbers_compare_modulo_2_32() {
    assert!(seq_le(0, 0) && seq_le(0, 1) && !seq_le(1, 0));
    assert!(seq_le(u32::MAX, 0), "0 follows u32::MAX");
    assert!(!seq_le(0, u32::MAX));
    assert!(seq_le(u32::MAX - 5, 10));
    assert_eq!(decimal(0, &mut [0; 20]), b"0");
    assert_eq!(decimal(u32::MAX.into(), &mut [0; 20]), b"4294967295");
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let with = |f: fn(&mut Sv2Config)| {
        let mut c = Sv2Config::default();
        f(&mut c);
        Sv2Shared::new(c).map(|_| ())
    };
    assert!(with(|_| {}).is_ok());
    assert!(matches!(
        with(|c| c.worker_prefix = Some("x".repeat(MAX_WORKER_PREFIX + 1))),
        Err(ConfigError::WorkerPrefixTooLong(_))
    ));
    assert!(matches!(
        with(|c| c.nonces_per_midstate = 0),
        Err(ConfigError::NoncesPerMidstate(0))
    ));
    assert!(matches!(
        with(|c| c.nominal_hash_rate = Some(f64::NAN)),
        Err(ConfigError::NominalHashRate(_))
    ));
    assert!(matches!(
        with(|c| c.max_target = Target::ZERO),
        Err(ConfigError::MaxTarget)
    ));
    // Not a point on the curve.
    assert!(matches!(
        with(|c| c.authority_key = [0xff; 32]),
        Err(ConfigError::AuthorityKey(_))
    ));
    assert!(parse_authority_key("9auqWEzQDVyd2oe1JVGFLMLHZtCo2FFqZwtKA5gd9xbuEu7PH72").is_ok());
    assert!(matches!(
        parse_authority_key("nonsense"),
        Err(ConfigError::AuthorityKeyText(_))
    ));
}

#[test]
fn a_device_is_small_and_holds_little_heap() {
    let shared = Sv2Shared::new(Sv2Config::default()).unwrap();
    let mut dev = Sv2Device::new(shared, 1, 1, 1, at(0));
    println!(
        "Sv2Device: {} bytes (NoiseInitiator {} of them)",
        std::mem::size_of::<Sv2Device>(),
        std::mem::size_of::<NoiseInitiator>()
    );
    assert!(std::mem::size_of::<Sv2Device>() < 1024);
    assert_eq!(dev.heap_bytes(), 0);
    dev.handle_connected(at(0));
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, at(0), &mut ());
    assert_eq!(out.len(), 64);
    assert_eq!(
        dev.heap_bytes(),
        0,
        "the ephemeral key went out; nothing kept"
    );
}
