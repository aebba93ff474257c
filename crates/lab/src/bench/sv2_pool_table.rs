//! The bench's summary: one line per row, the ratios between pools at each load, the floor's
//! margin, and where each pool's CPU and kernel work went by thread.

use std::collections::BTreeMap;
use std::io::{self, Write};

use super::sv2_pool::Row;

/// `value` with `digits` decimals, or `-`.
pub(super) fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

/// CPU per share above the same program's idle baseline (the same connections and channels
/// holding still): what the shares themselves cost.
fn net_us(row: &Row, idle: &BTreeMap<&str, f64>) -> Option<f64> {
    let i = idle.get(row.kind.as_str())?;
    (row.accepted > 0)
        .then(|| (row.pool_cpu_pct - i) / 100.0 * row.window_s * 1e6 / row.accepted as f64)
}

/// Pairs whose ratio the table prints, `(ours, other)`: other ÷ ours.
const PAIRS: [(&str, &str); 8] = [
    ("ours", "pool_sv2"),
    ("ours", "pool_sv2-warn"),
    ("ours-dur-off", "pool_sv2"),
    ("ours-dur-off", "pool_sv2-warn"),
    ("base", "pool_sv2"),
    ("base-dur-off", "pool_sv2"),
    ("ours", "base"),
    ("ours-dur-off", "base-dur-off"),
];

/// Prints the table, the ratios and the per-thread breakdown of `rows`.
pub(super) fn print(rows: &[Row], pool_core: usize, out: &mut dyn Write) -> io::Result<()> {
    let mut idle: BTreeMap<&str, f64> = rows
        .iter()
        .filter(|r| r.offered_per_s == 0.0)
        .map(|r| (r.kind.as_str(), r.pool_cpu_pct))
        .collect();
    // A baseline build has no idle row of its own: ours stands in.
    if let Some(&i) = idle.get("ours") {
        idle.entry("base").or_insert(i);
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<14} {:>9} {:>10} {:>4} {:>12} {:>6} {:>9} {:>7} {:>7} {:>8} {:>7} {:>5}  note",
        "pool",
        "offered/s",
        "accepted/s",
        "rej",
        "CPU-us/share",
        "net",
        "pool CPU%",
        "p50 ms",
        "p99 ms",
        "gen CPU%",
        "others%",
        "load"
    )?;
    for r in rows {
        let mut note = if r.offered_per_s == 0.0 {
            "idle baseline".to_owned()
        } else if r.fleet_cpu_pct >= 90.0 {
            "generator-bound".to_owned()
        } else if r.pool_cpu_pct >= 95.0 {
            "pool-bound: accepted/s is its saturation throughput".to_owned()
        } else {
            String::new()
        };
        if r.label.ends_with("-perf") {
            note.push_str(" perf attached");
        }
        writeln!(
            out,
            "{:<14} {:>9.0} {:>10.1} {:>4} {:>12} {:>6} {:>9.1} {:>7} {:>7} {:>8.1} {:>7.1} {:>5.1}  {note}",
            r.label,
            r.offered_per_s,
            r.accepted_per_s,
            r.rejected,
            opt(r.pool_cpu_us_per_share, 1),
            opt(net_us(r, &idle), 1),
            r.pool_cpu_pct,
            opt(r.p50_ms, 2),
            opt(r.p99_ms, 2),
            r.fleet_cpu_pct,
            r.pool_core_others_pct,
            r.loadavg_1m
        )?;
    }
    writeln!(
        out,
        "(others%: other processes' CPU on the pool's core {pool_core} during the window; load: \
         1-minute load average at its end. Latency is only comparable between rows with little \
         of either.)"
    )?;
    writeln!(out)?;
    let mut loads: Vec<f64> = rows
        .iter()
        .map(|r| r.offered_per_s)
        .filter(|&o| o > 0.0)
        .collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    for off in loads {
        let at = |label: &str| {
            rows.iter()
                .find(|r| r.label == label && r.offered_per_s == off && r.accepted > 0)
        };
        for (mine, other) in PAIRS {
            let (Some(m), Some(o)) = (at(mine), at(other)) else {
                continue;
            };
            let rate = o.accepted_per_s / m.accepted_per_s;
            let warn = if (rate - 1.0).abs() <= 0.1 {
                ""
            } else {
                "  (rates differ by more than 10%: CPU per share is not like for like)"
            };
            writeln!(
                out,
                "{off:.0} shares/s offered: {other} / {mine}: CPU per share {} (net of idle {}), \
                 p50 {}, p99 {}; accepted rate {rate:.3}x{warn}",
                ratio(o.pool_cpu_us_per_share, m.pool_cpu_us_per_share),
                ratio(net_us(o, &idle), net_us(m, &idle)),
                ratio(o.p50_ms, m.p50_ms),
                ratio(o.p99_ms, m.p99_ms),
            )?;
        }
        for fl in ["floor", "floor-epoll"] {
            let Some(f) = at(fl).and_then(|r| r.pool_cpu_us_per_share) else {
                continue;
            };
            writeln!(
                out,
                "{off:.0} shares/s offered: {fl} costs {f:.1} CPU-us/share; above it:"
            )?;
            for r in rows
                .iter()
                .filter(|r| r.offered_per_s == off && r.label != fl)
            {
                if let Some(c) = r.pool_cpu_us_per_share {
                    writeln!(
                        out,
                        "    {:<14} {:>7.1} CPU-us/share above {fl} ({:.2}x)",
                        r.label,
                        c - f,
                        c / f
                    )?;
                }
            }
            for o in ["pool_sv2", "pool_sv2-warn"] {
                if let Some(c) = at(o).and_then(|r| r.pool_cpu_us_per_share) {
                    writeln!(
                        out,
                        "    {o} / {fl}: {:.2}x, the most a pool built as {fl} is could be ahead \
                         of {o} in CPU per share on this machine at this load",
                        c / f
                    )?;
                }
            }
        }
        let bound: Vec<&str> = rows
            .iter()
            .filter(|r| r.offered_per_s == off && r.fleet_cpu_pct >= 90.0)
            .map(|r| r.label.as_str())
            .collect();
        if !bound.is_empty() {
            writeln!(
                out,
                "  generator-bound at {off:.0}/s ({}): no saturation figure from that step",
                bound.join(", ")
            )?;
        }
    }
    writeln!(out)?;
    writeln!(out, "pool CPU in the window by thread (s):")?;
    for r in rows {
        let mut th: Vec<(&String, &f64)> = r.pool_cpu_s_by_thread.iter().collect();
        th.sort_by(|a, b| b.1.total_cmp(a.1));
        let th: Vec<String> = th.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        writeln!(
            out,
            "  {:<14} {:>6.0}/s  {}",
            r.label,
            r.offered_per_s,
            th.join(", ")
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "kernel work per accepted share, by thread: context switches (voluntary+involuntary) and, \
         with --trace, system calls (the busiest calls in brackets):"
    )?;
    for r in rows.iter().filter(|r| r.accepted > 0) {
        kernel_work(r, out)?;
    }
    Ok(())
}

fn kernel_work(r: &Row, out: &mut dyn Write) -> io::Result<()> {
    let n = r.accepted as f64;
    let cs = &r.ctxt_switches_by_thread;
    let empty = BTreeMap::new();
    let sc = r.syscalls_by_thread.as_ref().unwrap_or(&empty);
    let total_cs: u64 = cs.values().map(|[v, i]| v + i).sum();
    let total_sc: u64 = sc.values().flat_map(|c| c.values()).sum();
    let mut head = format!(
        "  {:<14} {:>6.0}/s  switches {:.2}/share",
        r.label,
        r.offered_per_s,
        total_cs as f64 / n
    );
    if !sc.is_empty() {
        head.push_str(&format!(", syscalls {:.2}/share", total_sc as f64 / n));
    }
    writeln!(out, "{head}")?;
    let mut names: Vec<&String> = cs.keys().chain(sc.keys()).collect();
    names.sort();
    names.dedup();
    let weight = |k: &String| {
        cs.get(k).map_or(0, |[v, i]| v + i) + sc.get(k).map_or(0, |c| c.values().sum::<u64>())
    };
    names.sort_by_key(|k| std::cmp::Reverse(weight(k)));
    for name in names {
        let [v, i] = cs.get(name).copied().unwrap_or([0, 0]);
        let mut line = format!("      {name:<18} ");
        if let Some([u, s]) = r.pool_user_sys_s_by_thread.get(name) {
            line.push_str(&format!(
                "CPU-us/share user {:.1} + system {:.1}, ",
                u * 1e6 / n,
                s * 1e6 / n
            ));
        }
        line.push_str(&format!("switches {:.3}+{:.3}", v as f64 / n, i as f64 / n));
        if let Some(calls) = sc.get(name).filter(|c| !c.is_empty()) {
            let mut busiest: Vec<(&String, &u64)> = calls.iter().collect();
            busiest.sort_by_key(|(_, c)| std::cmp::Reverse(**c));
            let list: Vec<String> = busiest
                .iter()
                .take(6)
                .map(|(k, c)| format!("{k} {:.3}", **c as f64 / n))
                .collect();
            line.push_str(&format!(
                ", syscalls {:.3} ({})",
                calls.values().sum::<u64>() as f64 / n,
                list.join(", ")
            ));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
