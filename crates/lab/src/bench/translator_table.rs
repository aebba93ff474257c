//! The translator bench's summary: one line per row, latency on the wire, each repetition's
//! margins above the floor and ratios ours / reference, then the median ratio over repetitions.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::translator::{note, repetitions, Row};

pub(super) use super::sv2_pool_table::opt;

/// Each ratio's values over the repetitions, in the order printed.
type Pooled<'a> = Vec<(&'a str, Vec<Option<f64>>)>;

fn q(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// Wire latency (all shares) at `i` (0: p50, 1: p99) of a row.
fn wire(r: &Row, i: usize) -> Option<f64> {
    let all = r.wire?[0];
    [all.p50_ms, all.p99_ms][i]
}

/// Added latency above the floor, ours / theirs. Below the floor counts as nothing added; when
/// theirs is at or below the floor there is nothing to divide by.
fn q_above(ours: &Row, theirs: &Row, floor: Option<&Row>, i: usize) -> Option<f64> {
    let f = wire(floor?, i)?;
    let (a, b) = (wire(ours, i)? - f, wire(theirs, i)? - f);
    (b > 0.0).then(|| a.max(0.0) / b)
}

/// Prints the tables and ratios of `rows`.
pub(super) fn print(rows: &[Row], out: &mut dyn Write) -> io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "{:<20} {:>10} {:>4} {:>10} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>12} {:>6} {:>10} {:>8} {:>10} {:>8} {:>7} {:>5}  note",
        "translator", "answered/s", "rej", "upstream/s", "p50 ms", "p99 ms", "local p50",
        "local p99", "fwd p50", "fwd p99", "fwd n", "CPU-us/share", "CPU%", "KiB/device",
        "RSS0 MiB", "fan-out ms", "gen CPU%", "others%", "load"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<20} {:>10.1} {:>4} {:>10.2} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>12} {:>6.1} {:>10.1} {:>8.1} {:>10} {:>8.1} {:>7.1} {:>5.1}  {}",
            r.label,
            r.answered as f64 / r.window_s,
            r.rejected,
            r.upstream_per_s,
            opt(r.all.p50_ms, 3),
            opt(r.all.p99_ms, 3),
            opt(r.local.p50_ms, 3),
            opt(r.local.p99_ms, 3),
            opt(r.fwd.p50_ms, 3),
            opt(r.fwd.p99_ms, 3),
            r.fwd.n,
            opt(r.cpu_us_per_share, 1),
            r.translator_cpu_pct,
            r.rss_per_device_kib,
            r.rss0_kib / 1024.0,
            opt(r.fanout_max_ms, 1),
            r.fleet_cpu_pct,
            r.others_pct,
            r.loadavg_1m,
            note(r)
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<20} {:>7} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>9}",
        "on the wire",
        "n",
        "p50 ms",
        "p99 ms",
        "local p50",
        "local p99",
        "fwd p50",
        "fwd p99",
        "drops",
        "unmatched"
    )?;
    for r in rows {
        let Some([all, local, fwd]) = r.wire.filter(|w| w[0].n > 0) else {
            continue;
        };
        writeln!(
            out,
            "{:<20} {:>7} {:>7} {:>7} {:>9} {:>9} {:>8} {:>8} {:>6} {:>9}",
            r.label,
            all.n,
            opt(all.p50_ms, 3),
            opt(all.p99_ms, 3),
            opt(local.p50_ms, 3),
            opt(local.p99_ms, 3),
            opt(fwd.p50_ms, 3),
            opt(fwd.p99_ms, 3),
            r.wire_drops.unwrap_or(0),
            r.wire_unmatched.unwrap_or(0)
        )?;
    }
    writeln!(
        out,
        "(on the wire: at the translator's SV1 port, submit packet -> answer packet, kernel \
         timestamps on loopback; what the translator itself adds, without the devices' scheduling)"
    )?;
    writeln!(
        out,
        "(latency: device share_sent -> share_result over loopback, accepted shares sent in the \
         window; local: answered below the pool's target, fwd: the pool judged the same nonce; \
         KiB/device: (RSS with the devices - RSS before them) / devices; fan-out: the slowest, \
         over the window's templates, from the pool sending the job to the last device receiving \
         it; others%: other processes on the translator's core)"
    )?;
    writeln!(out)?;
    let mut pooled: BTreeMap<&str, Pooled> = BTreeMap::new();
    for (rep, by) in repetitions(rows) {
        let (ours, floor) = (by.get("ours").copied(), by.get("floor").copied());
        if let (Some(floor), Some(_)) = (floor, ours) {
            for (i, pct) in ["p50", "p99"].into_iter().enumerate() {
                let above: Vec<String> = by
                    .iter()
                    .filter(|(n, _)| **n != "floor")
                    .map(|(n, r)| {
                        let a = wire(r, i).zip(wire(floor, i)).map(|(x, f)| x - f);
                        format!("{n} {} ms", opt(a, 3))
                    })
                    .collect();
                writeln!(
                    out,
                    "repetition {rep}, {pct} above the floor on the wire (the floor pool's {pct} {} ms subtracted): {}",
                    opt(wire(floor, i), 3),
                    above.join(", ")
                )?;
            }
        }
        for other in ["translator_sv2", "translator_sv2-warn"] {
            let (Some(ours), Some(o)) = (ours, by.get(other).copied()) else {
                continue;
            };
            let rate = if o.answered > 0 {
                ours.answered as f64 / o.answered as f64
            } else {
                0.0
            };
            let got: [(&str, Option<f64>); 9] = [
                ("p50", q(ours.all.p50_ms, o.all.p50_ms)),
                ("p99", q(ours.all.p99_ms, o.all.p99_ms)),
                ("wire p50", q(wire(ours, 0), wire(o, 0))),
                ("wire p99", q(wire(ours, 1), wire(o, 1))),
                ("wire p50 above the floor", q_above(ours, o, floor, 0)),
                ("wire p99 above the floor", q_above(ours, o, floor, 1)),
                (
                    "CPU per share",
                    q(ours.cpu_us_per_share, o.cpu_us_per_share),
                ),
                ("job fan-out", q(ours.fanout_max_ms, o.fanout_max_ms)),
                (
                    "memory per device",
                    q(Some(ours.rss_per_device_kib), Some(o.rss_per_device_kib)),
                ),
            ];
            let pool = pooled.entry(other).or_default();
            for (i, (k, v)) in got.into_iter().enumerate() {
                if pool.len() <= i {
                    pool.push((k, Vec::new()));
                }
                pool[i].1.push(v);
            }
            let warn = if (rate - 1.0).abs() <= 0.1 {
                ""
            } else {
                "  (rates differ by more than 10%: CPU per share is not like for like)"
            };
            writeln!(
                out,
                "repetition {rep}, ours / {other}: {}; answered rate {rate:.3}x{warn}",
                ratios(got.iter().map(|&(k, v)| (k, v)))
            )?;
        }
    }
    for (other, got) in pooled {
        let n = got.first().map_or(0, |(_, v)| v.len());
        let medians = got.iter().map(|(k, v)| {
            let mut v: Vec<f64> = v.iter().flatten().copied().collect();
            v.sort_by(f64::total_cmp);
            (*k, v.get(v.len() / 2).copied())
        });
        writeln!(
            out,
            "median over {n} repetition(s), ours / {other}: {}",
            ratios(medians)
        )?;
    }
    Ok(())
}

fn ratios<'a>(items: impl Iterator<Item = (&'a str, Option<f64>)>) -> String {
    items
        .map(|(k, v)| format!("{k} {}", v.map_or("-".into(), |v| format!("{v:.2}x"))))
        .collect::<Vec<_>>()
        .join(", ")
}
