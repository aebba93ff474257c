//! What the template feed knows about the node, for the pool's decision to hand out work and
//! for `/healthz`: every read is a few atomic loads (the last error text is one `Arc` clone).
//!
//! Only the feed writes; anyone reads.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Whether the pool can serve work from the node's templates, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// No template yet, and nothing has failed yet.
    Starting,
    /// A fresh template: serve work.
    Ok,
    /// The last request got no HTTP answer (refused, reset, timed out) since `since`.
    Unreachable {
        /// When the node stopped answering.
        since: Instant,
    },
    /// The node answers, but not with a template (credentials refused, an RPC error such as
    /// Core's warm-up or initial block download, a malformed template) since `since`.
    Failing {
        /// When the node's answers stopped being templates.
        since: Instant,
    },
    /// No successful `getblocktemplate` for `age` (more than `stale_after`): a node that stopped
    /// answering without closing the connection looks like this until the request times out.
    Stale {
        /// Time since the last successful `getblocktemplate`.
        age: Duration,
    },
}

impl NodeState {
    /// Whether jobs made from the current template may go to miners.
    pub fn serves_work(&self) -> bool {
        matches!(self, NodeState::Ok)
    }

    /// A short name for logs and `/healthz`.
    pub fn name(&self) -> &'static str {
        match self {
            NodeState::Starting => "starting",
            NodeState::Ok => "ok",
            NodeState::Unreachable { .. } => "unreachable",
            NodeState::Failing { .. } => "failing",
            NodeState::Stale { .. } => "stale",
        }
    }
}

/// Shared between the feed (writer) and the pool (readers).
#[derive(Debug)]
pub struct NodeHealth {
    /// Instants are kept as nanoseconds since this one, plus one (zero: never).
    epoch: Instant,
    stale_after: Duration,
    /// Whether the last request got an HTTP answer.
    reachable: AtomicBool,
    last_gbt: AtomicU64,
    last_new_tip: AtomicU64,
    failing_since: AtomicU64,
    consecutive_failures: AtomicU32,
    height: AtomicU32,
    zmq_connected: AtomicBool,
    templates: AtomicU64,
    failures: AtomicU64,
    hashblocks: AtomicU64,
    last_error: Mutex<Option<Arc<str>>>,
}

impl NodeHealth {
    /// `stale_after` zero: never stale.
    pub fn new(stale_after: Duration) -> NodeHealth {
        NodeHealth {
            epoch: Instant::now(),
            stale_after,
            reachable: AtomicBool::new(false),
            last_gbt: AtomicU64::new(0),
            last_new_tip: AtomicU64::new(0),
            failing_since: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            height: AtomicU32::new(0),
            zmq_connected: AtomicBool::new(false),
            templates: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            hashblocks: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }

    fn stamp(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64 + 1
    }

    fn instant(&self, stamp: u64) -> Option<Instant> {
        (stamp != 0).then(|| self.epoch + Duration::from_nanos(stamp - 1))
    }

    // ---- Writes (the feed) ------------------------------------------------------------------

    /// A template arrived at `now`; `new_tip` if its previous block differs from the last one's.
    pub(crate) fn record_template(&self, now: Instant, height: u32, new_tip: bool) {
        let stamp = self.stamp(now);
        self.reachable.store(true, Relaxed);
        self.consecutive_failures.store(0, Relaxed);
        self.failing_since.store(0, Relaxed);
        self.last_gbt.store(stamp, Relaxed);
        if new_tip {
            self.last_new_tip.store(stamp, Relaxed);
        }
        self.height.store(height, Relaxed);
        self.templates.fetch_add(1, Relaxed);
    }

    /// A request failed at `now`; `unreachable` if no HTTP answer came back.
    pub(crate) fn record_failure(&self, now: Instant, unreachable: bool, error: &str) {
        self.reachable.store(!unreachable, Relaxed);
        if self.consecutive_failures.fetch_add(1, Relaxed) == 0 {
            self.failing_since.store(self.stamp(now), Relaxed);
        }
        self.failures.fetch_add(1, Relaxed);
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::from(error));
    }

    pub(crate) fn record_hashblock(&self) {
        self.hashblocks.fetch_add(1, Relaxed);
    }

    pub(crate) fn set_zmq_connected(&self, connected: bool) {
        self.zmq_connected.store(connected, Relaxed);
    }

    // ---- Reads -----------------------------------------------------------------------------

    /// The state at `now`: whether work may be served, and if not why.
    pub fn state(&self, now: Instant) -> NodeState {
        if self.consecutive_failures.load(Relaxed) > 0 {
            let since = self
                .instant(self.failing_since.load(Relaxed))
                .unwrap_or(self.epoch);
            return if self.reachable.load(Relaxed) {
                NodeState::Failing { since }
            } else {
                NodeState::Unreachable { since }
            };
        }
        match self.last_gbt() {
            None => NodeState::Starting,
            Some(t) => {
                let age = now.saturating_duration_since(t);
                if !self.stale_after.is_zero() && age > self.stale_after {
                    NodeState::Stale { age }
                } else {
                    NodeState::Ok
                }
            }
        }
    }

    /// Whether the last request got an HTTP answer.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Relaxed)
    }

    /// When the last successful `getblocktemplate` answer arrived.
    pub fn last_gbt(&self) -> Option<Instant> {
        self.instant(self.last_gbt.load(Relaxed))
    }

    /// When a template on a new previous block last arrived.
    pub fn last_new_tip(&self) -> Option<Instant> {
        self.instant(self.last_new_tip.load(Relaxed))
    }

    /// Failed requests since the last success.
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Relaxed)
    }

    /// The last failure's message (kept after recovery, for the record).
    pub fn last_error(&self) -> Option<Arc<str>> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Height of the last template's block.
    pub fn height(&self) -> u32 {
        self.height.load(Relaxed)
    }

    /// Whether the ZMQ subscriber is connected (false without ZMQ).
    pub fn zmq_connected(&self) -> bool {
        self.zmq_connected.load(Relaxed)
    }

    /// Templates received since start.
    pub fn templates(&self) -> u64 {
        self.templates.load(Relaxed)
    }

    /// Failed requests since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }

    /// ZMQ `hashblock` messages received since start.
    pub fn hashblocks(&self) -> u64 {
        self.hashblocks.load(Relaxed)
    }

    /// How long without a template makes the templates stale; zero: never.
    pub fn stale_after(&self) -> Duration {
        self.stale_after
    }

    /// One line saying whether work is served and why not, for logs and `/healthz`.
    pub fn describe(&self, now: Instant) -> String {
        let error = || {
            self.last_error()
                .map_or_else(String::new, |e| format!(": {e}"))
        };
        match self.state(now) {
            NodeState::Starting => "node: waiting for the first template".to_owned(),
            NodeState::Ok => format!("node: ok, height {}", self.height()),
            NodeState::Unreachable { since } => format!(
                "node unreachable for {:.1} s ({} failures){}",
                now.saturating_duration_since(since).as_secs_f64(),
                self.consecutive_failures(),
                error()
            ),
            NodeState::Failing { since } => format!(
                "node gives no template for {:.1} s ({} failures){}",
                now.saturating_duration_since(since).as_secs_f64(),
                self.consecutive_failures(),
                error()
            ),
            NodeState::Stale { age } => format!(
                "node templates stale: the last one arrived {:.1} s ago (limit {:.1} s)",
                age.as_secs_f64(),
                self.stale_after.as_secs_f64()
            ),
        }
    }

    /// The figures as a JSON object, for `/healthz`.
    pub fn to_json(&self, now: Instant) -> Value {
        let state = self.state(now);
        let age_ms =
            |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_millis() as u64);
        json!({
            "state": state.name(),
            "serves_work": state.serves_work(),
            "detail": self.describe(now),
            "reachable": self.reachable(),
            "height": self.height(),
            "last_template_age_ms": age_ms(self.last_gbt()),
            "last_new_tip_age_ms": age_ms(self.last_new_tip()),
            "consecutive_failures": self.consecutive_failures(),
            "last_error": self.last_error().as_deref(),
            "zmq_connected": self.zmq_connected(),
            "templates": self.templates(),
            "failures": self.failures(),
            "hashblocks": self.hashblocks(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_successes_failures_and_age() {
        let h = NodeHealth::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(h.state(t0), NodeState::Starting);
        assert!(!h.state(t0).serves_work());

        h.record_failure(t0, true, "getblocktemplate at http://n/: cannot connect");
        h.record_failure(t0 + Duration::from_secs(1), true, "again");
        assert_eq!(h.state(t0), NodeState::Unreachable { since: t0 });
        assert_eq!(h.consecutive_failures(), 2);
        assert!(h
            .describe(t0 + Duration::from_secs(2))
            .contains("unreachable for 2.0 s"));

        let t1 = t0 + Duration::from_secs(3);
        h.record_template(t1, 900_001, true);
        assert_eq!(h.state(t1), NodeState::Ok);
        assert!(h.state(t1).serves_work());
        assert_eq!(h.last_gbt(), Some(t1));
        assert_eq!(h.last_new_tip(), Some(t1));
        assert_eq!(h.height(), 900_001);
        assert_eq!(h.last_error().as_deref(), Some("again"));

        let later = t1 + Duration::from_secs(11);
        assert_eq!(
            h.state(later),
            NodeState::Stale {
                age: Duration::from_secs(11)
            }
        );
        assert!(h.describe(later).contains("stale"));

        h.record_failure(later, false, "RPC error -28: Loading block index");
        assert_eq!(h.state(later), NodeState::Failing { since: later });
        let j = h.to_json(later);
        assert_eq!(j["state"], "failing");
        assert_eq!(j["serves_work"], false);
        assert_eq!(j["failures"], 3);
        assert_eq!(j["templates"], 1);
    }

    #[test]
    fn zero_stale_after_never_goes_stale() {
        let h = NodeHealth::new(Duration::ZERO);
        let t0 = Instant::now();
        h.record_template(t0, 1, true);
        assert_eq!(h.state(t0 + Duration::from_secs(86_400)), NodeState::Ok);
    }
}
