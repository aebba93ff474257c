//! Live Prometheus metrics of a run (`stratumlab run --metrics-listen ADDR`): where the run is,
//! shares so far per configuration, CPU and memory per role. The figures that count are in
//! results.json; these are for watching a long run from Prometheus or Grafana
//! (`deploy/prometheus.yml` scrapes them).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::orchestrate::{Progress, ShareCounts};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConfigLabel {
    config: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RoleLabel {
    role: String,
}

/// The run's live gauges.
pub struct LiveMetrics {
    registry: Mutex<Registry>,
    elapsed: Gauge<f64, AtomicU64>,
    duration: Gauge<f64, AtomicU64>,
    accepted: Family<ConfigLabel, Gauge>,
    rejected: Family<ConfigLabel, Gauge>,
    blocks: Family<ConfigLabel, Gauge>,
    cpu: Family<RoleLabel, Gauge<f64, AtomicU64>>,
    rss: Family<RoleLabel, Gauge>,
}

impl Default for LiveMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl LiveMetrics {
    pub fn new() -> LiveMetrics {
        let mut r = Registry::with_prefix("stratumlab_run");
        let m = LiveMetrics {
            registry: Mutex::new(Registry::default()),
            elapsed: Gauge::default(),
            duration: Gauge::default(),
            accepted: Family::default(),
            rejected: Family::default(),
            blocks: Family::default(),
            cpu: Family::default(),
            rss: Family::default(),
        };
        r.register(
            "elapsed_seconds",
            "Time since the measured run started",
            m.elapsed.clone(),
        );
        r.register(
            "duration_seconds",
            "Measured duration of the trial",
            m.duration.clone(),
        );
        r.register(
            "shares_accepted",
            "Shares the configuration's pool accepted so far",
            m.accepted.clone(),
        );
        r.register(
            "shares_rejected",
            "Shares the configuration's pool rejected so far (stale included)",
            m.rejected.clone(),
        );
        r.register(
            "blocks_accepted",
            "Blocks the node accepted from the configuration's pool so far",
            m.blocks.clone(),
        );
        r.register(
            "role_cpu_percent",
            "CPU use of a role process in the last second (100 = one core)",
            m.cpu.clone(),
        );
        r.register(
            "role_rss_bytes",
            "Resident memory of a role process",
            m.rss.clone(),
        );
        *m.registry.lock().expect("not poisoned") = r;
        m
    }

    /// Records the roles' latest CPU and memory.
    pub fn set_roles(&self, roles: &BTreeMap<String, (f64, u64)>) {
        for (role, (cpu, rss)) in roles {
            let l = RoleLabel { role: role.clone() };
            self.cpu.get_or_create(&l).set(*cpu);
            self.rss
                .get_or_create(&l)
                .set(i64::try_from(*rss).unwrap_or(i64::MAX));
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let r = self.registry.lock().expect("not poisoned");
        prometheus_client::encoding::text::encode(&mut out, &r)
            .expect("writing to a String cannot fail");
        out
    }

    /// Serves `GET /metrics` on `addr` from a background thread; returns the bound address.
    pub fn serve(self: &Arc<Self>, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let listener = TcpListener::bind(addr)?;
        let bound = listener.local_addr()?;
        let me = self.clone();
        std::thread::Builder::new()
            .name("lab-metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(mut conn) = conn else { continue };
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut request = String::new();
                    let mut reader = BufReader::new(&conn);
                    if reader.read_line(&mut request).is_err() {
                        continue;
                    }
                    // Drain the headers; a scrape has no body.
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    let response = if request.starts_with("GET /metrics") {
                        let body = me.render();
                        format!(
                            "HTTP/1.0 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )
                    } else {
                        "HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".to_owned()
                    };
                    let _ = conn.write_all(response.as_bytes());
                }
            })?;
        Ok(bound)
    }
}

impl Progress for LiveMetrics {
    fn stage(&self, _what: &str) {}

    fn roles(&self, latest: &BTreeMap<String, (f64, u64)>) {
        self.set_roles(latest);
    }

    fn tick(&self, elapsed: Duration, total: Duration, shares: &BTreeMap<String, ShareCounts>) {
        self.elapsed.set(elapsed.as_secs_f64());
        self.duration.set(total.as_secs_f64());
        for (config, s) in shares {
            let l = ConfigLabel {
                config: config.clone(),
            };
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            self.accepted.get_or_create(&l).set(n(s.accepted));
            self.rejected.get_or_create(&l).set(n(s.rejected));
            self.blocks.get_or_create(&l).set(n(s.blocks));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn scrapes_see_the_latest_figures() {
        let live = Arc::new(LiveMetrics::new());
        let addr = live.serve("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut shares = BTreeMap::new();
        shares.insert(
            "sv1".to_owned(),
            ShareCounts {
                accepted: 42,
                rejected: 3,
                blocks: 1,
            },
        );
        live.tick(Duration::from_secs(12), Duration::from_secs(120), &shares);
        live.set_roles(&BTreeMap::from([("sv1.pool".to_owned(), (12.5, 4096))]));
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.0 200"), "{text}");
        assert!(
            text.contains("stratumlab_run_shares_accepted{config=\"sv1\"} 42"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_run_elapsed_seconds 12.0"),
            "{text}"
        );
        assert!(
            text.contains("stratumlab_run_role_cpu_percent{role=\"sv1.pool\"} 12.5"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }
}
