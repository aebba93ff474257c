//! JSON-RPC framing as Bitcoin Core 28 answers it: request forms, batches, notifications, reply
//! shapes and the HTTP status each reply travels with. No I/O: [`respond`] takes the request body
//! and a function that executes one call, and returns the status and body to send.
//!
//! Two dialects share one endpoint, told apart per request object by its `"jsonrpc"` member:
//!
//! - **legacy** (absent, or `"1.0"`; `"1.1"` clients send `"version"`, which is ignored): the
//!   reply always carries `result`, `error` and (when the request had one) `id`; a failed single
//!   request travels with HTTP 500, except -32600 (400) and -32601 (404);
//! - **JSON-RPC 2.0** (`"2.0"`): the reply carries `"jsonrpc": "2.0"` and `result` *or* `error`,
//!   always with HTTP 200; a request without `id` is a notification: it is executed, and
//!   answered with HTTP 204 and no body.
//!
//! A batch (top-level array) always travels with HTTP 200, each element answered in its own
//! dialect; 2.0 notifications inside it get no element, and a non-empty batch of nothing but
//! notifications gets 204. Errors found while reading a request object (a `jsonrpc` member that
//! is not a string, an unknown version, a missing method) are -32600 and travel like the
//! dialect's other errors, except that for a single request Core sends them as HTTP errors even
//! in 2.0. Every reply body ends with a newline, as Core's does (ckpool reads replies by line).

use std::future::Future;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

// Bitcoin Core's error codes (src/rpc/protocol.h) that this endpoint uses.
/// -1: an error with no more specific code.
pub const RPC_MISC_ERROR: i32 = -1;
/// -3: a parameter of the wrong JSON type.
pub const RPC_TYPE_ERROR: i32 = -3;
/// -5: no such block or transaction.
pub const RPC_INVALID_ADDRESS_OR_KEY: i32 = -5;
/// -8: a parameter with an invalid value.
pub const RPC_INVALID_PARAMETER: i32 = -8;
/// -22: the submitted bytes do not decode.
pub const RPC_DESERIALIZATION_ERROR: i32 = -22;
/// -25: the submission failed verification.
pub const RPC_VERIFY_ERROR: i32 = -25;
/// -27: the transaction or block is already in the chain.
pub const RPC_VERIFY_ALREADY_IN_CHAIN: i32 = -27;
/// -9: Core's "not connected"; here the answer to a long poll cut short by shutdown.
pub const RPC_CLIENT_NOT_CONNECTED: i32 = -9;
/// -32600: the JSON is not a valid request object (JSON-RPC 2.0).
pub const RPC_INVALID_REQUEST: i32 = -32600;
/// -32601: no method by that name (JSON-RPC 2.0).
pub const RPC_METHOD_NOT_FOUND: i32 = -32601;
/// -32603: an internal error (JSON-RPC 2.0).
pub const RPC_INTERNAL_ERROR: i32 = -32603;
/// -32700: the body is not JSON (JSON-RPC 2.0).
pub const RPC_PARSE_ERROR: i32 = -32700;

/// A JSON-RPC error object: `{"code": .., "message": ..}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct RpcError {
    /// One of the `RPC_*` codes.
    pub code: i32,
    /// Human-readable text, as Core words it.
    pub message: String,
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// -32601 "Method not found".
    pub fn method_not_found() -> Self {
        RpcError::new(RPC_METHOD_NOT_FOUND, "Method not found")
    }
}

/// Which reply shape a request object asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// No `jsonrpc` member, or `"1.0"`.
    Legacy,
    /// `"jsonrpc": "2.0"`.
    V2,
}

/// Positional or named parameters, as the request carried them.
#[derive(Clone, Debug, PartialEq)]
pub enum Params {
    /// A JSON array of parameters (or none).
    Positional(Vec<Value>),
    /// A JSON object of parameters by name.
    Named(Map<String, Value>),
}

/// One well-formed request object.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// `None` when the request had no `id` member (`Some(Null)` for `"id": null`).
    pub id: Option<Value>,
    /// The reply shape it asked for.
    pub version: Version,
    /// The method name.
    pub method: String,
    /// Its parameters.
    pub params: Params,
}

impl Call {
    /// Only 2.0 requests without an id are notifications; a legacy request without an id is
    /// answered (without an `id` member), as Core does.
    pub fn is_notification(&self) -> bool {
        self.id.is_none() && self.version == Version::V2
    }
}

/// A request object that could not be read, with what had been read of it when it failed:
/// Core answers with that id and in that dialect.
#[derive(Clone, Debug, PartialEq)]
pub struct BadCall {
    /// The request's id, if it was read before the failure.
    pub id: Option<Value>,
    /// The dialect to answer in.
    pub version: Version,
    /// What was wrong with it.
    pub error: RpcError,
}

/// Reads one request object the way Core's `JSONRPCRequest::parse` does: the id first (so later
/// errors carry it), then the version, the method, the parameters.
pub fn parse_call(v: &Value) -> Result<Call, BadCall> {
    let Value::Object(obj) = v else {
        return Err(BadCall {
            id: Some(Value::Null),
            version: Version::Legacy,
            error: RpcError::new(RPC_INVALID_REQUEST, "Invalid Request object"),
        });
    };
    let id = obj.get("id").cloned();
    let bad = |version, message: &str| BadCall {
        id: id.clone(),
        version,
        error: RpcError::new(RPC_INVALID_REQUEST, message),
    };
    let version = match obj.get("jsonrpc") {
        None | Some(Value::Null) => Version::Legacy,
        Some(Value::String(s)) if s == "1.0" => Version::Legacy,
        Some(Value::String(s)) if s == "2.0" => Version::V2,
        Some(Value::String(_)) => {
            return Err(bad(Version::Legacy, "JSON-RPC version not supported"))
        }
        Some(_) => return Err(bad(Version::Legacy, "jsonrpc field must be a string")),
    };
    let method = match obj.get("method") {
        None | Some(Value::Null) => return Err(bad(version, "Missing method")),
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(bad(version, "Method must be a string")),
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => Params::Positional(Vec::new()),
        Some(Value::Array(a)) => Params::Positional(a.clone()),
        Some(Value::Object(o)) => Params::Named(o.clone()),
        Some(_) => return Err(bad(version, "Params must be an array or object")),
    };
    Ok(Call {
        id,
        version,
        method,
        params,
    })
}

/// A request body: one request object (or any other JSON value), or a batch.
#[derive(Debug)]
pub enum Body {
    /// One JSON value that is not an array.
    Single(Value),
    /// A JSON array of request objects.
    Batch(Vec<Value>),
}

/// Parses the HTTP body. Anything that is not JSON is -32700 "Parse error".
pub fn parse_body(bytes: &[u8]) -> Result<Body, RpcError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(a)) => Ok(Body::Batch(a)),
        Ok(v) => Ok(Body::Single(v)),
        Err(_) => Err(RpcError::new(RPC_PARSE_ERROR, "Parse error")),
    }
}

/// A reply object in the dialect of its request. `id: None` leaves the member out.
pub fn reply_value(
    result: Result<&RawValue, &RpcError>,
    id: Option<&Value>,
    version: Version,
) -> Box<RawValue> {
    #[derive(Serialize)]
    struct Legacy<'a> {
        result: Option<&'a RawValue>,
        error: Option<&'a RpcError>,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a Value>,
    }
    #[derive(Serialize)]
    struct V2<'a> {
        jsonrpc: &'static str,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<&'a RawValue>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a RpcError>,
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a Value>,
    }
    let (result, error) = match result {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(e)),
    };
    let json = match version {
        Version::Legacy => serde_json::to_string(&Legacy { result, error, id }),
        Version::V2 => serde_json::to_string(&V2 {
            jsonrpc: "2.0",
            result,
            error,
            id,
        }),
    };
    // Serializing borrowed JSON values cannot fail.
    RawValue::from_string(json.expect("reply serializes")).expect("serde_json output is JSON")
}

/// The HTTP status of a failed legacy single request (Core's `JSONErrorReply`).
pub fn legacy_error_status(code: i32) -> u16 {
    match code {
        RPC_INVALID_REQUEST => 400,
        RPC_METHOD_NOT_FOUND => 404,
        _ => 500,
    }
}

/// What to send back over HTTP.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpReply {
    /// HTTP status code.
    pub status: u16,
    /// `None`: no body at all (204).
    pub body: Option<String>,
}

impl HttpReply {
    fn json(status: u16, v: &RawValue) -> Self {
        HttpReply {
            status,
            body: Some(format!("{}\n", v.get())),
        }
    }

    fn no_content() -> Self {
        HttpReply {
            status: 204,
            body: None,
        }
    }
}

/// Answers one HTTP request body, executing each call with `exec` in order (a batch runs its
/// calls one after another, as Core does).
pub async fn respond<F, Fut>(body: &[u8], mut exec: F) -> HttpReply
where
    F: FnMut(Call) -> Fut,
    Fut: Future<Output = Result<Box<RawValue>, RpcError>>,
{
    let parsed = match parse_body(body) {
        Ok(b) => b,
        Err(e) => return legacy_error(&e, Some(&Value::Null), Version::Legacy),
    };
    match parsed {
        Body::Single(v @ Value::Object(_)) => {
            let call = match parse_call(&v) {
                Ok(c) => c,
                // Core throws these before it knows the dialect's error handling: HTTP errors.
                Err(bad) => return legacy_error(&bad.error, bad.id.as_ref(), bad.version),
            };
            let (id, version, notification) =
                (call.id.clone(), call.version, call.is_notification());
            let result = exec(call).await;
            if notification {
                return HttpReply::no_content();
            }
            match (&result, version) {
                (Ok(r), _) => HttpReply::json(200, &reply_value(Ok(r), id.as_ref(), version)),
                // 2.0 errors are RPC errors, not HTTP errors.
                (Err(e), Version::V2) => {
                    HttpReply::json(200, &reply_value(Err(e), id.as_ref(), version))
                }
                (Err(e), Version::Legacy) => legacy_error(e, id.as_ref(), version),
            }
        }
        Body::Single(_) => legacy_error(
            &RpcError::new(RPC_PARSE_ERROR, "Top-level object parse error"),
            Some(&Value::Null),
            Version::Legacy,
        ),
        Body::Batch(items) => {
            let mut replies: Vec<Box<RawValue>> = Vec::with_capacity(items.len());
            // Core reuses one request record across the batch: an element that is not even an
            // object is answered with the id and dialect left over from the element before it.
            let (mut last_id, mut last_version) = (Some(Value::Null), Version::Legacy);
            for item in &items {
                let (id, version, result) = match parse_call(item) {
                    Ok(call) => {
                        let (id, version) = (call.id.clone(), call.version);
                        (id, version, exec(call).await)
                    }
                    Err(bad) if item.is_object() => (bad.id, bad.version, Err(bad.error)),
                    Err(bad) => (last_id.clone(), last_version, Err(bad.error)),
                };
                let notification = id.is_none() && version == Version::V2;
                if !notification {
                    replies.push(reply_value(result.as_deref(), id.as_ref(), version));
                }
                (last_id, last_version) = (id, version);
            }
            if replies.is_empty() && !items.is_empty() {
                return HttpReply::no_content();
            }
            let array = serde_json::to_string(&replies).expect("raw values serialize");
            HttpReply {
                status: 200,
                body: Some(array + "\n"),
            }
        }
    }
}

fn legacy_error(e: &RpcError, id: Option<&Value>, version: Version) -> HttpReply {
    HttpReply::json(
        legacy_error_status(e.code),
        &reply_value(Err(e), id, version),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(v: Value) -> Box<RawValue> {
        RawValue::from_string(v.to_string()).unwrap()
    }

    /// Executes `getblockcount` (42) and `getblockhash` (needs one number); everything else is
    /// an unknown method.
    async fn run(body: &str) -> (u16, Option<Value>) {
        let reply = respond(body.as_bytes(), |call: Call| async move {
            match call.method.as_str() {
                "getblockcount" => Ok(raw(json!(42))),
                "getblockhash" => match call.params {
                    Params::Positional(p) if p.len() == 1 && p[0].is_number() => {
                        Ok(raw(json!("00ff")))
                    }
                    _ => Err(RpcError::new(
                        RPC_INVALID_PARAMETER,
                        "Block height out of range",
                    )),
                },
                _ => Err(RpcError::method_not_found()),
            }
        })
        .await;
        if let Some(b) = &reply.body {
            assert!(b.ends_with('\n'), "Core ends replies with a newline");
        }
        (
            reply.status,
            reply.body.map(|b| serde_json::from_str(&b).unwrap()),
        )
    }

    #[tokio::test]
    async fn legacy_replies_carry_result_error_and_id_with_http_errors() {
        assert_eq!(
            run(r#"{"id":1,"method":"getblockcount"}"#).await,
            (200, Some(json!({"result":42,"error":null,"id":1})))
        );
        assert_eq!(
            run(r#"{"jsonrpc":"1.0","id":"x","method":"nope"}"#).await,
            (
                404,
                Some(
                    json!({"result":null,"error":{"code":-32601,"message":"Method not found"},"id":"x"})
                )
            )
        );
        let (status, body) = run(r#"{"id":1,"method":"getblockhash","params":[]}"#).await;
        assert_eq!(status, 500);
        assert_eq!(body.unwrap()["error"]["code"], -8);
        // No id member: answered all the same, without one.
        assert_eq!(
            run(r#"{"method":"getblockcount"}"#).await,
            (200, Some(json!({"result":42,"error":null})))
        );
    }

    #[tokio::test]
    async fn v2_replies_are_result_xor_error_with_http_200_and_notifications_get_204() {
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","id":7,"method":"getblockcount"}"#).await,
            (200, Some(json!({"jsonrpc":"2.0","result":42,"id":7})))
        );
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","id":7,"method":"nope"}"#).await,
            (
                200,
                Some(
                    json!({"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":7})
                )
            )
        );
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","method":"getblockcount"}"#).await,
            (204, None)
        );
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","method":"nope"}"#).await,
            (204, None)
        );
        // "id": null is an id: not a notification.
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","id":null,"method":"getblockcount"}"#).await,
            (200, Some(json!({"jsonrpc":"2.0","result":42,"id":null})))
        );
    }

    #[tokio::test]
    async fn malformed_requests_get_cores_errors() {
        let parse =
            json!({"result":null,"error":{"code":-32700,"message":"Parse error"},"id":null});
        assert_eq!(run("").await, (500, Some(parse.clone())));
        assert_eq!(run("this is bad").await, (500, Some(parse.clone())));
        assert_eq!(run(r#"{"method":"#).await, (500, Some(parse)));
        assert_eq!(
            run("42").await.1.unwrap()["error"],
            json!({"code":-32700,"message":"Top-level object parse error"})
        );
        assert_eq!(
            run(r#"{"jsonrpc":2,"method":"getblockcount"}"#).await,
            (
                400,
                Some(
                    json!({"result":null,"error":{"code":-32600,"message":"jsonrpc field must be a string"}})
                )
            )
        );
        assert_eq!(
            run(r#"{"jsonrpc":"3.0","method":"getblockcount"}"#).await,
            (
                400,
                Some(
                    json!({"result":null,"error":{"code":-32600,"message":"JSON-RPC version not supported"}})
                )
            )
        );
        assert_eq!(
            run(r#"{"jsonrpc":"2.0","id":3}"#).await,
            (
                400,
                Some(
                    json!({"jsonrpc":"2.0","error":{"code":-32600,"message":"Missing method"},"id":3})
                )
            )
        );
        assert_eq!(
            run(r#"{"id":3,"method":1}"#).await.1.unwrap()["error"]["message"],
            "Method must be a string"
        );
        assert_eq!(
            run(r#"{"id":3,"method":"getblockcount","params":5}"#)
                .await
                .1
                .unwrap()["error"]["message"],
            "Params must be an array or object"
        );
    }

    #[tokio::test]
    async fn batches_answer_each_element_in_its_own_dialect() {
        // Core's own functional test batch: good, unknown method, good, not a request.
        let (status, body) = run(r#"[{"jsonrpc":"2.0","id":1,"method":"getblockcount"},
                {"jsonrpc":"2.0","id":2,"method":"invalidmethod"},
                {"id":3,"method":"getblockhash","params":[0]},
                {"jsonrpc":"2.0","id":4,"pizza":"sausage"}]"#)
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            body.unwrap(),
            json!([
                {"jsonrpc":"2.0","result":42,"id":1},
                {"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":2},
                {"result":"00ff","error":null,"id":3},
                {"jsonrpc":"2.0","error":{"code":-32600,"message":"Missing method"},"id":4},
            ])
        );
        // Notifications inside a batch produce no element; only notifications: 204.
        let (status, body) = run(
            r#"[{"jsonrpc":"2.0","method":"getblockcount"},{"jsonrpc":"2.0","id":2,"method":"getblockcount"}]"#,
        )
        .await;
        assert_eq!(
            (status, body.unwrap()),
            (200, json!([{"jsonrpc":"2.0","result":42,"id":2}]))
        );
        assert_eq!(
            run(r#"[{"jsonrpc":"2.0","method":"getblockcount"},{"jsonrpc":"2.0","method":"x"}]"#)
                .await,
            (204, None)
        );
        // An empty batch is answered with an empty array (Core keeps this for old clients).
        assert_eq!(run("[]").await, (200, Some(json!([]))));
        // A non-object element: -32600 with the id left over from the element before it.
        let (_, body) = run(r#"[{"id":9,"method":"getblockcount"},17]"#).await;
        assert_eq!(
            body.unwrap()[1],
            json!({"result":null,"error":{"code":-32600,"message":"Invalid Request object"},"id":9})
        );
        // An unsupported version inside a batch is answered, in the legacy shape.
        let (status, body) = run(r#"[{"jsonrpc":"2.1","id":1,"method":"getblockcount"}]"#).await;
        assert_eq!(status, 200);
        assert_eq!(
            body.unwrap(),
            json!([{"result":null,"error":{"code":-32600,"message":"JSON-RPC version not supported"},"id":1}])
        );
    }

    #[test]
    fn named_params_are_kept_as_an_object() {
        let call = parse_call(
            &json!({"method":"getblock","params":{"blockhash":"ab","verbosity":0},"id":1}),
        )
        .unwrap();
        match call.params {
            Params::Named(m) => assert_eq!(m["verbosity"], 0),
            p => panic!("{p:?}"),
        }
    }
}
