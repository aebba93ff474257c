//! Whether the run met its own conditions (docs/metrics.md: hash rate, host CPU, unmatched events),
//! shown first (inside the findings) and loudly when it did not.

use serde_json::Value;

use super::html::{escape, push};
use super::results_json::Results;

pub(crate) fn render(results: Option<&Results>, out: &mut String) {
    let valid = results
        .and_then(|r| r.get("valid"))
        .and_then(Value::as_bool);
    let reasons: Vec<String> = match results.and_then(|r| r.get("invalid_reasons")) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    let (class, verdict) = match valid {
        Some(true) if reasons.is_empty() => {
            ("valid", "This run is valid: it met its own conditions.")
        }
        Some(false) | Some(true) => (
            "invalid",
            "This run is NOT valid: its own conditions were not met, so its figures do not \
             measure what they claim to.",
        ),
        None => (
            "unknown",
            "The results do not say whether this run met its own conditions.",
        ),
    };
    push(
        out,
        format_args!(
            "<div id=\"validity\" class=\"validity {class}\" data-valid=\"{}\">\
             <p class=\"verdict\">{verdict}</p>\n",
            valid.map_or("unknown", |v| if v && reasons.is_empty() {
                "true"
            } else {
                "false"
            })
        ),
    );
    if !reasons.is_empty() {
        out.push_str("<ul class=\"reasons\">\n");
        for r in &reasons {
            push(out, format_args!("<li>{}</li>\n", escape(r)));
        }
        out.push_str("</ul>\n");
    }
    out.push_str("</div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn html(json: &str) -> String {
        let r = Results::parse(json).unwrap();
        let mut out = String::new();
        render(Some(&r), &mut out);
        out
    }

    #[test]
    fn invalid_reasons_are_listed_and_escaped() {
        let out =
            html(r#"{"valid": false, "invalid_reasons": ["host CPU > 85% for 20% of the run"]}"#);
        assert!(out.contains("data-valid=\"false\""), "{out}");
        assert!(
            out.contains("<li>host CPU &gt; 85% for 20% of the run</li>"),
            "{out}"
        );
        assert!(html(r#"{"valid": true, "invalid_reasons": []}"#).contains("data-valid=\"true\""));
        // Reasons contradict a `true`: the reasons win.
        assert!(
            html(r#"{"valid": true, "invalid_reasons": ["x"]}"#).contains("data-valid=\"false\"")
        );
        assert!(html("{}").contains("data-valid=\"unknown\""));
        let mut out = String::new();
        render(None, &mut out);
        assert!(out.contains("data-valid=\"unknown\""));
    }
}
