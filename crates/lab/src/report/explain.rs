//! One sentence per configuration saying where its time to new job differs from the baseline's,
//! hop by hop, from results.json alone: the medians, the links each configuration's jobs cross
//! (`context.job_path`), the WAN's measured round trip, the LAN's configured one and the farm
//! node's relay delay. What the links do not account for is the job sources' and proxies'
//! processing, said as such rather than guessed apart.

use serde_json::Value;

use super::html::{escape, push};
use super::results_json::{at, number_at, Results};

/// A configuration's sentence against the baseline.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Explanation {
    pub config: String,
    pub text: String,
}

/// The hops of `config`'s job path, as results.json's context spells them.
fn path(results: &Results, config: &str) -> Option<Vec<String>> {
    let hops = at(&results.root, &["context", "job_path", config])?.as_array()?;
    Some(
        hops.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
    )
}

fn crosses(path: &[String], hop: &str) -> bool {
    path.iter().any(|h| h == hop)
}

/// How a hop reads in a sentence.
fn hop_words(hop: &str) -> &str {
    match hop {
        "pool node" => "the pool's node",
        "farm node" => "the farm's own node",
        "pool" => "the pool",
        "jdc" => "the JDC",
        "wan" => "the WAN",
        "lan" => "the intra-farm link",
        "proxy" => "the farm proxy",
        other => other,
    }
}

fn listing(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn ms(v: f64) -> String {
    if v.abs() >= 10.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn signed_ms(v: f64) -> String {
    let s = ms(v.abs());
    if v < 0.0 {
        format!("−{s}")
    } else {
        format!("+{s}")
    }
}

/// Every configuration after the first against the first.
pub(crate) fn explanations(results: &Results) -> Vec<Explanation> {
    let Some(((base, base_v), rest)) = results.configs.split_first() else {
        return Vec::new();
    };
    let context = results.get("context");
    let lan_one_way = context
        .and_then(|c| number_at(c, &["lan_rtt_ms"]))
        .map(|v| v / 2.0);
    let relay = context.and_then(|c| number_at(c, &["farm_relay_delay_ms"]));
    let base_path = path(results, base);
    rest.iter()
        .filter_map(|(config, v)| {
            let text = sentence(
                (base, base_v, base_path.as_deref()),
                (config, v, path(results, config).as_deref()),
                lan_one_way,
                relay,
            )?;
            Some(Explanation {
                config: config.clone(),
                text,
            })
        })
        .collect()
}

type Side<'a> = (&'a str, &'a Value, Option<&'a [String]>);

fn sentence(
    (base, bv, bpath): Side,
    (config, cv, cpath): Side,
    lan_one_way: Option<f64>,
    relay: Option<f64>,
) -> Option<String> {
    let p50 = |v: &Value, key: &str| number_at(v, &[key, "p50"]);
    let (b, c) = (p50(bv, "time_to_job_ms")?, p50(cv, "time_to_job_ms")?);
    let delta = c - b;
    let mut s = format!(
        "{config}: new jobs reach the devices {} than in {base} at the median ({} against {})",
        if delta <= 0.0 {
            format!("{} sooner", ms(-delta))
        } else {
            format!("{} later", ms(delta))
        },
        ms(c),
        ms(b),
    );
    let (Some(bpath), Some(cpath)) = (bpath, cpath) else {
        s.push_str(
            "; the configurations' job paths are not recorded, so the hops are not told apart.",
        );
        return Some(s);
    };
    // The WAN's one-way delay as measured through the tap (half the round trip), per side.
    let wan = |v: &Value| {
        number_at(v, &["rtt_ms", "measured"])
            .or_else(|| number_at(v, &["rtt_ms", "configured"]))
            .map(|r| r / 2.0)
    };
    let mut accounted = 0.0;
    let mut clauses = Vec::new();
    match (crosses(bpath, "wan"), crosses(cpath, "wan")) {
        (true, false) => {
            let w = wan(bv).unwrap_or(0.0);
            accounted -= w;
            clauses.push(format!(
                "{base}'s jobs cross the WAN ({} one way, measured) and {config}'s do not, coming from {}",
                ms(w),
                hop_words(&cpath[0])
            ));
        }
        (false, true) => {
            let w = wan(cv).unwrap_or(0.0);
            accounted += w;
            clauses.push(format!(
                "{config}'s jobs cross the WAN ({} one way, measured) and {base}'s do not",
                ms(w)
            ));
        }
        (true, true) => clauses.push(format!(
            "both cross the WAN ({} one way), so the link is not the difference",
            ms(wan(cv).unwrap_or(0.0))
        )),
        (false, false) => clauses.push("neither crosses the WAN".to_owned()),
    }
    // Hops only one side has (the WAN told above, the ends of the path aside).
    let only = |a: &[String], b: &[String]| -> Vec<String> {
        a.iter()
            .filter(|h| !matches!(h.as_str(), "wan" | "devices") && !b.contains(h))
            .cloned()
            .collect()
    };
    let hop_cost = |h: &str| if h == "lan" { lan_one_way } else { None };
    for (who, extra, sign) in [
        (config, only(cpath, bpath), 1.0),
        (base, only(bpath, cpath), -1.0),
    ] {
        let words: Vec<String> = extra
            .iter()
            .filter(|h| !h.ends_with("node"))
            .map(|h| match hop_cost(h) {
                Some(d) => {
                    accounted += sign * d;
                    format!("{} ({} one way, configured)", hop_words(h), ms(d))
                }
                None => hop_words(h).to_owned(),
            })
            .collect();
        if !words.is_empty() {
            clauses.push(format!("only {who}'s pass {}", listing(&words)));
        }
    }
    let rest = delta - accounted;
    // The job sources' own share, template to first job, where both runs measured it.
    let source = |v: &Value| p50(v, "time_to_job_at_source_ms");
    match (source(bv), source(cv)) {
        (Some(bs), Some(cs)) => {
            clauses.push(format!(
                "from template to first job {}'s job source takes {} and {}'s {} ({})",
                base,
                ms(bs),
                config,
                ms(cs),
                signed_ms(cs - bs)
            ));
            clauses.push(format!(
                "the other {} is proxies, loopback and the devices' reads",
                signed_ms(rest - (cs - bs))
            ));
        }
        _ => clauses.push(format!(
            "the other {} is the job sources' and proxies' processing",
            signed_ms(rest)
        )),
    }
    s.push_str(": ");
    s.push_str(&clauses.join("; "));
    if let (Some(bt), Some(ct)) = (
        p50(bv, "time_to_job_prevhash_ms"),
        p50(cv, "time_to_job_prevhash_ms"),
    ) {
        s.push_str(&format!(
            ". After a new block: {} against {}",
            ms(ct),
            ms(bt)
        ));
        if let (true, Some(r)) = (cpath.first().is_some_and(|h| h == "farm node"), relay) {
            s.push_str(&format!(
                ", {config}'s including the {} by which the farm's node hears of blocks after the pool's",
                ms(r)
            ));
        }
    }
    s.push('.');
    Some(s)
}

/// The section, when there is anything to say.
pub(crate) fn render(results: &Results, out: &mut String) {
    let all = explanations(results);
    if all.is_empty() {
        return;
    }
    out.push_str(
        "<section id=\"explanations\"><h2>Where time to new job goes</h2>\n<ul class=\"explanations\">\n",
    );
    for e in &all {
        push(
            out,
            format_args!(
                "<li data-explains=\"{}\">{}</li>\n",
                escape(&e.config),
                escape(&e.text)
            ),
        );
    }
    out.push_str("</ul></section>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results(json: &str) -> Results {
        Results::parse(json).unwrap()
    }

    const RUN: &str = r#"{
        "context": {"lan_rtt_ms": 0.5, "farm_relay_delay_ms": 20.0,
            "job_path": {"sv1": ["pool node", "pool", "wan", "devices"],
                         "A": ["farm node", "jdc", "lan", "proxy", "devices"],
                         "C": ["pool node", "pool", "wan", "proxy", "devices"]}},
        "configs": {
            "sv1": {"time_to_job_ms": {"p50": 138.0}, "time_to_job_prevhash_ms": {"p50": 217.0},
                    "rtt_ms": {"configured": 145.0, "measured": 146.0},
                    "time_to_job_at_source_ms": {"p50": 60.0}},
            "A": {"time_to_job_ms": {"p50": 41.0}, "time_to_job_prevhash_ms": {"p50": 78.0},
                  "rtt_ms": {"configured": 145.0, "measured": 146.0},
                  "time_to_job_at_source_ms": {"p50": 30.0}},
            "C": {"time_to_job_ms": {"p50": 140.0},
                  "rtt_ms": {"configured": 145.0, "measured": 146.0}}
        }}"#;

    #[test]
    fn a_sentence_per_configuration_with_the_hops_it_differs_by() {
        let all = explanations(&results(RUN));
        assert_eq!(all.len(), 2);
        let a = &all[0];
        assert_eq!(a.config, "A");
        // 97 ms sooner: sv1's 73 ms of WAN gone, 0.25 ms of LAN added, the rest processing.
        assert!(a.text.contains("97 ms sooner"), "{}", a.text);
        assert!(
            a.text.contains("sv1's jobs cross the WAN (73 ms one way"),
            "{}",
            a.text
        );
        assert!(a.text.contains("the farm's own node"), "{}", a.text);
        assert!(a.text.contains("the intra-farm link (0.2 ms"), "{}", a.text);
        // -97 = -73 + 0.25 + rest: rest = -24.25, of which the sources' -30, the rest +5.75.
        assert!(
            a.text
                .contains("sv1's job source takes 60 ms and A's 30 ms (−30 ms)"),
            "{}",
            a.text
        );
        assert!(a.text.contains("other +5.8 ms is proxies"), "{}", a.text);
        assert!(
            a.text.contains("After a new block: 78 ms against 217 ms"),
            "{}",
            a.text
        );
        assert!(a.text.contains("20 ms by which the farm"), "{}", a.text);
        let c = &all[1];
        assert!(c.text.contains("2.0 ms later"), "{}", c.text);
        assert!(c.text.contains("both cross the WAN"), "{}", c.text);
        assert!(
            c.text.contains("only C's pass the farm proxy"),
            "{}",
            c.text
        );
        // Without C's source figure the remainder is not split.
        assert!(
            c.text.contains("other +2.0 ms is the job sources'"),
            "{}",
            c.text
        );
        assert!(!c.text.contains("After a new block"), "{}", c.text);
    }

    #[test]
    fn without_paths_or_medians_nothing_is_guessed() {
        let r = results(
            r#"{"configs": {"sv1": {"time_to_job_ms": {"p50": 100.0}},
                            "D": {"time_to_job_ms": {"p50": 90.0}},
                            "D-ref": {"time_to_job_ms": {"n": 0, "p50": null}}}}"#,
        );
        let all = explanations(&r);
        assert_eq!(all.len(), 1, "{all:?}");
        assert!(all[0].text.contains("not recorded"), "{}", all[0].text);
        assert!(explanations(&results(r#"{"configs": {}}"#)).is_empty());
    }

    #[test]
    fn the_section_is_escaped() {
        let mut out = String::new();
        render(&results(RUN), &mut out);
        assert!(out.contains("data-explains=\"A\""), "{out}");
        assert!(out.contains("sv1&#39;s jobs"), "{out}");
    }
}
