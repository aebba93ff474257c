//! The wire, as Core 28 answers it: both request forms and their HTTP statuses, batches,
//! authentication, and bad input of every kind (malformed JSON, wrong parameters, wrong HTTP
//! method, oversized bodies, bytes that are not HTTP, clients that stop halfway). Each gets
//! Core's answer or a clean close, and a well-behaved client keeps getting answers meanwhile.

mod rpc_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rpc_support::*;
use serde_json::{json, Value};
use simnet::rpc::{RpcAuth, RpcOptions};

fn send(s: &Server, body: Value) -> HttpResponse {
    post(s.addr, Some((USER, PASSWORD)), body.to_string().as_bytes())
}

/// A well-behaved call, timed.
fn quick_call(s: &Server) -> Duration {
    let started = Instant::now();
    assert_eq!(s.call("getblockcount", json!([])).unwrap(), 900_000);
    started.elapsed()
}

#[test]
fn legacy_requests_get_result_error_id_and_http_errors() {
    let s = Server::start(config(31));
    let r = send(
        &s,
        json!({"jsonrpc": "1.0", "id": "x", "method": "getblockcount", "params": []}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(r.body.ends_with(b"}\n"), "Core ends a reply with a newline");
    assert_eq!(
        r.json(),
        json!({"result": 900_000, "error": null, "id": "x"})
    );

    let r = send(&s, json!({"id": 1, "method": "nosuchmethod"}));
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        json!({"result": null, "error": {"code": -32601, "message": "Method not found"}, "id": 1})
    );

    let r = send(
        &s,
        json!({"id": 2, "method": "getblockhash", "params": [42]}),
    );
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json()["error"],
        json!({"code": -8, "message": "Block height out of range"})
    );

    let r = send(
        &s,
        json!({"id": 3, "method": "getblockhash", "params": ["42"]}),
    );
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json()["error"],
        json!({"code": -3, "message": "Wrong type passed:\n{\n    \"Position 1 (height)\": \"JSON value of type string is not of expected type number\"\n}"})
    );

    // A wrong number of arguments gets the method's help text, as from Core.
    let r = send(&s, json!({"id": 4, "method": "getblockhash", "params": []}));
    assert_eq!(r.status, 500);
    let e = &r.json()["error"];
    assert_eq!(e["code"], -1);
    assert!(e["message"]
        .as_str()
        .unwrap()
        .starts_with("getblockhash height\n"));

    let r = send(
        &s,
        json!({"id": 5, "method": "getblock", "params": {"blockhash": "00", "verbose": 1}}),
    );
    assert_eq!(r.status, 500);
    assert_eq!(
        r.json()["error"],
        json!({"code": -8, "message": "Unknown named parameter verbose"})
    );

    let bad_hash = send(&s, json!({"id": 6, "method": "getblock", "params": ["00"]}));
    assert_eq!(
        bad_hash.json()["error"]["message"],
        "blockhash must be of length 64 (not 2, for '00')"
    );
    let unknown = send(
        &s,
        json!({"id": 7, "method": "getblock", "params": ["11".repeat(32)]}),
    );
    assert_eq!(
        unknown.json()["error"],
        json!({"code": -5, "message": "Block not found"})
    );

    // goPool sends `"params": null`.
    let r = send(
        &s,
        json!({"jsonrpc": "1.0", "id": 8, "method": "getbestblockhash", "params": null}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"].as_str().unwrap().len(), 64);
}

#[test]
fn v2_requests_get_rpc_errors_with_http_200_and_notifications_204() {
    let s = Server::start(config(32));
    let r = send(
        &s,
        json!({"jsonrpc": "2.0", "id": 1, "method": "getblockcount"}),
    );
    assert_eq!(
        (r.status, r.json()),
        (200, json!({"jsonrpc": "2.0", "result": 900_000, "id": 1}))
    );

    let r = send(
        &s,
        json!({"jsonrpc": "2.0", "id": 2, "method": "nosuchmethod"}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json(),
        json!({"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": 2})
    );
    let r = send(
        &s,
        json!({"jsonrpc": "2.0", "id": 3, "method": "getblockhash", "params": [true]}),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["error"]["code"], -3);

    // A notification is executed, and answered with no content.
    let r = send(
        &s,
        json!({"jsonrpc": "2.0", "method": "generatetoaddress", "params": [1, ADDRESS]}),
    );
    assert_eq!((r.status, r.body.len()), (204, 0));
    assert_eq!(s.call("getblockcount", json!([])).unwrap(), 900_001);
    // Even a failing one gets no answer, and has no effect.
    let r = send(
        &s,
        json!({"jsonrpc": "2.0", "method": "generatetoaddress", "params": [1, "invalid_address"]}),
    );
    assert_eq!((r.status, r.body.len()), (204, 0));
    assert_eq!(s.call("getblockcount", json!([])).unwrap(), 900_001);

    // Requests Core cannot read are HTTP errors in any dialect.
    let r = send(&s, json!({"jsonrpc": 2, "method": "getblockcount"}));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        json!({"result": null, "error": {"code": -32600, "message": "jsonrpc field must be a string"}})
    );
    let r = send(&s, json!({"jsonrpc": "3.0", "method": "getblockcount"}));
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "JSON-RPC version not supported"
    );
}

#[test]
fn malformed_json_is_a_parse_error() {
    let s = Server::start(config(33));
    for body in [
        &b""[..],
        b"this is bad",
        b"{\"method\": \"getblockcount\"",
        b"\xff\xfe",
    ] {
        let r = post(s.addr, Some((USER, PASSWORD)), body);
        assert_eq!(r.status, 500);
        assert_eq!(
            r.json(),
            json!({"result": null, "error": {"code": -32700, "message": "Parse error"}, "id": null})
        );
    }
    let r = post(s.addr, Some((USER, PASSWORD)), b"\"just a string\"");
    assert_eq!(r.json()["error"]["message"], "Top-level object parse error");
}

#[test]
fn a_batch_mixes_good_and_bad_calls() {
    let s = Server::start(config(34));
    let r = send(
        &s,
        json!([
            {"jsonrpc": "2.0", "id": 1, "method": "getblockcount"},
            {"jsonrpc": "2.0", "id": 2, "method": "invalidmethod"},
            {"id": 3, "method": "getblockhash", "params": [900_000]},
            {"jsonrpc": "2.0", "id": 4, "pizza": "sausage"},
            {"jsonrpc": "2.0", "method": "getblockcount"},
            {"id": 6, "method": "getblockhash", "params": ["x"]},
        ]),
    );
    assert_eq!(r.status, 200);
    let tip = s.call("getblockhash", json!([900_000])).unwrap();
    let body = r.json();
    assert_eq!(
        body.as_array().unwrap().len(),
        5,
        "the notification gets no element"
    );
    assert_eq!(
        body[0],
        json!({"jsonrpc": "2.0", "result": 900_000, "id": 1})
    );
    assert_eq!(body[1]["error"]["code"], -32601);
    assert_eq!(body[2], json!({"result": tip, "error": null, "id": 3}));
    assert_eq!(
        body[3],
        json!({"jsonrpc": "2.0", "error": {"code": -32600, "message": "Missing method"}, "id": 4})
    );
    assert_eq!(body[4]["error"]["code"], -3);
    assert_eq!(body[4]["id"], 6);
}

#[test]
fn authentication_is_required_and_checked() {
    let s = Server::start(config(35));
    let body = json!({"id": 1, "method": "getblockcount"}).to_string();

    let started = Instant::now();
    let r = post(s.addr, None, body.as_bytes());
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"jsonrpc\"")
    );
    assert!(r.body.is_empty());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "no pause without credentials"
    );

    // Wrong credentials: the same answer after Core's 250 ms pause, which holds up nobody else.
    let addr = s.addr;
    let wrong = std::thread::spawn(move || {
        let started = Instant::now();
        let r = post(addr, Some((USER, "wrong")), body.as_bytes());
        (started.elapsed(), r)
    });
    std::thread::sleep(Duration::from_millis(50));
    let meanwhile = quick_call(&s);
    let (took, r) = wrong.join().unwrap();
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("www-authenticate"),
        Some("Basic realm=\"jsonrpc\"")
    );
    assert!(
        took >= Duration::from_millis(250),
        "wrong password answered after {took:?}"
    );
    assert!(
        meanwhile < Duration::from_millis(150),
        "a good client waited {meanwhile:?}"
    );

    for header in ["Bearer abc", "Basic !!!", "basic bGFiOmh1bnRlcjI="] {
        let raw = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: {header}\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        );
        assert_eq!(
            exchange(s.addr, raw.as_bytes()).unwrap().status,
            401,
            "{header}"
        );
    }
}

#[test]
fn only_post_is_served() {
    let s = Server::start(config(36));
    for method in ["GET", "PUT", "DELETE", "HEAD"] {
        let raw = format!("{method} / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let r = exchange(s.addr, raw.as_bytes()).unwrap();
        assert_eq!(r.status, 405, "{method}");
        if method != "HEAD" {
            assert_eq!(r.text(), "JSONRPC server handles only POST requests");
        }
    }
    // Any path is the JSON-RPC endpoint, as in Core (`/wallet/...` included).
    let body = json!({"id": 1, "method": "getblockcount"}).to_string();
    let raw = format!(
        "POST /wallet/x HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        basic(USER, PASSWORD),
        body.len()
    );
    assert_eq!(
        exchange(s.addr, raw.as_bytes()).unwrap().json()["result"],
        900_000
    );
}

#[test]
fn oversized_bodies_get_413_and_big_ones_are_read() {
    let options = RpcOptions {
        max_body_size: 1 << 20,
        ..Default::default()
    };
    let s = Server::start_with(config(37), RpcAuth::user_password(USER, PASSWORD), options);
    // Declared too large: answered before the body is read.
    let big = vec![b' '; (1 << 20) + 1];
    let r = post(s.addr, Some((USER, PASSWORD)), &big);
    assert_eq!(r.status, 413);
    // Chunked, so the size shows only while reading.
    let mut raw = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        basic(USER, PASSWORD)
    )
    .into_bytes();
    for _ in 0..20 {
        raw.extend_from_slice(format!("{:x}\r\n", 100_000).as_bytes());
        raw.extend(std::iter::repeat_n(b' ', 100_000));
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(exchange(s.addr, &raw).unwrap().status, 413);
    quick_call(&s);

    // Under the default 32 MiB limit a 12 MB submitblock is read whole (and is no block).
    let s = Server::start(config(38));
    let hex = "ab".repeat(6_000_000);
    let r = send(
        &s,
        json!({"id": 1, "method": "submitblock", "params": [hex]}),
    );
    assert_eq!(
        r.json()["error"],
        json!({"code": -22, "message": "Block decode failed"})
    );
}

#[test]
fn bad_clients_are_closed_and_never_stall_others() {
    let options = RpcOptions {
        request_timeout: Duration::from_millis(500),
        ..Default::default()
    };
    let s = Server::start_with(config(39), RpcAuth::user_password(USER, PASSWORD), options);

    // Bytes that are not HTTP: a 400 or a close, nothing else.
    for junk in [
        &b"\x00\x01\x02\xff\xfe garbage\r\n\r\n"[..],
        b"HELLO\r\n\r\n",
        b"{\"method\":\"getblockcount\"}\n\n",
    ] {
        if let Some(r) = exchange(s.addr, junk) {
            assert_eq!(r.status, 400);
        }
    }

    // Stalled clients: one that never speaks, one halfway through its headers, one halfway
    // through its body.
    let body = json!({"id": 1, "method": "getblockcount"}).to_string();
    let half_body = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nContent-Length: {}\r\n\r\n{}",
        basic(USER, PASSWORD),
        body.len() + 10,
        body
    );
    let stalled: Vec<(TcpStream, Instant)> = [
        &b""[..],
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Le",
        half_body.as_bytes(),
    ]
    .iter()
    .map(|bytes| {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.write_all(bytes).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (c, Instant::now())
    })
    .collect();

    // Meanwhile, a good client is answered at once, again and again.
    for _ in 0..10 {
        let took = quick_call(&s);
        assert!(
            took < Duration::from_millis(200),
            "a good call took {took:?}"
        );
    }
    // The stalled ones are let go once the timeout passes: an answer or a close, no hang.
    for (mut c, since) in stalled {
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
        let waited = since.elapsed();
        assert!(
            waited < Duration::from_secs(5),
            "a stalled client was held {waited:?}"
        );
        assert!(
            waited >= Duration::from_millis(400),
            "closed after {waited:?}, before its timeout"
        );
        if let Some(r) = parse_response(&buf) {
            assert!(r.status >= 400, "{r:?}");
        }
    }
    quick_call(&s);
}

#[test]
fn keep_alive_and_ckpool_style_requests() {
    let s = Server::start(config(40));
    // ckpool writes its requests with bare newlines and no id, and reads the reply by line.
    let body = "{\"method\": \"getblockcount\"}\n";
    let raw = format!(
        "POST / HTTP/1.1\nAuthorization: {}\nHost: 127.0.0.1:8332\nContent-type: application/json\nContent-Length: {}\n\n{body}",
        basic(USER, PASSWORD),
        body.len()
    );
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Two requests on one connection, the second written before the first is answered.
    c.write_all(format!("{raw}{raw}").as_bytes()).unwrap();
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while seen
        .matches("\n{\"result\":900000,\"error\":null}\n")
        .count()
        < 2
    {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {seen:?}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert_eq!(seen.matches("HTTP/1.1 200 OK").count(), 2);
}
