//! Per-device mode driven without sockets: the test plays the SV2 pool (one connection, a
//! channel per device) and the SV1 devices; shares are real SHA-256d at easy targets.

use std::collections::HashMap;

use primitives::{Difficulty, Hash256};
use sv2::messages::mining::{
    CloseChannel, NewExtendedMiningJob, OpenExtendedMiningChannel,
    OpenExtendedMiningChannelSuccess, OpenMiningChannelError, SetTarget, SubmitSharesExtended,
    SubmitSharesSuccess,
};
use sv2::messages::Mining;
use translator::shares::UpstreamVerdict;
use translator::{
    ChannelMode, Close, DeviceId, Event, LineOutcome, Mode, PerDevice, Reach, Scope, Tagged,
    Timestamp, TranslatorConfig, TICK_ROUNDS,
};

mod support;

use support::{device_difficulty, pool_check, prev_hash, upstream_target, Miner};

/// Bytes our pool fixes per channel, and bytes it lets the channel roll.
const PREFIX_LEN: usize = 4;
const ROLLED: u16 = 4;

fn config() -> TranslatorConfig {
    TranslatorConfig {
        channels: ChannelMode::PerDevice,
        user_identity: "farm".into(),
        ..support::pinned(device_difficulty())
    }
}

/// A job for `channel` on a real coinbase with room for prefix + rolled extranonce.
fn job(channel: u32, job_id: u32, tag: u8) -> NewExtendedMiningJob {
    support::job(
        channel,
        job_id,
        None,
        PREFIX_LEN + usize::from(ROLLED),
        tag,
        3,
    )
}

/// The test's pool: the channels it opened, by id, with their prefixes.
#[derive(Default)]
struct Pool {
    next_channel: u32,
    /// Channel id -> (prefix, user identity).
    channels: HashMap<u32, (Vec<u8>, String)>,
    closed: Vec<u32>,
    submits: Vec<SubmitSharesExtended>,
    updates: Vec<(u32, f32)>,
    /// Channel requests not yet answered.
    requests: Vec<OpenExtendedMiningChannel>,
}

impl Pool {
    /// Takes everything the translator sent.
    fn read(&mut self, t: &mut PerDevice) {
        while let Some(m) = t.poll_transmit() {
            match m {
                Mining::OpenExtendedMiningChannel(o) => self.requests.push(o),
                Mining::SubmitSharesExtended(s) => self.submits.push(s),
                Mining::CloseChannel(c) => self.closed.push(c.channel_id),
                Mining::UpdateChannel(u) => self.updates.push((u.channel_id, u.nominal_hash_rate)),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Opens the channel asked for by `request`; returns its id.
    fn open(&mut self, t: &mut PerDevice, request: &OpenExtendedMiningChannel, now: u64) -> u32 {
        self.next_channel += 1;
        let channel_id = 100 + self.next_channel;
        let prefix = vec![0xee, 0, 0, self.next_channel as u8];
        self.channels
            .insert(channel_id, (prefix.clone(), request.user_identity.clone()));
        t.upstream_message(
            Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
                request_id: request.request_id,
                channel_id,
                target: upstream_target(),
                extranonce_size: ROLLED,
                extranonce_prefix: prefix,
                group_channel_id: 0,
            }),
            Timestamp::from_millis(now),
        );
        channel_id
    }

    /// Opens every channel asked for, in order; returns their ids.
    fn open_all(&mut self, t: &mut PerDevice, now: u64) -> Vec<u32> {
        self.read(t);
        let requests = std::mem::take(&mut self.requests);
        requests.iter().map(|r| self.open(t, r, now)).collect()
    }

    /// A first job on `channel`, active at once.
    fn work(&self, t: &mut PerDevice, channel: u32, tag: u8) -> (NewExtendedMiningJob, Reach) {
        let j = job(channel, u32::from(tag), tag);
        let r1 = t.upstream_message(
            Mining::NewExtendedMiningJob(j.clone()),
            Timestamp::from_millis(0),
        );
        assert_eq!(
            r1,
            t_reach_of(t, channel),
            "a future job reaches its device"
        );
        let r2 = t.upstream_message(
            Mining::SetNewPrevHash(prev_hash(channel, j.job_id, 1)),
            Timestamp::from_millis(0),
        );
        (j, r2)
    }

    /// The pool's own check of a submission, from its job and the channel's prefix.
    fn check(&self, job: &NewExtendedMiningJob, s: &SubmitSharesExtended) -> (Hash256, bool) {
        pool_check(job, s, &self.channels[&s.channel_id].0, 1)
    }
}

/// Where the translator's routing should send a message for `channel`: its device.
fn t_reach_of(t: &PerDevice, channel: u32) -> Reach {
    for id in 1..=16 {
        let id = DeviceId(id);
        if t.channel_of(id).and_then(|c| c.channel_id()) == Some(channel) {
            return Reach::Device(id);
        }
    }
    Reach::Nobody
}

fn line(t: &mut PerDevice, id: DeviceId, s: &str) -> LineOutcome {
    t.device_line(id, s.as_bytes(), Timestamp::from_millis(0))
        .unwrap()
}

const SUBSCRIBE: &str = r#"{"id":1,"method":"mining.subscribe","params":["test/1.0"]}"#;
const EXTRANONCE_SUBSCRIBE: &str = r#"{"id":3,"method":"mining.extranonce.subscribe","params":[]}"#;

fn authorize(t: &mut PerDevice, id: DeviceId, worker: &str) {
    line(
        t,
        id,
        &format!(r#"{{"id":2,"method":"mining.authorize","params":["{worker}","x"]}}"#),
    );
}

fn events(t: &mut PerDevice) -> Vec<Tagged> {
    std::iter::from_fn(|| t.poll_event()).collect()
}

/// A connected translator with devices `a` and `b` subscribed and authorized, each on its own
/// open channel with work.
struct Farm {
    t: PerDevice,
    pool: Pool,
    a: DeviceId,
    b: DeviceId,
    ch_a: u32,
    ch_b: u32,
    job_a: NewExtendedMiningJob,
    job_b: NewExtendedMiningJob,
    ma: Miner,
    mb: Miner,
}

fn farm() -> Farm {
    let mut t = PerDevice::new(config());
    let mut pool = Pool::default();
    t.upstream_connected(Timestamp::from_millis(0));
    assert!(t.is_ready(), "a connection is all per-device mode needs");
    pool.read(&mut t);
    assert!(pool.requests.is_empty(), "no device, no channel");
    let a = t.device_connected(Timestamp::from_millis(0));
    let b = t.device_connected(Timestamp::from_millis(0));
    // `a` opts into extranonce changes; `b` does not.
    line(&mut t, a, EXTRANONCE_SUBSCRIBE);
    // Subscribe-then-authorize firmware waits for the subscribe result: the channel is asked
    // for at the subscribe.
    line(&mut t, a, SUBSCRIBE);
    line(&mut t, b, SUBSCRIBE);
    let ids = pool.open_all(&mut t, 0);
    let [ch_a, ch_b] = ids[..] else {
        panic!("two channels, not {ids:?}")
    };
    authorize(&mut t, a, "farm.a");
    authorize(&mut t, b, "farm.b");
    let (job_a, _) = pool.work(&mut t, ch_a, 1);
    let (job_b, _) = pool.work(&mut t, ch_b, 2);
    let (mut ma, mut mb) = (Miner::default(), Miner::default());
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    let _ = events(&mut t);
    Farm {
        t,
        pool,
        a,
        b,
        ch_a,
        ch_b,
        job_a,
        job_b,
        ma,
        mb,
    }
}

#[test]
fn two_devices_get_two_channels_with_distinct_extranonce_prefixes() {
    let (mut t, mut pool, a, b, reqs) = two_asking();
    assert_eq!(reqs.len(), 2);
    assert_ne!(
        reqs[0].request_id, reqs[1].request_id,
        "request ids unique on the connection"
    );
    let identities: Vec<&str> = reqs.iter().map(|r| r.user_identity.as_str()).collect();
    assert_eq!(identities, ["farm.miner1", "farm.miner2"]);
    for r in &reqs {
        assert_eq!(r.nominal_hash_rate, 1e6, "one device's rate per channel");
        assert_eq!(r.min_extranonce_size, 2, "the device's extranonce2 only");
    }
    // Answered out of order: each answer still finds its device by request id.
    let ch_b = pool.open(&mut t, &reqs[1], 5);
    let ch_a = pool.open(&mut t, &reqs[0], 5);
    assert_eq!(t.channels_open(), 2);
    let (mut ma, mut mb) = (Miner::default(), Miner::default());
    ma.read(&mut t, a);
    mb.read(&mut t, b);
    assert_eq!(
        ma.extranonce1, pool.channels[&ch_a].0,
        "extranonce1 is the prefix alone"
    );
    assert_eq!(mb.extranonce1, pool.channels[&ch_b].0);
    assert_ne!(ma.extranonce1, mb.extranonce1);
    assert_eq!(
        (ma.extranonce2_size, mb.extranonce2_size),
        (usize::from(ROLLED), usize::from(ROLLED)),
        "each device rolls its channel's whole extranonce"
    );
    let opened: Vec<(Option<u32>, Scope)> = events(&mut t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::ChannelOpened { .. }))
        .map(|e| (e.channel, e.scope))
        .collect();
    assert_eq!(
        opened,
        [
            (Some(ch_b), Scope::Device(b)),
            (Some(ch_a), Scope::Device(a))
        ]
    );
}

#[test]
fn each_channels_job_reaches_only_its_device() {
    let mut f = farm();
    let n = f.ma.latest_notify();
    assert_eq!(n.coinb1, f.job_a.coinbase_tx_prefix);
    assert!(n.clean_jobs);
    assert_eq!(f.mb.latest_notify().coinb1, f.job_b.coinbase_tx_prefix);
    // A new job on b's channel: b hears of it, a does not.
    let before_a = f.ma.notifies.len();
    let before_b = f.mb.notifies.len();
    let mut next = job(f.ch_b, 9, 9);
    next.min_ntime = Some(1_700_000_000);
    let reach = f.t.upstream_message(
        Mining::NewExtendedMiningJob(next.clone()),
        Timestamp::from_millis(10),
    );
    assert_eq!(reach, Reach::Device(f.b));
    f.ma.read(&mut f.t, f.a);
    f.mb.read(&mut f.t, f.b);
    assert_eq!(f.ma.notifies.len(), before_a);
    assert_eq!(f.mb.notifies.len(), before_b + 1);
    assert_eq!(f.mb.latest_notify().coinb1, next.coinbase_tx_prefix);
    let sent: Vec<(Option<u32>, Scope)> = events(&mut f.t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::JobSent { devices: 1, .. }))
        .map(|e| (e.channel, e.scope))
        .collect();
    assert_eq!(sent, [(Some(f.ch_b), Scope::Device(f.b))]);
    // SetTarget is per channel too: a's target changes, b's does not.
    let easier = Difficulty::new(2f64.powi(-18)).unwrap().to_target();
    f.t.upstream_message(
        Mining::SetTarget(SetTarget {
            channel_id: f.ch_a,
            maximum_target: easier,
        }),
        Timestamp::from_millis(20),
    );
    assert_eq!(f.t.channel_of(f.a).unwrap().target(), easier);
    assert_eq!(f.t.channel_of(f.b).unwrap().target(), upstream_target());
    // A message for no channel of ours reaches nobody.
    let stray = f.t.upstream_message(
        Mining::NewExtendedMiningJob(job(999, 1, 1)),
        Timestamp::from_millis(30),
    );
    assert_eq!(stray, Reach::Nobody);
}

#[test]
fn a_share_meeting_the_upstream_target_goes_up_on_its_devices_channel_and_the_verdict_comes_back() {
    let mut f = farm();
    let up = upstream_target();
    let device_t = device_difficulty().to_target();
    // Only the device's target: answered locally.
    let (local, _) = f.mb.grind("farm.b", &[0, 0, 0, 1], |h| {
        device_t.is_met_by(&h.0) && !up.is_met_by(&h.0)
    });
    assert!(matches!(
        f.t.device_line(f.b, &local, Timestamp::from_millis(5))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    f.pool.read(&mut f.t);
    assert!(f.pool.submits.is_empty());
    // Meets the channel's target: goes up on b's channel.
    let (submit, hash) = f.mb.grind("farm.b", &[0, 0, 0, 2], |h| up.is_met_by(&h.0));
    assert!(matches!(
        f.t.device_line(f.b, &submit, Timestamp::from_millis(10))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    f.pool.read(&mut f.t);
    let s = f.pool.submits.pop().expect("a submission");
    assert_eq!(s.channel_id, f.ch_b);
    assert_eq!(s.extranonce, [0, 0, 0, 2], "the device's extranonce2 alone");
    let (pool_hash, meets) = f.pool.check(&f.job_b, &s);
    assert_eq!(
        pool_hash, hash,
        "the pool sees the header the device hashed"
    );
    assert!(meets);
    let forwarded: Vec<Tagged> = events(&mut f.t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::ShareForwarded { .. }))
        .collect();
    assert_eq!(forwarded.len(), 1);
    assert_eq!(
        forwarded[0].channel,
        Some(f.ch_b),
        "share events name the device's channel"
    );
    assert_eq!(forwarded[0].target, up);
    assert_eq!(f.t.in_flight(), 1);
    // a's channel answers nothing of b's: a success there settles nothing.
    f.t.upstream_message(
        Mining::SubmitSharesSuccess(SubmitSharesSuccess {
            channel_id: f.ch_a,
            last_sequence_number: s.sequence_number,
            new_submits_accepted_count: 1,
            new_shares_sum: 1,
        }),
        Timestamp::from_millis(50),
    );
    assert!(events(&mut f.t)
        .iter()
        .all(|e| !matches!(e.event, Event::UpstreamResult(_))));
    f.t.upstream_message(
        Mining::SubmitSharesSuccess(SubmitSharesSuccess {
            channel_id: f.ch_b,
            last_sequence_number: s.sequence_number,
            new_submits_accepted_count: 1,
            new_shares_sum: 1,
        }),
        Timestamp::from_millis(60),
    );
    let results: Vec<(DeviceId, UpstreamVerdict, Option<u32>)> = events(&mut f.t)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::UpstreamResult(r) => Some((r.device, r.verdict, e.channel)),
            _ => None,
        })
        .collect();
    assert_eq!(results, [(f.b, UpstreamVerdict::Accepted, Some(f.ch_b))]);
    assert_eq!(f.t.in_flight(), 0);
}

#[test]
fn a_device_leaving_closes_its_channel_and_its_shares_still_get_verdicts() {
    let mut f = farm();
    let up = upstream_target();
    let (submit, _) = f.ma.grind("farm.a", &[0, 0, 0, 7], |h| up.is_met_by(&h.0));
    f.t.device_line(f.a, &submit, Timestamp::from_millis(10))
        .unwrap();
    f.pool.read(&mut f.t);
    let seq = f.pool.submits.pop().unwrap().sequence_number;
    f.t.device_closed(f.a);
    f.pool.read(&mut f.t);
    assert_eq!(
        f.pool.closed,
        [f.ch_a],
        "CloseChannel for the device's channel only"
    );
    assert_eq!(f.t.channels_open(), 1);
    assert!(f.t.channel_of(f.b).is_some());
    // The verdict on its last share still counts.
    assert_eq!(f.t.channels_draining(), 1);
    f.t.upstream_message(
        Mining::SubmitSharesSuccess(SubmitSharesSuccess {
            channel_id: f.ch_a,
            last_sequence_number: seq,
            new_submits_accepted_count: 1,
            new_shares_sum: 1,
        }),
        Timestamp::from_millis(40),
    );
    let results: Vec<(DeviceId, UpstreamVerdict)> = events(&mut f.t)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::UpstreamResult(r) => Some((r.device, r.verdict)),
            _ => None,
        })
        .collect();
    assert_eq!(results, [(f.a, UpstreamVerdict::Accepted)]);
    assert_eq!((f.t.in_flight(), f.t.channels_draining()), (0, 0));

    // A device that leaves while its channel is being opened: the channel the pool opens
    // for it anyway is closed at once.
    let c = f.t.device_connected(Timestamp::from_millis(50));
    line(&mut f.t, c, SUBSCRIBE);
    f.pool.read(&mut f.t);
    let req = f.pool.requests.pop().unwrap();
    f.t.device_closed(c);
    f.pool.read(&mut f.t);
    assert_eq!(f.pool.closed, [f.ch_a], "nothing to close yet");
    let ch_c = f.pool.open(&mut f.t, &req, 60);
    f.pool.read(&mut f.t);
    assert_eq!(f.pool.closed, [f.ch_a, ch_c]);
    assert_eq!(f.t.channels_open(), 1);
}

#[test]
fn a_refused_channel_ends_its_device_only() {
    let (mut t, mut pool, a, b, reqs) = two_asking();
    let reach = t.upstream_message(
        Mining::OpenMiningChannelError(OpenMiningChannelError {
            request_id: reqs[0].request_id,
            error_code: "unknown-user".into(),
        }),
        Timestamp::from_millis(5),
    );
    assert_eq!(reach, Reach::Device(a));
    let ch_b = pool.open(&mut t, &reqs[1], 5);
    let mut ma = Miner::default();
    ma.read(&mut t, a);
    assert!(
        ma.replies.last().unwrap().contains("unknown-user"),
        "the waiting subscribe is told why: {:?}",
        ma.replies
    );
    assert_eq!(
        t.device_mut(a).unwrap().wants_close(),
        Some(Close::ChannelLost)
    );
    assert_eq!(t.device_mut(b).unwrap().wants_close(), None);
    let failed: Vec<Scope> = events(&mut t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::ChannelOpenFailed(_)))
        .map(|e| e.scope)
        .collect();
    assert_eq!(
        failed,
        [Scope::Device(a)],
        "the device's, not the connection's"
    );
    authorize(&mut t, b, "farm.b");
    let (_, reach) = pool.work(&mut t, ch_b, 3);
    assert_eq!(reach, Reach::Device(b));
    let mut mb = Miner::default();
    mb.read(&mut t, b);
    assert_eq!(mb.notifies.len(), 1, "b works on");
    // The pool closing b's channel later ends b alone, without a CloseChannel back.
    t.upstream_message(
        Mining::CloseChannel(CloseChannel {
            channel_id: ch_b,
            reason_code: "pool maintenance".into(),
        }),
        Timestamp::from_millis(20),
    );
    assert_eq!(
        t.device_mut(b).unwrap().wants_close(),
        Some(Close::ChannelLost)
    );
    assert_eq!(t.channels_open(), 0);
    t.device_closed(b);
    pool.read(&mut t);
    assert!(pool.closed.is_empty());
}

#[test]
fn failover_reopens_every_channel_and_keeps_devices_with_fresh_work() {
    let mut f = farm();
    let up = upstream_target();
    let (submit, _) = f.mb.grind("farm.b", &[0, 0, 0, 4], |h| up.is_met_by(&h.0));
    f.t.device_line(f.b, &submit, Timestamp::from_millis(10))
        .unwrap();
    f.pool.read(&mut f.t);
    let _ = events(&mut f.t);
    // The connection is lost: the share in flight goes unanswered, channels are gone.
    f.t.upstream_lost(Timestamp::from_millis(20));
    assert!(!f.t.is_ready());
    assert_eq!((f.t.channels_open(), f.t.in_flight()), (0, 0));
    let unanswered: Vec<DeviceId> = events(&mut f.t)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::UpstreamResult(r) if r.verdict == UpstreamVerdict::Unanswered => Some(r.device),
            _ => None,
        })
        .collect();
    assert_eq!(unanswered, [f.b]);
    // A share on the lost pool's work meanwhile is stale, answered locally.
    let (late, _) = f.ma.grind("farm.a", &[0, 0, 0, 5], |h| up.is_met_by(&h.0));
    assert!(matches!(
        f.t.device_line(f.a, &late, Timestamp::from_millis(25))
            .unwrap(),
        LineOutcome::Rejected(_)
    ));
    // The next pool: a channel asked for every device, under the same identities.
    let mut second = Pool {
        next_channel: 10,
        ..Pool::default()
    };
    f.t.upstream_connected(Timestamp::from_millis(30));
    second.read(&mut f.t);
    let identities: Vec<String> = second
        .requests
        .iter()
        .map(|r| r.user_identity.clone())
        .collect();
    assert_eq!(identities, ["farm.miner1", "farm.miner2"]);
    let ids = second.open_all(&mut f.t, 40);
    assert_eq!(ids.len(), 2);
    assert_eq!(f.t.channels_open(), 2);
    let (new_a, new_b) = (ids[0], ids[1]);
    second.work(&mut f.t, new_a, 5);
    second.work(&mut f.t, new_b, 6);
    f.ma.read(&mut f.t, f.a);
    f.mb.read(&mut f.t, f.b);
    // a opted in: told its new extranonce, then given work; b could not be told, and must
    // reconnect, as in aggregated mode.
    assert_eq!(f.ma.set_extranonces, 1);
    assert_eq!(f.ma.extranonce1, second.channels[&new_a].0);
    assert_eq!(
        f.ma.latest_notify().coinb1,
        job(new_a, 5, 5).coinbase_tx_prefix
    );
    assert_eq!(f.t.device_mut(f.a).unwrap().wants_close(), None);
    assert_eq!(
        f.t.device_mut(f.b).unwrap().wants_close(),
        Some(Close::ExtranonceChanged)
    );
    // a's shares go up on its new channel.
    let (submit, hash) = f.ma.grind("farm.a", &[0, 0, 0, 6], |h| up.is_met_by(&h.0));
    assert!(matches!(
        f.t.device_line(f.a, &submit, Timestamp::from_millis(50))
            .unwrap(),
        LineOutcome::Accepted(_)
    ));
    second.read(&mut f.t);
    let s = second.submits.pop().unwrap();
    assert_eq!(s.channel_id, new_a);
    assert_eq!(second.check(&job(new_a, 5, 5), &s), (hash, true));
    let _ = (f.ch_a, f.ch_b);
}

#[test]
fn each_channel_keeps_its_devices_rate_until_vardiff_measures_it() {
    let mut f = farm();
    f.t.handle_tick(Timestamp::from_millis(500));
    f.t.handle_tick(Timestamp::from_millis(1_500));
    f.pool.read(&mut f.t);
    // Vardiff has measured nothing yet: each channel keeps the rate it opened with.
    assert!(f.pool.updates.is_empty(), "{:?}", f.pool.updates);
    assert_eq!(f.t.nominal_hash_rate(), 2e6, "the sum over channels");
    let _ = (f.a, f.b, f.ch_a, f.ch_b, &f.job_a, &f.ma);
}

/// A tick walks one round of the devices, not all of them: the rounds are disjoint, and
/// every device is ticked once in `TICK_ROUNDS` ticks.
#[test]
fn ticks_walk_the_devices_in_rounds() {
    let mut t = PerDevice::new(config());
    let devices: Vec<DeviceId> = (0..10)
        .map(|_| t.device_connected(Timestamp::from_millis(0)))
        .collect();
    let mut seen = HashMap::new();
    for n in 0..TICK_ROUNDS {
        let ids = t.handle_tick(Timestamp::from_millis(1_000 * (n + 1)));
        assert!(ids.len() <= 3, "a round of 10 devices in 4: {ids:?}");
        for id in ids {
            assert_eq!(seen.insert(id, n), None, "{id:?} ticked twice");
        }
    }
    assert_eq!(seen.len(), devices.len());
}

/// How long the tests let a channel request wait.
const OPEN_TIMEOUT_MS: u64 = 10_000;

/// A connected translator with devices `a` and `b` subscribed, their channels asked for at
/// 0 ms; the pool's two requests, in order.
fn two_asking() -> (
    PerDevice,
    Pool,
    DeviceId,
    DeviceId,
    Vec<OpenExtendedMiningChannel>,
) {
    let mut t = PerDevice::new(config());
    t.set_open_timeout(std::time::Duration::from_millis(OPEN_TIMEOUT_MS));
    let mut pool = Pool::default();
    t.upstream_connected(Timestamp::from_millis(0));
    let a = t.device_connected(Timestamp::from_millis(0));
    let b = t.device_connected(Timestamp::from_millis(0));
    line(&mut t, a, SUBSCRIBE);
    line(&mut t, b, SUBSCRIBE);
    pool.read(&mut t);
    let reqs = std::mem::take(&mut pool.requests);
    assert_eq!(reqs.len(), 2);
    (t, pool, a, b, reqs)
}

#[test]
fn a_channel_request_the_pool_skips_is_given_up_and_only_its_device_closed() {
    let (mut t, mut pool, a, b, reqs) = two_asking();
    // The pool answers a's request and keeps a's channel busy; b's it never answers.
    let ch_a = pool.open(&mut t, &reqs[0], 5);
    authorize(&mut t, a, "farm.a");
    pool.work(&mut t, ch_a, 1);
    let _ = events(&mut t);
    assert_eq!(t.channels().opening, 1);
    // Within the open timeout, b waits.
    t.handle_tick(Timestamp::from_millis(OPEN_TIMEOUT_MS));
    assert_eq!(t.device_mut(b).unwrap().wants_close(), None);
    assert!(events(&mut t)
        .iter()
        .all(|e| !matches!(e.event, Event::ChannelOpenFailed(_))));
    // Past it: b is closed, told why, and counted; a works on.
    t.handle_tick(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1));
    assert_eq!(
        t.device_mut(b).unwrap().wants_close(),
        Some(Close::ChannelLost)
    );
    assert_eq!(t.device_mut(a).unwrap().wants_close(), None);
    let mut mb = Miner::default();
    mb.read(&mut t, b);
    let reply = mb.replies.last().expect("the subscribe is answered");
    assert!(
        reply.contains("\"error\"") && reply.contains("unanswered"),
        "{reply}"
    );
    let failed: Vec<(Scope, String)> = events(&mut t)
        .into_iter()
        .filter_map(|e| match e.event {
            Event::ChannelOpenFailed(code) => Some((e.scope, code)),
            _ => None,
        })
        .collect();
    assert_eq!(
        failed,
        [(Scope::Device(b), "channel request unanswered".to_owned())],
        "the device's, not the connection's"
    );
    let census = t.channels();
    assert_eq!(
        (
            census.open,
            census.opening,
            census.timed_out,
            census.refused
        ),
        (1, 0, 1, 0)
    );
    // The pool answers after all: the channel it opened is closed at once, nothing else moves.
    let late = pool.open(&mut t, &reqs[1], OPEN_TIMEOUT_MS + 50);
    pool.read(&mut t);
    assert_eq!(pool.closed, [late]);
    assert_eq!(t.channels_open(), 1);
    assert!(
        events(&mut t).is_empty(),
        "a late answer is expected, not a protocol error"
    );
    // b's firmware reconnects and asks again: a fresh request, answered this time.
    t.device_closed(b);
    let b2 = t.device_connected(Timestamp::from_millis(OPEN_TIMEOUT_MS + 100));
    t.device_line(
        b2,
        SUBSCRIBE.as_bytes(),
        Timestamp::from_millis(OPEN_TIMEOUT_MS + 100),
    )
    .unwrap();
    pool.read(&mut t);
    let again = pool.requests.pop().expect("asked again");
    assert!(again.request_id != reqs[1].request_id);
    let ch_b2 = pool.open(&mut t, &again, OPEN_TIMEOUT_MS + 150);
    assert_eq!(t.channel_of(b2).and_then(|c| c.channel_id()), Some(ch_b2));
    assert_eq!((t.channels_open(), t.channels().timed_out), (2, 1));
}

#[test]
fn a_pool_silent_since_the_requests_is_the_connections_fault_not_the_devices() {
    let (mut t, _pool, a, b, _reqs) = two_asking();
    t.handle_tick(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1));
    t.handle_tick(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1_000));
    let failed: Vec<Scope> = events(&mut t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::ChannelOpenFailed(_)))
        .map(|e| e.scope)
        .collect();
    assert_eq!(failed, [Scope::Connection], "once, for the connection");
    for id in [a, b] {
        assert_eq!(
            t.device_mut(id).unwrap().wants_close(),
            None,
            "devices stay for the next pool"
        );
    }
    assert_eq!(t.channels().timed_out, 0);
    // The next connection asks again for both, and its silence is judged afresh.
    let mut second = Pool::default();
    t.upstream_lost(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1_100));
    t.upstream_connected(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1_200));
    second.read(&mut t);
    assert_eq!(second.requests.len(), 2);
    t.handle_tick(Timestamp::from_millis(2 * OPEN_TIMEOUT_MS + 1_201));
    let failed = events(&mut t)
        .into_iter()
        .filter(|e| e.scope == Scope::Connection && matches!(e.event, Event::ChannelOpenFailed(_)))
        .count();
    assert_eq!(failed, 1);
}

#[test]
fn a_device_leaving_while_its_request_waits_is_not_counted_as_opening() {
    let (mut t, mut pool, _a, b, reqs) = two_asking();
    t.device_closed(b);
    assert_eq!(t.channels().opening, 1);
    t.handle_tick(Timestamp::from_millis(OPEN_TIMEOUT_MS + 1));
    assert_eq!(t.channels().timed_out, 0, "nobody left to give up");
    let ch = pool.open(&mut t, &reqs[1], OPEN_TIMEOUT_MS + 2);
    pool.read(&mut t);
    assert_eq!(pool.closed, [ch], "opened for nobody: closed at once");
}

#[test]
fn the_census_gives_the_channels_difficulty_range_and_what_drains() {
    let mut f = farm();
    let census = f.t.channels();
    let d = Difficulty::from_target(upstream_target()).as_f64();
    assert_eq!((census.open, census.opening, census.draining), (2, 0, 0));
    assert_eq!(census.difficulty, Some((d, d)));
    // a's channel gets a target four times easier.
    f.t.upstream_message(
        Mining::SetTarget(SetTarget {
            channel_id: f.ch_a,
            maximum_target: Difficulty::new(2f64.powi(-18)).unwrap().to_target(),
        }),
        Timestamp::from_millis(20),
    );
    let (lo, hi) = f.t.channels().difficulty.unwrap();
    assert!((lo * 4.0 - d).abs() < d * 1e-6 && hi == d, "{lo} {hi}");
    // a leaves with a share awaiting its verdict: its channel drains, out of the range.
    let up = f.t.channel_of(f.a).unwrap().target();
    let (submit, _) = f.ma.grind("farm.a", &[0, 0, 0, 9], |h| up.is_met_by(&h.0));
    f.t.device_line(f.a, &submit, Timestamp::from_millis(30))
        .unwrap();
    f.t.device_closed(f.a);
    let census = f.t.channels();
    assert_eq!((census.open, census.draining), (1, 1));
    assert_eq!(census.difficulty, Some((d, d)));
    let _ = (f.b, f.ch_b, &f.job_a, &f.job_b, &f.mb, &f.pool);
}

#[test]
fn a_channel_too_small_for_its_device_is_closed_upstream_and_ends_its_device_only() {
    let (mut t, mut pool, a, b, reqs) = two_asking();
    // The pool opens a's channel with no extranonce to roll: no device can mine on it.
    t.upstream_message(
        Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
            request_id: reqs[0].request_id,
            channel_id: 41,
            target: upstream_target(),
            extranonce_size: 0,
            extranonce_prefix: vec![0xee; PREFIX_LEN],
            group_channel_id: 0,
        }),
        Timestamp::from_millis(5),
    );
    let unusable: Vec<Scope> = events(&mut t)
        .into_iter()
        .filter(|e| matches!(e.event, Event::Layout(_)))
        .map(|e| e.scope)
        .collect();
    assert_eq!(unusable, [Scope::Device(a)]);
    assert_eq!(
        t.device_mut(a).unwrap().wants_close(),
        Some(Close::ChannelLost)
    );
    assert_eq!(t.device_mut(b).unwrap().wants_close(), None);
    // The pool opened it: it must be told, or it keeps the channel for the connection's life.
    pool.read(&mut t);
    assert_eq!(pool.closed, [41]);
    t.device_closed(a);
    pool.read(&mut t);
    assert_eq!(pool.closed, [41], "closed once");
    assert_eq!(t.channels_open(), 0);
    assert_eq!(t.channels().opening, 1, "b's request still waits");
}

#[test]
fn with_no_devices_the_nominal_hash_rate_is_zero_not_negative_zero() {
    let mut t = PerDevice::new(config());
    t.upstream_connected(Timestamp::from_millis(0));
    let rate = t.nominal_hash_rate();
    assert!(rate == 0.0 && rate.is_sign_positive(), "{rate}");
    let a = t.device_connected(Timestamp::from_millis(0));
    t.device_closed(a);
    assert!(t.nominal_hash_rate().is_sign_positive());
}
