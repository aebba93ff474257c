//! HTML text: escaping and a small writer for the report's markup.
//!
//! Every string that comes from the results directory (config names, role names, reasons, host
//! facts) passes through [`escape`] on its way into the page, attributes included.

use std::fmt::{self, Write};

/// `text` with the five characters that matter in HTML text and quoted attributes replaced.
pub(crate) fn escape(text: &str) -> Escaped<'_> {
    Escaped(text)
}

/// A string displayed HTML-escaped.
pub(crate) struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(i) = rest.find(['<', '>', '&', '"', '\'']) {
            f.write_str(&rest[..i])?;
            f.write_str(match rest.as_bytes()[i] {
                b'<' => "&lt;",
                b'>' => "&gt;",
                b'&' => "&amp;",
                b'"' => "&quot;",
                _ => "&#39;",
            })?;
            rest = &rest[i + 1..];
        }
        f.write_str(rest)
    }
}

/// A fragment id made from arbitrary text: ASCII letters and digits kept, the rest `-`.
pub(crate) fn id(prefix: &str, text: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + text.len() + 1);
    out.push_str(prefix);
    out.push('-');
    for c in text.chars() {
        out.push(if c.is_ascii_alphanumeric() { c } else { '-' });
    }
    out
}

/// Appends formatted markup; writing to a `String` cannot fail.
pub(crate) fn push(out: &mut String, args: fmt::Arguments<'_>) {
    let _ = out.write_fmt(args);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            escape(r#"<b a="x" b='y'>&amp;</b>"#).to_string(),
            "&lt;b a=&quot;x&quot; b=&#39;y&#39;&gt;&amp;amp;&lt;/b&gt;"
        );
        assert_eq!(escape("plain ünïcode").to_string(), "plain ünïcode");
        assert_eq!(escape("").to_string(), "");
    }

    #[test]
    fn ids_are_safe() {
        assert_eq!(id("chart", "sv1-proxied <x>"), "chart-sv1-proxied--x-");
    }
}
