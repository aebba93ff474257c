//! The run's context and host (docs/metrics.md, "Run context, always recorded"): every key shown as
//! recorded, and the time compression stated in words from the recorded values.

use serde_json::{Map, Value};

use super::html::{escape, push};
use super::results_json::{number_at, Results};
use super::units::{exact, MISSING};

/// Mainnet's target block interval.
const MAINNET_BLOCK_INTERVAL_S: f64 = 600.0;

/// How much faster than mainnet the run's clock of blocks ran, as a sentence; `None` when the
/// results record neither the compression factor nor the block interval.
pub(crate) fn compression_statement(context: &Value) -> Option<String> {
    let interval = number_at(context, &["block_interval_s"]).filter(|v| *v > 0.0);
    let factor = number_at(context, &["time_compression"])
        .filter(|v| *v > 0.0)
        .or_else(|| interval.map(|i| MAINNET_BLOCK_INTERVAL_S / i))?;
    let interval = interval.unwrap_or(MAINNET_BLOCK_INTERVAL_S / factor);
    let template = number_at(context, &["template_interval_s"]).filter(|v| *v > 0.0);
    let mut s = if (factor - 1.0).abs() < 1e-9 {
        format!(
            "This run keeps mainnet's pace: a block every {} s on average",
            exact(interval)
        )
    } else {
        format!(
            "This run compresses time {}-fold against mainnet's 600 s blocks: a block every {} s \
             on average",
            exact(round3(factor)),
            exact(round3(interval))
        )
    };
    if let Some(t) = template {
        s.push_str(&format!(
            ", templates refreshed every {} s ({} s at mainnet scale)",
            exact(round3(t)),
            exact(round3(t * factor))
        ));
    }
    s.push('.');
    if (factor - 1.0).abs() >= 1e-9 {
        s.push_str(&format!(
            " Whatever happens per block (new tips, stale shares, orphans) happens {} times as \
             often as on mainnet; stale_pct_mainnet_equiv rescales the stale rate to 600 s blocks.",
            exact(round3(factor))
        ));
    }
    Some(s)
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The context section: the statement, the context table, trials, the host.
pub(crate) fn render(results: Option<&Results>, out: &mut String) {
    out.push_str("<section id=\"context\"><h2>Run context</h2>\n");
    let Some(results) = results else {
        out.push_str(
            "<p class=\"note\">No results.json: the run's context is unknown.</p></section>\n",
        );
        return;
    };
    let context = results.get("context");
    match context.and_then(compression_statement) {
        Some(s) => push(
            out,
            format_args!("<p class=\"compression\">{}</p>\n", escape(&s)),
        ),
        None => out.push_str(
            "<p class=\"note\">The results record neither the time compression nor the block \
             interval.</p>\n",
        ),
    }
    if let Some(Value::Array(trials)) = results.get("trials") {
        push(
            out,
            format_args!(
                "<p>{} trials (<code>--repeat</code>); the figures below aggregate across them.</p>\n",
                trials.len()
            ),
        );
    }
    if let Some(schema) = results.get("schema") {
        push(
            out,
            format_args!(
                "<p class=\"schema\">results.json schema {}</p>\n",
                plain(schema)
            ),
        );
    }
    match context {
        Some(Value::Object(m)) => key_values(m, out, 0),
        _ => out.push_str("<p class=\"note\">No context recorded.</p>\n"),
    }
    out.push_str("<h3>Host</h3>\n");
    match results.get("host") {
        Some(Value::Object(m)) if !m.is_empty() => key_values(m, out, 0),
        _ => out.push_str("<p class=\"note\">No host facts recorded.</p>\n"),
    }
    out.push_str("</section>\n");
}

/// An object as a two-column table, nested objects as nested tables.
fn key_values(map: &Map<String, Value>, out: &mut String, depth: usize) {
    out.push_str("<table class=\"kv\">\n");
    for (k, v) in map {
        push(
            out,
            format_args!("<tr><th scope=\"row\">{}</th><td>", escape(k)),
        );
        value(k, v, out, depth);
        out.push_str("</td></tr>\n");
    }
    out.push_str("</table>\n");
}

fn value(key: &str, v: &Value, out: &mut String, depth: usize) {
    match v {
        Value::Object(m) if depth < 4 && !m.is_empty() => key_values(m, out, depth + 1),
        Value::Array(items) if depth < 4 && items.iter().any(Value::is_object) => {
            for item in items {
                value(key, item, out, depth + 1);
            }
        }
        Value::Array(items) => {
            let text: Vec<String> = items.iter().map(plain).collect();
            push(out, format_args!("{}", escape(&text.join(", "))));
        }
        Value::Number(_) => {
            let unit = if key.ends_with("_ms") {
                " ms"
            } else if key.ends_with("_s") {
                " s"
            } else if key.ends_with("_bytes") {
                " bytes"
            } else {
                ""
            };
            push(out, format_args!("{}{unit}", plain(v)));
        }
        other => push(out, format_args!("{}", escape(&plain(other)))),
    }
}

/// A JSON value as one line of text.
fn plain(v: &Value) -> String {
    match v {
        Value::Null => MISSING.to_owned(),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), exact),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_from_the_recorded_values() {
        let ctx = serde_json::json!({"block_interval_s": 10, "template_interval_s": 2,
                                     "time_compression": 60});
        let s = compression_statement(&ctx).unwrap();
        assert!(s.starts_with("This run compresses time 60-fold against mainnet's 600 s blocks: a block every 10 s"), "{s}");
        assert!(
            s.contains("templates refreshed every 2 s (120 s at mainnet scale)"),
            "{s}"
        );
        // The factor follows from the interval when it is not recorded.
        let s = compression_statement(&serde_json::json!({"block_interval_s": 30})).unwrap();
        assert!(s.contains("20-fold"), "{s}");
        let s = compression_statement(&serde_json::json!({"time_compression": 1})).unwrap();
        assert!(s.contains("mainnet's pace"), "{s}");
        assert_eq!(compression_statement(&serde_json::json!({})), None);
        assert_eq!(
            compression_statement(&serde_json::json!({"block_interval_s": 0})),
            None
        );
    }

    #[test]
    fn context_values_are_escaped_and_nested() {
        let r = Results::parse(
            r#"{"context": {"scenario": "<sv1>", "duration_s": 120, "roles": {"pool": "x&y"},
                "configs": ["sv1", "A"]}, "host": {"cores": 2}, "trials": [{}, {}]}"#,
        )
        .unwrap();
        let mut out = String::new();
        render(Some(&r), &mut out);
        assert!(out.contains("&lt;sv1&gt;"), "{out}");
        assert!(!out.contains("<sv1>"));
        assert!(out.contains("120 s"), "{out}");
        assert!(out.contains("x&amp;y"), "{out}");
        assert!(out.contains("sv1, A"), "{out}");
        assert!(out.contains("2 trials"), "{out}");
        assert!(
            out.contains("<th scope=\"row\">cores</th><td>2</td>"),
            "{out}"
        );
    }
}
