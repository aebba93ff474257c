//! `/metrics`: the statistics in the OpenMetrics text format, written by prometheus-client's
//! encoder through a custom collector. The share path never touches prometheus-client: it
//! bumps the pool's own atomics ([`PoolStats`](crate::stats::PoolStats)), and a scrape turns one
//! snapshot of them into text.
//!
//! Every family is present from the first scrape, zeros included, so that rates and alerts
//! work before the first share; label values come from fixed vocabularies (`events::Reason`,
//! [`NotServing`], [`NodeStatus::STATES`]), never from miners' input.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use edge::AdmissionSnapshot;
use status::{admission_families, counter, dependency_families, family, gauge, DependencyFigure};

use crate::stats::{
    Attached, Dependency, HistogramSnapshot, NodeStatus, NotServing, Serving, StatusSnapshot,
    PROCESSING_BOUNDS_NS,
};

/// Prefix of every metric's name (followed by `_`).
pub const METRICS_PREFIX: &str = "stratumlab_pool";

/// The pool's metrics as one OpenMetrics text exposition (ending in `# EOF`). With `role`
/// (a role built around the pool: `"jdc"`), the dependencies are also given under
/// `stratumlab_<role>_`.
pub fn render_metrics(
    snapshot: &StatusSnapshot,
    processing: &HistogramSnapshot,
    attached: &[Attached],
    admission: Option<&AdmissionSnapshot>,
    role: Option<&str>,
) -> String {
    let mut registry = Registry::default();
    registry
        .sub_registry_with_prefix(METRICS_PREFIX)
        .register_collector(Box::new(Snapshot {
            s: *snapshot,
            processing: *processing,
            attached: attached.to_vec(),
            admission: admission.cloned(),
        }));
    // The pool's own prefix already names them.
    if let Some(role) = role.filter(|r| *r != "pool") {
        registry
            .sub_registry_with_prefix(format!("stratumlab_{role}"))
            .register_collector(Box::new(RoleDependencies {
                s: *snapshot,
                attached: attached.to_vec(),
            }));
    }
    let mut out = String::with_capacity(8 * 1024);
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct Snapshot {
    s: StatusSnapshot,
    processing: HistogramSnapshot,
    attached: Vec<Attached>,
    admission: Option<AdmissionSnapshot>,
}

fn flag(on: bool) -> u64 {
    u64::from(on)
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let s = &self.s;
        let e = &mut e;

        // Shares and work.
        let reasons: Vec<[(&str, &str); 2]> = s
            .rejected
            .iter()
            .map(|(r, _)| [("result", "rejected"), ("reason", r.as_str())])
            .collect();
        let accepted = [("result", "accepted")];
        let shares = std::iter::once((&accepted[..], s.accepted)).chain(
            reasons
                .iter()
                .zip(s.rejected.iter())
                .map(|(labels, (_, n))| (&labels[..], n)),
        );
        family(
            e,
            "shares",
            "Shares answered, by result and, for rejected ones, reason.",
            None,
            MetricType::Counter,
            shares,
        )?;
        counter(
            e,
            "accepted_work",
            "Sum of accepted shares' difficulties, in difficulty-1 units (2^32 hashes each).",
            s.accepted_work,
        )?;
        let hashrate = [
            (&[("window", "1m")][..], s.hashrate_1m),
            (&[("window", "10m")][..], s.hashrate_10m),
        ];
        family(
            e,
            "hashrate",
            "Accepted work per second as hashes, exponentially decayed over the window.",
            Some(&Unit::Other("hashes_per_second".into())),
            MetricType::Gauge,
            hashrate,
        )?;
        gauge(
            e,
            "shares_per_second",
            "Shares submitted per second, any verdict, exponentially decayed over a minute.",
            None,
            s.shares_per_second,
        )?;
        let p = &self.processing;
        let buckets: Vec<(f64, u64)> = p
            .buckets()
            .map(|(bound, n)| (bound.map_or(f64::INFINITY, |ns| ns as f64 / 1e9), n))
            .collect();
        debug_assert_eq!(buckets.len(), PROCESSING_BOUNDS_NS.len() + 1);
        let mut m = e.encode_descriptor(
            "share_processing",
            "Time the pool took over a share, from reading it to its verdict.",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        m.encode_histogram::<NoLabelSet>(p.sum_ns as f64 / 1e9, p.count(), &buckets, None)?;

        // Connections, workers, vardiff, jobs.
        gauge(
            e,
            "connections",
            "Open miner connections.",
            None,
            s.connections,
        )?;
        counter(
            e,
            "connections_opened",
            "Miner connections accepted since start.",
            s.connections_opened,
        )?;
        gauge(
            e,
            "workers",
            "Workers with at least one connection.",
            None,
            s.workers,
        )?;
        gauge(
            e,
            "workers_listed",
            "Workers in the worker list: connected, or disconnected within the retention period.",
            None,
            s.workers_listed,
        )?;
        counter(
            e,
            "vardiff_changes",
            "Difficulty changes sent to miners by vardiff.",
            s.vardiff_changes,
        )?;
        let jobs = [
            (&[("clean", "true")][..], s.jobs.clean),
            (
                &[("clean", "false")][..],
                s.jobs.created.saturating_sub(s.jobs.clean),
            ),
        ];
        family(
            e,
            "jobs",
            "Jobs created; clean jobs make miners drop their current work.",
            None,
            MetricType::Counter,
            jobs,
        )?;

        // Blocks.
        counter(
            e,
            "blocks_submitted",
            "Shares that met the network target, sent to the node as blocks.",
            s.blocks.submitted,
        )?;
        counter(
            e,
            "blocks_accepted",
            "Blocks the node accepted.",
            s.blocks.accepted,
        )?;
        counter(
            e,
            "blocks_rejected",
            "Blocks the node rejected.",
            s.blocks.rejected,
        )?;

        // Health.
        let state = s.node.state();
        let node_states: Vec<[(&str, &str); 1]> = NodeStatus::STATES
            .iter()
            .map(|&st| [("state", st)])
            .collect();
        family(
            e,
            "node_state",
            "The node's state: 1 for the current one.",
            None,
            MetricType::Gauge,
            node_states
                .iter()
                .map(|labels| (&labels[..], flag(labels[0].1 == state))),
        )?;
        gauge(
            e,
            "node_state_duration",
            "Time the node has been in its current state (0 while unknown).",
            Some(&Unit::Seconds),
            s.node
                .since()
                .map_or(0.0, |since| s.now.since(since).as_secs_f64()),
        )?;
        gauge(
            e,
            "serving",
            "1 while the pool hands out work and acknowledges shares, 0 otherwise (see not_serving).",
            None,
            flag(s.serving.is_serving()),
        )?;
        let why: Vec<[(&str, &str); 1]> = NotServing::ALL
            .iter()
            .map(|r| [("reason", r.as_str())])
            .collect();
        family(
            e,
            "not_serving",
            "Why the pool holds back work: 1 for the current reason.",
            None,
            MetricType::Gauge,
            NotServing::ALL
                .iter()
                .zip(&why)
                .map(|(&r, labels)| (&labels[..], flag(s.serving == Serving::No(r)))),
        )?;
        gauge(
            e,
            "uptime",
            "Time since the pool started.",
            Some(&Unit::Seconds),
            s.uptime_ms as f64 / 1000.0,
        )?;

        // The store, once it reports.
        if let Some(st) = s.store {
            counter(
                e,
                "store_commits",
                "Store transactions committed.",
                st.commits,
            )?;
            counter(
                e,
                "store_records",
                "Records (shares, blocks) the store wrote.",
                st.records,
            )?;
            gauge(
                e,
                "store_queue_length",
                "Records waiting to be written.",
                None,
                st.queue_len,
            )?;
            gauge(
                e,
                "store_batch_window",
                "How long the store gathers records into one commit.",
                Some(&Unit::Seconds),
                st.batch_window_ms as f64 / 1000.0,
            )?;
            gauge(
                e,
                "store_last_commit_duration",
                "How long the store's last commit took.",
                Some(&Unit::Seconds),
                st.last_commit_us as f64 / 1e6,
            )?;
        }

        if let Some(zmq) = s.zmq {
            gauge(
                e,
                "zmq_up",
                "With --zmq: 1 while the subscription to the node's new blocks is connected, 0 \
                 while the pool follows the node by long polling instead.",
                None,
                flag(zmq),
            )?;
        }

        let deps = dependencies(s, &self.attached);
        dependency_families(e, &deps)?;
        if let Some(a) = &self.admission {
            admission_families(e, a)?;
        }
        Ok(())
    }
}

/// The dependencies: the template source, the node beside a provider, the store when there is
/// one, and those a role built around the pool attached.
fn dependencies<'a>(s: &'a StatusSnapshot, attached: &'a [Attached]) -> Vec<DependencyFigure<'a>> {
    let mut deps = vec![DependencyFigure {
        name: s.template_source.as_str(),
        up: matches!(s.node, NodeStatus::Ok { .. }),
        failures: s.node_failures,
    }];
    if let Some((node, failures)) = s.backup_node {
        deps.push(DependencyFigure {
            name: Dependency::Node.as_str(),
            up: matches!(node, NodeStatus::Ok { .. }),
            failures,
        });
    }
    if let Some(st) = s.store {
        deps.push(DependencyFigure {
            name: Dependency::Store.as_str(),
            up: st.failing_since.is_none(),
            failures: st.failures,
        });
    }
    for a in attached {
        deps.push(DependencyFigure {
            name: a.dependency.as_str(),
            up: a.up,
            failures: a.failures,
        });
    }
    deps
}

/// The dependencies again under a role's own prefix (`stratumlab_<role>_`), for a role built
/// around the pool (the JDC), so that every role's dependencies have the same names.
#[derive(Debug)]
struct RoleDependencies {
    s: StatusSnapshot,
    attached: Vec<Attached>,
}

impl Collector for RoleDependencies {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        dependency_families(&mut e, &dependencies(&self.s, &self.attached))
    }
}
