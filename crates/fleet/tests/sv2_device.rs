//! An SV2 device driven by a scripted pool over an in-memory Noise connection: the handshake
//! against the authority key, the setup flags each profile sends, the channel, standard and
//! future jobs with their prev hashes, SetTarget, batched acknowledgements and errors mapped to
//! verdicts, and reconnecting.

mod common;

use std::time::Duration;

use common::at;
use common::sv2::{
    ack, prev_hash, prev_hash_message, setup_success, PoolJob, Recorder, ScriptedPool, CHANNEL,
    GROUP,
};
use events::{Reason, Verdict};
use fleet::{CloseReason, ConnectionPolicy, Profile, Sv2Config, Sv2Device, Sv2Shared, Timestamp};
use primitives::{Difficulty, Target};
use sv2::messages::common::{
    mining_flags, protocol, Reconnect, SetupConnectionError, PROTOCOL_VERSION,
};
use sv2::messages::mining::{
    error_code, CloseChannel, OpenMiningChannelError, SetTarget, SubmitSharesError,
};
use sv2::AuthorityKeys;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const MAINNET_BITS: u32 = 0x1703_6e3a;
const NTIME: u32 = 1_700_000_000;

fn target(log2_difficulty: i32) -> Target {
    Difficulty::new(2f64.powi(log2_difficulty))
        .unwrap()
        .to_target()
}

fn device_with(profile: Profile, f: impl FnOnce(&mut Sv2Config)) -> Sv2Device {
    let mut c = Sv2Config {
        profile,
        nonces_per_midstate: 64,
        connection: ConnectionPolicy {
            reply_timeout: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(3),
            ..ConnectionPolicy::default()
        },
        endpoint: Some("127.0.0.1:34255".parse().unwrap()),
        ..Sv2Config::default()
    };
    f(&mut c);
    Sv2Device::new(Sv2Shared::new(c).unwrap(), 42, 5, 11, at(0))
}

fn device(profile: Profile) -> Sv2Device {
    device_with(profile, |_| {})
}

/// A device with its channel open at `t` (connected at 0, no setup flags).
fn opened(profile: Profile, t: Target) -> (Sv2Device, ScriptedPool, Recorder) {
    let mut dev = device(profile);
    let mut pool = ScriptedPool::new();
    let mut rec = Recorder::default();
    dev.handle_connected(at(0));
    pool.open(&mut dev, at(0), &mut rec, 0, t);
    (dev, pool, rec)
}

/// A device with its channel open at `t`, hashing on job 1 (activated by prev hash 1).
fn mining(profile: Profile, t: Target) -> (Sv2Device, ScriptedPool, Recorder) {
    let (mut dev, mut pool, mut rec) = opened(profile, t);
    pool.send(
        &mut dev,
        at(MS),
        &mut rec,
        &[
            PoolJob::new(1).message(None),
            prev_hash_message(1, 1, NTIME, MAINNET_BITS),
        ],
    );
    assert!(dev.can_hash());
    (dev, pool, rec)
}

/// Connects a device of `profile` to a new pool, runs the Noise handshake (returning whether the
/// device accepted the pool), takes the device's `SetupConnection` and answers it with `reply`.
fn answer_setup(
    profile: Profile,
    rec: &mut Recorder,
    reply: sv2::messages::Message,
) -> (Sv2Device, ScriptedPool, bool) {
    let mut dev = device(profile);
    let mut pool = ScriptedPool::new();
    dev.handle_connected(at(0));
    let accepted = pool.handshake(&mut dev, at(0), rec);
    pool.take(&mut dev, at(0), rec);
    pool.send(&mut dev, at(0), rec, &[reply]);
    (dev, pool, accepted)
}

/// Hashes until at least `n` shares are waiting to be sent.
fn find<O: fleet::Observer>(dev: &mut Sv2Device, rec: &mut O, n: usize, now: Timestamp) {
    while dev.pending_shares() < n {
        dev.hash(now, 1_000, rec);
    }
}

#[test]
fn each_profile_sets_up_and_opens_its_channel_as_its_firmware_would() {
    for (profile, flags, mask) in [
        (
            Profile::Asic,
            mining_flags::REQUIRES_STANDARD_JOBS | mining_flags::REQUIRES_VERSION_ROLLING,
            0x1fff_e000,
        ),
        (
            Profile::Bitaxe,
            mining_flags::REQUIRES_STANDARD_JOBS,
            0x1fff_e000,
        ),
        (Profile::Cpu, mining_flags::REQUIRES_STANDARD_JOBS, 0),
    ] {
        let mut dev = device_with(profile, |c| c.nominal_hash_rate = Some(2.5e5));
        let mut pool = ScriptedPool::new();
        let mut rec = Recorder::default();
        assert!(dev.wants_connect(at(0)));
        dev.handle_connected(at(0));
        assert!(!dev.is_ready() && !dev.handshake_done());
        let t = target(-20);
        let (setup, open) = pool.open(&mut dev, at(2 * MS), &mut rec, 0, t);
        assert_eq!(setup.protocol, protocol::MINING);
        assert_eq!(
            (setup.min_version, setup.max_version),
            (PROTOCOL_VERSION, PROTOCOL_VERSION)
        );
        assert_eq!(setup.flags, flags, "{profile}");
        assert_eq!(
            (setup.endpoint_host.as_str(), setup.endpoint_port),
            ("127.0.0.1", 34255)
        );
        assert_eq!(setup.vendor, "stratumlab");
        assert_eq!(setup.hardware_version, profile.sv2_hardware());
        assert_eq!(
            open.user_identity,
            format!("{}5", profile.sv2_user_prefix()),
            "the profile's identity and the device's index"
        );
        assert_eq!(open.nominal_hash_rate, 2.5e5);
        assert_eq!(open.max_target, Target::MAX);
        assert!(dev.is_ready());
        assert_eq!(rec.ready, 1);
        assert_eq!(dev.channel_id(), Some(CHANNEL));
        assert_eq!(dev.version_mask(), mask, "{profile}");
        assert_eq!(dev.target(), t);
        assert_eq!(rec.targets, [(2 * MS, CHANNEL, t)]);
        assert!(!dev.can_hash(), "no job yet");
        assert!(rec.errors.is_empty(), "{:?}", rec.errors);
    }
}

#[test]
fn a_pool_that_fixes_the_version_gets_no_rolled_bits_or_loses_an_asic() {
    let mut rec = Recorder::default();
    let fixed = mining_flags::REQUIRES_FIXED_VERSION;
    let mut dev = device(Profile::Bitaxe);
    dev.handle_connected(at(0));
    ScriptedPool::new().open(&mut dev, at(0), &mut rec, fixed, target(-20));
    assert_eq!(dev.version_mask(), 0);

    // An ASIC requires version rolling: the spec forbids the flag then, and the device leaves.
    let (dev, _, accepted) = answer_setup(Profile::Asic, &mut rec, setup_success(fixed));
    assert!(accepted);
    assert_eq!(dev.close_requested(), Some(CloseReason::Protocol));
    assert!(!dev.is_ready());
}

#[test]
fn the_pool_must_hold_a_certificate_from_the_trusted_authority() {
    // The device trusts the reference authority; this pool's certificate is another's.
    let other =
        AuthorityKeys::from_secret("SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF").unwrap();
    let mut dev = device(Profile::Asic);
    let mut rec = Recorder::default();
    dev.handle_connected(at(0));
    assert!(!ScriptedPool::with_keys(&other).handshake(&mut dev, at(0), &mut rec));
    assert_eq!(dev.close_requested(), Some(CloseReason::Certificate));
    assert!(rec.errors[0].contains("certificate"), "{:?}", rec.errors);
    let mut out = Vec::new();
    assert_eq!(
        dev.poll_transmit(&mut out, at(0), &mut rec),
        0,
        "nothing more is sent"
    );

    // Told to trust that authority instead, it connects.
    let mut dev = device_with(Profile::Asic, |c| c.authority_key = other.public_bytes());
    dev.handle_connected(at(0));
    assert!(ScriptedPool::with_keys(&other).handshake(&mut dev, at(0), &mut rec));
}

#[test]
fn setup_and_channel_refusals_close_the_connection() {
    let mut rec = Recorder::default();
    let refusal = SetupConnectionError {
        flags: 0,
        error_code: "unsupported-protocol".into(),
    };
    let (dev, _, _) = answer_setup(Profile::Cpu, &mut rec, refusal.into());
    assert_eq!(dev.close_requested(), Some(CloseReason::Protocol));

    let (mut dev, mut pool, _) = answer_setup(Profile::Cpu, &mut rec, setup_success(0));
    pool.take(&mut dev, at(0), &mut rec);
    pool.send(
        &mut dev,
        at(0),
        &mut rec,
        &[OpenMiningChannelError {
            request_id: 1,
            error_code: error_code::UNKNOWN_USER.into(),
        }
        .into()],
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::Unauthorized));
    assert!(
        rec.errors.iter().any(|e| e.contains("unknown-user")),
        "{:?}",
        rec.errors
    );
}

#[test]
fn future_jobs_wait_for_their_prev_hash_and_only_the_named_one_survives() {
    let t1 = target(-20);
    let (mut dev, mut pool, mut rec) = opened(Profile::Asic, t1);
    let (a, b, c) = (PoolJob::new(10), PoolJob::new(11), PoolJob::new(12));

    // Two future jobs: nothing to hash on yet.
    pool.send(
        &mut dev,
        at(MS),
        &mut rec,
        &[a.message(None), b.message(None)],
    );
    assert_eq!(dev.future_jobs(), 2);
    assert!(!dev.can_hash());
    assert_eq!(rec.received.len(), 2);
    let r = &rec.received[1];
    assert_eq!(
        (r.at, r.channel, r.job_id, r.future),
        (MS, CHANNEL, 11, true)
    );
    assert_eq!((r.prev_hash, r.ntime, r.target), (None, None, t1));
    assert_eq!(r.merkle_root.0, b.merkle_root);
    assert!(rec.activated.is_empty());
    assert_eq!(dev.hash(at(MS), 1000, &mut rec).hashes, 0);

    // The prev hash names b (on the group channel, as a pool may broadcast it): b is hashed
    // on, a is gone.
    let mut snph = prev_hash_message(11, 1, NTIME, MAINNET_BITS);
    if let sv2::Message::Mining(sv2::messages::Mining::SetNewPrevHash(m)) = &mut snph {
        m.channel_id = GROUP;
    }
    pool.send(&mut dev, at(2 * MS), &mut rec, &[snph]);
    assert!(dev.can_hash());
    assert_eq!(dev.job(), Some((11, t1)));
    assert_eq!(dev.future_jobs(), 0);
    let act = &rec.activated[0];
    assert_eq!((act.at, act.job_id, act.future), (2 * MS, 11, true));
    assert_eq!(act.prev_hash, Some(prev_hash(1)));
    assert_eq!(act.ntime, Some(NTIME));
    assert_eq!(act.merkle_root.0, b.merkle_root);

    // A job on the current prev hash: hashed on at once, from its own min_ntime.
    pool.send(
        &mut dev,
        at(3 * MS),
        &mut rec,
        &[c.message(Some(NTIME + 7))],
    );
    assert_eq!(dev.job(), Some((12, t1)));
    let r = rec.received.last().unwrap();
    assert_eq!((r.job_id, r.future), (12, false));
    assert_eq!(
        (r.prev_hash, r.ntime),
        (Some(prev_hash(1)), Some(NTIME + 7))
    );
    find(&mut dev, &mut rec, 1, at(3 * MS));
    let s = &pool.take_shares(&mut dev, at(3 * MS), &mut rec)[0];
    assert_eq!((s.channel_id, s.job_id), (CHANNEL, 12));
    assert!(s.ntime >= NTIME + 7);

    // A prev hash naming a job the device never got (a dropped one): nothing valid to hash.
    pool.send(
        &mut dev,
        at(4 * MS),
        &mut rec,
        &[
            a.message(None),
            prev_hash_message(99, 2, NTIME + 600, MAINNET_BITS),
        ],
    );
    assert!(!dev.can_hash());
    assert_eq!(
        dev.future_jobs(),
        0,
        "the prev hash invalidated the queued job"
    );
    assert!(
        rec.errors.iter().any(|e| e.contains("no future job")),
        "{:?}",
        rec.errors
    );

    // A job for somebody else's channel is refused.
    let mut other = PoolJob::new(13).message(Some(NTIME));
    if let sv2::Message::Mining(sv2::messages::Mining::NewMiningJob(m)) = &mut other {
        m.channel_id = CHANNEL + 1;
    }
    pool.send(&mut dev, at(5 * MS), &mut rec, &[other]);
    assert!(!dev.can_hash());
}

#[test]
fn set_target_applies_to_jobs_that_become_workable_later() {
    let t1 = target(-16);
    let (mut dev, mut pool, mut rec) = mining(Profile::Bitaxe, t1);
    assert_eq!(dev.job(), Some((1, t1)));

    // A harder target: the job being hashed keeps the one it started with (the spec; the
    // reference pool judges its shares so too), the channel takes the new one.
    let t2 = target(-12);
    pool.send(
        &mut dev,
        at(2 * MS),
        &mut rec,
        &[SetTarget {
            channel_id: CHANNEL,
            maximum_target: t2,
        }
        .into()],
    );
    assert_eq!(rec.targets.last(), Some(&(2 * MS, CHANNEL, t2)));
    assert_eq!(dev.target(), t2);
    assert_eq!(dev.job(), Some((1, t1)));
    find(&mut dev, &mut rec, 3, at(2 * MS));
    pool.take_shares(&mut dev, at(2 * MS), &mut rec);
    assert!(rec.sent.iter().all(|s| s.difficulty == 2f64.powi(-16)));

    // The next job is held to the new target, whether it is a future job activated now or a
    // job on the current prev hash.
    pool.send(
        &mut dev,
        at(3 * MS),
        &mut rec,
        &[PoolJob::new(2).message(Some(NTIME))],
    );
    assert_eq!(dev.job(), Some((2, t2)));
    let t3 = target(-14);
    pool.send(
        &mut dev,
        at(4 * MS),
        &mut rec,
        &[
            PoolJob::new(3).message(None),
            SetTarget {
                channel_id: CHANNEL,
                maximum_target: t3,
            }
            .into(),
            prev_hash_message(3, 2, NTIME + 600, MAINNET_BITS),
        ],
    );
    assert_eq!(
        rec.received.last().unwrap().target,
        t2,
        "the channel's at receipt"
    );
    assert_eq!(dev.job(), Some((3, t3)), "the channel's at activation");
    assert_eq!(rec.activated.last().unwrap().target, t3);
}

#[test]
fn a_batched_success_settles_every_share_up_to_its_sequence_number() {
    let (mut dev, mut pool, mut rec) = mining(Profile::Asic, target(-20));
    find(&mut dev, &mut rec, 6, at(2 * MS));
    let shares = pool.take_shares(&mut dev, at(10 * MS), &mut rec);
    assert!(shares.len() >= 6);
    let seqs: Vec<u32> = shares.iter().map(|s| s.sequence_number).collect();
    assert_eq!(
        seqs,
        (0..shares.len() as u32).collect::<Vec<_>>(),
        "sequential from 0"
    );
    assert_eq!(dev.in_flight(), shares.len());

    // Share 2 is stale; then one acknowledgement covers 0, 1 and 3.
    pool.send(
        &mut dev,
        at(20 * MS),
        &mut rec,
        &[
            SubmitSharesError {
                channel_id: CHANNEL,
                sequence_number: 2,
                error_code: error_code::STALE_SHARE.into(),
            }
            .into(),
            ack(3, 3, 3),
        ],
    );
    let got: Vec<(u32, Verdict)> = rec.results.iter().map(|r| (r.seq, r.verdict)).collect();
    assert_eq!(
        got,
        [
            (2, Verdict::Rejected(Reason::Stale)),
            (0, Verdict::Accepted),
            (1, Verdict::Accepted),
            (3, Verdict::Accepted),
        ]
    );
    assert!(rec.results.iter().all(|r| r.latency_ns == 10 * MS));
    assert_eq!(rec.results[0].error_code.as_deref(), Some("stale-share"));
    assert_eq!(dev.in_flight(), shares.len() - 4);

    // A count smaller than the shares covered: the newest are the accepted ones, the older
    // stay in flight for an error that may still come.
    let n = shares.len() as u32;
    pool.send(&mut dev, at(30 * MS), &mut rec, &[ack(n - 1, 1, 1)]);
    assert_eq!(rec.results.last().unwrap().seq, n - 1);
    assert_eq!(dev.in_flight(), shares.len() - 5);
    // A repeated acknowledgement settles nothing twice.
    pool.send(&mut dev, at(31 * MS), &mut rec, &[ack(3, 3, 3)]);
    assert_eq!(rec.results.len(), 5);
    // The rest time out as unanswered.
    dev.handle_timeout(at(10 * MS + 5 * SEC), &mut rec);
    assert_eq!(rec.unanswered.len(), shares.len() - 5);
    assert_eq!(dev.in_flight(), 0);
}

#[test]
fn sequence_numbers_compare_across_the_wrap() {
    let (mut dev, mut pool, mut rec) = mining(Profile::Cpu, target(-20));
    // Sequence numbers wrap: u32::MAX comes just before 0, so acknowledging it settles
    // nothing from 0 on.
    find(&mut dev, &mut rec, 2, at(2 * MS));
    let shares = pool.take_shares(&mut dev, at(2 * MS), &mut rec);
    let last = shares.last().unwrap().sequence_number;
    // An acknowledgement "before" the first share (u32::MAX precedes 0) settles nothing.
    pool.send(&mut dev, at(3 * MS), &mut rec, &[ack(u32::MAX, 5, 5)]);
    assert!(rec.results.is_empty());
    pool.send(
        &mut dev,
        at(3 * MS),
        &mut rec,
        &[ack(last, shares.len() as u32, 5)],
    );
    assert_eq!(rec.results.len(), shares.len());
}

#[test]
fn every_error_code_maps_onto_the_shared_vocabulary() {
    let cases = [
        (error_code::STALE_SHARE, Reason::Stale),
        (error_code::DUPLICATE_SHARE, Reason::Duplicate),
        (error_code::DIFFICULTY_TOO_LOW, Reason::LowDifficulty),
        (error_code::INVALID_JOB_ID, Reason::InvalidJob),
        (error_code::INVALID_CHANNEL_ID, Reason::InvalidChannel),
        (error_code::INVALID_SHARE, Reason::Other),
        ("invalid-non-rollable-version-bit", Reason::Other),
        ("something-new", Reason::Other),
    ];
    let (mut dev, mut pool, mut rec) = mining(Profile::Asic, target(-18));
    find(&mut dev, &mut rec, cases.len(), at(2 * MS));
    let shares = pool.take_shares(&mut dev, at(2 * MS), &mut rec);
    let errors: Vec<sv2::Message> = cases
        .iter()
        .zip(&shares)
        .map(|((code, _), s)| {
            SubmitSharesError {
                channel_id: CHANNEL,
                sequence_number: s.sequence_number,
                error_code: (*code).into(),
            }
            .into()
        })
        .collect();
    pool.send(&mut dev, at(3 * MS), &mut rec, &errors);
    for ((code, reason), r) in cases.iter().zip(&rec.results) {
        assert_eq!(r.verdict, Verdict::Rejected(*reason), "{code}");
        assert_eq!(r.error_code.as_deref(), Some(*code));
        assert_eq!(events::Reason::from_sv2_code(code), *reason);
    }
    assert_eq!(rec.results.len(), cases.len());
}

#[test]
fn reconnect_and_close_channel_end_the_connection_and_the_device_comes_back() {
    let (mut dev, mut pool, mut rec) = mining(Profile::Asic, target(-20));
    find(&mut dev, &mut rec, 2, at(2 * MS));
    let first = pool.take_shares(&mut dev, at(2 * MS), &mut rec);
    find(&mut dev, &mut rec, 1, at(2 * MS));
    pool.send(
        &mut dev,
        at(3 * MS),
        &mut rec,
        &[Reconnect {
            new_host: String::new(),
            new_port: 0,
        }
        .into()],
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::Reconnect));
    let mut out = Vec::new();
    assert_eq!(dev.poll_transmit(&mut out, at(3 * MS), &mut rec), 0);
    dev.handle_closed(at(3 * MS), CloseReason::Reconnect, &mut rec);
    assert_eq!(
        rec.unanswered.len(),
        first.len(),
        "in flight when the connection went"
    );
    assert!(rec.dropped >= 1, "found but never sent");
    assert!(!dev.is_ready() && !dev.can_hash());
    // Back after the first backoff step (base 1 s, equal jitter).
    let due = dev.poll_timeout().unwrap();
    assert!(
        (3 * MS + SEC / 2..=3 * MS + SEC).contains(&due.as_nanos()),
        "{due:?}"
    );
    assert!(!dev.wants_connect(at(due.as_nanos() - 1)) && dev.wants_connect(due));

    // A new connection, a new Noise session, the whole setup again; sequence numbers go on.
    dev.handle_connected(due);
    let mut pool = ScriptedPool::new();
    pool.open(&mut dev, due, &mut rec, 0, target(-20));
    assert_eq!(rec.ready, 2);
    pool.send(
        &mut dev,
        due,
        &mut rec,
        &[
            PoolJob::new(5).message(None),
            prev_hash_message(5, 3, NTIME, MAINNET_BITS),
        ],
    );
    find(&mut dev, &mut rec, 1, due);
    let again = pool.take_shares(&mut dev, due, &mut rec);
    assert!(again[0].sequence_number > first.last().unwrap().sequence_number);

    // The pool closes the channel.
    pool.send(
        &mut dev,
        due + std::time::Duration::from_nanos(MS),
        &mut rec,
        &[CloseChannel {
            channel_id: CHANNEL,
            reason_code: "pool-shutdown".into(),
        }
        .into()],
    );
    assert_eq!(dev.close_requested(), Some(CloseReason::ChannelClosed));
}

#[test]
fn a_silent_pool_times_the_handshake_out_and_backoff_grows() {
    let mut dev = device(Profile::Bitaxe);
    let mut rec = Recorder::default();
    dev.handle_connected(at(0));
    let mut out = Vec::new();
    dev.poll_transmit(&mut out, at(0), &mut rec);
    assert_eq!(out.len(), 64);
    assert_eq!(
        dev.poll_timeout(),
        Some(at(3 * SEC)),
        "the handshake timeout"
    );
    dev.handle_timeout(at(3 * SEC - 1), &mut rec);
    assert_eq!(dev.close_requested(), None);
    dev.handle_timeout(at(3 * SEC), &mut rec);
    assert_eq!(dev.close_requested(), Some(CloseReason::Timeout));
    dev.handle_closed(at(3 * SEC), CloseReason::Timeout, &mut rec);
    let first = dev.poll_timeout().unwrap().as_nanos() - 3 * SEC;
    dev.handle_connect_failed(at(3 * SEC + first));
    let second = dev.poll_timeout().unwrap().as_nanos() - (3 * SEC + first);
    assert!(first <= SEC && second >= SEC, "{first} then {second}");
    dev.stop();
    assert_eq!(dev.poll_timeout(), None);
    assert!(!dev.wants_connect(Timestamp::MAX));
}

#[test]
fn bytes_in_any_pieces_give_the_same_device() {
    // The whole stream of pool messages fed one byte at a time.
    let (mut dev, mut pool, mut rec) = opened(Profile::Asic, target(-20));
    let mut wire = Vec::new();
    for m in [
        PoolJob::new(1).message(None),
        prev_hash_message(1, 1, NTIME, MAINNET_BITS),
    ] {
        let mut payload = Vec::new();
        let t = m.encode(&mut payload).unwrap();
        pool.noise
            .encrypt(t, m.extension_type(), &payload, &mut wire)
            .unwrap();
    }
    for b in wire.chunks(1) {
        assert!(!dev.can_hash());
        dev.handle_bytes(b, at(MS), &mut rec);
    }
    assert!(dev.can_hash());
    assert_eq!(rec.activated.len(), 1);
    assert!(rec.errors.is_empty(), "{:?}", rec.errors);
}

#[test]
fn jobs_activations_targets_shares_and_verdicts_become_events() {
    use events::{EventKind, JobId, Perspective};
    use fleet::stats::Tally;
    let (_dir, path, sink, stats) = common::event_file();
    let mut tally = Tally {
        stats: &stats,
        events: &sink,
    };
    let mut dev = device(Profile::Asic);
    let mut pool = ScriptedPool::new();
    let (t_open, t_future, t_prev, t_send, t_verdict) = (1_000, 2_000, 3_000, 4_000, 5_000);
    let t = target(-20);
    dev.handle_connected(at(0));
    pool.open(&mut dev, at(t_open), &mut tally, 0, t);
    let job = PoolJob::new(9);
    pool.send(&mut dev, at(t_future), &mut tally, &[job.message(None)]);
    pool.send(
        &mut dev,
        at(t_prev),
        &mut tally,
        &[prev_hash_message(9, 4, NTIME, MAINNET_BITS)],
    );
    find(&mut dev, &mut tally, 2, at(t_prev));
    let shares = pool.take_shares(&mut dev, at(t_send), &mut tally);
    pool.send(
        &mut dev,
        at(t_verdict),
        &mut tally,
        &[
            SubmitSharesError {
                channel_id: CHANNEL,
                sequence_number: shares[0].sequence_number,
                error_code: error_code::DIFFICULTY_TOO_LOW.into(),
            }
            .into(),
            ack(
                shares.last().unwrap().sequence_number,
                shares.len() as u32 - 1,
                0,
            ),
        ],
    );
    sink.finish().unwrap();
    assert_eq!(
        stats.accepted.load(std::sync::atomic::Ordering::Relaxed),
        shares.len() as u64 - 1
    );
    assert_eq!(stats.rejected_by_reason().get("low_difficulty"), Some(&1));
    assert_eq!(
        stats.rejected_by_error_code().get("difficulty-too-low"),
        Some(&1)
    );

    let log = events::read_file(&path).unwrap();
    let mut events = log.events.iter();
    let e = events.next().unwrap();
    assert_eq!(e.ts_ns, t_open);
    let EventKind::TargetChanged(tc) = e.kind else {
        panic!("{e:?}")
    };
    assert_eq!((tc.conn, tc.channel, tc.target), (42, Some(CHANNEL), t));

    let e = events.next().unwrap();
    assert_eq!(e.ts_ns, t_future);
    let EventKind::JobReceived(j) = e.kind else {
        panic!("{e:?}")
    };
    assert_eq!(
        (j.device, j.channel, j.job_id),
        (42, Some(CHANNEL), JobId::Num(9))
    );
    assert!(j.future && j.clean);
    assert_eq!((j.prev_hash, j.fingerprint, j.target), (None, None, t));

    let e = events.next().unwrap();
    assert_eq!(
        e.ts_ns, t_prev,
        "a future job counts from its SetNewPrevHash"
    );
    let EventKind::JobActivated(a) = e.kind else {
        panic!("{e:?}")
    };
    assert_eq!(
        (a.conn, a.channel, a.job_id),
        (42, Some(CHANNEL), JobId::Num(9))
    );
    assert_eq!((a.prev_hash, a.fingerprint), (prev_hash(4), None));

    for s in &shares {
        let e = events.next().unwrap();
        assert_eq!(e.ts_ns, t_send, "stamped when written");
        let EventKind::ShareSent(ev) = e.kind else {
            panic!("{e:?}")
        };
        let header = dev.header_for(s.ntime, s.nonce, s.version).unwrap();
        assert_eq!((ev.device, ev.channel), (42, Some(CHANNEL)));
        assert_eq!(
            ev.seq,
            u64::from(s.sequence_number),
            "seq is the sequence number"
        );
        assert_eq!(ev.job_id, JobId::Num(9));
        assert_eq!(
            (ev.nonce, ev.ntime, ev.version),
            (s.nonce, s.ntime, s.version)
        );
        assert_eq!(ev.difficulty, 2f64.powi(-20));
        assert_eq!(ev.hash, Some(header.block_hash()));
        assert!(t.is_met_by(&header.block_hash().0));
    }
    let verdicts: Vec<(u64, u64, Verdict)> = events
        .map(|e| match e.kind {
            EventKind::ShareResult(r) => {
                assert_eq!(
                    (r.conn, r.channel, r.job_id),
                    (42, Some(CHANNEL), JobId::Num(9))
                );
                assert_eq!(r.perspective, Perspective::Received);
                (e.ts_ns, r.seq, r.verdict)
            }
            _ => panic!("{e:?}"),
        })
        .collect();
    let mut want = vec![(
        t_verdict,
        u64::from(shares[0].sequence_number),
        Verdict::Rejected(Reason::LowDifficulty),
    )];
    want.extend(
        shares[1..]
            .iter()
            .map(|s| (t_verdict, u64::from(s.sequence_number), Verdict::Accepted)),
    );
    assert_eq!(verdicts, want);
}
