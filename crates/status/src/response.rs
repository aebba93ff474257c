//! The answers every router gives: never cached, since each is the state of the moment.

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

/// `404 not found`, for a path no route serves.
pub fn not_found() -> Response<Full<Bytes>> {
    text(StatusCode::NOT_FOUND, "not found\n".into())
}

/// The `405` answer (with `Allow`) for a request that is neither a GET nor a HEAD: the
/// endpoints only read.
pub fn refuse_method<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    if req.method() == Method::GET || req.method() == Method::HEAD {
        return None;
    }
    let mut r = text(
        StatusCode::METHOD_NOT_ALLOWED,
        "only GET and HEAD are served\n".into(),
    );
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    Some(r)
}

/// A response that is never cached.
pub fn reply(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Plain UTF-8 text (`/healthz`, errors).
pub fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain; charset=utf-8", body.into())
}

/// A JSON document on one line, ending in a newline.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut body = serde_json::to_vec(value).expect("a JSON value always serializes");
    body.push(b'\n');
    reply(status, "application/json", body.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_are_served() {
        let get = Request::get("/healthz").body(()).unwrap();
        let head = Request::head("/healthz").body(()).unwrap();
        assert!(refuse_method(&get).is_none());
        assert!(refuse_method(&head).is_none());
        let post = Request::post("/healthz").body(()).unwrap();
        let r = refuse_method(&post).expect("a POST is refused");
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(r.headers()[ALLOW], "GET, HEAD");
    }

    #[test]
    fn answers_are_never_cached() {
        let r = json(StatusCode::OK, &serde_json::json!({"up": true}));
        assert_eq!(r.headers()[CACHE_CONTROL], "no-store");
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(not_found().status(), StatusCode::NOT_FOUND);
    }
}
