//! The fuzz target `line` (crates/sv1/fuzz) on stable: every committed corpus input goes through
//! the same function the fuzzer calls (`sv1::fuzz_support::line`: framing against its model,
//! every line through `parse_line` and the typed parsers, agreement with serde_json), so a fixed
//! crash stays fixed and CI needs no nightly. Also writes the seed inputs the corpus started
//! from (`--ignored write_seeds`).

use testkit::{corpus, replay_corpora};

use sv1::fuzz_support;

replay_corpora! {
    every_corpus_input_goes_through_the_read_path_with_its_invariants:
        "line", 30, fuzz_support::line;
}

/// An input: the line limit (`'0'`..`'7'` index `fuzz_support::LIMITS`), the chunking seed (a
/// letter: reads through `feed` and `split`, not `spare`), then the stream.
fn input(limit: u8, seed: u8, stream: &[u8]) -> Vec<u8> {
    let mut v = vec![limit, seed];
    v.extend_from_slice(stream);
    v
}

const SUBMIT: &str = r#"{"params": ["bc1qexampleworker.rig1", "6512ab34", "00000001", "6752a1b0", "1a2b3c4d"], "id": 4, "method": "mining.submit"}"#;

fn notify(branches: usize) -> String {
    let branch: Vec<String> = (0..branches)
        .map(|i| format!("\"{}\"", format!("{:02x}", i + 1).repeat(32)))
        .collect();
    format!(
        concat!(
            r#"{{"id":null,"method":"mining.notify","params":["1f","4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000","#,
            r#""01000000010000000000000000000000000000000000000000000000000000000000000000ffffffff2003a0bb0d","#,
            r#""0b2f7374726174756d6c61622fffffffff0200f2052a010000001600140000000000000000000000000000000000000000","#,
            r#"[{}],"20000000","1703a30c","6752a1b0",true]}}"#
        ),
        branch.join(",")
    )
}

/// Seeds: the lines real miners and pools send (each miner's opening as its source shows it),
/// framing edge cases, and JSON the reader must refuse or read exactly.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let lines = |ls: &[&str]| -> Vec<u8> {
        let mut v = Vec::new();
        for l in ls {
            v.extend_from_slice(l.as_bytes());
            v.push(b'\n');
        }
        v
    };
    let mut s: Vec<(&'static str, Vec<u8>)> = vec![
        // Miners' openings (crates/pool/tests/data/handshakes).
        (
            "miner-cgminer",
            input(b'5', b'a', &lines(&[
                r#"{"id": 0, "method": "mining.subscribe", "params": ["cgminer/4.12.1", "a1b2c3d4"]}"#,
                r#"{"id": 2, "method": "mining.authorize", "params": ["acct.rig1", "x"]}"#,
                r#"{"params": ["acct.rig1", "1f", "00000000", "6752a1b0", "1a2b3c4d"], "id": 3, "method": "mining.submit"}"#,
            ])),
        ),
        (
            "miner-cgminer-version-rolling",
            input(b'5', b'b', &lines(&[
                r#"{"id": 2, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "1fffe000", "version-rolling.min-bit-count": 2}]}"#,
                r#"{"params": ["acct.rig1", "1f", "00000000", "6752a1b0", "1a2b3c4d", "00002000"], "id": 9, "method": "mining.submit"}"#,
            ])),
        ),
        (
            "miner-bfgminer",
            input(b'5', b'c', &lines(&[
                r#"{"id": null, "method": "mining.suggest_difficulty", "params": [8]}"#,
                r#"{"id": 0, "method": "mining.subscribe", "params": ["bfgminer/5.5.0"]}"#,
                r#"{"id": "xnsub", "method": "mining.extranonce.subscribe", "params": []}"#,
                r#"{"id": 1, "method": "mining.authorize", "params": ["acct.rig2", "x"]}"#,
                r#"{"params": ["acct.rig2", "1f", "0000000000000000", "6752a1b0", "deadbeef"], "id": 5, "method": "mining.submit"}"#,
            ])),
        ),
        (
            "miner-cpuminer",
            input(b'5', b'd', &lines(&[
                r#"{"id": 1, "method": "mining.subscribe", "params": ["cpuminer/2.5.1", "f8002c90"]}"#,
                r#"{"id": 2, "method": "mining.authorize", "params": ["acct.cpu", "x"]}"#,
                r#"{"method": "mining.submit", "params": ["acct.cpu", "1f", "00000000", "6752a1b0", "4d3c2b1a"], "id":4}"#,
            ])),
        ),
        (
            "miner-bitaxe",
            input(b'5', b'e', &lines(&[
                r#"{"id": 1, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff"}]}"#,
                r#"{"id": 2, "method": "mining.subscribe", "params": ["bitaxe/BM1370/v2.4.0"]}"#,
                r#"{"id": 3, "method": "mining.suggest_difficulty", "params": [1000]}"#,
                r#"{"id": 4, "method": "mining.authorize", "params": ["bc1qexample.bitaxe", "x"]}"#,
                r#"{"id": 5, "method": "mining.submit", "params": ["bc1qexample.bitaxe", "1f", "00000001", "6752a1b0", "0badf00d", "0a6e0000"]}"#,
            ])),
        ),
        // What a pool sends (miners read these with the same reader).
        (
            "pool-subscribe-reply-difficulty-notify",
            input(b'5', b'f', &lines(&[
                r#"{"id":1,"result":[[["mining.set_difficulty","deadbeef"],["mining.notify","deadbeef"]],"08000002",4],"error":null}"#,
                r#"{"id":null,"method":"mining.set_difficulty","params":[0.001]}"#,
                &notify(0),
                r#"{"id":2,"result":true,"error":null}"#,
            ])),
        ),
        ("pool-notify-12-branches", input(b'5', b'g', &lines(&[&notify(12)]))),
        (
            "pool-configure-reply",
            input(b'5', b'h', &lines(&[
                r#"{"id":1,"result":{"version-rolling":true,"version-rolling.mask":"1fffe000","minimum-difficulty":false},"error":null}"#,
            ])),
        ),
        (
            "pool-errors",
            input(b'5', b'i', &lines(&[
                r#"{"id":5,"result":null,"error":[21,"Job not found",null]}"#,
                r#"{"id":6,"result":false,"error":[23,"Low difficulty share",null]}"#,
                r#"{"id":7,"result":null,"error":{"code":-32601,"message":"Method not found"}}"#,
            ])),
        ),
        (
            "pool-other-methods",
            input(b'5', b'j', &lines(&[
                r#"{"id":null,"method":"mining.set_extranonce","params":["0a0b0c0d",4]}"#,
                r#"{"id":null,"method":"client.reconnect","params":["pool.example.com",3333,5]}"#,
                r#"{"id":null,"method":"client.reconnect","params":[]}"#,
                r#"{"id":9,"method":"mining.ping","params":[]}"#,
                r#"{"id":10,"method":"client.get_version","params":[]}"#,
                r#"{"id":null,"method":"client.show_message","params":["maintenance at 12:00"]}"#,
                r#"{"id":null,"method":"mining.set_version_mask","params":["1fffe000"]}"#,
                r#"{"id":11,"method":"mining.auth","params":["u","p"]}"#,
                r#"{"id":12,"method":"mining.suggest_target","params":["00000000ffff0000000000000000000000000000000000000000000000000000"]}"#,
            ])),
        ),
        // Framing.
        ("frame-crlf", input(b'5', b'k', format!("{SUBMIT}\r\n{SUBMIT}\r\n").as_bytes())),
        ("frame-cr-cr-lf", input(b'5', b'l', format!("{SUBMIT}\r\r\n").as_bytes())),
        ("frame-blank-lines", input(b'5', b'm', format!("\n\n \t\r\n\x0c\n{SUBMIT}\n   \n").as_bytes())),
        ("frame-no-final-newline", input(b'5', b'n', format!("{SUBMIT}\n{SUBMIT}").as_bytes())),
        ("frame-only-newlines", input(b'1', b'o', &[b'\n'; 200])),
        ("frame-at-limit", input(b'1', b'p', format!("{}\n", "a".repeat(64)).as_bytes())),
        ("frame-at-limit-crlf", input(b'1', b'q', format!("{}\r\n", "a".repeat(64)).as_bytes())),
        ("frame-over-limit-then-line", input(b'1', b'r', format!("{}\n{{\"id\":1}}\n", "a".repeat(65)).as_bytes())),
        ("frame-over-limit-no-newline", input(b'0', b's', &[b'x'; 300])),
        ("frame-over-limit-blank", input(b'0', b't', format!("{}\n{{}}\n", " ".repeat(40)).as_bytes())),
        ("frame-submit-over-small-limit", input(b'1', b'u', format!("{SUBMIT}\n").as_bytes())),
        ("frame-nul-bytes", input(b'2', b'v', b"{\"id\":1}\n\0\0\0\n{\"id\":\0}\n")),
        // Invalid UTF-8 and odd bytes.
        ("utf8-invalid-in-string", input(b'5', b'w', b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[\"miner\xff\xfe\"]}\n")),
        ("utf8-overlong-and-bom", input(b'5', b'x', b"\xef\xbb\xbf{\"id\":1}\n{\"id\":\"\xc0\xaf\"}\n")),
        ("utf8-valid-multibyte", input(b'5', b'y', "{\"id\":1,\"method\":\"mining.authorize\",\"params\":[\"wörker.矿机\",\"x\"]}\n".as_bytes())),
        ("utf8-truncated-at-end", input(b'5', b'z', b"{\"id\":\"\xe2\x82")),
        // Escapes.
        (
            "escape-worker-and-agent",
            input(b'5', b'a', &lines(&[
                r#"{"id":1,"method":"mining.subscribe","params":["cg\"miner\\\/4.\u0031\t"]}"#,
                r#"{"id":2,"method":"mining.authorize","params":["w\u00e9.r\u0069g","p\u0061ss,d=0.5"]}"#,
                r#"{"id":3,"method":"mining.submit","params":["w\u00e9","1f","00","6752a1b0","1a2b3c4d"]}"#,
            ])),
        ),
        ("escape-lone-surrogate", input(b'5', b'b', &lines(&[r#"{"id":1,"method":"mining.authorize","params":["\ud800abc","x"]}"#, r#"{"id":"\udc00\ud83d\ude00"}"#]))),
        ("escape-in-method", input(b'5', b'c', &lines(&[r#"{"id":1,"method":"mining.\u0073ubmit","params":["w","1f","00","6752a1b0","1a2b3c4d"]}"#]))),
        ("escape-in-key", input(b'5', b'd', &lines(&[r#"{"\u0069d":1,"method":"x"}"#, r#"{"id":1,"para\u006ds":[1,2]}"#]))),
        ("escape-invalid", input(b'5', b'e', &lines(&[r#"{"id":"\x"}"#, r#"{"id":"\u12g4"}"#, r#"{"id":"\"}"#]))),
        // Structure.
        (
            "json-duplicate-keys",
            input(b'5', b'f', &lines(&[
                r#"{"id":1,"id":2,"method":"a","method":"mining.submit","params":["w","1f","00","6752a1b0","1a2b3c4d"]}"#,
                r#"{"method":"a","method":null,"params":[1],"params":null}"#,
                r#"{"params":[1],"params":{"a":1}}"#,
            ])),
        ),
        (
            "json-nesting",
            input(b'5', b'g', format!(
                "{{\"id\":1,\"params\":[{}1{}]}}\n{{\"id\":1,\"params\":[{}1{}]}}\n{{\"x\":{}{}}}\n",
                "[".repeat(31), "]".repeat(31), "[".repeat(32), "]".repeat(32),
                "{\"a\":".repeat(40), "}".repeat(40)
            ).as_bytes()),
        ),
        (
            "json-param-counts",
            input(b'5', b'h', format!(
                "{{\"id\":1,\"params\":[{}1]}}\n{{\"id\":1,\"params\":[{}1]}}\n{{\"id\":1,\"params\":[]}}\n{{\"id\":1,\"params\":null}}\n{{\"id\":1,\"params\":{{\"user\":\"u\"}}}}\n",
                "1,".repeat(11), "1,".repeat(12)
            ).as_bytes()),
        ),
        (
            "json-numbers",
            input(b'5', b'i', &lines(&[
                r#"{"id":1e400,"method":"mining.suggest_difficulty","params":[1e400]}"#,
                r#"{"id":-0,"method":"mining.suggest_difficulty","params":[-0.0]}"#,
                r#"{"id":18446744073709551616,"method":"mining.suggest_difficulty","params":[1.5E-3]}"#,
                r#"{"id":1,"method":"mining.suggest_difficulty","params":["512"]}"#,
                r#"{"id":1,"method":"mining.suggest_difficulty","params":["NaN"]}"#,
                r#"{"id":1,"method":"mining.suggest_difficulty","params":["inf"]}"#,
                r#"{"id":01,"method":"x"}"#,
                r#"{"id":1.,"method":"x"}"#,
                r#"{"id":-,"method":"x"}"#,
            ])),
        ),
        (
            "json-ids-and-methods",
            input(b'5', b'j', &lines(&[
                r#"{"id":"abc","method":"mining.subscribe","params":[]}"#,
                r#"{"id":[1,{"a":[]}],"method":"mining.subscribe"}"#,
                r#"{"id":{"n":1},"method":null}"#,
                r#"{"id":1,"method":5}"#,
                r#"{"id":1,"params":"x"}"#,
                r#"{}"#,
                r#"[]"#,
                r#"{"jsonrpc":"2.0","id":1,"method":"mining.subscribe","params":["x"]}"#,
                " \t{ \"id\" :\t1 , \"method\" : \"mining.ping\" } \t",
            ])),
        ),
        (
            "json-truncated-and-trailing",
            input(b'5', b'k', &lines(&[
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752a1b0","1a2b3c4d"]"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752a1b0","1a2b3c4d"]} x"#,
                r#"{"id":1}}"#,
                r#"{"id":tru}"#,
                r#"{"id":1,}"#,
                "{\"id\":\"a\x01\"}",
            ])),
        ),
        // Typed parameters.
        (
            "submit-shapes",
            input(b'5', b'l', &lines(&[
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752a1b0","1a2b3c4d",null]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752A1B0","1A2B3C4D","1FFFE000"]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","000","6752a1b0","1a2b3c4d"]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","","6752a1b0","1a2b3c4d"]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752a1b","1a2b3c4d"]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","00","6752a1b0",439041101]}"#,
                r#"{"id":1,"method":"mining.submit","params":[1,"1f","00","6752a1b0","1a2b3c4d"]}"#,
                r#"{"id":1,"method":"mining.submit","params":["w","1f","zz","6752a1b0","1a2b3c4d"]}"#,
            ])),
        ),
        (
            "submit-extranonce2-sizes",
            input(b'6', b'm', format!(
                "{{\"id\":1,\"method\":\"mining.submit\",\"params\":[\"w\",\"1f\",\"{}\",\"6752a1b0\",\"1a2b3c4d\"]}}\n{{\"id\":1,\"method\":\"mining.submit\",\"params\":[\"w\",\"1f\",\"{}\",\"6752a1b0\",\"1a2b3c4d\"]}}\n",
                "ab".repeat(32), "ab".repeat(33)
            ).as_bytes()),
        ),
        (
            "configure-shapes",
            input(b'5', b'n', &lines(&[
                r#"{"id":1,"method":"mining.configure","params":[["version-rolling","minimum-difficulty","subscribe-extranonce","info"],{"version-rolling.mask":"1fffe000","version-rolling.min-bit-count":100,"minimum-difficulty.value":2048,"info.connection-url":"x"}]}"#,
                r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"xyz"}]}"#,
                r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"1ffffffff"}]}"#,
                r#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":536862720}]}"#,
                r#"{"id":1,"method":"mining.configure","params":[["version-rolling"]]}"#,
                r#"{"id":1,"method":"mining.configure","params":[[1,2],{}]}"#,
                r#"{"id":1,"method":"mining.configure","params":[]}"#,
                r#"{"id":1,"method":"mining.configure","params":[["minimum-difficulty"],{"minimum-difficulty.value":-1}]}"#,
            ])),
        ),
        (
            "authorize-shapes",
            input(b'5', b'o', &lines(&[
                r#"{"id":1,"method":"mining.authorize","params":["acct","x,d=1024"]}"#,
                r#"{"id":1,"method":"mining.authorize","params":["acct.w.x","d=0.5;y"]}"#,
                r#"{"id":1,"method":"mining.authorize","params":["acct"]}"#,
                r#"{"id":1,"method":"mining.authorize","params":[null,"x"]}"#,
                r#"{"id":1,"method":"mining.authorize","params":["acct",null]}"#,
                r#"{"id":1,"method":"mining.authorize","params":[".",""]}"#,
            ])),
        ),
        (
            "notify-malformed",
            input(b'5', b'p', &lines(&[
                r#"{"id":null,"method":"mining.notify","params":["1f","00","01","02",[],"20000000","1703a30c","6752a1b0",true]}"#,
                r#"{"id":null,"method":"mining.notify","params":["1f","4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000","01","02",["zz"],"20000000","1703a30c","6752a1b0",true]}"#,
                r#"{"id":null,"method":"mining.notify","params":["1f","4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000","01","02",[],"20000000","1703a30c","6752a1b0","true"]}"#,
                r#"{"id":null,"method":"mining.notify","params":["1f","4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000","0","02",[],"20000000","1703a30c","6752a1b0",false]}"#,
            ])),
        ),
        (
            "subscribe-shapes",
            input(b'5', b'q', &lines(&[
                r#"{"id":1,"method":"mining.subscribe","params":[null,"abcd"]}"#,
                r#"{"id":1,"method":"mining.subscribe","params":["ua",null,"pool.example.com",3333]}"#,
                r#"{"id":1,"method":"mining.subscribe","params":[5]}"#,
                r#"{"id":1,"method":"mining.subscribe"}"#,
            ])),
        ),
    ];
    // The same stream cut into different reads.
    let many: Vec<u8> = std::iter::repeat_n(format!("{SUBMIT}\n"), 20)
        .collect::<String>()
        .into_bytes();
    s.push(("chunking-20-submits-a", input(b'5', b'A', &many)));
    s.push(("chunking-20-submits-b", input(b'3', b'Q', &many)));
    s
}

#[test]
fn the_seeds_hold_the_invariants() {
    let seeds = seeds();
    assert!(seeds.len() >= 30);
    for (name, data) in &seeds {
        eprintln!("{name}");
        fuzz_support::line(data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    corpus!("line").write_seeds(seeds().into_iter().map(|(n, d)| (format!("seed-{n}"), d)));
}
