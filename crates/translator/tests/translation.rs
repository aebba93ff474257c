//! The translator's core driven without sockets: an SV2 upstream played by the test, SV1
//! devices played by the test, real SHA-256d shares ground at easy targets.

use std::collections::{HashMap, HashSet};

use mining::vardiff::VardiffConfig;
use mining::Reject;
use primitives::{Difficulty, Hash256};
use sv2::messages::mining::{
    NewExtendedMiningJob, OpenExtendedMiningChannel, OpenExtendedMiningChannelSuccess,
    SetExtranoncePrefix, SetNewPrevHash, SubmitSharesError, SubmitSharesExtended,
    SubmitSharesSuccess,
};
use sv2::messages::Mining;
use translator::shares::UpstreamVerdict;
use translator::{
    Close, DeviceId, Event, LineOutcome, Mode, Timestamp, Translator, TranslatorConfig, TICK_ROUNDS,
};

mod support;

use support::{device_difficulty, pool_check, upstream_target, Miner, NBITS};

const CHANNEL: u32 = 3;
const PREFIX: [u8; 4] = [0xab, 0xcd, 0x00, 0x01];

fn config() -> TranslatorConfig {
    support::pinned(device_difficulty())
}

/// An upstream job as a pool would build it: a real coinbase split around an 8-byte extranonce
/// (4 of prefix, 4 rolled below it), a merkle path over a few transactions.
fn upstream_job(job_id: u32, min_ntime: Option<u32>, tag: u8) -> NewExtendedMiningJob {
    support::job(CHANNEL, job_id, min_ntime, PREFIX.len() + 6, tag, 5)
}

fn prev_hash(job_id: u32, seed: u8) -> SetNewPrevHash {
    support::prev_hash(CHANNEL, job_id, seed)
}

fn line(t: &mut Translator, id: DeviceId, s: &str, now: u64) -> LineOutcome {
    t.device_line(id, s.as_bytes(), Timestamp::from_millis(now))
        .unwrap()
}

fn handshake(t: &mut Translator, id: DeviceId, worker: &str) {
    line(
        t,
        id,
        r#"{"id":1,"method":"mining.subscribe","params":["test/1.0"]}"#,
        0,
    );
    line(
        t,
        id,
        &format!(r#"{{"id":2,"method":"mining.authorize","params":["{worker}","x"]}}"#),
        0,
    );
}

fn open(t: &mut Translator) -> OpenExtendedMiningChannel {
    t.open_channel(Timestamp::from_millis(0));
    let Some(Mining::OpenExtendedMiningChannel(o)) = t.poll_transmit() else {
        panic!("no OpenExtendedMiningChannel")
    };
    t.upstream_message(
        Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
            request_id: o.request_id,
            channel_id: CHANNEL,
            target: upstream_target(),
            extranonce_size: 6,
            extranonce_prefix: PREFIX.to_vec(),
            group_channel_id: 0,
        }),
        Timestamp::from_millis(0),
    );
    o
}

fn first_work(t: &mut Translator) -> NewExtendedMiningJob {
    let job = upstream_job(11, None, 1);
    t.upstream_message(
        Mining::NewExtendedMiningJob(job.clone()),
        Timestamp::from_millis(0),
    );
    t.upstream_message(
        Mining::SetNewPrevHash(prev_hash(11, 1)),
        Timestamp::from_millis(0),
    );
    job
}

fn submits(t: &mut Translator) -> Vec<SubmitSharesExtended> {
    let mut out = Vec::new();
    while let Some(m) = t.poll_transmit() {
        if let Mining::SubmitSharesExtended(s) = m {
            out.push(s);
        }
    }
    out
}

fn events(t: &mut Translator) -> Vec<Event> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

/// The SV2 share checked the way the pool checks it, from the upstream job alone.
fn upstream_check(job: &NewExtendedMiningJob, s: &SubmitSharesExtended) -> (Hash256, bool) {
    pool_check(job, s, &PREFIX, 1)
}

/// A translator on an open channel with work, devices `a` and `b` (workers `farm.a` and
/// `farm.b`) subscribed and authorized once it opened, each opted into extranonce changes if
/// `follow` says so; and what each device was told.
fn two_devices(follow: [bool; 2]) -> (Translator, DeviceId, DeviceId, Miner, Miner) {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    let a = t.device_connected(Timestamp::from_millis(0));
    let b = t.device_connected(Timestamp::from_millis(0));
    open(&mut t);
    for ((d, w), follows) in [(a, "farm.a"), (b, "farm.b")].into_iter().zip(follow) {
        if follows {
            line(
                &mut t,
                d,
                r#"{"id":0,"method":"mining.extranonce.subscribe","params":[]}"#,
                0,
            );
        }
        handshake(&mut t, d, w);
    }
    first_work(&mut t);
    let (mut ma, mut mb) = (Miner::default(), Miner::default());
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    (t, a, b, ma, mb)
}

/// Device `id`'s share, accepted and forwarded alone: the submission that went upstream.
fn forward(t: &mut Translator, id: DeviceId, share: &[u8], now: u64) -> SubmitSharesExtended {
    assert!(matches!(
        t.device_line(id, share, Timestamp::from_millis(now))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    let mut sent = submits(t);
    assert_eq!(sent.len(), 1);
    sent.remove(0)
}

#[test]
fn shares_translate_both_ways_with_real_hashes() {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    let a = t.device_connected(Timestamp::from_millis(0));
    let b = t.device_connected(Timestamp::from_millis(0));
    // Devices may subscribe before the channel opens: answered once it does.
    handshake(&mut t, a, "farm.a");
    handshake(&mut t, b, "farm.b");
    let mut ma = Miner::default();
    ma.read(&mut t, a);
    assert!(
        ma.extranonce1.is_empty(),
        "no extranonce before the channel"
    );
    let o = open(&mut t);
    assert_eq!(
        o.min_extranonce_size, 4,
        "2 device bytes + 2 of extranonce2"
    );
    assert_eq!(o.nominal_hash_rate, 2e6, "both devices");
    let job = first_work(&mut t);
    let mut mb = Miner::default();
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    assert_eq!(ma.extranonce2_size, 4);
    assert_eq!(&ma.extranonce1[..4], &PREFIX);
    assert_eq!(ma.extranonce1.len(), 6);
    assert_ne!(ma.extranonce1, mb.extranonce1);
    assert_eq!(ma.difficulty, Some(device_difficulty().as_f64()));
    let n = ma.latest_notify();
    assert!(n.clean_jobs);
    assert_eq!(n.coinb1, job.coinbase_tx_prefix);
    assert_eq!(n.coinb2, job.coinbase_tx_suffix);
    assert_eq!(n.prev_hash, Hash256(prev_hash(11, 1).prev_hash));
    assert_eq!(n.nbits, NBITS);

    // A share for the device only: answered locally, nothing goes upstream.
    let device_t = device_difficulty().to_target();
    let up_t = upstream_target();
    let (submit, _) = ma.grind("farm.a", &[0, 0, 0, 1], |h| {
        device_t.is_met_by(&h.0) && !up_t.is_met_by(&h.0)
    });
    let out = t
        .device_line(a, &submit, Timestamp::from_millis(10))
        .unwrap();
    assert!(matches!(out, LineOutcome::Accepted(_)), "{out:?}");
    assert!(submits(&mut t).is_empty());
    ma.read(&mut t, a);
    assert!(ma.replies.last().unwrap().contains("\"result\":true"));

    // A share meeting the upstream target: accepted and sent on.
    let (submit, hash) = ma.grind("farm.a", &[0, 0, 0, 2], |h| up_t.is_met_by(&h.0));
    let out = t
        .device_line(a, &submit, Timestamp::from_millis(20))
        .unwrap();
    assert!(matches!(out, LineOutcome::Accepted(_)));
    let sent = submits(&mut t);
    assert_eq!(sent.len(), 1);
    let s = &sent[0];
    assert_eq!(s.channel_id, CHANNEL);
    assert_eq!(s.job_id, 11);
    assert_eq!(s.extranonce.len(), 6, "the channel's negotiated size");
    assert_eq!(
        &s.extranonce[..2],
        &ma.extranonce1[4..],
        "device bytes first"
    );
    assert_eq!(&s.extranonce[2..], &[0, 0, 0, 2]);
    // The pool, from its own job, the channel prefix and the message, sees the same header.
    let (pool_hash, meets) = upstream_check(&job, s);
    assert_eq!(pool_hash, hash);
    assert!(meets);

    // The same share again: a duplicate, answered locally with 22, not sent on.
    let out = t
        .device_line(a, &submit, Timestamp::from_millis(30))
        .unwrap();
    assert!(matches!(out, LineOutcome::Rejected(Reject::Duplicate)));
    assert!(submits(&mut t).is_empty());
    ma.read(&mut t, a);
    assert!(ma.replies.last().unwrap().contains("[22,"));

    // Too weak for the device: 23.
    let (weak, _) = ma.grind("farm.a", &[0, 0, 0, 3], |h| !device_t.is_met_by(&h.0));
    assert!(matches!(
        t.device_line(a, &weak, Timestamp::from_millis(40)).unwrap(),
        LineOutcome::Rejected(Reject::LowDifficulty)
    ));
    // An unknown job: 21.
    let unknown = r#"{"id":9,"method":"mining.submit","params":["farm.a","ffff","00000004","6553f100","00000000"]}"#;
    assert!(matches!(
        line(&mut t, a, unknown, 50),
        LineOutcome::Rejected(Reject::UnknownJob)
    ));
    ma.read(&mut t, a);
    assert!(ma.replies.last().unwrap().contains("[21,"));
    // An unauthorized worker: 24.
    let (other, _) = ma.grind("farm.z", &[0, 0, 0, 5], |h| device_t.is_met_by(&h.0));
    assert!(matches!(
        t.device_line(a, &other, Timestamp::from_millis(60))
            .unwrap(),
        LineOutcome::Refused(sv1::ErrorCode::Unauthorized)
    ));
}

#[test]
fn notify_is_serialized_once_for_every_device() {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    let ids: Vec<DeviceId> = (0..5)
        .map(|_| t.device_connected(Timestamp::from_millis(0)))
        .collect();
    open(&mut t);
    for (i, &id) in ids.iter().enumerate() {
        handshake(&mut t, id, &format!("farm.{i}"));
        // Drop the handshake's replies: only the job is left pending.
        let _ = t.device_mut(id).unwrap().take_output();
    }
    first_work(&mut t);
    let lines: Vec<&[u8]> = ids
        .iter()
        .map(|&id| t.device(id).unwrap().poll_transmit()[1])
        .collect();
    assert!(!lines[0].is_empty());
    for l in &lines[1..] {
        assert_eq!(*l, lines[0], "same bytes");
        assert_eq!(l.as_ptr(), lines[0].as_ptr(), "the same buffer, not a copy");
    }
    let sent = events(&mut t)
        .into_iter()
        .find_map(|e| match e {
            Event::JobSent { devices, clean, .. } => Some((devices, clean)),
            _ => None,
        })
        .unwrap();
    assert_eq!(sent, (5, true));
}

#[test]
fn extranonce_ranges_are_unique_and_reused_after_a_device_leaves() {
    let mut cfg = config();
    cfg.device_extranonce_bytes = 1;
    let mut t = Translator::new(cfg, Timestamp::from_millis(0));
    open(&mut t);
    let mut seen = HashSet::new();
    let mut ids = Vec::new();
    for i in 0..256 {
        let id = t.device_connected(Timestamp::from_millis(0));
        handshake(&mut t, id, &format!("w{i}"));
        let mut m = Miner::default();
        m.read(&mut t, id);
        assert_eq!(m.extranonce2_size, 5);
        assert!(seen.insert(m.extranonce1.clone()), "extranonce1 repeated");
        ids.push((id, m.extranonce1));
    }
    // The 257th does not fit in one byte.
    let full = t.device_connected(Timestamp::from_millis(0));
    handshake(&mut t, full, "late");
    assert_eq!(
        t.device(full).unwrap().wants_close(),
        Some(translator::Close::Full)
    );
    t.device_closed(full);
    // One leaves: its range goes to the next device.
    let (gone, en1) = ids.remove(100);
    t.device_closed(gone);
    let id = t.device_connected(Timestamp::from_millis(0));
    handshake(&mut t, id, "new");
    let mut m = Miner::default();
    m.read(&mut t, id);
    assert_eq!(m.extranonce1, en1);
}

#[test]
fn shares_on_the_previous_block_are_stale() {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    let a = t.device_connected(Timestamp::from_millis(0));
    open(&mut t);
    handshake(&mut t, a, "farm.a");
    first_work(&mut t);
    let mut m = Miner::default();
    m.read(&mut t, a);
    let device_t = device_difficulty().to_target();
    let (old_share, _) = m.grind("farm.a", &[0, 0, 0, 1], |h| device_t.is_met_by(&h.0));
    // A job for the same block, active at once: not clean, the old job stays valid.
    t.upstream_message(
        Mining::NewExtendedMiningJob(upstream_job(12, Some(1_700_000_001), 2)),
        Timestamp::from_millis(5),
    );
    m.read(&mut t, a);
    assert!(!m.latest_notify().clean_jobs);
    assert!(matches!(
        t.device_line(a, &old_share, Timestamp::from_millis(6))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    let (second, _) = m.grind("farm.a", &[0, 0, 0, 2], |h| device_t.is_met_by(&h.0));
    // A new block: a future job and its prev hash. Everything before is stale.
    t.upstream_message(
        Mining::NewExtendedMiningJob(upstream_job(13, None, 3)),
        Timestamp::from_millis(7),
    );
    t.upstream_message(
        Mining::SetNewPrevHash(prev_hash(13, 2)),
        Timestamp::from_millis(7),
    );
    m.read(&mut t, a);
    assert!(m.latest_notify().clean_jobs);
    assert!(matches!(
        t.device_line(a, &second, Timestamp::from_millis(8))
            .unwrap(),
        LineOutcome::Rejected(Reject::Stale)
    ));
    m.read(&mut t, a);
    assert!(m.replies.last().unwrap().contains("[21,"));
    assert!(submits(&mut t).is_empty());

    // A submit whose parameters do not parse is answered in the same order as at the pool:
    // the stale job first (21, not a bad line), then the parameter (20).
    let sent: serde_json::Value = serde_json::from_slice(&second).unwrap();
    let old_job = sent["params"][1].as_str().unwrap().to_owned();
    let current = m.latest_notify().job_id.to_owned();
    let bad = |job: &str| {
        format!(
            r#"{{"id":7,"method":"mining.submit","params":["farm.a","{job}","00000000","zz","00000000"]}}"#
        )
    };
    assert!(matches!(
        line(&mut t, a, &bad(&old_job), 9),
        LineOutcome::Rejected(Reject::Stale)
    ));
    assert!(matches!(
        line(&mut t, a, &bad(&current), 9),
        LineOutcome::Refused(sv1::ErrorCode::Other)
    ));
    m.read(&mut t, a);
    let n = m.replies.len();
    assert!(m.replies[n - 2].contains("[21,"), "{:?}", m.replies);
    assert!(m.replies[n - 1].contains("[20,"), "{:?}", m.replies);
}

#[test]
fn upstream_verdicts_go_back_to_the_device_by_sequence_number() {
    let (mut t, a, b, mut ma, mut mb) = two_devices([false, false]);
    let up_t = upstream_target();
    for (i, (id, m, worker)) in [(a, &ma, "farm.a"), (b, &mb, "farm.b"), (a, &ma, "farm.a")]
        .into_iter()
        .enumerate()
    {
        let (submit, _) = m.grind(worker, &[0, 0, 0, i as u8], |h| up_t.is_met_by(&h.0));
        assert!(matches!(
            t.device_line(id, &submit, Timestamp::from_millis(10))
                .unwrap(),
            LineOutcome::Accepted(_)
        ));
    }
    let sent = submits(&mut t);
    assert_eq!(
        sent.iter().map(|s| s.sequence_number).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let _ = events(&mut t);
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    // The pool refuses the second and takes the others in one batch.
    t.upstream_message(
        Mining::SubmitSharesError(SubmitSharesError {
            channel_id: CHANNEL,
            sequence_number: 1,
            error_code: "difficulty-too-low".into(),
        }),
        Timestamp::from_millis(100),
    );
    t.upstream_message(
        Mining::SubmitSharesSuccess(SubmitSharesSuccess {
            channel_id: CHANNEL,
            last_sequence_number: 2,
            new_submits_accepted_count: 2,
            new_shares_sum: 2,
        }),
        Timestamp::from_millis(150),
    );
    let results: Vec<(DeviceId, u32, UpstreamVerdict, u64)> = events(&mut t)
        .into_iter()
        .filter_map(|e| match e {
            Event::UpstreamResult(r) => {
                Some((r.device, r.sequence_number, r.verdict, r.latency_ms))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            (
                b,
                1,
                UpstreamVerdict::Rejected("difficulty-too-low".into()),
                90
            ),
            (a, 0, UpstreamVerdict::Accepted, 140),
            (a, 2, UpstreamVerdict::Accepted, 140),
        ]
    );
    assert_eq!(t.in_flight(), 0);
    // The devices had their answers long before: nothing more is written to them.
    for id in [a, b] {
        assert!(t
            .device(id)
            .unwrap()
            .poll_transmit()
            .iter()
            .all(|p| p.is_empty()));
    }
}

#[test]
fn nominal_hash_rate_follows_the_devices() {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    open(&mut t);
    let ids: Vec<DeviceId> = (0..3)
        .map(|_| t.device_connected(Timestamp::from_millis(0)))
        .collect();
    t.handle_tick(Timestamp::from_millis(500));
    assert!(t.poll_transmit().is_none(), "debounced to once a second");
    t.handle_tick(Timestamp::from_millis(1_000));
    let Some(Mining::UpdateChannel(u)) = t.poll_transmit() else {
        panic!("no UpdateChannel")
    };
    assert_eq!(u.channel_id, CHANNEL);
    assert_eq!(u.nominal_hash_rate, 3e6);
    t.handle_tick(Timestamp::from_millis(2_500));
    assert!(t.poll_transmit().is_none(), "unchanged: nothing to say");
    t.device_closed(ids[0]);
    t.handle_tick(Timestamp::from_millis(3_000));
    let Some(Mining::UpdateChannel(u)) = t.poll_transmit() else {
        panic!("no UpdateChannel")
    };
    assert_eq!(u.nominal_hash_rate, 2e6);
}

/// The second upstream's channel: another prefix, and `size` bytes to roll after it.
fn open_second(t: &mut Translator, prefix: &[u8], size: u16, now: u64) {
    t.open_channel(Timestamp::from_millis(now));
    let Some(Mining::OpenExtendedMiningChannel(o)) = t.poll_transmit() else {
        panic!("no OpenExtendedMiningChannel for the new upstream")
    };
    t.upstream_message(
        Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
            request_id: o.request_id,
            channel_id: CHANNEL + 1,
            target: upstream_target(),
            extranonce_size: size,
            extranonce_prefix: prefix.to_vec(),
            group_channel_id: 0,
        }),
        Timestamp::from_millis(now),
    );
}

/// The new upstream's first work: a job and its prev hash (from seed 9).
fn second_work(t: &mut Translator, now: u64) -> NewExtendedMiningJob {
    let mut job = upstream_job(1, None, 7);
    job.channel_id = CHANNEL + 1;
    t.upstream_message(
        Mining::NewExtendedMiningJob(job.clone()),
        Timestamp::from_millis(now),
    );
    let mut p = prev_hash(1, 9);
    p.channel_id = CHANNEL + 1;
    t.upstream_message(Mining::SetNewPrevHash(p), Timestamp::from_millis(now));
    job
}

#[test]
fn failover_keeps_devices_connected_and_moves_them_to_the_new_channel() {
    // `a` opted into extranonce changes; `b` did not, and cannot follow a new prefix.
    let (mut t, a, b, mut ma, _) = two_devices([true, false]);
    let up = upstream_target();
    let device_t = device_difficulty().to_target();
    // One share goes upstream and is never answered; another is kept for after the loss.
    let (forwarded, _) = ma.grind("farm.a", &[0, 0, 0, 1], |h| up.is_met_by(&h.0));
    assert!(matches!(
        t.device_line(a, &forwarded, Timestamp::from_millis(5))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    assert_eq!(submits(&mut t).len(), 1);
    let (late, _) = ma.grind("farm.a", &[0, 0, 0, 2], |h| device_t.is_met_by(&h.0));
    events(&mut t);

    t.upstream_lost(Timestamp::from_millis(10));
    let unanswered = events(&mut t)
        .into_iter()
        .filter(
            |e| matches!(e, Event::UpstreamResult(r) if r.verdict == UpstreamVerdict::Unanswered),
        )
        .count();
    assert_eq!(unanswered, 1, "the share in flight is reported unanswered");
    assert_eq!(t.in_flight(), 0);
    assert!(t.upstream().channel_id().is_none());
    // Work of the lost upstream is stale: judged and answered 21, not refused as
    // unsubscribed (which makes some firmware reconnect), and not forwarded.
    assert!(matches!(
        t.device_line(a, &late, Timestamp::from_millis(11)).unwrap(),
        LineOutcome::Rejected(Reject::Stale)
    ));
    ma.read(&mut t, a);
    assert!(
        ma.replies.last().unwrap().contains("[21,"),
        "{:?}",
        ma.replies.last()
    );
    assert!(submits(&mut t).is_empty());
    // A device arriving meanwhile waits for the new channel.
    let c = t.device_connected(Timestamp::from_millis(12));
    handshake(&mut t, c, "farm.c");
    let mut mc = Miner::default();
    mc.read(&mut t, c);
    assert!(
        mc.extranonce1.is_empty(),
        "no subscribe answer without a channel"
    );

    // The next upstream: same extranonce size, another prefix.
    let prefix2 = [0x11, 0x22, 0x33, 0x44];
    open_second(&mut t, &prefix2, 6, 20);
    let closing: Vec<DeviceId> = t
        .devices()
        .filter(|d| d.wants_close().is_some())
        .map(|d| d.id())
        .collect();
    assert_eq!(
        closing,
        [b],
        "only the device that cannot follow the prefix is let go"
    );
    ma.read(&mut t, a);
    assert_eq!(ma.set_extranonces, 1);
    assert_eq!(
        &ma.extranonce1[..4],
        &prefix2,
        "extranonce1 follows the prefix"
    );
    assert_eq!(ma.extranonce2_size, 4);
    mc.read(&mut t, c);
    assert_eq!(&mc.extranonce1[..4], &prefix2);
    assert_ne!(mc.extranonce1, ma.extranonce1, "device values stay unique");
    let job = second_work(&mut t, 21);
    ma.read(&mut t, a);
    mc.read(&mut t, c);
    assert!(ma.latest_notify().clean_jobs);
    assert_eq!(ma.latest_notify().job_id, mc.latest_notify().job_id);
    // A share on the new work, with the new extranonce1, is what the new pool checks.
    let (share, hash) = ma.grind("farm.a", &[0, 0, 0, 3], |h| up.is_met_by(&h.0));
    let sent = forward(&mut t, a, &share, 22);
    assert_eq!(sent.channel_id, CHANNEL + 1);
    assert_eq!(pool_check(&job, &sent, &prefix2, 9), (hash, true));
}

#[test]
fn failover_to_a_channel_of_another_size_reallocates_device_extranonces() {
    let (mut t, a, b, mut ma, mut mb) = two_devices([true, true]);
    assert_eq!(ma.extranonce2_size, 4);
    t.upstream_lost(Timestamp::from_millis(10));
    // Ten bytes to roll: the devices keep 2 of them apart, and roll 8.
    let prefix2 = [0x55; 3];
    open_second(&mut t, &prefix2, 10, 20);
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    for m in [&ma, &mb] {
        assert_eq!(m.set_extranonces, 1);
        assert_eq!(m.extranonce2_size, 8);
        assert_eq!(m.extranonce1.len(), 3 + 2);
        assert_eq!(&m.extranonce1[..3], &prefix2);
    }
    assert_ne!(ma.extranonce1, mb.extranonce1);
    let job = second_work(&mut t, 21);
    ma.read(&mut t, a);
    let up = upstream_target();
    let (share, hash) = ma.grind("farm.a", &[0, 0, 0, 0, 0, 0, 0, 9], |h| up.is_met_by(&h.0));
    let sent = forward(&mut t, a, &share, 22);
    assert_eq!(sent.extranonce.len(), 10);
    assert_eq!(pool_check(&job, &sent, &prefix2, 9), (hash, true));
}

#[test]
fn a_channel_opened_before_any_device_claims_a_positive_zero() {
    let mut t = Translator::new(config(), Timestamp::from_millis(0));
    let o = open(&mut t);
    // The spec asks for 0.0 with no devices; -0.0 (an empty sum) reads as negative, and the
    // reference pool refuses the channel for it.
    assert_eq!(o.nominal_hash_rate, 0.0);
    assert!(o.nominal_hash_rate.is_sign_positive());
}

/// A tick walks one round of the devices: quiet devices are stepped down by vardiff on their
/// own round's tick only, each once in `TICK_ROUNDS` ticks, and the tick names them.
#[test]
fn ticks_walk_the_devices_in_rounds() {
    let live = VardiffConfig {
        min: Difficulty::new(2f64.powi(-30)).unwrap(),
        max: device_difficulty(),
        ..VardiffConfig::default()
    };
    let mut t = Translator::new(
        TranslatorConfig {
            vardiff: live,
            ..config()
        },
        Timestamp::from_millis(0),
    );
    open(&mut t);
    let ids: Vec<DeviceId> = (0..10)
        .map(|_| t.device_connected(Timestamp::from_millis(0)))
        .collect();
    for (i, &id) in ids.iter().enumerate() {
        handshake(&mut t, id, &format!("farm.{i}"));
    }
    first_work(&mut t);
    let mut miners: HashMap<DeviceId, Miner> =
        ids.iter().map(|&id| (id, Miner::default())).collect();
    for (&id, m) in miners.iter_mut() {
        m.read(&mut t, id);
        assert_eq!(m.difficulty, Some(device_difficulty().as_f64()));
    }
    // Long after: no device sent a share, so each is due a lower difficulty.
    let start = 10 * live.retarget_interval_ms;
    let mut stepped: HashMap<DeviceId, u64> = HashMap::new();
    for n in 0..TICK_ROUNDS {
        let named = Mode::handle_tick(&mut t, Timestamp::from_millis(start + 1_000 * n));
        assert!(named.len() <= 3, "a round of 10 devices in 4: {named:?}");
        for (&id, m) in miners.iter_mut() {
            let before = m.difficulty;
            m.read(&mut t, id);
            if m.difficulty != before {
                assert!(named.contains(&id), "{id:?} stepped down but not named");
                assert_eq!(stepped.insert(id, n), None, "{id:?} stepped down twice");
            }
        }
    }
    assert_eq!(stepped.len(), ids.len(), "every device once: {stepped:?}");
}

#[test]
fn a_future_job_activated_after_a_new_prefix_is_mined_with_its_own_prefix() {
    // Found by the fuzz target translator_session: a future job keeps the extranonce prefix it
    // arrived under, but a device told of a new prefix before the job was activated mined it
    // with the new one, so its shares were judged (and submitted) on a coinbase it never
    // hashed. Now the device is told the job's own prefix before the job.
    let (mut t, a, b, mut ma, _) = two_devices([true, false]);
    assert_eq!(&ma.extranonce1[..4], &PREFIX);

    // A future job under the channel's prefix, a new prefix, then the prev hash naming the job.
    let job = upstream_job(12, None, 2);
    t.upstream_message(
        Mining::NewExtendedMiningJob(job.clone()),
        Timestamp::from_millis(1),
    );
    t.upstream_message(
        Mining::SetExtranoncePrefix(SetExtranoncePrefix {
            channel_id: CHANNEL,
            extranonce_prefix: vec![9, 9, 9, 9],
        }),
        Timestamp::from_millis(1),
    );
    // `b` did not opt in to extranonce changes: it must reconnect.
    assert_eq!(
        t.device(b).unwrap().wants_close(),
        Some(Close::ExtranonceChanged)
    );
    t.upstream_message(
        Mining::SetNewPrevHash(prev_hash(12, 2)),
        Timestamp::from_millis(2),
    );
    ma.read(&mut t, a);
    // Told the new prefix, then the job's own (the old one) before its notify.
    assert_eq!(ma.set_extranonces, 2);
    assert_eq!(&ma.extranonce1[..4], &PREFIX);
    let up = upstream_target();
    let (share, hash) = ma.grind("farm.a", &[0, 0, 0, 1], |h| up.is_met_by(&h.0));
    let LineOutcome::Accepted(s) = t.device_line(a, &share, Timestamp::from_millis(3)).unwrap()
    else {
        panic!("the device's share on the job was refused")
    };
    assert_eq!(s.hash, hash, "the core judges what the device hashed");
    let sent = submits(&mut t);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        pool_check(&job, &sent[0], &PREFIX, 2),
        (hash, true),
        "and so does the pool, on the job's prefix"
    );
}

#[test]
fn forwarded_shares_name_their_worker_once_the_pool_tracks_workers() {
    let up_t = upstream_target();
    let long = format!("farm.{}", "r".repeat(40));
    // (worker tracking asked for, the pool agreed): the names the pool sees.
    for (asked, agreed, want) in [
        // The worker part of each name, cut to 32 bytes: the pool has the account already.
        (true, true, [Some("a".to_owned()), Some("r".repeat(32))]),
        (true, false, [None, None]),
        (false, true, [None, None]),
    ] {
        let mut t = Translator::new(
            TranslatorConfig {
                worker_tracking: asked,
                ..config()
            },
            Timestamp::from_millis(0),
        );
        t.upstream_extensions(if agreed { &[2] } else { &[] });
        assert_eq!(t.tracks_workers(), asked && agreed);
        let a = t.device_connected(Timestamp::from_millis(0));
        let b = t.device_connected(Timestamp::from_millis(0));
        handshake(&mut t, a, "farm.a");
        handshake(&mut t, b, &long);
        open(&mut t);
        first_work(&mut t);
        let mut got = Vec::new();
        for (id, worker) in [(a, "farm.a"), (b, long.as_str())] {
            let mut m = Miner::default();
            m.read(&mut t, id);
            let (submit, _) = m.grind(worker, &[0, 0, 0, 7], |h| up_t.is_met_by(&h.0));
            let out = t.device_line(id, &submit, Timestamp::from_millis(10));
            assert!(matches!(out, Some(LineOutcome::Accepted(_))), "{out:?}");
            let sent = submits(&mut t);
            assert_eq!(sent.len(), 1);
            got.push(sent[0].user_identity.clone());
        }
        assert_eq!(got, want, "asked {asked}, agreed {agreed}");
    }
}
