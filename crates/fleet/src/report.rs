//! What a fleet run reports: connections, shares and their verdicts, validated shares per
//! second, submit-to-reply latency, hashes, and the CPU the fleet and the pool used.

use std::collections::BTreeMap;
use std::fmt;

use hdrhistogram::Histogram;
use serde::Serialize;

/// A latency distribution in milliseconds. With no samples, `n` is 0 and the figures are null.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    /// Samples.
    pub n: u64,
    /// The mean; `None` with no samples.
    pub mean: Option<f64>,
    /// The median.
    pub p50: Option<f64>,
    /// The 99th percentile.
    pub p99: Option<f64>,
    /// The slowest.
    pub max: Option<f64>,
}

impl LatencyMs {
    /// From a histogram of microseconds.
    pub fn from_histogram_us(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return LatencyMs::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        LatencyMs {
            n: h.len(),
            mean: Some(h.mean() / 1000.0),
            p50: Some(ms(h.value_at_quantile(0.5))),
            p99: Some(ms(h.value_at_quantile(0.99))),
            max: Some(ms(h.max())),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
/// What happened to the shares the devices found.
pub struct ShareCounts {
    /// Shares sent to the pool.
    pub sent: u64,
    /// Of those, accepted.
    pub accepted: u64,
    /// Of those, rejected.
    pub rejected: u64,
    /// By SV1 error code ("21", ...; "false" for `"result": false` without an error) or SV2
    /// error code ("stale-share", ...).
    pub rejected_by_code: BTreeMap<String, u64>,
    /// In docs/metrics.md's vocabulary (stale, duplicate, low_difficulty, ...).
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Sent, but no verdict came (timed out, or the connection closed first).
    pub unanswered: u64,
    /// Found, but never sent (the connection closed first).
    pub dropped: u64,
}

/// CPU a process used over the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuUse {
    /// The process id.
    pub pid: u32,
    /// CPU seconds, user and system, over the run.
    pub cpu_s: f64,
    /// 100 = one core busy for the whole run.
    pub cpu_pct: f64,
    /// Resident memory at the end of the run; `None` where it could not be read.
    pub rss_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
/// The summary of one fleet run (printed, and written as JSON).
pub struct FleetReport {
    /// The pool's address.
    pub pool: String,
    /// `sv1` or `sv2`.
    pub protocol: String,
    /// The devices' [`crate::Profile`].
    pub profile: String,
    /// The measured time: from the start until the drain ended.
    pub duration_s: f64,
    /// Devices in the fleet.
    pub devices: u64,
    /// Connections open when the run ended (before the fleet closed them).
    pub connected: u64,
    /// Devices subscribed and authorized when the run ended.
    pub ready: u64,
    /// TCP connections opened, reconnects included.
    pub connects: u64,
    /// Connection attempts that failed.
    pub connect_failures: u64,
    /// Connections that closed, whichever side closed them.
    pub disconnects: u64,
    /// Jobs the devices received, all devices together.
    pub jobs_received: u64,
    /// The shares' fates.
    pub shares: ShareCounts,
    /// Validated shares per second: accepted shares over the measured time.
    pub accepted_per_s: f64,
    /// From a share leaving a device until its verdict arrived.
    pub share_latency_ms: LatencyMs,
    /// Shares that also met the network target.
    pub blocks_found: u64,
    /// Header hashes computed, all devices together.
    pub hashes: u64,
    /// Hashes per second achieved, and the budget they were capped at.
    pub hash_rate: f64,
    /// The hash budget, hashes per second (0: none).
    pub hash_budget: f64,
    /// CPU seconds the fleet process used over the run.
    pub fleet_cpu_s: f64,
    /// The same as a percentage of one core.
    pub fleet_cpu_pct: f64,
    /// The fleet process's resident memory at the end, bytes.
    pub fleet_rss_bytes: u64,
    /// Resident memory the devices added, per device (RSS growth from before the first device
    /// to the end of the run, divided by the device count).
    pub rss_per_device_bytes: f64,
    /// The pool process's CPU over the same time, when its pid was given.
    pub pool_process: Option<CpuUse>,
    /// Lines or frames from the pool the devices could not use.
    pub protocol_errors: u64,
}

/// `key: count` for each entry, comma-separated.
fn listed(counts: &BTreeMap<String, u64>) -> String {
    let by: Vec<String> = counts.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    by.join(", ")
}

impl fmt::Display for FleetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shares;
        writeln!(
            f,
            "fleet ran {:.1}s against {}: {} {} devices ({}), {} connected, {} ready at the end",
            self.duration_s,
            self.pool,
            self.devices,
            self.protocol,
            self.profile,
            self.connected,
            self.ready
        )?;
        writeln!(
            f,
            "  connections    {} made, {} failed, {} closed",
            self.connects, self.connect_failures, self.disconnects
        )?;
        writeln!(f, "  jobs           {} received", self.jobs_received)?;
        let pct = if s.sent > 0 {
            100.0 * s.accepted as f64 / s.sent as f64
        } else {
            0.0
        };
        writeln!(
            f,
            "  shares         {} sent, {} accepted ({pct:.1}%), {} rejected, {} unanswered, {} dropped",
            s.sent, s.accepted, s.rejected, s.unanswered, s.dropped
        )?;
        if !s.rejected_by_code.is_empty() {
            writeln!(f, "  rejected by    code {}", listed(&s.rejected_by_code))?;
        }
        if !s.rejected_by_reason.is_empty() {
            writeln!(f, "  rejected as    {}", listed(&s.rejected_by_reason))?;
        }
        writeln!(f, "  validated      {:.1} shares/s", self.accepted_per_s)?;
        let l = &self.share_latency_ms;
        match (l.p50, l.p99, l.max) {
            (Some(p50), Some(p99), Some(max)) => writeln!(
                f,
                "  latency        p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms ({} replies)",
                l.n
            )?,
            _ => writeln!(f, "  latency        no replies")?,
        }
        writeln!(
            f,
            "  hashing        {} hashes, {} of a {} budget, {} blocks",
            self.hashes,
            primitives::HashRate::from_hashes_per_sec(self.hash_rate),
            primitives::HashRate::from_hashes_per_sec(self.hash_budget),
            self.blocks_found
        )?;
        write!(
            f,
            "  fleet          {:.2} s CPU ({:.1}%), RSS {:.1} MiB ({:.0} B per device)",
            self.fleet_cpu_s,
            self.fleet_cpu_pct,
            self.fleet_rss_bytes as f64 / (1 << 20) as f64,
            self.rss_per_device_bytes
        )?;
        if let Some(p) = &self.pool_process {
            write!(
                f,
                "\n  pool (pid {})   {:.2} s CPU ({:.1}%)",
                p.pid, p.cpu_s, p.cpu_pct
            )?;
            if let Some(rss) = p.rss_bytes {
                write!(f, ", RSS {:.1} MiB", rss as f64 / (1 << 20) as f64)?;
            }
        }
        if self.protocol_errors > 0 {
            write!(f, "\n  protocol errors {}", self.protocol_errors)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_latency_is_null_and_the_summary_says_so() {
        let r = FleetReport::default();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["share_latency_ms"]["n"], 0);
        assert!(json["share_latency_ms"]["p50"].is_null());
        assert!(r.to_string().contains("no replies"));
    }

    #[test]
    fn latency_figures_come_from_the_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        for us in 1..=1000u64 {
            h.record(us * 10).unwrap();
        }
        let l = LatencyMs::from_histogram_us(&h);
        assert_eq!(l.n, 1000);
        assert!((l.p50.unwrap() - 5.0).abs() < 0.01);
        assert!((l.p99.unwrap() - 9.9).abs() < 0.01);
        assert!((l.max.unwrap() - 10.0).abs() < 0.01);
    }
}
