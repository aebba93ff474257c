//! The pages a person opens at `/`: self-contained HTML (style and script inline, nothing
//! fetched from elsewhere) that draws the role's own JSON answers and refreshes them.
//!
//! The figures of the moment are embedded in the page, so its first paint needs no second
//! request and shows exactly what `/api/status` answered; the script then reads `/api/status`,
//! `/healthz` (and `/api/workers` where the role keeps workers) every two seconds. A strict
//! content security policy allows the inline code and requests to the role itself only: worker
//! names and peers' errors are drawn as text, never parsed as markup.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, CONTENT_SECURITY_POLICY};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use crate::response::reply;

/// Style shared by every page.
pub const STYLE: &str = include_str!("page.css");
/// Drawing helpers shared by every page's script (DOM as text, tables, a line chart).
pub const SCRIPT_LIB: &str = include_str!("lib.js");
const ROLE_SCRIPT: &str = include_str!("role.js");

/// Inline code and requests back to the role, nothing else.
const POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
     connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What a role's page shows: its `/api/status` and `/healthz` answers of the moment, and the
/// first page of `/api/workers` where the role has that endpoint.
#[derive(Debug, Clone)]
pub struct RolePage<'a> {
    /// `pool`, `translator`, `proxy`, `jdc`, `jds`.
    pub role: &'a str,
    /// `/api/status`'s answer.
    pub status: Value,
    /// `/healthz`'s answer: `Ok(body)` for 200, `Err(body)` for 503.
    pub health: Result<String, String>,
    /// `/api/workers`' answer where the role has workers (the first page of them).
    pub workers: Option<Value>,
}

impl RolePage<'_> {
    /// The page, as the `/` route answers it.
    pub fn response(&self) -> Response<Full<Bytes>> {
        html_page(
            &format!("stratumlab {}", self.role),
            &self.data(),
            ROLE_SCRIPT,
        )
    }

    fn data(&self) -> Value {
        let (ok, text) = match &self.health {
            Ok(t) => (true, t),
            Err(t) => (false, t),
        };
        json!({
            "role": self.role,
            "status": self.status,
            "health": {"ok": ok, "text": text},
            "workers": self.workers,
        })
    }
}

/// A page titled `title` whose `script` finds `data` in the element `#status-data`.
pub fn html_page(title: &str, data: &Value, script: &str) -> Response<Full<Bytes>> {
    let body = render(title, data, script);
    let mut r = reply(StatusCode::OK, "text/html; charset=utf-8", body.into());
    r.headers_mut()
        .insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY));
    r
}

fn render(title: &str, data: &Value, script: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title><style>{STYLE}</style></head>\n<body><main id=page>\
         <noscript>This page draws its figures with JavaScript; the same figures are at \
         <a href=\"/api/status\">/api/status</a>.</noscript></main>\n\
         <script id=status-data type=application/json>{data}</script>\n\
         <script>{SCRIPT_LIB}\n{script}</script></body></html>\n",
        title = escape_text(title),
        data = embed_json(data),
    )
}

/// JSON that can sit inside a `<script>` element: a `<` anywhere (as in `</script>` inside a
/// worker's name) is written as its escape, which JSON reads back as the same character.
fn embed_json(v: &Value) -> String {
    serde_json::to_string(v)
        .expect("a JSON value always serializes")
        .replace('<', "\\u003c")
}

fn escape_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_embeds_the_figures_without_letting_them_out_of_the_script() {
        let page = RolePage {
            role: "pool",
            status: json!({"uptime_s": 1.0, "name": "</script><script>alert(1)</script>"}),
            health: Err("not serving: node\n".into()),
            workers: None,
        };
        let r = page.response();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-type"], "text/html; charset=utf-8");
        assert!(r.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap()
            .contains("connect-src 'self'"));

        let html = render("stratumlab <pool>", &page.data(), ROLE_SCRIPT);
        assert_eq!(html.matches("</script>").count(), 2, "only the page's own");
        let start = html.find("type=application/json>").unwrap() + "type=application/json>".len();
        let end = start + html[start..].find("</script>").unwrap();
        let back: Value = serde_json::from_str(&html[start..end]).unwrap();
        assert_eq!(back["status"]["name"], "</script><script>alert(1)</script>");
        assert_eq!(
            back["health"],
            json!({"ok": false, "text": "not serving: node\n"})
        );
        assert!(html.contains("<title>stratumlab &lt;pool&gt;</title>"));
    }
}
