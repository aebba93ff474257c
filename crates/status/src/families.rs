//! Metric families every role writes the same way, so that one dashboard or alert rule reads
//! any role's. Each role's collector calls these under its own prefix (`stratumlab_<role>_`).
//!
//! Label values come from fixed vocabularies (the edge's reasons, the dependencies' names),
//! never from clients' input.

use std::collections::BTreeMap;
use std::fmt;

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use edge::{AcceptQueue, AdmissionSnapshot, ListenerQueue};

/// The content type of an OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// One counter.
pub fn counter(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: impl EncodeCounterValue,
) -> fmt::Result {
    let c = ConstCounter::new(value);
    let m = e.encode_descriptor(name, help, None, c.metric_type())?;
    c.encode(m)
}

/// One gauge.
pub fn gauge(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: impl EncodeGaugeValue,
) -> fmt::Result {
    let g = ConstGauge::new(value);
    let m = e.encode_descriptor(name, help, unit, g.metric_type())?;
    g.encode(m)
}

/// A family of counters or gauges, one per label set.
pub fn family<'a, V: EncodeCounterValue + EncodeGaugeValue + 'a>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    kind: MetricType,
    members: impl IntoIterator<Item = (&'a [(&'a str, &'a str)], V)>,
) -> fmt::Result {
    let mut m = e.encode_descriptor(name, help, unit, kind)?;
    for (labels, value) in members {
        let mut member = m.encode_family(&labels)?;
        match kind {
            MetricType::Counter => member.encode_counter::<NoLabelSet, V, u64>(&value, None)?,
            _ => member.encode_gauge(&value)?,
        }
    }
    Ok(())
}

/// The connection edge's families (`admission_refused`, `admission_closed`, `admission_bans`,
/// `admission_workers_refused`, `admission_bans_active`, `admission_accept_queue`,
/// `admission_accept_queue_limit`, `admission_netns_listen_overflows`), for every role that listens.
pub fn admission_families(e: &mut DescriptorEncoder, a: &AdmissionSnapshot) -> fmt::Result {
    let by = |m: &BTreeMap<&'static str, u64>| -> Vec<([(&'static str, &'static str); 1], u64)> {
        m.iter().map(|(r, n)| ([("reason", *r)], *n)).collect()
    };
    let refused = by(&a.refused);
    family(
        e,
        "admission_refused",
        "Connections refused at accept, by reason.",
        None,
        MetricType::Counter,
        refused.iter().map(|(l, n)| (&l[..], *n)),
    )?;
    let closed = by(&a.closed);
    family(
        e,
        "admission_closed",
        "Admitted connections closed, by reason.",
        None,
        MetricType::Counter,
        closed.iter().map(|(l, n)| (&l[..], *n)),
    )?;
    let bans = by(&a.bans);
    family(
        e,
        "admission_bans",
        "Source addresses banned since start, by reason.",
        None,
        MetricType::Counter,
        bans.iter().map(|(l, n)| (&l[..], *n)),
    )?;
    counter(
        e,
        "admission_workers_refused",
        "Authorizations refused because their address had used up its allowance of new worker names.",
        a.workers_refused,
    )?;
    gauge(
        e,
        "admission_bans_active",
        "Source addresses banned now.",
        None,
        a.bans_active as u64,
    )?;
    let listeners: Vec<[(&str, &str); 1]> = a
        .accept_queues
        .iter()
        .map(|q| [("listener", q.listener)])
        .collect();
    type Figure = fn(&AcceptQueue) -> u32;
    let queue_families: [(&str, &str, Figure); 2] = [
        (
            "admission_accept_queue",
            "Connections the kernel has completed on the listener and the role has not accepted yet.",
            |q| q.waiting,
        ),
        (
            "admission_accept_queue_limit",
            "The most the listener's accept queue holds (the role's request capped by net.core.somaxconn).",
            |q| q.limit,
        ),
    ];
    for (name, help, figure) in queue_families {
        let members = listeners
            .iter()
            .zip(&a.accept_queues)
            .map(|(l, q)| (&l[..], u64::from(figure(&q.queue))));
        family(e, name, help, None, MetricType::Gauge, members)?;
    }
    match a.netns_listen_overflows {
        Some(n) => counter(
            e,
            "admission_netns_listen_overflows",
            "Handshake packets (SYN or final ACK) the kernel dropped because an accept queue was \
             full (TcpExt ListenOverflows), counted for the whole network namespace: the same \
             figure on every role sharing it, so never summed across roles. A client whose \
             packet is dropped waits a second or more for its resend.",
            n,
        ),
        None => Ok(()),
    }
}

/// `/healthz` lines for the listeners whose accept queue is past half full (connections
/// arrive faster than the role accepts them), each ending in a newline; empty when none is.
/// Takes the queues alone (`Gate::listeners().queues()`), so that a health probe costs no
/// snapshot of the gate's tables.
pub fn accept_queue_lines(queues: &[ListenerQueue]) -> String {
    queues
        .iter()
        .filter(|q| q.queue.filling())
        .map(|q| {
            format!(
                "accept queue {}: {} of {} waiting (connections arrive faster than they are accepted)\n",
                q.listener, q.queue.waiting, q.queue.limit
            )
        })
        .collect()
}

/// `/api/status`'s `admission`, the same figures as JSON.
pub fn admission_json(a: &AdmissionSnapshot) -> serde_json::Value {
    serde_json::to_value(a).unwrap_or(serde_json::Value::Null)
}

/// One thing a role depends on (its template source, node, store, upstream pool or JDS), as
/// `/metrics` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DependencyFigure<'a> {
    /// The `dependency` label: `node`, `tp`, `store`, `pool`, `jds`.
    pub name: &'a str,
    /// Whether it works now.
    pub up: bool,
    /// Times it went from working to failing.
    pub failures: u64,
}

/// `dependency_up` and `dependency_failures`, one member per dependency.
pub fn dependency_families(
    e: &mut DescriptorEncoder,
    deps: &[DependencyFigure<'_>],
) -> fmt::Result {
    let labels: Vec<[(&str, &str); 1]> = deps.iter().map(|d| [("dependency", d.name)]).collect();
    family(
        e,
        "dependency_up",
        "1 while the dependency works (a template source or node answers with fresh work, a \
         store writes, an upstream channel is open), 0 while it fails.",
        None,
        MetricType::Gauge,
        labels
            .iter()
            .zip(deps)
            .map(|(l, d)| (&l[..], u64::from(d.up))),
    )?;
    family(
        e,
        "dependency_failures",
        "Times the dependency went from working to failing.",
        None,
        MetricType::Counter,
        labels.iter().zip(deps).map(|(l, d)| (&l[..], d.failures)),
    )
}

#[cfg(test)]
mod tests {
    use prometheus_client::collector::Collector;
    use prometheus_client::registry::Registry;

    use super::*;

    #[derive(Debug)]
    struct Deps(Vec<(&'static str, bool, u64)>);

    impl Collector for Deps {
        fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
            let deps: Vec<DependencyFigure> = self
                .0
                .iter()
                .map(|&(name, up, failures)| DependencyFigure { name, up, failures })
                .collect();
            dependency_families(&mut e, &deps)
        }
    }

    fn render(deps: Vec<(&'static str, bool, u64)>) -> String {
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("stratumlab_role")
            .register_collector(Box::new(Deps(deps)));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    #[derive(Debug)]
    struct Edge(AdmissionSnapshot);

    impl Collector for Edge {
        fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
            admission_families(&mut e, &self.0)
        }
    }

    /// A listener with a small queue (8) that nothing accepts on, watched by a gate, as a role
    /// stalled in a reconnect storm would have it.
    #[tokio::test]
    async fn a_filling_accept_queue_shows_on_metrics_and_healthz() {
        use edge::{Admission, Gate};
        let gate = Gate::new(Admission::default());
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let small = gate.listeners().watch("sv1", socket.listen(8).unwrap());
        let roomy = edge::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let roomy = gate.listeners().watch("sv2", roomy);
        let now = edge::Timestamp::from_millis(0);

        let _clients = testkit::net::fill_accept_queue(small.local_addr().unwrap(), 4);
        let a = gate.snapshot(now);
        assert_eq!(
            accept_queue_lines(&a.accept_queues),
            "",
            "4 of 8 is not past half"
        );

        let _more = testkit::net::fill_accept_queue(small.local_addr().unwrap(), 1);
        let _one = testkit::net::fill_accept_queue(roomy.local_addr().unwrap(), 1);
        let a = gate.snapshot(now);
        assert_eq!(
            accept_queue_lines(&a.accept_queues),
            "accept queue sv1: 5 of 8 waiting (connections arrive faster than they are \
             accepted)\n"
        );
        let mut registry = Registry::default();
        registry
            .sub_registry_with_prefix("stratumlab_role")
            .register_collector(Box::new(Edge(a.clone())));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let limit = a.accept_queues[1].queue.limit;
        assert!(limit >= 128, "{a:?}");
        for line in [
            "stratumlab_role_admission_accept_queue{listener=\"sv1\"} 5\n".to_owned(),
            "stratumlab_role_admission_accept_queue{listener=\"sv2\"} 1\n".to_owned(),
            "stratumlab_role_admission_accept_queue_limit{listener=\"sv1\"} 8\n".to_owned(),
            format!("stratumlab_role_admission_accept_queue_limit{{listener=\"sv2\"}} {limit}\n"),
            format!(
                "stratumlab_role_admission_netns_listen_overflows_total {}\n",
                a.netns_listen_overflows.expect("/proc/net/netstat")
            ),
        ] {
            assert!(text.contains(&line), "{line:?} missing from:\n{text}");
        }
        let json = admission_json(&a);
        assert_eq!(json["accept_queues"][0]["listener"], "sv1");
        assert_eq!(json["accept_queues"][0]["waiting"], 5);
        assert_eq!(json["accept_queues"][0]["limit"], 8);

        // A listener its role has dropped is closed and no longer listed.
        drop(small);
        let a = gate.snapshot(now);
        assert_eq!(a.accept_queues.len(), 1);
        assert_eq!(accept_queue_lines(&a.accept_queues), "");
    }

    #[test]
    fn each_dependency_is_one_member_of_both_families() {
        let text = render(vec![("node", true, 2), ("store", false, 1)]);
        for line in [
            "stratumlab_role_dependency_up{dependency=\"node\"} 1\n",
            "stratumlab_role_dependency_up{dependency=\"store\"} 0\n",
            "stratumlab_role_dependency_failures_total{dependency=\"node\"} 2\n",
            "stratumlab_role_dependency_failures_total{dependency=\"store\"} 1\n",
            "# TYPE stratumlab_role_dependency_up gauge\n",
            "# TYPE stratumlab_role_dependency_failures counter\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }
}
