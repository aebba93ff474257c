//! The farm edge: one pass over each fleet log, device by device.
//!
//! A job counts from the moment its device can hash on it: a `JobReceived`, or for an SV2 future
//! job the device's `JobActivated`. Its template is found by fingerprint (SV1 notify, SV2
//! extended job) or, for SV2 standard jobs that carry only a merkle root, through the job
//! source's own `JobSent` on the same channel and job id. From there:
//! - `time_to_job_ms`: one sample per (template, device), from the node's `TemplateCreated`,
//!   for templates the node made in the measured window; clustered by template.
//! - `time_to_job_prevhash_ms`: one sample per (tip, device), from the tip's first existence to
//!   the device's first job on it, for tips new in the measured window; clustered by tip.
//! - `time_to_first_job_ms`: per connection opened before the drain (warm-up included: that is
//!   when devices connect), from `ConnectionOpened` to its first job; each its own cluster.
//! - template value stretches (see [`super::value`]).

use std::collections::{HashMap, HashSet};

use events::{EventKind, Fingerprint, Hash256, JobId, Perspective};

use super::index::Index;
use super::input::Window;
use super::series::Series;
use super::shares::{Matched, ShareBook};
use super::unmatched::Unmatched;
use super::value::{add_stretch, NetworkValue, ValueTally};
use crate::stats::Samples;

/// SV2 future jobs a device may hold before one is activated.
const MAX_FUTURE_JOBS: usize = 16;

/// Workable jobs whose prev hash a device remembers, for its shares' verdicts. A share on an
/// older job keeps the pool's reason (it is stale by then anyway, or a fault); 32 jobs cover a
/// tip's worth of template updates at the lab's rates.
const MAX_RECENT_JOBS: usize = 32;

#[derive(Default)]
struct Device {
    /// Value of the template being worked on, when known, and since when.
    value: Option<u64>,
    since: u64,
    /// A connection opened that has not had its first job yet.
    opened: Option<u64>,
    future: Vec<(Option<u32>, JobId, Option<Fingerprint>)>,
    /// The prev hashes of its latest workable jobs, newest last.
    recent: std::collections::VecDeque<(Option<u32>, JobId, Hash256)>,
}

impl Device {
    fn job_prev_hash(&self, channel: Option<u32>, job_id: JobId) -> Option<Hash256> {
        self.recent
            .iter()
            .rev()
            .find(|(c, id, _)| *c == channel && *id == job_id)
            .map(|(_, _, p)| *p)
    }

    /// The prev hash of its newest workable job: what its pool last told it the tip was.
    fn current_prev(&self) -> Option<Hash256> {
        self.recent.back().map(|(_, _, p)| *p)
    }
}

/// `HashesDone` of one fleet log: the delta at time t covers the time since the previous one,
/// so the window's hashes are those recorded after the last record at or before the warm-up's
/// end, over the time up to the last record before the drain.
#[derive(Clone, Copy, Default)]
struct HashClock {
    before: Option<u64>,
    sum: u64,
    last: Option<u64>,
}

impl HashClock {
    fn add(&mut self, w: &Window, ts: u64, hashes: u64) {
        if ts <= w.warmup_end_ns {
            self.before = Some(self.before.map_or(ts, |b| b.max(ts)));
        } else if ts <= w.drain_start_ns {
            self.sum += hashes;
            self.last = Some(self.last.map_or(ts, |l| l.max(ts)));
        }
    }

    fn rate(&self, w: &Window) -> Option<f64> {
        let from = self.before.unwrap_or(w.warmup_end_ns);
        let to = self.last?;
        (to > from).then(|| self.sum as f64 / ((to - from) as f64 / 1e9))
    }
}

/// Per fleet log: process-wide records (`device: None`) when there are any, else the sum of
/// per-device ones, never both.
#[derive(Default)]
struct FleetHashes {
    process: HashClock,
    devices: HashClock,
    process_seen: bool,
    device_series: Vec<(usize, u64)>,
}

pub(crate) struct FleetPass<'a> {
    index: &'a Index,
    window: Window,
    net: NetworkValue,
    ids: HashMap<(u32, u64), u32>,
    devices: Vec<Device>,
    pub shares: ShareBook,
    templates_reached: Reach,
    tips_reached: Reach,
    pub time_to_job: Samples,
    pub time_to_prevhash: Samples,
    pub time_to_first_job: Samples,
    connections: u32,
    pub value: ValueTally,
    /// Accepted blocks whose solving share a device sent: hash -> when.
    pub block_shares: HashMap<Hash256, u64>,
    /// Blocks a node refused whose share a device sent: hash -> when (what a pool without
    /// events submitted in vain).
    pub refused_block_shares: HashMap<Hash256, u64>,
    pub unmatched: Unmatched,
    pub series: Series,
    hashes: Vec<FleetHashes>,
    /// The job source writes no events (a third-party pool): SV2 standard jobs, which carry
    /// only a merkle root, cannot be tied to a template, and are not counted as unmatched.
    blind_to_standard_jobs: bool,
    /// Jobs that could not be tied for that reason.
    pub untied_standard_jobs: u64,
}

fn pair(a: u32, b: u32) -> u64 {
    (u64::from(a) << 32) | u64::from(b)
}

/// Devices reaching what the node makes (templates, tips): each device's first job on one,
/// and the earliest device's delay to each.
#[derive(Default)]
struct Reach {
    seen: HashSet<u64>,
    first: HashMap<u32, u64>,
}

impl Reach {
    /// Device `d` got a job on `k` `delay` ns after `k` appeared: the device's first such job
    /// adds its delay to `all`.
    fn reached(&mut self, k: u32, d: u32, delay: u64, all: &mut Samples) {
        if self.seen.insert(pair(k, d)) {
            all.push(k, delay);
            let first = self.first.entry(k).or_insert(delay);
            *first = (*first).min(delay);
        }
    }

    /// The earliest device's delay to each one reached.
    fn firsts(&self) -> Samples {
        let mut firsts = Samples::new();
        for (&k, &delay) in &self.first {
            firsts.push(k, delay);
        }
        firsts
    }
}

impl<'a> FleetPass<'a> {
    /// `series` already holds what other logs added (bytes); the fleet adds shares and hashes.
    pub(crate) fn new(
        index: &'a Index,
        window: Window,
        series: Series,
        job_source_logged: bool,
    ) -> Self {
        FleetPass {
            index,
            window,
            net: NetworkValue::new(&index.templates.node_timeline),
            ids: HashMap::new(),
            devices: Vec::new(),
            shares: ShareBook::new(window),
            templates_reached: Reach::default(),
            tips_reached: Reach::default(),
            time_to_job: Samples::new(),
            time_to_prevhash: Samples::new(),
            time_to_first_job: Samples::new(),
            connections: 0,
            value: ValueTally::default(),
            block_shares: HashMap::new(),
            refused_block_shares: HashMap::new(),
            unmatched: Unmatched::default(),
            series,
            hashes: Vec::new(),
            blind_to_standard_jobs: !job_source_logged,
            untied_standard_jobs: 0,
        }
    }

    fn device(&mut self, log: u32, id: u64) -> u32 {
        let next = self.devices.len() as u32;
        let i = *self.ids.entry((log, id)).or_insert(next);
        if i == next {
            self.devices.push(Device::default());
        }
        i
    }

    /// Feeds one event of fleet log number `log`.
    pub(crate) fn on_event(&mut self, log: u32, ts: u64, kind: &EventKind) {
        match kind {
            EventKind::JobReceived(j) => {
                let d = self.device(log, j.device);
                if j.future {
                    let f = &mut self.devices[d as usize].future;
                    if f.len() == MAX_FUTURE_JOBS {
                        f.remove(0);
                    }
                    f.push((j.channel, j.job_id, j.fingerprint));
                } else {
                    self.workable(d, ts, j.fingerprint, j.channel, j.job_id, j.prev_hash);
                }
            }
            EventKind::JobActivated(a) => {
                let d = self.device(log, a.conn);
                let f = &mut self.devices[d as usize].future;
                match f
                    .iter()
                    .position(|(c, id, _)| *c == a.channel && *id == a.job_id)
                {
                    Some(k) => {
                        let (channel, job_id, fp) = f.remove(k);
                        let fp = a.fingerprint.or(fp);
                        self.workable(d, ts, fp, channel, job_id, Some(a.prev_hash));
                    }
                    None => {
                        self.unmatched.matchable += 1;
                        self.unmatched.add("activation_without_future_job");
                    }
                }
            }
            EventKind::ShareSent(s) => {
                let d = self.device(log, s.device);
                let prev = self.devices[d as usize].job_prev_hash(s.channel, s.job_id);
                self.shares
                    .sent(d, s.seq, ts, s.difficulty, prev, Some(&mut self.series));
                if let Some(h) = s.hash {
                    let chain = &self.index.chain;
                    let shares = if chain.accepted.contains_key(&h) {
                        Some(&mut self.block_shares)
                    } else if chain.submissions.contains(&h) {
                        Some(&mut self.refused_block_shares)
                    } else {
                        None
                    };
                    if let Some(shares) = shares {
                        let t = shares.entry(h).or_insert(ts);
                        *t = (*t).min(ts);
                    }
                }
            }
            EventKind::ShareResult(r) if r.perspective == Perspective::Received => {
                let d = self.device(log, r.conn);
                self.unmatched.matchable += 1;
                let (chain, dev) = (&self.index.chain, &self.devices[d as usize]);
                // Superseded at the pool when it answered: it had already sent this device work
                // on another prev hash (one connection keeps the pool's order), or the network
                // had a block on top of the share's by the time the verdict came.
                let superseded = |prev: Hash256, at: u64| {
                    dev.current_prev().is_some_and(|c| c != prev) || chain.superseded(&prev, at)
                };
                if let Matched::Unmatched =
                    self.shares
                        .verdict(d, r.seq, ts, r.verdict, superseded, Some(&mut self.series))
                {
                    self.unmatched.add("verdict_without_share");
                }
            }
            EventKind::ConnectionOpened(c) => {
                let d = self.device(log, c.conn);
                self.stop_work(d, ts);
                self.devices[d as usize].opened = Some(ts);
            }
            EventKind::ConnectionClosed(c) => {
                let d = self.device(log, c.conn);
                self.stop_work(d, ts);
                let dev = &mut self.devices[d as usize];
                dev.opened = None;
                dev.future.clear();
                dev.recent.clear();
            }
            EventKind::HashesDone(h) => {
                let log = log as usize;
                if self.hashes.len() <= log {
                    self.hashes.resize_with(log + 1, FleetHashes::default);
                }
                let fh = &mut self.hashes[log];
                let sec = self.window.second(ts);
                match h.device {
                    None => {
                        fh.process_seen = true;
                        fh.process.add(&self.window, ts, h.hashes);
                        if let Some(sec) = sec {
                            self.series.add(Series::HASHES, sec, h.hashes);
                        }
                    }
                    Some(_) => {
                        fh.devices.add(&self.window, ts, h.hashes);
                        if let Some(sec) = sec {
                            fh.device_series.push((sec, h.hashes));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// The device stops working on its template (disconnected, or reconnecting).
    fn stop_work(&mut self, d: u32, ts: u64) {
        let w = (self.window.warmup_end_ns, self.window.drain_start_ns);
        let dev = &mut self.devices[d as usize];
        if let Some(v) = dev.value.take() {
            add_stretch(&mut self.value, &self.net, w, (dev.since, ts), v);
        }
    }

    /// Device `d` can hash on a job from `ts`.
    fn workable(
        &mut self,
        d: u32,
        ts: u64,
        fingerprint: Option<Fingerprint>,
        channel: Option<u32>,
        job_id: JobId,
        prev_hash: Option<Hash256>,
    ) {
        let index: &'a Index = self.index;
        let book = &index.templates;
        let w = self.window;
        if let Some(opened) = self.devices[d as usize].opened.take() {
            if opened >= w.start_ns && opened < w.drain_start_ns {
                self.time_to_first_job
                    .push(self.connections, ts.saturating_sub(opened));
                self.connections += 1;
            }
        }

        let found = match fingerprint {
            Some(fp) => book.by_fingerprint(fp),
            None => channel.and_then(|c| index.jobs.template(book, c, job_id)),
        };
        let template = found.filter(|&i| prev_hash.is_none_or(|p| book.get(i).prev_hash == p));
        if fingerprint.is_none() && channel.is_some() && self.blind_to_standard_jobs {
            self.untied_standard_jobs += 1;
        } else {
            self.unmatched.matchable += 1;
            if template.is_none() {
                self.unmatched.add("job_without_template");
            }
        }

        self.stop_work(d, ts);
        let prev = prev_hash.or_else(|| template.map(|i| book.get(i).prev_hash));
        let dev = &mut self.devices[d as usize];
        dev.value = template.map(|i| book.get(i).value_sats);
        dev.since = ts;
        if let Some(p) = prev {
            if dev.recent.len() == MAX_RECENT_JOBS {
                dev.recent.pop_front();
            }
            dev.recent.push_back((channel, job_id, p));
        }

        if let Some(i) = template {
            let t = book.get(i);
            if t.from_node && w.measured(t.first_ns) {
                if ts < t.first_ns {
                    self.unmatched.add("job_before_its_template");
                } else {
                    let delay = ts - t.first_ns;
                    self.templates_reached
                        .reached(i, d, delay, &mut self.time_to_job);
                }
            }
        }

        let chain = &index.chain;
        if let Some(k) = prev.and_then(|p| chain.tip_index(&p)) {
            let tip = chain.tip(k);
            if w.measured(tip.first_ns) {
                if ts < tip.first_ns {
                    self.unmatched.add("job_before_its_tip");
                } else {
                    let delay = ts - tip.first_ns;
                    self.tips_reached
                        .reached(k, d, delay, &mut self.time_to_prevhash);
                }
            }
        }
    }

    /// Closes what is still open at the end of the run.
    pub(crate) fn finish(&mut self) -> FleetOutcome {
        for d in 0..self.devices.len() as u32 {
            self.stop_work(d, self.window.drain_start_ns);
        }
        self.shares.finish();
        let mut rates = Vec::new();
        for fh in &self.hashes {
            let clock = if fh.process_seen {
                fh.process
            } else {
                for &(sec, n) in &fh.device_series {
                    self.series.add(Series::HASHES, sec, n);
                }
                fh.devices
            };
            rates.extend(clock.rate(&self.window));
        }
        let book = &self.index.templates;
        let created = book
            .templates
            .iter()
            .filter(|t| t.from_node && self.window.measured(t.first_ns))
            .count() as u64;
        FleetOutcome {
            time_to_job_first: self.templates_reached.firsts(),
            time_to_prevhash_first: self.tips_reached.firsts(),
            achieved_hps: (!rates.is_empty()).then(|| rates.iter().sum()),
            templates_created: created,
            templates_reached: self.templates_reached.first.len() as u64,
        }
    }
}

/// What [`FleetPass::finish`] adds to the pass's own fields.
pub(crate) struct FleetOutcome {
    pub time_to_job_first: Samples,
    pub time_to_prevhash_first: Samples,
    /// Summed over fleet processes (they hash at the same time).
    pub achieved_hps: Option<f64>,
    pub templates_created: u64,
    pub templates_reached: u64,
}
