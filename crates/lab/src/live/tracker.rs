//! Time to job and share latency as they happen, from the roles' events read while the run goes
//! on (sans-IO: events in, observations out; no clock, no files).
//!
//! This is a live view, not the run's figures: it counts from the fleets' start (warm-up
//! included), ties a device's job to its template by fingerprint, or for an SV2 standard job
//! through the `JobSent` of the role that served it, and keeps bounded memory of templates and
//! jobs. The figures that count are computed after the run from the whole logs
//! (docs/metrics.md); these agree with them in steady state.

use std::collections::{HashMap, VecDeque};

use events::{EventKind, Fingerprint, JobId, Perspective, Reason, Verdict};

use crate::metrics::{RoleKind, Site};

/// Templates remembered for matching (a few minutes of the lab's template rates).
const MAX_TEMPLATES: usize = 16_384;
/// Jobs sent remembered per configuration, for tying standard jobs to templates.
const MAX_JOBS: usize = 65_536;
/// Shares in flight remembered per configuration.
const MAX_PENDING_SHARES: usize = 65_536;
/// Templates a device remembers having counted (a job repeated for the same template counts
/// once).
const DEVICE_MEMORY: usize = 8;

/// Which events a log gives the tracker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRole {
    /// `None` for simnet, which serves every configuration.
    pub config: Option<String>,
    /// What the role is; `None` for simnet.
    pub kind: Option<RoleKind>,
    /// The site it runs at.
    pub site: Site,
}

/// What one event showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Observation {
    /// A device could hash on a template this long after the node made it.
    TimeToJob {
        /// The configuration.
        config: String,
        /// The delay, in seconds.
        seconds: f64,
    },
    /// A share's verdict reached its device this long after it was sent.
    ShareLatency {
        /// The configuration.
        config: String,
        /// The delay, in seconds.
        seconds: f64,
    },
    /// A device's share was answered.
    Verdict {
        /// The configuration.
        config: String,
        /// The verdict.
        outcome: Outcome,
    },
}

/// A share's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted.
    Accepted,
    /// Rejected as stale (job superseded).
    Stale,
    /// Rejected for another reason.
    Rejected,
}

/// Insertion-ordered map that forgets its oldest entries beyond `cap`.
struct Bounded<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    cap: usize,
}

impl<K: std::hash::Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            map: HashMap::new(),
            order: VecDeque::new(),
            cap,
        }
    }

    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k.clone(), v).is_none() {
            self.order.push_back(k);
            if self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }

    fn remove(&mut self, k: &K) -> Option<V> {
        // The key stays in `order` until it would be evicted; removing it from the map is
        // enough for lookups.
        self.map.remove(k)
    }
}

/// A device within one fleet log.
type DeviceKey = (usize, u64);

/// Per configuration.
struct Config {
    /// Standard jobs by (site that sent them, channel, job id).
    jobs: Bounded<(Site, u32, JobId), Fingerprint>,
    /// Shares sent, by (device, sequence number): when.
    pending: Bounded<(DeviceKey, u64), u64>,
    /// Per device: the templates already counted, newest last; SV2 future jobs waiting.
    devices: HashMap<DeviceKey, Device>,
}

#[derive(Default)]
struct Device {
    counted: VecDeque<Fingerprint>,
    future: VecDeque<(Option<u32>, JobId, Option<Fingerprint>)>,
}

impl Config {
    fn new() -> Self {
        Config {
            jobs: Bounded::new(MAX_JOBS),
            pending: Bounded::new(MAX_PENDING_SHARES),
            devices: HashMap::new(),
        }
    }
}

/// The matching state of a run's logs.
pub struct Tracker {
    /// When each node template was made.
    templates: Bounded<Fingerprint, u64>,
    configs: HashMap<String, Config>,
}

impl Default for Tracker {
    fn default() -> Self {
        Tracker {
            templates: Bounded::new(MAX_TEMPLATES),
            configs: HashMap::new(),
        }
    }
}

impl Tracker {
    /// Feeds one event of log number `log`, which `role` describes; what it showed goes to
    /// `out`.
    pub fn on_event(
        &mut self,
        log: usize,
        role: &LogRole,
        ts_ns: u64,
        kind: &EventKind,
        out: &mut Vec<Observation>,
    ) {
        let Some(config) = &role.config else {
            if let EventKind::TemplateCreated(t) = kind {
                // A template is made once; the node may announce it again (to another
                // provider client), which does not make it newer.
                if !t.future && self.templates.get(&t.fingerprint).is_none() {
                    self.templates.insert(t.fingerprint, ts_ns);
                }
            }
            return;
        };
        let c = self
            .configs
            .entry(config.clone())
            .or_insert_with(Config::new);
        match (role.kind, kind) {
            (Some(RoleKind::Fleet), _) => {
                fleet_event(c, &self.templates, config, log, ts_ns, kind, out)
            }
            (Some(RoleKind::Pool | RoleKind::Proxy | RoleKind::Other), EventKind::JobSent(j)) => {
                if let (Some(channel), Some(fp)) = (j.channel, j.fingerprint) {
                    c.jobs.insert((role.site, channel, j.job_id), fp);
                }
            }
            _ => {}
        }
    }
}

fn fleet_event(
    c: &mut Config,
    templates: &Bounded<Fingerprint, u64>,
    config: &str,
    log: usize,
    ts: u64,
    kind: &EventKind,
    out: &mut Vec<Observation>,
) {
    let job = |c: &mut Config,
               device: u64,
               fp: Option<Fingerprint>,
               channel,
               job_id,
               out: &mut Vec<Observation>| {
        // The farm's own job source first: its channel ids are the device's.
        let fp = fp.or_else(|| {
            let ch = channel?;
            c.jobs
                .get(&(Site::Farm, ch, job_id))
                .or_else(|| c.jobs.get(&(Site::Pool, ch, job_id)))
                .copied()
        });
        let Some(fp) = fp else { return };
        let Some(&made) = templates.get(&fp) else {
            return;
        };
        let d = c.devices.entry((log, device)).or_default();
        if d.counted.contains(&fp) {
            return;
        }
        if d.counted.len() == DEVICE_MEMORY {
            d.counted.pop_front();
        }
        d.counted.push_back(fp);
        out.push(Observation::TimeToJob {
            config: config.to_owned(),
            seconds: ts.saturating_sub(made) as f64 / 1e9,
        });
    };
    match kind {
        EventKind::JobReceived(j) if j.future => {
            let d = c.devices.entry((log, j.device)).or_default();
            if d.future.len() == 16 {
                d.future.pop_front();
            }
            d.future.push_back((j.channel, j.job_id, j.fingerprint));
        }
        EventKind::JobReceived(j) => job(c, j.device, j.fingerprint, j.channel, j.job_id, out),
        EventKind::JobActivated(a) => {
            let Some(d) = c.devices.get_mut(&(log, a.conn)) else {
                return;
            };
            let Some(k) = d
                .future
                .iter()
                .position(|(ch, id, _)| *ch == a.channel && *id == a.job_id)
            else {
                return;
            };
            let (channel, job_id, fp) = d.future.remove(k).expect("found above");
            job(c, a.conn, a.fingerprint.or(fp), channel, job_id, out);
        }
        EventKind::ShareSent(s) => c.pending.insert(((log, s.device), s.seq), ts),
        EventKind::ShareResult(r) if r.perspective == Perspective::Received => {
            let Some(sent) = c.pending.remove(&((log, r.conn), r.seq)) else {
                return;
            };
            out.push(Observation::ShareLatency {
                config: config.to_owned(),
                seconds: ts.saturating_sub(sent) as f64 / 1e9,
            });
            let outcome = match r.verdict {
                Verdict::Accepted => Outcome::Accepted,
                Verdict::Rejected(Reason::Stale) => Outcome::Stale,
                Verdict::Rejected(_) => Outcome::Rejected,
            };
            out.push(Observation::Verdict {
                config: config.to_owned(),
                outcome,
            });
        }
        EventKind::ConnectionClosed(cl) => {
            if let Some(d) = c.devices.get_mut(&(log, cl.conn)) {
                d.future.clear();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::{
        Hash256, JobReceived, JobSent, ShareResult, ShareSent, ShortStr, Target, TemplateCreated,
    };

    const MS: u64 = 1_000_000;

    fn node() -> LogRole {
        LogRole {
            config: None,
            kind: None,
            site: Site::Pool,
        }
    }

    fn of(config: &str, kind: RoleKind, site: Site) -> LogRole {
        LogRole {
            config: Some(config.into()),
            kind: Some(kind),
            site,
        }
    }

    fn template(fp: u64) -> EventKind {
        EventKind::TemplateCreated(TemplateCreated {
            node: ShortStr::new("node"),
            template_id: fp,
            height: 1,
            prev_hash: Hash256::default(),
            value_sats: 1,
            fees_sats: 0,
            tx_count: 0,
            fingerprint: Fingerprint(fp),
            future: false,
        })
    }

    fn job(device: u64, channel: Option<u32>, id: u64, fp: Option<u64>) -> EventKind {
        EventKind::JobReceived(JobReceived {
            device,
            channel,
            job_id: JobId::Num(id),
            fingerprint: fp.map(Fingerprint),
            prev_hash: None,
            target: Target::DIFFICULTY_1,
            clean: true,
            future: false,
        })
    }

    fn sent(device: u64, seq: u64) -> EventKind {
        EventKind::ShareSent(ShareSent {
            device,
            channel: None,
            seq,
            job_id: JobId::Num(1),
            nonce: 0,
            ntime: 0,
            version: 0,
            difficulty: 1.0,
            hash: None,
        })
    }

    fn answered(device: u64, seq: u64, verdict: Verdict, perspective: Perspective) -> EventKind {
        EventKind::ShareResult(ShareResult {
            conn: device,
            channel: None,
            seq,
            job_id: JobId::Num(1),
            nonce: 0,
            difficulty: 1.0,
            verdict,
            perspective,
        })
    }

    #[test]
    fn jobs_are_timed_from_their_template_once_per_device() {
        let mut t = Tracker::default();
        let mut out = Vec::new();
        let fleet = of("sv1", RoleKind::Fleet, Site::Farm);
        t.on_event(0, &node(), 100 * MS, &template(7), &mut out);
        // Device 1 gets the template 30 ms later, then the same template again (a repeated
        // notify): one sample. Device 2 gets it 45 ms after it was made.
        t.on_event(1, &fleet, 130 * MS, &job(1, None, 1, Some(7)), &mut out);
        t.on_event(1, &fleet, 150 * MS, &job(1, None, 2, Some(7)), &mut out);
        t.on_event(1, &fleet, 145 * MS, &job(2, None, 1, Some(7)), &mut out);
        // A job whose template the tracker never saw is not timed.
        t.on_event(1, &fleet, 160 * MS, &job(2, None, 3, Some(99)), &mut out);
        let times: Vec<f64> = out
            .iter()
            .map(|o| match o {
                Observation::TimeToJob { config, seconds } if config == "sv1" => *seconds,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(times.len(), 2);
        assert!((times[0] - 0.030).abs() < 1e-9 && (times[1] - 0.045).abs() < 1e-9);
    }

    #[test]
    fn a_standard_job_is_tied_to_its_template_through_the_farm_side_job_source() {
        let mut t = Tracker::default();
        let mut out = Vec::new();
        t.on_event(0, &node(), 0, &template(5), &mut out);
        t.on_event(0, &node(), 0, &template(6), &mut out);
        let sent = |channel, fp| {
            EventKind::JobSent(JobSent {
                conn: 1,
                channel: Some(channel),
                job_id: JobId::Num(9),
                template_id: None,
                fingerprint: Some(Fingerprint(fp)),
                prev_hash: None,
                target: Target::DIFFICULTY_1,
                clean: true,
                future: false,
            })
        };
        // The pool sends job 9 on channel 1 for template 6 (to the JDC); the JDC sends job 9 on
        // its own channel 1 for template 5 (to the device): the device's job is the JDC's.
        t.on_event(
            1,
            &of("D", RoleKind::Pool, Site::Pool),
            0,
            &sent(1, 6),
            &mut out,
        );
        t.on_event(
            2,
            &of("D", RoleKind::Proxy, Site::Farm),
            0,
            &sent(1, 5),
            &mut out,
        );
        t.on_event(
            3,
            &of("D", RoleKind::Fleet, Site::Farm),
            20 * MS,
            &job(4, Some(1), 9, None),
            &mut out,
        );
        assert_eq!(
            out,
            vec![Observation::TimeToJob {
                config: "D".into(),
                seconds: 0.020
            }]
        );
    }

    #[test]
    fn shares_are_timed_to_their_verdict_and_stale_ones_counted() {
        let mut t = Tracker::default();
        let mut out = Vec::new();
        let fleet = of("A", RoleKind::Fleet, Site::Farm);
        t.on_event(1, &fleet, 0, &sent(3, 1), &mut out);
        t.on_event(1, &fleet, MS, &sent(3, 2), &mut out);
        // The pool's own view of a verdict is not the device's.
        t.on_event(
            1,
            &fleet,
            50 * MS,
            &answered(3, 1, Verdict::Accepted, Perspective::Given),
            &mut out,
        );
        assert!(out.is_empty());
        t.on_event(
            1,
            &fleet,
            80 * MS,
            &answered(3, 1, Verdict::Accepted, Perspective::Received),
            &mut out,
        );
        t.on_event(
            1,
            &fleet,
            91 * MS,
            &answered(
                3,
                2,
                Verdict::Rejected(Reason::Stale),
                Perspective::Received,
            ),
            &mut out,
        );
        // A verdict for a share never seen sent (or answered twice) is not timed.
        t.on_event(
            1,
            &fleet,
            95 * MS,
            &answered(3, 2, Verdict::Accepted, Perspective::Received),
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Observation::ShareLatency {
                    config: "A".into(),
                    seconds: 0.080
                },
                Observation::Verdict {
                    config: "A".into(),
                    outcome: Outcome::Accepted
                },
                Observation::ShareLatency {
                    config: "A".into(),
                    seconds: 0.090
                },
                Observation::Verdict {
                    config: "A".into(),
                    outcome: Outcome::Stale
                },
            ]
        );
    }
}
