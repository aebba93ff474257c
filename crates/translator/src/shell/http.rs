//! The farm proxy's HTTP status endpoints (`--http-listen ADDR`), served by every role's
//! serving loop ([`status::serve_with`]: GET and HEAD only, 404 and 405 as every role answers
//! them, bounded request heads, a cap on connections served at once):
//!
//! | path | answer |
//! |---|---|
//! | `/api/status` | JSON: the channel mode, devices, jobs, shares from devices and upstream, the upstream in use and its channels (open, opening, draining, given up, refused, closed by the pool, their difficulties), hash rate, uptime ([`status`]) |
//! | `/metrics` | the same figures, OpenMetrics text, prefixed `stratumlab_<role>_` ([`render_metrics`]) |
//! | `/healthz` | `200 ok` while an upstream channel is open, `503` with the reason otherwise ([`health`]) |
//! | `/` | a page for a person: the same figures, shares over time, the upstream and its channels ([`status::RolePage`]) |
//!
//! Every answer renders one [`Stats::snapshot`]: atomic loads and one short lock, however many
//! devices are connected. Ages are given in seconds (`state_for_s`), since the translator's
//! clock means nothing to a reader.

use std::fmt;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use serde_json::{json, Map, Value};
use status::{
    admission_families, admission_json, counter, dependency_families, family, gauge, json,
    not_found, refuse_method, reply, serve_with, text, DependencyFigure, ServeOptions,
    OPENMETRICS_CONTENT_TYPE,
};
use tokio::net::TcpListener;

use events::ReasonCounts;

use super::stats::{Stats, StatsSnapshot, UpstreamState};
use crate::config::ChannelMode;

/// Serves the endpoints on `listener` until `shutdown` completes. `role` names the figures
/// (`translator`, or `proxy` for the SV1 farm proxy, which runs the same shell).
pub async fn serve(
    listener: TcpListener,
    stats: Arc<Stats>,
    role: &'static str,
    shutdown: impl Future,
) -> io::Result<()> {
    let prefix = format!("stratumlab_{role}");
    let router = move |req: &Request<Incoming>| respond(&stats, role, &prefix, req);
    serve_with(listener, &ServeOptions::default(), router, shutdown).await
}

#[derive(Clone, Copy)]
enum Route {
    Page,
    Status,
    Metrics,
    Health,
}

fn respond(
    stats: &Stats,
    role: &str,
    prefix: &str,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    let route = match req.uri().path() {
        "/" => Route::Page,
        "/api/status" => Route::Status,
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Health,
        _ => return not_found(),
    };
    if let Some(r) = refuse_method(req) {
        return r;
    }
    let s = stats.snapshot();
    match route {
        Route::Page => status::RolePage {
            role,
            status: status(&s, role),
            health: health(&s),
            workers: None,
        }
        .response(),
        Route::Status => json(StatusCode::OK, &status(&s, role)),
        Route::Metrics => reply(
            StatusCode::OK,
            OPENMETRICS_CONTENT_TYPE,
            render_metrics(&s, prefix).into(),
        ),
        Route::Health => match health(&s) {
            Ok(body) => text(StatusCode::OK, body),
            Err(body) => text(StatusCode::SERVICE_UNAVAILABLE, body),
        },
    }
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn by_reason(counts: &ReasonCounts) -> Map<String, Value> {
    counts
        .iter()
        .map(|(reason, n)| (reason.as_str().to_owned(), n.into()))
        .collect()
}

/// `/api/status`.
pub fn status(s: &StatsSnapshot, role: &str) -> Value {
    let u = &s.upstream;
    let c = &u.channels;
    let last_lost = u.last_lost.as_ref().map(|l| {
        json!({
            "index": l.index,
            "address": l.address.to_string(),
            "reason": l.reason,
            "ago_s": seconds(l.ago),
        })
    });
    let mut v = json!({
        "role": role,
        // Open device connections, as every listening role says it.
        "connections": s.devices_connected,
        // The same shape as every role's: here the one dependency is the upstream pool.
        "dependencies": {
            "pool": {
                "up": u.state == UpstreamState::Open,
                "state": u.state.as_str(),
                "for_s": seconds(u.for_),
                "failures": u.upstreams_lost,
                "error": u.last_lost.as_ref().map(|l| l.reason.clone()),
            },
        },
        "mode": s.mode.as_str(),
        "uptime_s": seconds(s.uptime),
        "healthy": u.state == UpstreamState::Open,
        "devices": {
            "connected": s.devices_connected,
            "total": s.devices_opened,
            "dropped_slow": s.devices_dropped_slow,
        },
        "hashrate": s.hash_rate,
        "jobs_sent": s.jobs_sent,
        "shares": {
            "accepted": s.accepted,
            "rejected": s.rejected.total(),
            "rejected_by_reason": by_reason(&s.rejected),
        },
        "work": { "accepted": s.accepted_work },
        "upstream_shares": {
            "forwarded": s.forwarded,
            "accepted": s.upstream_accepted,
            "rejected": s.upstream_rejected.total(),
            "rejected_by_reason": by_reason(&s.upstream_rejected),
            "unanswered": s.upstream_unanswered,
            "in_flight": s.in_flight,
        },
        "upstream": {
            "state": u.state.as_str(),
            "index": u.index,
            "address": u.address.to_string(),
            "channel_id": u.channel_id,
            "difficulty": u.difficulty,
            "state_for_s": seconds(u.for_),
            "state_since_unix_ms": u.since_unix_ms,
            "channels_opened": u.channels_opened,
            "channels_open": u.channels_open,
            // Per-device mode has no one channel (`channel_id` null, `difficulty` 0): its
            // channels are described here; aggregated mode's one channel likewise.
            "channels": {
                "opening": c.opening,
                "draining": c.draining,
                "timed_out": c.timed_out,
                "refused": c.refused,
                "closed_by_pool": c.closed_by_pool,
                "difficulty_min": c.difficulty_min,
                "difficulty_max": c.difficulty_max,
            },
            "upstreams_lost": u.upstreams_lost,
            "last_lost": last_lost,
            // SV2 extensions the upstream agreed to: [2] when shares name their worker.
            "extensions": u.extensions,
        },
    });
    if let (Some(map), Some(a)) = (v.as_object_mut(), &s.admission) {
        map.insert("admission".to_owned(), admission_json(a));
    }
    v
}

/// `/healthz`: the body for 200, or for 503 with the reason; either way a line for each
/// listener whose accept queue is filling.
pub fn health(s: &StatsSnapshot) -> Result<String, String> {
    let queues = s
        .admission
        .as_ref()
        .map(|a| status::accept_queue_lines(&a.accept_queues))
        .unwrap_or_default();
    upstream_health(s)
        .map(|b| b + &queues)
        .map_err(|b| b + &queues)
}

fn upstream_health(s: &StatsSnapshot) -> Result<String, String> {
    let u = &s.upstream;
    match u.state {
        UpstreamState::Open => Ok("ok\n".into()),
        UpstreamState::Opening => Err(format!(
            "no upstream: opening the channel on {} (index {}) for {:.1} s\n",
            u.address,
            u.index,
            seconds(u.for_)
        )),
        UpstreamState::FailingOver => {
            let lost = match &u.last_lost {
                Some(l) => format!("; lost {} (index {}): {}", l.address, l.index, l.reason),
                None => String::new(),
            };
            Err(format!(
                "no upstream: failing over for {:.1} s{lost}\n",
                seconds(u.for_)
            ))
        }
    }
}

/// `/metrics`: one OpenMetrics text exposition (ending in `# EOF`), every family present from
/// the first scrape, label values from fixed vocabularies only.
pub fn render_metrics(s: &StatsSnapshot, prefix: &str) -> String {
    let mut registry = Registry::with_prefix(prefix);
    registry.register_collector(Box::new(Figures(s.clone())));
    let mut out = String::with_capacity(4 * 1024);
    prometheus_client::encoding::text::encode(&mut out, &registry)
        .expect("writing to a String cannot fail");
    out
}

#[derive(Debug)]
struct Figures(StatsSnapshot);

/// A shares family: accepted, then rejected by every reason, then the extra members.
fn shares<'a>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    accepted: u64,
    rejected: &ReasonCounts,
    extra: &[(&'a [(&'a str, &'a str)], u64)],
) -> fmt::Result {
    let reasons: Vec<[(&str, &str); 2]> = rejected
        .iter()
        .map(|(r, _)| [("result", "rejected"), ("reason", r.as_str())])
        .collect();
    let accepted_label = [("result", "accepted")];
    let members = std::iter::once((&accepted_label[..], accepted))
        .chain(
            reasons
                .iter()
                .zip(rejected.iter())
                .map(|(labels, (_, n))| (&labels[..], n)),
        )
        .chain(extra.iter().copied());
    family(e, name, help, None, MetricType::Counter, members)
}

impl Collector for Figures {
    fn encode(&self, mut e: DescriptorEncoder) -> fmt::Result {
        let s = &self.0;
        let u = &s.upstream;
        let e = &mut e;

        // Devices.
        gauge(
            e,
            "devices",
            "Open device connections.",
            None,
            s.devices_connected,
        )?;
        counter(
            e,
            "devices_opened",
            "Device connections accepted since start.",
            s.devices_opened,
        )?;
        counter(
            e,
            "devices_dropped_slow",
            "Devices dropped for not reading what they were sent.",
            s.devices_dropped_slow,
        )?;
        gauge(
            e,
            "hashrate",
            "The devices' hash rate: vardiff's measurement of each, or the configured rate until measured.",
            Some(&Unit::Other("hashes_per_second".into())),
            s.hash_rate,
        )?;
        counter(
            e,
            "jobs_sent",
            "Jobs sent to the devices (each serialized once for all of them).",
            s.jobs_sent,
        )?;
        shares(
            e,
            "shares",
            "Devices' shares judged by the translator, by result and, for rejected ones, reason.",
            s.accepted,
            &s.rejected,
            &[],
        )?;
        counter(
            e,
            "accepted_work",
            "Sum of the devices' accepted shares' difficulties, in difficulty-1 units (2^32 hashes each).",
            s.accepted_work,
        )?;

        // Upstream.
        counter(
            e,
            "upstream_shares_forwarded",
            "Devices' shares that met the upstream target and were sent upstream.",
            s.forwarded,
        )?;
        shares(
            e,
            "upstream_shares",
            "Forwarded shares by the upstream's verdict; unanswered ones were still waiting when the channel was lost or the window filled.",
            s.upstream_accepted,
            &s.upstream_rejected,
            &[(&[("result", "unanswered")], s.upstream_unanswered)],
        )?;
        gauge(
            e,
            "upstream_shares_in_flight",
            "Forwarded shares awaiting the upstream's verdict.",
            None,
            s.in_flight,
        )?;
        gauge(
            e,
            "upstream_up",
            "1 while an upstream channel is open, 0 while opening or failing over.",
            None,
            u64::from(u.state == UpstreamState::Open),
        )?;
        let states: Vec<[(&str, &str); 1]> = [
            UpstreamState::Open,
            UpstreamState::Opening,
            UpstreamState::FailingOver,
        ]
        .iter()
        .map(|st| [("state", st.as_str())])
        .collect();
        family(
            e,
            "upstream_state",
            "The upstream's state: 1 for the current one.",
            None,
            MetricType::Gauge,
            states
                .iter()
                .map(|labels| (&labels[..], u64::from(labels[0].1 == u.state.as_str()))),
        )?;
        gauge(
            e,
            "upstream_state_duration",
            "Time the upstream has been in its current state.",
            Some(&Unit::Seconds),
            seconds(u.for_),
        )?;
        gauge(
            e,
            "upstream_index",
            "The upstream in use (while failing over: the one lost), as its place in the list from 0.",
            None,
            u.index as u64,
        )?;
        gauge(
            e,
            "upstream_difficulty",
            "The upstream channel's share target as a difficulty (0 while none is open).",
            None,
            u.difficulty,
        )?;
        counter(
            e,
            "upstream_channels_opened",
            "Upstream channels opened since start, the first included.",
            u.channels_opened,
        )?;
        gauge(
            e,
            "upstream_channels_open",
            "Upstream channels open now: one in aggregated mode, one per device in per-device mode.",
            None,
            u.channels_open,
        )?;
        let c = &u.channels;
        gauge(
            e,
            "upstream_channels_opening",
            "Upstream channels asked for and not answered yet (per-device mode).",
            None,
            c.opening,
        )?;
        gauge(
            e,
            "upstream_channels_draining",
            "Channels closed on their devices' departure, awaiting verdicts on shares already sent.",
            None,
            c.draining,
        )?;
        counter(
            e,
            "upstream_channel_requests_timed_out",
            "Channel requests the pool left unanswered past the open timeout while answering other traffic; each device was closed to ask again.",
            c.timed_out,
        )?;
        counter(
            e,
            "upstream_channels_refused",
            "Channel requests the pool refused.",
            c.refused,
        )?;
        counter(
            e,
            "upstream_channels_closed_by_pool",
            "Open upstream channels the pool closed.",
            c.closed_by_pool,
        )?;
        gauge(
            e,
            "upstream_channel_difficulty_min",
            "The easiest share target over the open upstream channels, as a difficulty (0 while none is open).",
            None,
            c.difficulty_min,
        )?;
        gauge(
            e,
            "upstream_channel_difficulty_max",
            "The hardest share target over the open upstream channels, as a difficulty (0 while none is open).",
            None,
            c.difficulty_max,
        )?;
        let modes: Vec<[(&str, &str); 1]> = [ChannelMode::Aggregated, ChannelMode::PerDevice]
            .iter()
            .map(|m| [("mode", m.as_str())])
            .collect();
        family(
            e,
            "channel_mode",
            "How devices map onto upstream channels: 1 for the mode in use.",
            None,
            MetricType::Gauge,
            modes
                .iter()
                .map(|labels| (&labels[..], u64::from(labels[0].1 == s.mode.as_str()))),
        )?;
        counter(
            e,
            "upstreams_lost",
            "Upstreams lost, each followed by failover.",
            u.upstreams_lost,
        )?;
        // The one dependency here is the upstream pool.
        dependency_families(
            e,
            &[DependencyFigure {
                name: "pool",
                up: u.state == UpstreamState::Open,
                failures: u.upstreams_lost,
            }],
        )?;
        gauge(
            e,
            "uptime",
            "Time since the translator started.",
            Some(&Unit::Seconds),
            seconds(s.uptime),
        )?;
        if let Some(a) = &s.admission {
            admission_families(e, a)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use events::Reason;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::mode::ChannelCensus;
    use crate::shares::UpstreamVerdict;

    /// The pool dependency's up, state, failures and error in a status document.
    fn pool_dependency(v: &serde_json::Value) -> [&serde_json::Value; 4] {
        let pool = &v["dependencies"]["pool"];
        [
            &pool["up"],
            &pool["state"],
            &pool["failures"],
            &pool["error"],
        ]
    }

    /// The upstream's channels open and channels opened in a status document.
    fn channel_counts(v: &serde_json::Value) -> [&serde_json::Value; 2] {
        [
            &v["upstream"]["channels_open"],
            &v["upstream"]["channels_opened"],
        ]
    }

    /// A per-device translator's figures before any device or channel.
    fn per_device_stats() -> Stats {
        Stats::new(
            Instant::now(),
            0,
            "127.0.0.1:3333".parse().unwrap(),
            None,
            0.0,
        )
        .with_mode(ChannelMode::PerDevice)
    }

    fn busy_stats() -> Stats {
        let s = Stats::new(
            Instant::now(),
            0,
            "127.0.0.1:3333".parse().unwrap(),
            Some(7),
            512.0,
        );
        for n in 1..=3 {
            s.device_opened(n);
        }
        s.device_closed(2);
        s.job_sent();
        s.job_sent();
        s.share_accepted(0.25);
        s.share_accepted(0.25);
        s.share_rejected(Reason::Duplicate);
        s.share_forwarded();
        s.share_forwarded();
        s.upstream_verdict(&UpstreamVerdict::Accepted);
        s.upstream_verdict(&UpstreamVerdict::Rejected("stale-share".into()));
        s.set_in_flight(1);
        s.set_hash_rate(120e3);
        s
    }

    #[test]
    fn status_carries_every_figure() {
        let stats = busy_stats();
        let v = status(&stats.snapshot(), "translator");
        assert_eq!(v["role"], "translator");
        assert_eq!(v["healthy"], true);
        assert_eq!(v["devices"]["connected"], 2);
        assert_eq!(v["devices"]["total"], 3);
        assert_eq!(v["jobs_sent"], 2);
        assert_eq!(v["hashrate"], 120e3);
        assert_eq!(v["shares"]["accepted"], 2);
        assert_eq!(v["shares"]["rejected"], 1);
        assert_eq!(v["shares"]["rejected_by_reason"]["duplicate"], 1);
        assert_eq!(
            v["shares"]["rejected_by_reason"].as_object().unwrap().len(),
            Reason::ALL.len(),
            "every reason, zeros included"
        );
        assert_eq!(v["work"]["accepted"], 0.5);
        let up = &v["upstream_shares"];
        assert_eq!(
            (&up["forwarded"], &up["accepted"], &up["rejected"]),
            (&json!(2), &json!(1), &json!(1))
        );
        assert_eq!(up["rejected_by_reason"]["stale"], 1);
        assert_eq!(
            (&up["unanswered"], &up["in_flight"]),
            (&json!(0), &json!(1))
        );
        let u = &v["upstream"];
        assert_eq!(u["state"], "open");
        assert_eq!(u["address"], "127.0.0.1:3333");
        assert_eq!((&u["index"], &u["channel_id"]), (&json!(0), &json!(7)));
        assert_eq!(u["difficulty"], 512.0);
        assert_eq!(
            (&u["channels_opened"], &u["upstreams_lost"]),
            (&json!(1), &json!(0))
        );
        assert!(u["last_lost"].is_null());
        assert_eq!(
            pool_dependency(&v),
            [&json!(true), &json!("open"), &json!(0), &json!(null)]
        );

        stats.upstream_lost("connection reset by peer");
        let v = status(&stats.snapshot(), "translator");
        assert_eq!(v["healthy"], false);
        assert_eq!(
            pool_dependency(&v),
            [
                &json!(false),
                &json!("failing_over"),
                &json!(1),
                &json!("connection reset by peer")
            ]
        );
        assert_eq!(v["upstream"]["state"], "failing_over");
        assert!(v["upstream"]["channel_id"].is_null());
        assert_eq!(v["upstream"]["upstreams_lost"], 1);
        assert_eq!(
            v["upstream"]["last_lost"]["reason"],
            "connection reset by peer"
        );
    }

    #[test]
    fn status_reports_the_channel_mode_and_the_channels_open() {
        let v = status(&busy_stats().snapshot(), "translator");
        assert_eq!(v["mode"], "aggregated");
        assert_eq!(v["upstream"]["channels_open"], 1);
        let s = per_device_stats();
        let v = status(&s.snapshot(), "translator");
        assert_eq!(v["mode"], "per-device");
        assert_eq!(
            channel_counts(&v),
            [&json!(0), &json!(0)],
            "no device, no channel"
        );
        for _ in 0..3 {
            s.device_channel_opened();
        }
        s.set_channels_open(2);
        let v = status(&s.snapshot(), "translator");
        assert_eq!(v["healthy"], true, "open with the connection");
        assert_eq!(channel_counts(&v), [&json!(2), &json!(3)]);
        let text = render_metrics(&s.snapshot(), "stratumlab_translator");
        assert!(
            text.contains("stratumlab_translator_upstream_channels_open 2\n"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_translator_channel_mode{mode=\"per-device\"} 1\n"),
            "{text}"
        );
    }

    #[test]
    fn status_and_metrics_describe_per_device_channels() {
        let s = per_device_stats();
        let v = status(&s.snapshot(), "translator");
        let c = &v["upstream"]["channels"];
        assert_eq!(
            (&c["opening"], &c["timed_out"], &c["difficulty_min"]),
            (&json!(0), &json!(0), &json!(0.0)),
            "{c}"
        );
        s.set_channels_open(3);
        s.set_channels(&ChannelCensus {
            open: 3,
            opening: 2,
            draining: 1,
            timed_out: 4,
            refused: 5,
            closed_by_pool: 6,
            difficulty: Some((0.25, 8.0)),
        });
        let v = status(&s.snapshot(), "translator");
        let u = &v["upstream"];
        assert_eq!(u["channels_open"], 3);
        // No one channel: the keys that describe one say so, and the range says the rest.
        assert!(u["channel_id"].is_null(), "{u}");
        assert_eq!(u["difficulty"], 0.0);
        let c = &u["channels"];
        assert_eq!(
            (&c["opening"], &c["draining"], &c["timed_out"]),
            (&json!(2), &json!(1), &json!(4)),
            "{c}"
        );
        assert_eq!(
            (&c["refused"], &c["closed_by_pool"]),
            (&json!(5), &json!(6))
        );
        assert_eq!(
            (&c["difficulty_min"], &c["difficulty_max"]),
            (&json!(0.25), &json!(8.0))
        );
        let text = render_metrics(&s.snapshot(), "stratumlab_translator");
        for line in [
            "stratumlab_translator_upstream_channels_opening 2\n",
            "stratumlab_translator_upstream_channels_draining 1\n",
            "stratumlab_translator_upstream_channel_requests_timed_out_total 4\n",
            "stratumlab_translator_upstream_channels_refused_total 5\n",
            "stratumlab_translator_upstream_channels_closed_by_pool_total 6\n",
            "stratumlab_translator_upstream_channel_difficulty_min 0.25\n",
            "stratumlab_translator_upstream_channel_difficulty_max 8.0\n",
        ] {
            assert!(text.contains(line), "no {line:?} in\n{text}");
        }
        // Every channel gone: the range reads 0, as the one channel's difficulty does.
        s.set_channels(&ChannelCensus::default());
        let c = status(&s.snapshot(), "translator")["upstream"]["channels"].clone();
        assert_eq!(
            (&c["difficulty_min"], &c["difficulty_max"]),
            (&json!(0.0), &json!(0.0))
        );
        assert_eq!(c["timed_out"], 0, "the core's own count, whatever it says");
    }

    #[test]
    fn aggregated_status_gives_the_one_channels_difficulty_as_its_range() {
        let v = status(&busy_stats().snapshot(), "translator");
        let c = &v["upstream"]["channels"];
        assert_eq!(
            (&c["difficulty_min"], &c["difficulty_max"]),
            (&json!(512.0), &json!(512.0)),
            "{c}"
        );
    }

    #[test]
    fn health_says_why_there_is_no_upstream() {
        let stats = busy_stats();
        assert_eq!(health(&stats.snapshot()), Ok("ok\n".into()));
        stats.upstream_lost("silent for 30s");
        let why = health(&stats.snapshot()).unwrap_err();
        assert!(why.starts_with("no upstream: failing over"), "{why}");
        assert!(
            why.contains("127.0.0.1:3333 (index 0): silent for 30s"),
            "{why}"
        );
        stats.upstream_opening(1, "127.0.0.1:4444".parse().unwrap());
        let why = health(&stats.snapshot()).unwrap_err();
        assert!(
            why.starts_with("no upstream: opening the channel on 127.0.0.1:4444 (index 1)"),
            "{why}"
        );
        stats.channel_opened(Some(2), 1.0);
        assert_eq!(health(&stats.snapshot()), Ok("ok\n".into()));
    }

    /// `name{labels} value` or `name value`, with a number for the value.
    fn sample(line: &str) -> Option<(&str, f64)> {
        let (series, value) = line.rsplit_once(' ')?;
        let name = series.split('{').next()?;
        let ok_name = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        let ok_labels = match series.split_once('{') {
            Some((_, rest)) => rest.ends_with('}'),
            None => true,
        };
        (ok_name && ok_labels).then_some(())?;
        Some((series, value.parse().ok()?))
    }

    #[test]
    fn metrics_are_openmetrics_with_every_figure() {
        let stats = busy_stats();
        let text = render_metrics(&stats.snapshot(), "stratumlab_translator");
        assert!(text.ends_with("# EOF\n"), "{text}");
        let mut samples = std::collections::HashMap::new();
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let (series, value) =
                sample(line).unwrap_or_else(|| panic!("not a sample: {line:?}\n{text}"));
            assert!(series.starts_with("stratumlab_translator_"), "{line}");
            samples.insert(series.to_owned(), value);
        }
        let get = |series: &str| {
            *samples
                .get(&format!("stratumlab_translator_{series}"))
                .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        };
        assert_eq!(get("devices"), 2.0);
        assert_eq!(get("devices_opened_total"), 3.0);
        assert_eq!(get("jobs_sent_total"), 2.0);
        assert_eq!(get("hashrate_hashes_per_second"), 120e3);
        assert_eq!(get("shares_total{result=\"accepted\"}"), 2.0);
        assert_eq!(
            get("shares_total{result=\"rejected\",reason=\"duplicate\"}"),
            1.0
        );
        assert_eq!(
            get("shares_total{result=\"rejected\",reason=\"stale\"}"),
            0.0
        );
        assert_eq!(get("accepted_work_total"), 0.5);
        assert_eq!(get("upstream_shares_forwarded_total"), 2.0);
        assert_eq!(get("upstream_shares_total{result=\"accepted\"}"), 1.0);
        assert_eq!(
            get("upstream_shares_total{result=\"rejected\",reason=\"stale\"}"),
            1.0
        );
        assert_eq!(get("upstream_shares_total{result=\"unanswered\"}"), 0.0);
        assert_eq!(get("upstream_shares_in_flight"), 1.0);
        assert_eq!(get("upstream_up"), 1.0);
        assert_eq!(get("upstream_state{state=\"open\"}"), 1.0);
        assert_eq!(get("upstream_state{state=\"failing_over\"}"), 0.0);
        assert_eq!(get("upstream_index"), 0.0);
        assert_eq!(get("upstream_difficulty"), 512.0);
        assert_eq!(get("upstream_channels_opened_total"), 1.0);
        assert_eq!(get("upstreams_lost_total"), 0.0);
        assert_eq!(get("dependency_up{dependency=\"pool\"}"), 1.0);
        assert_eq!(get("dependency_failures_total{dependency=\"pool\"}"), 0.0);
        assert!(get("uptime_seconds") >= 0.0);

        stats.upstream_lost("closed");
        let text = render_metrics(&stats.snapshot(), "stratumlab_proxy");
        assert!(text.contains("stratumlab_proxy_upstream_up 0\n"), "{text}");
        assert!(
            text.contains("stratumlab_proxy_upstreams_lost_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_proxy_dependency_up{dependency=\"pool\"} 0\n"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_proxy_dependency_failures_total{dependency=\"pool\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_proxy_upstream_state{state=\"failing_over\"} 1\n"),
            "{text}"
        );
    }

    /// One request over a fresh connection: the status code and the body.
    async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(head.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out[9..12].parse().unwrap();
        let body = out.split_once("\r\n\r\n").unwrap().1.to_owned();
        (code, body)
    }

    #[tokio::test]
    async fn the_endpoints_answer_over_http() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(busy_stats());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, stats.clone(), "translator", stopped));
        let checks = async {
            let (code, body) = request(addr, "GET", "/api/status").await;
            assert_eq!(code, 200, "{body}");
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(v["devices"]["connected"], 2);
            assert_eq!(request(addr, "GET", "/healthz").await, (200, "ok\n".into()));
            let (code, body) = request(addr, "GET", "/metrics").await;
            assert_eq!(code, 200);
            assert!(body.contains("stratumlab_translator_devices 2\n"), "{body}");
            let (code, body) = request(addr, "HEAD", "/metrics").await;
            assert_eq!((code, body.as_str()), (200, ""), "HEAD has no body");
            assert_eq!(request(addr, "POST", "/healthz").await.0, 405);
            assert_eq!(request(addr, "GET", "/api/workers").await.0, 404);
            stats.upstream_lost("closed");
            let (code, body) = request(addr, "GET", "/healthz").await;
            assert_eq!(code, 503);
            assert!(body.starts_with("no upstream: failing over"), "{body}");
        };
        tokio::time::timeout(Duration::from_secs(10), checks)
            .await
            .expect("the endpoints answered in time");
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("the server stopped")
            .unwrap()
            .unwrap();
    }
}
