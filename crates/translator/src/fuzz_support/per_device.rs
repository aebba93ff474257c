//! What the `translator_per_device` fuzz target runs: the same kind of script as
//! [`super::translator_session`], against the translator in per-device mode ([`PerDevice`],
//! each SV1 device on an SV2 extended channel of its own, all on one connection), driven
//! through [`Mode`] as the shell drives it.
//!
//! The script starts with two configuration bytes, read as the aggregated target reads them
//! (the device extranonce bytes aside: a device takes its channel's whole extranonce), except
//! bit 0 of the first, which shortens the channel requests' open timeout from the default to
//! two seconds ([`Mode::set_open_timeout`]). The steps are the aggregated target's (devices
//! connect, close, overflow a line or send a line of the same SV1 grammar; the clock steps and
//! the core ticks; the connection is lost and another connected), but the pool keeps a
//! channel per device and its messages name one ([`up`], each followed by an addressing byte):
//!
//! - the answer to any pending channel request: opened (any extranonce size and prefix, any
//!   target, in one of two groups or none, under a fresh id or one of a channel closed
//!   earlier on the connection) or refused; or an answer to a request never made;
//! - future and immediate jobs, prev hashes naming held, old or unknown jobs (any nBits),
//!   `SetTarget`, `SetExtranoncePrefix`, `SubmitShares.Success` and `.Error` on any range of
//!   a channel's shares in flight, `CloseChannel`: each to an open channel, a group, a channel
//!   closed (by either side, maybe still awaiting verdicts for its departed device), or an id
//!   never used; messages a client never gets; raw payloads through `Mining::decode` that
//!   name no request or channel of the connection.
//!
//! As the shell does, devices that want to be closed are closed after each step, and a
//! connection-wide failure (the pool silent since a channel request) fails the connection
//! over. Checked after every step, against what `per_device`, `mode` and the aggregated
//! core's own rules promise:
//!
//! - no panic; device ids fresh; the core holds exactly the devices connected;
//! - on each device's side, everything the aggregated target checks (every share answered
//!   once, at once, its verdict justified by what the device was told; an accepted share's
//!   hash, recomputed from the device's view, is the core's; notifies are jobs its channel got
//!   and activated; subscribe answers carry its channel's prefix and size; requests answered
//!   once; every line one JSON object; bounded output), with its own channel as the upstream;
//! - **a channel per device**: a request is sent for every device that wants an extranonce
//!   and has neither a channel nor a request on the connection, and for no other, under a
//!   request id fresh on the connection, named `<account>.miner<N>`; every channel the pool
//!   opened is its device's while the device is connected, and closed (`CloseChannel`, with
//!   the reason the code gives) once the device leaves, once found unusable (an extranonce too
//!   small), or at once if it answers a request given up; never otherwise; each channel's
//!   state (prefix, size, target) is the pool's;
//! - **a channel's trouble is its device's**: a refused or closed channel, or a request given
//!   up, closes that device only; a request is given up only past the open timeout while the
//!   pool answered since it was sent, and a connection-wide failure is raised only when the
//!   pool has been silent since an overdue request; after a tick no overdue request is left
//!   that should have been given up;
//! - **forwarding**: an accepted share goes upstream exactly when its device's channel is
//!   open and the share meets that channel's target or the network's, on that channel, under
//!   the device's next sequence number, with the hash the pool computes from its own view;
//! - **every forwarded share gets exactly one verdict**, tagged with its device and channel:
//!   those the rules give on its channel, even after its device left (the channel draining),
//!   unanswered when the window pushes it out, when its channel is closed by the pool or its
//!   id reused, or when the connection is lost; `in_flight()` is the sum over channels and
//!   `oldest_in_flight()` when the longest-waiting of them went up; `channels()` counts what
//!   is open, opening and draining as the pool sees it, and spans the open channels' targets;
//! - **reach**: an upstream message reaches whom the routing says (an answer, its request's
//!   device, or nobody if the request was given up; an open channel's message, its device; a
//!   group's, every device; a draining channel's or an unknown id's, nobody); after a message
//!   or a tick only the devices the core named may have anything to write, after a device's
//!   line only that device;
//! - bounded messages upstream and events per step; SV2 messages upstream a client's, encoding
//!   and decoding back.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::mode::{Reach, Scope, Tagged};
use crate::per_device::DEFAULT_OPEN_TIMEOUT;
use crate::per_device::{
    PerDevice, REASON_DEVICE_LEFT, REASON_SILENT, REASON_UNANSWERED, REASON_UNUSABLE,
};

/// The pool's two groups (far above any channel id a run reaches).
const GROUPS: [u32; 2] = [1_000_000, 1_000_001];
/// The short open timeout (bit 0 of the first configuration byte).
const SHORT_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    /// The core sent `CloseChannel`; verdicts may still come for what is in flight.
    ClosedByCore,
    ClosedByPool,
}

/// A channel as the pool keeps it.
struct Chan {
    device: DeviceId,
    group: u32,
    prefix: Vec<u8>,
    size: usize,
    target: Target,
    held: Held,
    /// Shares in flight on it, in sequence order.
    flights: VecDeque<Flight>,
    state: State,
}

/// A channel request on the current connection, not answered yet.
struct Request {
    device: DeviceId,
    asked: Timestamp,
    /// Given up by the core, and why: an answer opening a channel is closed with the reason.
    abandoned: Option<&'static str>,
}

/// The device side's view of the pool in per-device mode: each device's own channels.
struct Channels<'a> {
    chans: &'a BTreeMap<u32, Chan>,
    retired: &'a [Chan],
}

impl Channels<'_> {
    fn open_of(&self, device: DeviceId) -> Option<&Chan> {
        self.chans
            .values()
            .find(|c| c.device == device && c.state == State::Open)
    }
}

impl View for Channels<'_> {
    fn pool_job(&self, device: DeviceId, coinb1: &[u8]) -> Option<&PoolJob> {
        self.chans
            .values()
            .chain(self.retired)
            .filter(|c| c.device == device)
            .find_map(|c| c.held.find(coinb1))
    }

    fn subscribe_answer(&self, device: DeviceId, e: Option<DeviceExtranonce>) -> (Vec<u8>, usize) {
        let c = self
            .open_of(device)
            .expect("a subscribe answered with no channel open for its device");
        let mut mine = c.prefix.clone();
        if let Some(e) = e {
            e.write(&mut mine);
        }
        assert_eq!(
            mine.len(),
            c.prefix.len(),
            "a device in per-device mode takes its channel's whole extranonce"
        );
        (mine, c.size)
    }

    fn may_wait(&self, device: DeviceId) -> bool {
        self.open_of(device).is_none()
    }
}

/// A settled share: its channel, sequence number, device and verdict.
type Settled = (u32, u32, DeviceId, UpstreamVerdict);

struct World {
    c: Common<PerDevice>,
    timeout_ms: u64,
    /// When the pool last sent anything on this connection.
    heard: Option<Timestamp>,
    requests: BTreeMap<u32, Request>,
    /// Request ids used on this connection.
    used_requests: HashSet<u32>,
    chans: BTreeMap<u32, Chan>,
    /// Channels of earlier connections, or whose id was reused: their jobs, for the devices'
    /// checks.
    retired: Vec<Chan>,
    next_channel: u32,
    next_job: u32,
    /// Each device's last sequence number.
    last_seq: HashMap<DeviceId, u32>,
    /// What this step must settle, as the pool's messages and the rules give it.
    expected: Vec<Settled>,
    /// The `CloseChannel`s this step must send.
    closes: Vec<(u32, &'static str)>,
    fail_over: bool,
    /// The reach the message being delivered must have.
    reach: Option<Reach>,
    /// When each forwarded share went upstream, by device and sequence number.
    sent_at: HashMap<(DeviceId, u32), Timestamp>,
}

impl World {
    fn new(config: TranslatorConfig, short_timeout: bool) -> Self {
        let mut t = PerDevice::new(config.clone());
        let timeout = if short_timeout {
            SHORT_TIMEOUT
        } else {
            DEFAULT_OPEN_TIMEOUT
        };
        if short_timeout {
            Mode::set_open_timeout(&mut t, timeout);
        }
        assert_eq!(Mode::channel_mode(&t), crate::ChannelMode::PerDevice);
        Mode::upstream_connected(&mut t, T0);
        let mut w = World {
            c: Common::new(t, config),
            timeout_ms: timeout.as_millis() as u64,
            heard: None,
            requests: BTreeMap::new(),
            used_requests: HashSet::new(),
            chans: BTreeMap::new(),
            retired: Vec::new(),
            next_channel: 7,
            next_job: 1,
            last_seq: HashMap::new(),
            expected: Vec::new(),
            closes: Vec::new(),
            fail_over: false,
            reach: None,
            sent_at: HashMap::new(),
        };
        w.settle(None, None, MayWrite::Only(Vec::new()));
        w
    }

    fn open_chan_of(&self, device: DeviceId) -> Option<u32> {
        self.chans
            .iter()
            .find(|(_, c)| c.device == device && c.state == State::Open)
            .map(|(&id, _)| id)
    }

    /// The channel `id` a message the core sent (`what`, for the panic) names: it must be
    /// open.
    fn open_chan(&self, id: u32, what: &str) -> &Chan {
        let c = self
            .chans
            .get(&id)
            .unwrap_or_else(|| panic!("{what} no channel"));
        assert_eq!(c.state, State::Open, "{what} a closed channel");
        c
    }

    fn pending_of(&self, device: DeviceId) -> Option<u32> {
        self.requests
            .iter()
            .find(|(_, r)| r.device == device && r.abandoned.is_none())
            .map(|(&id, _)| id)
    }

    /// An upstream message to the core; the devices it may reach are those the core names.
    fn deliver(&mut self, m: Mining) {
        self.heard = Some(self.c.now);
        let name = m.name();
        let reach = Mode::upstream_message(&mut self.c.t, m, self.c.now);
        if let Some(want) = self.reach.take() {
            assert_eq!(reach, want, "the reach of {name}");
        }
        let may = match reach {
            Reach::Nobody => MayWrite::Only(Vec::new()),
            Reach::Device(id) => {
                assert!(
                    self.c.devices.iter().any(|d| d.id == id),
                    "reach names device {id:?}, not connected"
                );
                MayWrite::Only(vec![id])
            }
            Reach::Everyone => MayWrite::Anyone,
        };
        self.settle(None, None, may);
    }

    // ---- The pool ------------------------------------------------------------------------

    /// Whom a message addressed to `id` reaches, as the routing documents it: an open
    /// channel's device, every device of a group, nobody for a channel draining or unknown.
    fn reach_to(&self, id: u32) -> Reach {
        match self.chans.get(&id) {
            Some(c) if c.state == State::Open => Reach::Device(c.device),
            Some(_) => Reach::Nobody,
            None if self.reached(id).is_empty() => Reach::Nobody,
            None => Reach::Everyone,
        }
    }

    /// The channels a message addressed to `id` reaches, as the routing documents it: an open
    /// channel, a closed one still awaiting verdicts, or every open channel of a group.
    fn reached(&self, id: u32) -> Vec<u32> {
        match self.chans.get(&id) {
            Some(c) if c.state == State::Open => vec![id],
            Some(c) if c.state == State::ClosedByCore && !c.flights.is_empty() => vec![id],
            Some(_) => Vec::new(),
            None => self
                .chans
                .iter()
                .filter(|(_, c)| c.state == State::Open && c.group == id && id != 0)
                .map(|(&c, _)| c)
                .collect(),
        }
    }

    /// The ids of the channels `keep` keeps, in order.
    fn chan_ids(&self, keep: impl Fn(&Chan) -> bool) -> Vec<u32> {
        self.chans
            .iter()
            .filter(|(_, c)| keep(c))
            .map(|(&id, _)| id)
            .collect()
    }

    /// The id a message is addressed with, from `a`: an open channel mostly, a group, a closed
    /// channel or an id never used. `settled`: prefer channels with shares in flight.
    fn address(&self, a: u8, settled: bool) -> u32 {
        let unknown = self.next_channel + 1000;
        match a % 16 {
            0 => unknown,
            1 => GROUPS[0],
            2 => GROUPS[1],
            3 => {
                let closed = self.chan_ids(|c| c.state != State::Open);
                pick(&closed, a >> 4).unwrap_or(unknown)
            }
            _ => {
                let with_flights = self.chan_ids(|c| !c.flights.is_empty());
                let open = self.chan_ids(|c| c.state == State::Open);
                let list = if settled && !with_flights.is_empty() {
                    with_flights
                } else {
                    open
                };
                pick(&list, a >> 4).unwrap_or(unknown)
            }
        }
    }

    /// A message built from the pool's state, `kind` one of [`up`]; the model follows it.
    fn message(&mut self, kind: u8, input: &mut Input<'_>) -> Mining {
        let b = input.u8();
        match kind {
            up::OPEN => self.answer(b, input),
            up::JOB => {
                let to = self.address(input.u8(), false);
                self.reach = Some(self.reach_to(to));
                let job_id = self.next_job;
                self.next_job += 1;
                let min_ntime = (b % 3 == 0).then(|| NTIME0 + u32::from(input.u8()));
                let reached = self.reached(to);
                let (prefix, size) = reached
                    .first()
                    .and_then(|c| self.chans.get(c))
                    .map_or((vec![0; 4], 4), |c| (c.prefix.clone(), c.size));
                let (m, sent) = extended_job(to, job_id, b, &prefix, size, min_ntime);
                for id in reached {
                    let c = self.chans.get_mut(&id).expect("reached");
                    if c.state != State::Open {
                        continue;
                    }
                    // One job for a group, each channel's on its own prefix.
                    let job = PoolJob {
                        prefix: c.prefix.clone(),
                        ..sent.clone()
                    };
                    c.held.add(job_id, min_ntime, job);
                }
                m
            }
            up::PREV_HASH => {
                let to = self.address(input.u8(), false);
                self.reach = Some(self.reach_to(to));
                let reached = self.reached(to);
                let newest = reached
                    .iter()
                    .filter_map(|c| self.chans[c].held.future.back().copied())
                    .max();
                let oldest = reached
                    .iter()
                    .filter_map(|c| self.chans[c].held.future.front().copied())
                    .min();
                let (m, job_id, work) =
                    new_prev_hash(to, b, (newest, oldest), self.next_job, input);
                if let Some(work) = work {
                    for id in reached {
                        let c = self.chans.get_mut(&id).expect("reached");
                        if c.state == State::Open {
                            c.held.new_prev(job_id, work);
                        }
                    }
                }
                m
            }
            up::TARGET => {
                let to = self.address(input.u8(), false);
                self.reach = Some(self.reach_to(to));
                let target = pick_target(b);
                for id in self.reached(to) {
                    let c = self.chans.get_mut(&id).expect("reached");
                    if c.state == State::Open {
                        c.target = target;
                    }
                }
                Mining::SetTarget(SetTarget {
                    channel_id: to,
                    maximum_target: target,
                })
            }
            up::PREFIX => {
                let to = self.address(input.u8(), false);
                self.reach = Some(self.reach_to(to));
                let (m, prefix) = new_prefix(to, b);
                for id in self.reached(to) {
                    let c = self.chans.get_mut(&id).expect("reached");
                    if c.state == State::Open && prefix.len() + c.size <= 32 {
                        c.prefix = prefix.clone();
                    }
                }
                m
            }
            up::ACCEPT | up::REJECT => {
                let to = self.address(input.u8(), true);
                self.reach = Some(self.reach_to(to));
                let reached = self.reached(to);
                let seqs: Vec<u32> = reached
                    .first()
                    .map(|c| self.chans[c].flights.iter().map(|f| f.seq).collect())
                    .unwrap_or_default();
                let (m, v) = if kind == up::ACCEPT {
                    success(to, b, &seqs, input)
                } else {
                    error(to, b, &seqs)
                };
                self.settle_on(&reached, &v);
                m
            }
            up::CLOSE => {
                let to = self.address(input.u8(), false);
                self.reach = Some(self.reach_to(to));
                for id in self.reached(to) {
                    let c = self.chans.get_mut(&id).expect("reached");
                    c.state = State::ClosedByPool;
                    for f in c.flights.drain(..) {
                        self.expected
                            .push((id, f.seq, f.device, UpstreamVerdict::Unanswered));
                    }
                }
                Mining::CloseChannel(CloseChannel {
                    channel_id: to,
                    reason_code: "pool closing".into(),
                })
            }
            _ => {
                let to = self.address(input.u8(), false);
                // Only `UpdateChannelError` is routed (to its channel); the rest reach nobody.
                self.reach = Some(if b % 5 == 0 {
                    self.reach_to(to)
                } else {
                    Reach::Nobody
                });
                stray(
                    b,
                    to,
                    (GROUPS[0], to),
                    Mining::OpenExtendedMiningChannel(
                        sv2::messages::mining::OpenExtendedMiningChannel {
                            request_id: 1,
                            user_identity: "farm.miner1".into(),
                            nominal_hash_rate: 1.0,
                            max_target: Target::MAX,
                            min_extranonce_size: 4,
                        },
                    ),
                )
            }
        }
    }

    /// A verdict on the channels it reaches: their shares settled as the rules give.
    fn settle_on(&mut self, reached: &[u32], v: &Verdict) {
        for &id in reached {
            let c = self.chans.get_mut(&id).expect("reached");
            let mut out = Vec::new();
            apply_verdict(&mut c.flights, v, &mut out);
            self.expected
                .extend(out.into_iter().map(|(seq, d, v)| (id, seq, d, v)));
        }
    }

    /// The answer to a channel request (`b % 8`: 0-5 opened, 6 refused, 7 a request never
    /// made) and what the core must do about it.
    fn answer(&mut self, b: u8, input: &mut Input<'_>) -> Mining {
        let which = input.u8();
        let g = input.u8();
        let target = pick_target(input.u8());
        let pending: Vec<u32> = self.requests.keys().copied().collect();
        let request_id = match (pick(&pending, which & 0x7f), b % 8) {
            (Some(r), 0..=6) => r,
            _ => self
                .used_requests
                .iter()
                .max()
                .map_or(0, |m| m + 1 + u32::from(which % 4)),
        };
        let request = self.requests.remove(&request_id);
        self.reach = Some(match &request {
            Some(r) if r.abandoned.is_none() => Reach::Device(r.device),
            _ => Reach::Nobody,
        });
        if b % 8 == 6 || (b % 8 == 7 && which & 0x80 != 0) {
            // Refused: the device's channel_lost closes it; a request given up stays so.
            return Mining::OpenMiningChannelError(OpenMiningChannelError {
                request_id,
                error_code: "unknown-user".into(),
            });
        }
        let (size, prefix_len) = channel_shape(b);
        let size = size.min(32 - prefix_len);
        let group = match g % 8 {
            0 => GROUPS[0],
            1 => GROUPS[1],
            _ => 0,
        };
        let usable = size >= self.c.config.min_extranonce2_size.max(1);
        // An id closed earlier on this connection, reused: only for a request still wanted,
        // whose answer ends the old channel (its shares settled, unanswered) whether the
        // new one is usable or not.
        let closed = self.chan_ids(|c| c.state != State::Open);
        let live = request.as_ref().is_some_and(|r| r.abandoned.is_none());
        let channel_id = match pick(&closed, g >> 4) {
            Some(id) if which & 0x80 != 0 && live => id,
            _ => {
                self.next_channel += 1;
                self.next_channel - 1
            }
        };
        let prefix: Vec<u8> = (0..prefix_len)
            .map(|i| (channel_id as u8) ^ (i as u8))
            .collect();
        if let Some(r) = request {
            if let Some(old) = self.chans.remove(&channel_id) {
                for f in &old.flights {
                    self.expected
                        .push((channel_id, f.seq, f.device, UpstreamVerdict::Unanswered));
                }
                self.retired.push(old);
            }
            let mut state = State::Open;
            if let Some(reason) = r.abandoned {
                state = State::ClosedByCore;
                self.closes.push((channel_id, reason));
            } else if !usable {
                state = State::ClosedByCore;
                self.closes.push((channel_id, REASON_UNUSABLE));
            }
            self.chans.insert(
                channel_id,
                Chan {
                    device: r.device,
                    group,
                    prefix: prefix.clone(),
                    size,
                    target,
                    held: Held::default(),
                    flights: VecDeque::new(),
                    state,
                },
            );
        }
        Mining::OpenExtendedMiningChannelSuccess(OpenExtendedMiningChannelSuccess {
            request_id,
            channel_id,
            target,
            extranonce_size: size as u16,
            extranonce_prefix: prefix,
            group_channel_id: group,
        })
    }

    /// A raw message from the input, if it names no request or channel of the connection
    /// (those the model builds itself).
    fn raw(&mut self, input: &mut Input<'_>) -> Option<Mining> {
        let known = |c: u32| self.chans.contains_key(&c) || GROUPS.contains(&c);
        raw_message(input, |r| self.used_requests.contains(&r), known)
    }

    /// A message the core sent: checked; a share submission described (channel, sequence
    /// number, hash); a close noted.
    fn sent(
        &mut self,
        m: Mining,
        subs: &mut Vec<(u32, u32, Hash256)>,
        closes: &mut Vec<(u32, String)>,
    ) {
        encodes_back(&m);
        match m {
            Mining::OpenExtendedMiningChannel(o) => {
                assert!(self.c.connected, "a channel asked for with no connection");
                let n: u64 = o
                    .user_identity
                    .strip_prefix("farm.miner")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("channel identity {}", o.user_identity));
                let device = DeviceId(n);
                assert!(
                    self.c.devices.iter().any(|d| d.id == device),
                    "a channel asked for device {n}, not connected"
                );
                assert!(
                    self.used_requests.insert(o.request_id),
                    "request id {} used twice on one connection",
                    o.request_id
                );
                assert!(
                    self.pending_of(device).is_none() && self.open_chan_of(device).is_none(),
                    "a second channel asked for device {n}"
                );
                assert_eq!(
                    usize::from(o.min_extranonce_size),
                    self.c.config.min_extranonce2_size,
                    "a device takes its channel's whole extranonce"
                );
                assert!(o.nominal_hash_rate >= 0.0 && o.nominal_hash_rate.is_finite());
                self.requests.insert(
                    o.request_id,
                    Request {
                        device,
                        asked: self.c.now,
                        abandoned: None,
                    },
                );
            }
            Mining::UpdateChannel(u) => {
                self.open_chan(u.channel_id, "an update for");
                assert!(u.nominal_hash_rate >= 0.0 && u.nominal_hash_rate.is_finite());
            }
            Mining::SubmitSharesExtended(s) => {
                let c = self.open_chan(s.channel_id, "a share on");
                let hash = submission_hash(&s, &c.held.jobs, c.size, &self.c.config);
                subs.push((s.channel_id, s.sequence_number, hash));
            }
            Mining::CloseChannel(c) => closes.push((c.channel_id, c.reason_code)),
            other => panic!("the core sent {}, which a client never sends", other.name()),
        }
    }

    /// Events tagged as the code promises; channel failures justified; a silent pool fails
    /// the connection over.
    fn check_scopes(&mut self, tagged: &[Tagged]) {
        for t in tagged {
            match (&t.event, t.scope) {
                (Event::ChannelOpenFailed(code), Scope::Connection) => {
                    assert_eq!(code, REASON_SILENT, "a connection-wide refusal");
                    let silent = self.requests.values().any(|r| {
                        r.abandoned.is_none()
                            && self.c.now.millis_since(r.asked) > self.timeout_ms
                            && self.heard.is_none_or(|h| h < r.asked)
                    });
                    assert!(
                        silent,
                        "the connection given up, though no request was overdue in silence"
                    );
                    self.fail_over = true;
                }
                (Event::ProtocolError(_), Scope::Connection) => {}
                (e, Scope::Connection) => panic!("{e:?} for the whole connection"),
                (Event::ChannelOpenFailed(code), Scope::Device(id))
                    if code == REASON_UNANSWERED =>
                {
                    let rid = self
                        .pending_of(id)
                        .expect("a request given up that was not pending");
                    let r = self.requests.get_mut(&rid).expect("pending");
                    assert!(
                        self.c.now.millis_since(r.asked) > self.timeout_ms,
                        "a request given up before its time"
                    );
                    assert!(
                        self.heard.is_some_and(|h| h >= r.asked),
                        "a request given up though the pool was silent since"
                    );
                    r.abandoned = Some(REASON_UNANSWERED);
                }
                (Event::ShareForwarded { device, .. }, Scope::Device(id))
                | (Event::ShareJudged { device, .. }, Scope::Device(id)) => {
                    assert_eq!(*device, id, "an event tagged with another device");
                }
                (_, Scope::Device(id)) => {
                    assert!(
                        self.c.devices.iter().any(|d| d.id == id)
                            || matches!(t.event, Event::UpstreamResult(_)),
                        "an event for device {id:?}, not connected"
                    );
                }
            }
        }
    }

    /// Accepted shares go upstream exactly when they should, on their device's channel.
    fn check_forwarding(
        &mut self,
        line_dev: Option<usize>,
        outcome: &Option<LineOutcome>,
        accepted_hash: Option<Hash256>,
        tagged: &[Tagged],
        subs: Vec<(u32, u32, Hash256)>,
    ) {
        let forwarded = forwarded(tagged.iter().map(|t| &t.event));
        let Some((share, is_block)) = accepted_share(outcome, &forwarded, !subs.is_empty()) else {
            return;
        };
        let dev = self.c.devices[line_dev.expect("a device's line")].id;
        let chan = self.open_chan_of(dev);
        let should =
            chan.is_some_and(|c| self.chans[&c].target.is_met_by(&share.hash.0) || is_block);
        let Some((seq, (sub_chan, sub_seq, hash))) = forwarded_once(
            &forwarded,
            subs,
            should,
            dev,
            format_args!(
                "forwarding of a share (channel {chan:?}, block {is_block}) against its channel's target"
            ),
        ) else {
            return;
        };
        let c = chan.expect("open");
        let device = dev;
        assert_eq!(
            sub_chan, c,
            "a share submitted on another channel than its device's"
        );
        assert_eq!(sub_seq, seq);
        assert_eq!(
            Some(hash),
            accepted_hash,
            "the pool hashes the submission otherwise than the device"
        );
        if let Some(last) = self.last_seq.insert(dev, seq) {
            assert_eq!(
                seq,
                last.wrapping_add(1),
                "a device's sequence numbers in order"
            );
        }
        let window = self.c.config.max_in_flight.max(1);
        let chan = self.chans.get_mut(&c).expect("open");
        chan.flights.push_back(Flight { seq, device });
        self.sent_at.insert((device, seq), self.c.now);
        while chan.flights.len() > window {
            let f = chan.flights.pop_front().expect("over full");
            self.expected
                .push((c, f.seq, f.device, UpstreamVerdict::Unanswered));
        }
    }

    /// What holds whatever the step.
    fn check_state(&mut self) {
        let flights: usize = self.chans.values().map(|c| c.flights.len()).sum();
        assert_eq!(Mode::in_flight(&self.c.t), flights, "shares in flight");
        let oldest = self
            .chans
            .values()
            .flat_map(|c| &c.flights)
            .map(|f| self.sent_at[&(f.device, f.seq)])
            .min();
        assert_eq!(
            Mode::oldest_in_flight(&self.c.t),
            oldest,
            "when the oldest share in flight went upstream"
        );
        let rate = Mode::nominal_hash_rate(&self.c.t);
        assert!(
            rate.is_finite() && rate >= 0.0 && rate.is_sign_positive(),
            "nominal hash rate {rate}"
        );
        assert_eq!(Mode::is_ready(&self.c.t), self.c.connected);
        assert_eq!(
            self.c.t.devices().count(),
            self.c.devices.len(),
            "devices held"
        );
        for d in &self.c.devices {
            assert!(
                self.c.t.device(d.id).is_some(),
                "device {:?} not held",
                d.id
            );
        }
        let open: Vec<(&u32, &Chan)> = self
            .chans
            .iter()
            .filter(|(_, c)| c.state == State::Open)
            .collect();
        let opening = self
            .requests
            .values()
            .filter(|r| r.abandoned.is_none())
            .count();
        let draining = self
            .chans
            .values()
            .filter(|c| c.state == State::ClosedByCore && !c.flights.is_empty())
            .count();
        let census = Mode::channels(&self.c.t);
        assert_eq!(Mode::channels_open(&self.c.t), open.len(), "channels open");
        assert_eq!(census.open, open.len(), "census: open");
        assert_eq!(census.opening, opening, "census: opening");
        assert_eq!(census.draining, draining, "census: draining");
        let difficulties = open
            .iter()
            .map(|(_, c)| Difficulty::from_target(c.target).as_f64());
        let range = difficulties.fold(None, |r: Option<(f64, f64)>, d| {
            Some(r.map_or((d, d), |(lo, hi)| (lo.min(d), hi.max(d))))
        });
        assert_eq!(
            census.difficulty, range,
            "census: the open channels' difficulties"
        );
        assert_eq!(self.c.t.channels_opening(), opening);
        assert_eq!(self.c.t.channels_draining(), draining);
        for &(&id, c) in &open {
            assert!(
                self.c.devices.iter().any(|d| d.id == c.device),
                "channel {id} open for device {:?}, gone",
                c.device
            );
            let u = self
                .c
                .t
                .channel_of(c.device)
                .unwrap_or_else(|| panic!("channel {id} open, but not its device's"));
            assert_eq!(u.channel_id(), Some(id));
            assert_eq!(
                &u.extranonce_prefix()[..],
                &c.prefix[..],
                "channel {id}'s prefix"
            );
            assert_eq!(u.extranonce_size(), c.size, "channel {id}'s size");
            assert_eq!(u.target(), c.target, "channel {id}'s target");
        }
        for r in self.requests.values().filter(|r| r.abandoned.is_none()) {
            assert!(
                self.c.devices.iter().any(|d| d.id == r.device),
                "a request pending for device {:?}, gone",
                r.device
            );
        }
        // A channel, or a request for one, for every device that wants an extranonce.
        for d in &self.c.devices {
            let wants = self.c.t.device(d.id).is_some_and(|x| x.wants_extranonce());
            let has = self.pending_of(d.id).is_some() || self.open_chan_of(d.id).is_some();
            if self.c.connected {
                assert_eq!(
                    wants, has,
                    "device {:?}: wants an extranonce {wants}, has a channel or a request {has}",
                    d.id
                );
            } else {
                assert!(!has);
                assert!(self.c.t.channel_of(d.id).is_none());
            }
        }
    }
}

impl Harness for World {
    type Core = PerDevice;

    fn common(&self) -> &Common<PerDevice> {
        &self.c
    }

    fn common_mut(&mut self) -> &mut Common<PerDevice> {
        &mut self.c
    }

    fn with_cx<R>(&mut self, i: usize, f: impl FnOnce(&mut Dev, &Cx<'_>) -> R) -> R {
        let view = Channels {
            chans: &self.chans,
            retired: &self.retired,
        };
        let cx = Cx {
            now: self.c.now,
            config: &self.c.config,
            view: &view,
        };
        f(&mut self.c.devices[i], &cx)
    }

    fn settle(
        &mut self,
        line: Option<(usize, Sent, usize)>,
        outcome: Option<LineOutcome>,
        may: MayWrite,
    ) {
        let mut tagged: Vec<Tagged> = Vec::new();
        while let Some(t) = Mode::poll_event(&mut self.c.t) {
            tagged.push(t);
        }
        let flights: usize = self.chans.values().map(|c| c.flights.len()).sum();
        assert!(
            tagged.len() <= 8 + 4 * self.c.devices.len() + flights + self.expected.len(),
            "{} events in one step",
            tagged.len()
        );
        let mut subs = Vec::new();
        let mut closes = Vec::new();
        let mut upstream = 0;
        while let Some(m) = Mode::poll_transmit(&mut self.c.t) {
            upstream += 1;
            self.sent(m, &mut subs, &mut closes);
        }
        assert!(
            upstream <= STEP_UPSTREAM + 2 * self.c.devices.len(),
            "{upstream} messages upstream in one step"
        );
        self.check_scopes(&tagged);

        // The line's outcome, the share it judged, and where it went.
        let verdict = verdict_of(&outcome);
        let mut accepted_hash = None;
        if let (Some((i, sent, _)), Some(outcome)) = (&line, &outcome) {
            let id = self.c.devices[*i].id;
            let events: Vec<Event> = tagged
                .iter()
                .filter(|t| t.scope == Scope::Device(id))
                .map(|t| t.event.clone())
                .collect();
            accepted_hash = self.with_cx(*i, |d, cx| d.check_line(cx, sent, outcome, &events));
        }
        self.check_forwarding(
            line.as_ref().map(|l| l.0),
            &outcome,
            accepted_hash,
            &tagged,
            subs,
        );

        // The verdicts: exactly those expected, each tagged with its device and channel.
        let mut got: Vec<Settled> = tagged
            .iter()
            .filter_map(|t| match &t.event {
                Event::UpstreamResult(r) => {
                    assert_eq!(
                        t.scope,
                        Scope::Device(r.device),
                        "a verdict tagged otherwise"
                    );
                    let v = upstream_results([&t.event]).remove(0);
                    Some((
                        t.channel.expect("a verdict names its channel"),
                        v.0,
                        v.1,
                        v.2,
                    ))
                }
                _ => None,
            })
            .collect();
        let mut expected = std::mem::take(&mut self.expected);
        got.sort_by_key(|e| (e.0, e.1));
        expected.sort_by_key(|e| (e.0, e.1));
        assert_eq!(got, expected, "the upstream verdicts");

        // Every device's output, only where the core said there may be some.
        for i in 0..self.c.devices.len() {
            let mut got = HashMap::new();
            self.read_device(i, &line, &may, verdict, &mut got);
            let id = self.c.devices[i].id;
            for t in tagged.iter().filter(|t| t.scope == Scope::Device(id)) {
                if let Event::JobSent {
                    wire_id, devices, ..
                } = t.event
                {
                    assert_eq!(
                        got.get(&wire_id).copied().unwrap_or(0),
                        devices,
                        "JobSent {wire_id} names {devices} devices"
                    );
                }
            }
        }

        // Devices that want to be closed are closed, and what that sends is read.
        self.close_wanting();
        while let Some(m) = Mode::poll_transmit(&mut self.c.t) {
            let mut none = Vec::new();
            self.sent(m, &mut none, &mut closes);
            assert!(none.is_empty(), "a share sent as a device was closed");
        }
        assert!(
            Mode::poll_event(&mut self.c.t).is_none(),
            "an event from closing devices"
        );
        let mut want: Vec<(u32, String)> = std::mem::take(&mut self.closes)
            .into_iter()
            .map(|(c, r)| (c, r.to_owned()))
            .collect();
        want.sort();
        closes.sort();
        assert_eq!(closes, want, "the channels closed upstream");

        self.check_state();
        if std::mem::take(&mut self.fail_over) && self.c.connected {
            self.lose();
        }
    }

    /// Device `i` leaves (the harness's doing or the core's wish): its request is given up,
    /// its open channel closed.
    fn close_device(&mut self, i: usize) {
        let d = self.c.devices.remove(i);
        Mode::device_closed(&mut self.c.t, d.id);
        if let Some(rid) = self.pending_of(d.id) {
            self.requests.get_mut(&rid).expect("pending").abandoned = Some(REASON_DEVICE_LEFT);
        }
        if let Some(c) = self.open_chan_of(d.id) {
            self.chans.get_mut(&c).expect("open").state = State::ClosedByCore;
            self.closes.push((c, REASON_DEVICE_LEFT));
        }
    }

    fn lose(&mut self) {
        self.c.connected = false;
        Mode::upstream_lost(&mut self.c.t, self.c.now);
        for (id, mut c) in std::mem::take(&mut self.chans) {
            for f in c.flights.drain(..) {
                self.expected
                    .push((id, f.seq, f.device, UpstreamVerdict::Unanswered));
            }
            self.retired.push(c);
        }
        self.requests.clear();
        self.used_requests.clear();
        self.heard = None;
        self.settle(None, None, MayWrite::Anyone);
        assert_eq!(
            Mode::in_flight(&self.c.t),
            0,
            "shares in flight after the connection was lost"
        );
        assert_eq!(Mode::channels_open(&self.c.t), 0);
    }

    fn upstream(&mut self, kind: u8, input: &mut Input<'_>) {
        let m = self.message(kind, input);
        self.deliver(m);
    }

    fn upstream_raw(&mut self, input: &mut Input<'_>) {
        if let Some(m) = self.raw(input) {
            self.deliver(m);
        }
    }

    fn ticked(&mut self) {
        if self.c.connected {
            // Every request overdue while the pool answered others was given up.
            for (rid, r) in &self.requests {
                assert!(
                    r.abandoned.is_some()
                        || self.c.now.millis_since(r.asked) <= self.timeout_ms
                        || self.heard.is_none_or(|h| h < r.asked),
                    "request {rid} overdue and not given up"
                );
            }
        }
    }

    fn reconnect(&mut self) {
        self.c.connected = true;
        Mode::upstream_connected(&mut self.c.t, self.c.now);
        self.settle(None, None, MayWrite::Anyone);
    }
}

/// The `n`th of `list`, modulo its length.
fn pick(list: &[u32], n: u8) -> Option<u32> {
    (!list.is_empty()).then(|| list[usize::from(n) % list.len()])
}

fn run(config: TranslatorConfig, short_timeout: bool, input: &mut Input<'_>) {
    let mut w = World::new(config, short_timeout);
    w.play(input);
    assert!(w.closes.is_empty(), "channels to close with no connection");
    assert_eq!(w.c.t.devices().count(), 0);
    assert_eq!(Mode::in_flight(&w.c.t), 0);
    assert_eq!(w.c.t.channels_opening(), 0);
    assert_eq!(w.c.t.channels_draining(), 0);
    assert!(Mode::poll_transmit(&mut w.c.t).is_none());
}

/// One input: see the module documentation. Never panics unless an invariant breaks.
pub fn translator_per_device(data: &[u8]) {
    let mut input = Input::new(data);
    let c0 = input.u8();
    let c1 = input.u8();
    run(config(c0, c1), c0 & 1 != 0, &mut input);
}

/// Steps of the per-device script: the pool's side, addressed (see [`super::script`] for the
/// devices' side, the clock and the connection, which are written as for the aggregated
/// target).
impl super::script::Script {
    /// The pool opens the channel asked for by the `request`th pending request: 8 bytes to
    /// roll after a 4-byte prefix, no group, any share forwarded.
    pub fn grant(self, request: u8) -> Self {
        self.grant_with(request, 0xa0, 0x02, 0)
    }

    /// The same, shaped by `b` (bytes to roll `b >> 4`, prefix length `(b >> 2) & 3`; `b % 8`
    /// 0 to 5), `g` (`g % 8` 0 or 1: a group; with bit 7 of `request`, the id of the `g >> 4`th
    /// closed channel, reused) and `t` (the target).
    pub fn grant_with(self, request: u8, b: u8, g: u8, t: u8) -> Self {
        self.upstream(up::OPEN, &[b & !7, request, g, t])
    }

    /// The pool refuses the `request`th pending request.
    pub fn refuse(self, request: u8) -> Self {
        self.upstream(up::OPEN, &[6, request, 2, 0])
    }

    /// The address of the `k`th open channel (by id); 1 and 2 are the groups, 3 a closed
    /// channel, 0 an id never used.
    pub fn chan(k: u8) -> u8 {
        (k << 4) | 4
    }

    /// Work on a new block (prev hash from `seed`, regtest nBits) for `to`: a future job,
    /// then the prev hash naming it.
    pub fn work_on(self, to: u8, seed: u8) -> Self {
        self.upstream(up::JOB, &[0x41, to])
            .upstream(up::PREV_HASH, &[0x01, to, seed, 0x00])
    }

    /// More work on the same block for `to`.
    pub fn update_on(self, to: u8) -> Self {
        self.upstream(up::JOB, &[0x42, to, 0x02])
    }

    /// `SetTarget` for `to` (`b` picks the target: 0 any share, 4 difficulty 1, 5 none).
    pub fn target_on(self, to: u8, b: u8) -> Self {
        self.upstream(up::TARGET, &[b, to])
    }

    /// `SetExtranoncePrefix` for `to` (`b % 6` bytes).
    pub fn prefix_on(self, to: u8, b: u8) -> Self {
        self.upstream(up::PREFIX, &[b, to])
    }

    /// `SubmitShares.Success` for every share up to the `i`th in flight on `to` (channels
    /// with shares in flight first: `chan(k)` is the `k`th of those when there are any).
    pub fn accept_on(self, to: u8, i: u8) -> Self {
        self.upstream(up::ACCEPT, &[0x00, to, i])
    }

    /// `SubmitShares.Error` for the `i`th share in flight on `to`.
    pub fn reject_on(self, to: u8, i: u8) -> Self {
        self.upstream(up::REJECT, &[i, to])
    }

    /// `CloseChannel` for `to`.
    pub fn close_on(self, to: u8) -> Self {
        self.upstream(up::CLOSE, &[0, to])
    }
}

#[cfg(test)]
mod tests {
    use super::super::script::Script;
    use super::*;

    #[test]
    fn devices_mine_on_their_own_channels_and_leave() {
        let mut s = Script::per_device(0, 0);
        for d in 0..2 {
            s = s.connect().configure(d).subscribe(d).authorize(d, 0);
        }
        let s = s
            .grant(0)
            .grant(0)
            .work_on(Script::chan(0), 1)
            .work_on(Script::chan(1), 2)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .close(0)
            .accept_on(Script::chan(0), 0)
            .lost()
            .reconnected()
            .grant(0)
            .work_on(Script::chan(0), 3)
            .submit(0, 2, 3)
            .build();
        translator_per_device(&s);
    }

    #[test]
    fn arbitrary_inputs_hold_the_invariants() {
        for data in crate::fuzz_support::arbitrary_inputs() {
            translator_per_device(&data);
        }
    }
}
