//! The SV1 pool front end, sans IO: a `Session` driven line by line, with templates
//! built by hand and shares ground by an independent miner (see `support`). Every rule is
//! checked on the exact lines the pool writes, in order.

mod support;

use std::collections::HashSet;

use events::{Reason, Verdict};
use pool::sv1::{Close, LineKind};
use primitives::bitcoin::{consensus, Amount, Block, BlockHash, KnownHrp, Transaction};
use primitives::{Difficulty, Hash256};
use serde_json::{json, Value};
use support::*;

const ALICE: &str = "alice";

fn rejected(r: Reason) -> LineKind {
    LineKind::Share(Verdict::Rejected(r))
}

// ---------------------------------------------------------------------------------------------
// mining.subscribe
// ---------------------------------------------------------------------------------------------

#[test]
fn subscribe_reply_has_the_customary_shape() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.send(
        r#"{"id":1,"method":"mining.subscribe","params":["cpuminer/2.5.1"]}"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "only the reply before authorize: {lines:?}");
    let v: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["id"], json!(1));
    assert_eq!(v["error"], Value::Null);
    let r = v["result"].as_array().expect("result is an array");
    assert_eq!(r.len(), 3, "{lines:?}");
    let subs = r[0].as_array().expect("subscriptions");
    assert_eq!(subs.len(), 2, "{lines:?}");
    assert_eq!(subs[0][0], json!("mining.set_difficulty"));
    assert_eq!(subs[1][0], json!("mining.notify"));
    let sid = subs[1][1].as_str().expect("subscription id is a string");
    assert!(!sid.is_empty());
    assert_eq!(subs[0][1], json!(sid));
    let en1 = r[1].as_str().expect("extranonce1 is a hex string");
    assert!(!en1.is_empty());
    primitives::hex::decode(en1).expect("extranonce1 is hex");
    assert_eq!(r[2], json!(4), "extranonce2_size from the config");
    // Byte for byte (the whole line, with the subscription id and extranonce1 just read).
    assert_eq!(
        lines[0],
        format!(
            r#"{{"id":1,"result":[[["mining.set_difficulty","{sid}"],["mining.notify","{sid}"]],"{en1}",4],"error":null}}"#
        )
    );
}

#[test]
fn subscribe_accepts_the_shapes_miners_send_and_echoes_ids_verbatim() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    for (line, id) in [
        // cgminer's retry after a failed resume: no params at all.
        (
            r#"{"id": 0, "method": "mining.subscribe", "params": []}"#,
            "0",
        ),
        // A resume attempt: [agent, previous session id].
        (
            r#"{"id": 3, "method": "mining.subscribe", "params": ["bfgminer/5.5.0", "deadbeef"]}"#,
            "3",
        ),
        // String ids and a "jsonrpc" member (some ESP-Miner versions).
        (
            r#"{"jsonrpc":"2.0","id":"sub-1","method":"mining.subscribe","params":["bitaxe/BM1370/v2.9.0"]}"#,
            "\"sub-1\"",
        ),
    ] {
        let mut m = lab.miner(T0);
        m.send(line, T0);
        let lines = m.lines();
        assert_eq!(lines.len(), 1, "{line}: {lines:?}");
        assert!(
            lines[0].starts_with(&format!(r#"{{"id":{id},"result":[[["#)),
            "{lines:?}"
        );
        assert_eq!(m.extranonce2_size, 4);
    }
}

#[test]
fn extranonce1_is_unique_across_sessions() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut seen = HashSet::new();
    let mut sids = HashSet::new();
    for _ in 0..500 {
        let mut m = lab.miner(T0);
        m.request("mining.subscribe", r#"["x"]"#, T0);
        let v: Value = serde_json::from_str(&m.lines()[0]).unwrap();
        assert!(
            seen.insert(m.extranonce1.clone()),
            "extranonce1 {:?} reused",
            m.extranonce1
        );
        sids.insert(v["result"][0][1][1].as_str().unwrap().to_owned());
        // extranonce1 + extranonce2 fill the coinbase's extranonce exactly (checked on a real
        // coinbase in `pool_mode_pays_the_pool_and_accepts_any_account_name`).
        assert_eq!(m.extranonce1.len() + m.extranonce2_size, 8);
    }
    assert_eq!(sids.len(), 500, "subscription ids are per connection");
}

#[test]
fn authorize_before_subscribe_is_tolerated() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.request("mining.authorize", r#"["alice","x"]"#, T0);
    assert_eq!(m.lines(), vec![ok_line(a)], "no work before subscribe");
    assert!(!m.session.is_working());
    let s = m.request("mining.subscribe", r#"["cgminer/4.12.1"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines[0].starts_with(&format!(r#"{{"id":{s},"result":[[["#)));
    assert_set_difficulty(&lines[1], diff(-24).as_f64());
    assert!(assert_notify(&lines[2]).clean);
    // And it mines: a share is accepted.
    let share = m.find(meets(diff(-24)));
    m.submit_ok(ALICE, &share, T0);
}

#[test]
fn mining_auth_is_an_alias_of_authorize() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.request("mining.subscribe", "[]", T0);
    m.lines();
    let a = m.request("mining.auth", r#"["alice.rig1","x"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(a));
    assert_notify(&lines[2]);
    let share = m.find(meets(diff(-24)));
    m.submit_ok("alice.rig1", &share, T0);
}

// ---------------------------------------------------------------------------------------------
// mining.authorize
// ---------------------------------------------------------------------------------------------

/// The coinbase a miner would build from `job`, decoded.
fn coinbase_tx(m: &Miner, job: &MinerJob) -> Transaction {
    let raw = m.coinbase(job, &m.en2());
    let tx: Transaction = consensus::deserialize(&raw).expect("coinbase decodes exactly");
    assert!(tx.is_coinbase());
    tx
}

#[test]
fn pool_mode_pays_the_pool_and_accepts_any_account_name() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let job = m.handshake(ALICE, T0);
    let cb = coinbase_tx(&m, &job);
    assert_eq!(cb.output.len(), 1);
    assert_eq!(cb.output[0].script_pubkey, pool_script());
    assert_eq!(cb.output[0].value, Amount::from_sat(SUBSIDY_SAT + 600));
    let sig = cb.input[0].script_sig.as_bytes();
    assert!(
        sig.windows(8)
            .any(|w| w == [&m.extranonce1[..], &[0; 4]].concat()),
        "the scriptSig carries extranonce1 || extranonce2"
    );

    // Other accounts, with or without a worker suffix, get the same pool-paying job.
    for user in ["bob", "bob.rig7", "1BoatSLRHtKNngkdXEeobR76b53LETtpyT", "x"] {
        let mut other = lab.miner(T0);
        let j = other.handshake(user, T0);
        assert_eq!(
            j.id, job.id,
            "{user}: same generation, same payout, same job"
        );
        assert_eq!(j.coinb2, job.coinb2);
    }
}

#[test]
fn unusable_worker_names_are_refused_with_24() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let long = "a".repeat(129);
    for params in [
        r#"["","x"]"#.to_owned(),
        r#"["   ","x"]"#.to_owned(),
        format!(r#"["{long}","x"]"#),
        r#"["al\u0007ice","x"]"#.to_owned(),
    ] {
        let mut m = lab.miner(T0);
        m.request("mining.subscribe", "[]", T0);
        m.lines();
        let id = m.request("mining.authorize", &params, T0);
        let lines = m.lines();
        assert_eq!(lines.len(), 1, "{params}: {lines:?}");
        assert_error(&lines[0], &id.to_string(), 24);
        assert!(!m.session.is_working(), "{params}");
    }
    // Missing params: a malformed request (20), not an authorization failure.
    let mut m = lab.miner(T0);
    let id = m.request("mining.authorize", "[]", T0);
    assert_error(&m.lines()[0], &id.to_string(), 20);
}

#[test]
fn a_name_with_surrounding_spaces_is_authorized_and_then_mines() {
    // Authorized as " alice.rig1 " (a padded user name from a config file), the miner submits
    // under the same name it authorized with: its shares must not be "unauthorized".
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(" alice.rig1 ", T0);
    let s = m.find(meets(diff(-24)));
    m.submit_ok(" alice.rig1 ", &s, T0);
}

#[test]
fn several_workers_share_a_connection_up_to_the_limit() {
    let mut c = LabConfig::pool();
    c.sv1.max_workers = 2;
    let lab = Lab::serving(c, tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake("alice.rig1", T0);
    let a = m.request("mining.authorize", r#"["alice.rig2","x"]"#, T0);
    assert_eq!(m.lines(), vec![ok_line(a)], "already working: no new job");
    let a = m.request("mining.authorize", r#"["alice.rig3","x"]"#, T0);
    assert_error(&m.lines()[0], &a.to_string(), 24);
    // A name already authorized may authorize again.
    let a = m.request("mining.authorize", r#"["alice.rig1","y"]"#, T0);
    assert_eq!(m.lines(), vec![ok_line(a)]);

    for worker in ["alice.rig1", "alice.rig2"] {
        let s = m.find(meets(diff(-24)));
        m.submit_ok(worker, &s, T0);
    }
    for worker in ["alice.rig3", "alice", "alice.rig", "ALICE.RIG1"] {
        let s = m.find(meets(diff(-24)));
        assert_eq!(
            m.submit_err(worker, &s, T0, 24),
            Reason::Unauthorized,
            "{worker}"
        );
    }
}

#[test]
fn solo_mode_pays_the_authorized_address() {
    let lab = Lab::serving(LabConfig::solo(), tip(1), HARD_BITS);
    let (addr, script) = p2wpkh_address([0x11; 20], KnownHrp::Regtest);
    assert!(addr.starts_with("bcrt1q"), "{addr}");
    let mut m = lab.miner(T0);
    let job = m.handshake(&addr, T0);
    let cb = coinbase_tx(&m, &job);
    assert_eq!(cb.output.len(), 1);
    assert_eq!(cb.output[0].script_pubkey, script);
    assert_eq!(cb.output[0].value, Amount::from_sat(SUBSIDY_SAT + 600));
    assert!(
        job.coinb2
            .windows(script.len())
            .any(|w| w == script.as_bytes()),
        "coinb2 holds the output script"
    );

    // `.worker` suffix: the address before the dot is paid, the worker is the full name.
    let (addr2, script2) = p2wpkh_address([0x33; 20], KnownHrp::Regtest);
    let mut m2 = lab.miner(T0);
    let user = format!("{addr2}.rig1");
    let job2 = m2.handshake(&user, T0);
    assert_eq!(coinbase_tx(&m2, &job2).output[0].script_pubkey, script2);
    assert_ne!(job2.id, job.id, "a different payout is a different job");
    let s = m2.find(meets(diff(-24)));
    m2.submit_ok(&user, &s, T0);
    let s = m2.find(meets(diff(-24)));
    assert_eq!(m2.submit_err(&addr2, &s, T0, 24), Reason::Unauthorized);

    // A second miner paying the first address gets the first job (built once per payout).
    let mut m3 = lab.miner(T0);
    assert_eq!(m3.handshake(&format!("{addr}.other"), T0).id, job.id);
}

#[test]
fn solo_mode_refuses_what_is_not_an_address_of_the_network_with_24() {
    let lab = Lab::serving(LabConfig::solo(), tip(1), HARD_BITS);
    let (mainnet, _) = p2wpkh_address([0x11; 20], KnownHrp::Mainnet);
    let (testnet, _) = p2wpkh_address([0x11; 20], KnownHrp::Testnets);
    let (good, script) = p2wpkh_address([0x11; 20], KnownHrp::Regtest);
    // A regtest address with one character changed: the bech32 checksum fails.
    let mut corrupt = good.clone().into_bytes();
    let last = corrupt.len() - 1;
    corrupt[last] = if corrupt[last] == b'q' { b'p' } else { b'q' };
    let corrupt = String::from_utf8(corrupt).unwrap();
    let mut m = lab.miner(T0);
    m.request("mining.subscribe", "[]", T0);
    m.lines();
    for user in [
        "alice".to_owned(),
        "notanaddress.rig1".to_owned(),
        mainnet,
        testnet,
        corrupt,
    ] {
        let id = m.request("mining.authorize", &format!(r#"["{user}","x"]"#), T0);
        let lines = m.lines();
        assert_eq!(lines.len(), 1, "{user}: {lines:?}");
        assert_error(&lines[0], &id.to_string(), 24);
        assert!(!m.session.is_working(), "{user}");
    }
    // The connection stays usable: a valid address then starts work.
    let id = m.request("mining.authorize", &format!(r#"["{good}","x"]"#), T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    let job = assert_notify(&lines[2]);
    assert_eq!(coinbase_tx(&m, &job).output[0].script_pubkey, script);
}

#[test]
fn difficulty_hint_in_the_password_sets_the_first_difficulty() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    for (password, want) in [
        ("d=0.5", 0.5),
        ("x,d=0.00390625", 0.00390625),
        ("x d=2", 2.0),
        ("d=4096", MAX_DIFF),
        ("d=1e-20", 2f64.powi(MIN_LOG2)),
        ("d=abc", 2f64.powi(-24)),
        ("d=-3", 2f64.powi(-24)),
        ("x", 2f64.powi(-24)),
    ] {
        let mut m = lab.miner(T0);
        m.request("mining.subscribe", "[]", T0);
        m.lines();
        let a = m.request(
            "mining.authorize",
            &format!(r#"["alice","{password}"]"#),
            T0,
        );
        let lines = m.lines();
        assert_eq!(lines.len(), 3, "{password}: {lines:?}");
        assert_eq!(lines[0], ok_line(a));
        assert_set_difficulty(&lines[1], want);
        assert_eq!(
            assert_notify(&lines[2]).difficulty,
            None,
            "set before the notify"
        );
        assert_eq!(m.latest_job().difficulty, Some(want));
    }
}

// ---------------------------------------------------------------------------------------------
// mining.configure
// ---------------------------------------------------------------------------------------------

#[test]
fn configure_grants_the_mask_intersection_and_answers_every_extension() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    for (miner_mask, granted) in [
        ("ffffffff", "1fffe000"),
        ("1fffe000", "1fffe000"),
        ("00fff000", "00ffe000"),
        ("fff", "00000000"),
        ("1ffe0000", "1ffe0000"),
    ] {
        let mut m = lab.miner(T0);
        let id = m.request(
            "mining.configure",
            &format!(
                r#"[["version-rolling"],{{"version-rolling.mask":"{miner_mask}","version-rolling.min-bit-count":2}}]"#
            ),
            T0,
        );
        assert_eq!(
            m.lines(),
            vec![format!(
                r#"{{"id":{id},"result":{{"version-rolling":true,"version-rolling.mask":"{granted}"}},"error":null}}"#
            )],
            "miner mask {miner_mask}"
        );
    }

    // Every requested extension is answered, unknown ones with false, in the miner's order.
    let mut m = lab.miner(T0);
    let id = m.request(
        "mining.configure",
        r#"[["info","version-rolling","minimum-difficulty","subscribe-extranonce","x-unknown"],{"info.connection-url":"stratum+tcp://x","version-rolling.mask":"ffffffff","minimum-difficulty.value":0.001}]"#,
        T0,
    );
    assert_eq!(
        m.lines(),
        vec![format!(
            r#"{{"id":{id},"result":{{"info":false,"version-rolling":true,"version-rolling.mask":"1fffe000","minimum-difficulty":true,"subscribe-extranonce":true,"x-unknown":false}},"error":null}}"#
        )]
    );

    // minimum-difficulty without a value cannot be granted.
    let mut m = lab.miner(T0);
    let id = m.request("mining.configure", r#"[["minimum-difficulty"],{}]"#, T0);
    assert_eq!(
        m.lines(),
        vec![format!(
            r#"{{"id":{id},"result":{{"minimum-difficulty":false}},"error":null}}"#
        )]
    );

    // version-rolling without a mask: the pool's whole mask.
    let mut m = lab.miner(T0);
    let id = m.request("mining.configure", r#"[["version-rolling"]]"#, T0);
    assert_eq!(
        m.lines(),
        vec![format!(
            r#"{{"id":{id},"result":{{"version-rolling":true,"version-rolling.mask":"1fffe000"}},"error":null}}"#
        )]
    );

    // Malformed: 20.
    let mut m = lab.miner(T0);
    let id = m.request("mining.configure", r#"["version-rolling"]"#, T0);
    assert_error(&m.lines()[0], &id.to_string(), 20);
}

#[test]
fn configure_sent_first_is_answered_on_the_very_next_line() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    // One at a time, as a miner that waits for each reply.
    let mut m = lab.miner(T0);
    let c = m.request(
        "mining.configure",
        r#"[["version-rolling"],{"version-rolling.mask":"ffffffff"}]"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "nothing but the configure reply: {lines:?}");
    assert!(lines[0].starts_with(&format!(r#"{{"id":{c},"result":{{"version-rolling":true"#)));
    let s = m.request("mining.subscribe", r#"["bitaxe/BM1370/v2.9.0"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "nothing but the subscribe reply: {lines:?}");
    assert!(lines[0].starts_with(&format!(r#"{{"id":{s},"result":[[["#)));
    let a = m.request("mining.authorize", r#"["alice","x"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(a));
    assert_set_difficulty(&lines[1], diff(-24).as_f64());
    assert_notify(&lines[2]);
    assert_eq!(m.version_mask, 0x1fff_e000);

    // As a burst (ESP-Miner sends all three back to back): the same order.
    let mut m = lab.miner(T0);
    m.send(
        r#"{"id": 1, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff"}]}"#,
        T0,
    );
    m.send(
        r#"{"id": 2, "method": "mining.subscribe", "params": ["bitaxe/BM1370/v2.9.0"]}"#,
        T0,
    );
    m.send(
        r#"{"id": 3, "method": "mining.authorize", "params": ["alice", "x"]}"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines[0].starts_with(r#"{"id":1,"result":{"version-rolling":true"#));
    assert!(lines[1].starts_with(r#"{"id":2,"result":[[["#));
    assert_eq!(lines[2], ok_line(3));
    assert!(matches!(classify(&lines[3]), Msg::SetDifficulty(_)));
    assert_notify(&lines[4]);
}

#[test]
fn minimum_difficulty_is_a_floor() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.request(
        "mining.configure",
        r#"[["minimum-difficulty"],{"minimum-difficulty.value":0.001}]"#,
        T0,
    );
    m.lines();
    m.handshake(ALICE, T0);
    assert_eq!(
        m.latest_job().difficulty,
        Some(0.001),
        "start raised to the floor"
    );
    // A suggestion below the floor is clamped to it: no change.
    let id = m.request("mining.suggest_difficulty", "[0.000001]", T0);
    assert_eq!(m.lines(), vec![ok_line(id)]);
    // Above it: taken.
    let id = m.request("mining.suggest_difficulty", "[0.01]", T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    assert_set_difficulty(&lines[1], 0.01);
}

// ---------------------------------------------------------------------------------------------
// mining.set_difficulty and mining.notify
// ---------------------------------------------------------------------------------------------

#[test]
fn fractional_difficulty_precedes_the_first_notify_as_a_plain_decimal() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.request("mining.subscribe", "[]", T0);
    m.request("mining.authorize", r#"["alice","x"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    // 2^-24 as the shortest decimal that reads back exactly, without an exponent.
    assert_eq!(
        lines[2],
        r#"{"id":null,"method":"mining.set_difficulty","params":[0.00000005960464477539063]}"#
    );
    assert_eq!(
        "0.00000005960464477539063".parse::<f64>(),
        Ok(2f64.powi(-24))
    );
    assert_notify(&lines[3]);
}

#[test]
fn notify_fields_prevhash_word_swapped_and_big_endian_numbers() {
    // The block in the public Stratum V1 documentation's example notify.
    let prev = Hash256::from_display_hex(
        "00000000440b921e1b77c6c0487ae5616de67f788f44ae2a5af6e2194d16b6f8",
    )
    .unwrap();
    let lab = Lab::serving(LabConfig::pool(), prev, HARD_BITS);
    let mut m = lab.miner(T0);
    m.request("mining.subscribe", "[]", T0);
    m.request("mining.authorize", r#"["alice","x"]"#, T0);
    let lines = m.lines();
    let v: Value = serde_json::from_str(&lines[3]).unwrap();
    assert_eq!(v["id"], Value::Null);
    assert_eq!(v["method"], json!("mining.notify"));
    let p = v["params"].as_array().unwrap();
    assert_eq!(p.len(), 9);
    assert_eq!(
        p[1],
        json!("4d16b6f85af6e2198f44ae2a6de67f78487ae5611b77c6c0440b921e00000000")
    );
    assert_eq!(p[5], json!("20000000"), "version");
    assert_eq!(p[6], json!("1d00ffff"), "nbits");
    assert_eq!(p[7], json!(format!("{CURTIME:08x}")), "ntime");
    assert_eq!(p[7], json!("6553f100"));
    assert_eq!(p[8], json!(true), "the first job is clean");
    // The merkle branch of a coinbase and three transactions: tx1, then hash(tx2, tx3); in
    // internal byte order.
    let branch = p[4].as_array().unwrap();
    assert_eq!(branch.len(), 2);
    let txid = |n| Hash256::from(fake_tx(n).compute_txid());
    assert_eq!(branch[0], json!(txid(1).to_internal_hex()));
    let pair = primitives::sha256d(&[txid(2).0, txid(3).0].concat());
    assert_eq!(branch[1], json!(pair.to_internal_hex()));
    assert_eq!(m.latest_job().prev_hash, prev);
    assert_eq!(m.latest_job().prev_hash_field, p[1].as_str().unwrap());
}

#[test]
fn clean_jobs_follow_the_tip_and_job_ids_never_repeat() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let j1 = m.handshake(ALICE, T0);
    assert!(j1.clean);

    // Same tip, new transactions: not clean, no new difficulty.
    let t = T0.plus_millis(30_000);
    lab.publish(
        template_with(tip(1), HARD_BITS, CURTIME + 30, &[fake_tx(1), fake_tx(4)]),
        t,
    );
    m.handle_generation(&lab, t);
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let j2 = assert_notify(&lines[0]);
    assert!(!j2.clean);
    assert_eq!(j2.prev_hash, tip(1));
    assert_eq!(j2.ntime, CURTIME + 30);
    // The same generation again: nothing.
    m.handle_generation(&lab, t);
    assert!(m.lines().is_empty());

    // A refresh identical to the last template (the liveness refresh): a new job all the same.
    let t = t.plus_millis(30_000);
    lab.publish(
        template_with(tip(1), HARD_BITS, CURTIME + 30, &[fake_tx(1), fake_tx(4)]),
        t,
    );
    m.handle_generation(&lab, t);
    let j3 = assert_notify(&m.lines()[0]);
    assert!(!j3.clean);

    // New tip: clean.
    lab.publish(template(tip(2), HARD_BITS), t);
    m.handle_generation(&lab, t);
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let j4 = assert_notify(&lines[0]);
    assert!(j4.clean);
    assert_eq!(j4.prev_hash, tip(2));

    // A difficulty change re-sends the work under a new id, not clean.
    let id = m.request("mining.suggest_difficulty", "[0.5]", t);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    assert_set_difficulty(&lines[1], 0.5);
    let j5 = assert_notify(&lines[2]);
    assert!(!j5.clean);
    assert_eq!(
        (j5.coinb1.clone(), j5.coinb2.clone()),
        (j4.coinb1, j4.coinb2)
    );

    let ids: HashSet<_> = m.jobs.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids.len(), m.jobs.len(), "job ids repeat: {:?}", m.jobs);
    for j in &m.jobs {
        assert!(
            !j.id.is_empty() && j.id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            j.id
        );
    }
}

// ---------------------------------------------------------------------------------------------
// mining.submit: verdicts and the order of the checks
// ---------------------------------------------------------------------------------------------

#[test]
fn accepted_shares_are_acknowledged_with_true() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    for i in 0..20u8 {
        let job = m.latest_job().id.clone();
        let s = m.grind(&job, &[i, 0, 0, 0xff], None, meets(diff(-24)));
        m.submit_ok(ALICE, &s, T0);
    }
    assert!(lab.engine.workers.get(ALICE).unwrap().accepted() == 20);
    assert!(
        m.session.take_pending_ticket().is_none(),
        "no store: nothing to wait for"
    );
}

#[test]
fn submit_before_subscribe_is_25_whatever_else_is_wrong() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut donor = lab.miner(T0);
    donor.handshake(ALICE, T0);
    let good = donor.find(meets(diff(-24)));

    let mut m = lab.miner(T0);
    assert_eq!(m.submit_err(ALICE, &good, T0, 25), Reason::Unauthorized);
    // Authorized but not subscribed: still 25.
    m.request("mining.authorize", r#"["alice","x"]"#, T0);
    m.lines();
    assert_eq!(m.submit_err(ALICE, &good, T0, 25), Reason::Unauthorized);
    assert_eq!(
        m.submit_err("nobody", &good.on_job("zz"), T0, 25),
        Reason::Unauthorized
    );
    // Malformed parameters too.
    let kind = m.send(
        r#"{"id":9,"method":"mining.submit","params":["alice","1","00","zz","00000000"]}"#,
        T0,
    );
    assert_error(&m.lines()[0], "9", 25);
    assert_eq!(kind, rejected(Reason::Unauthorized));
}

#[test]
fn unauthorized_worker_is_24_before_any_job_check() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let good = m.find(meets(diff(-24)));
    assert_eq!(m.submit_err("mallory", &good, T0, 24), Reason::Unauthorized);
    assert_eq!(
        m.submit_err("mallory", &good.on_job("ffff"), T0, 24),
        Reason::Unauthorized
    );
    let mut bad_en2 = good.clone();
    bad_en2.en2 = vec![0; 3];
    assert_eq!(
        m.submit_err("mallory", &bad_en2, T0, 24),
        Reason::Unauthorized
    );
    let kind = m.send(
        r#"{"id":9,"method":"mining.submit","params":["mallory","1","00","zz","00000000"]}"#,
        T0,
    );
    assert_error(&m.lines()[0], "9", 24);
    assert_eq!(kind, rejected(Reason::Unauthorized));
    // The share itself was fine.
    m.submit_ok(ALICE, &good, T0);
}

#[test]
fn unknown_job_is_21_invalid_job_before_parameter_checks() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let good = m.find(meets(diff(-24)));
    for job in ["deadbeef", "zz", "", "ffffffffffffffffff"] {
        let r = m.submit_err(ALICE, &good.on_job(job), T0, 21);
        assert_eq!(r, Reason::InvalidJob, "job {job:?}");
    }
    // Unknown job and malformed extranonce2 / ntime / version bits: the job is judged first.
    let mut s = good.on_job("deadbeef");
    s.en2 = vec![0; 5];
    assert_eq!(m.submit_err(ALICE, &s, T0, 21), Reason::InvalidJob);
    let mut s = good.on_job("deadbeef");
    s.version_bits = Some(0xe000_0000);
    assert_eq!(m.submit_err(ALICE, &s, T0, 21), Reason::InvalidJob);
    let kind = m.send(
        r#"{"id":9,"method":"mining.submit","params":["alice","deadbeef","0000000","zz","00000000"]}"#,
        T0,
    );
    assert_error(&m.lines()[0], "9", 21);
    assert_eq!(kind, rejected(Reason::InvalidJob));
    m.submit_ok(ALICE, &good, T0);
}

#[test]
fn job_id_zero_was_never_issued() {
    // Job ids start at 1; "0" was never sent, so it is an unknown job, not a stale one.
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let good = m.find(meets(diff(-24)));
    assert_eq!(
        m.submit_err(ALICE, &good.on_job("0"), T0, 21),
        Reason::InvalidJob
    );
}

#[test]
fn shares_on_a_superseded_tip_are_stale() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let j1 = m.handshake(ALICE, T0);
    let en2 = m.en2();
    let s1 = m.grind(&j1.id, &en2, None, meets(diff(-24)));
    let s2 = m.grind(&j1.id, &en2, None, meets(diff(-24)));
    let s3 = m.grind(&j1.id, &en2, None, meets(diff(-24)));
    m.submit_ok(ALICE, &s1, T0);

    // A same-tip refresh does not make the older job stale.
    let t = T0.plus_millis(1_000);
    lab.publish(
        template_with(tip(1), HARD_BITS, CURTIME + 1, &[fake_tx(5)]),
        t,
    );
    m.handle_generation(&lab, t);
    m.lines();
    m.submit_ok(ALICE, &s2, t);

    // New tip, not yet delivered to this connection: already stale.
    lab.publish(template(tip(2), HARD_BITS), t);
    let (id, kind, lines) = m.submit(ALICE, &s3, t);
    assert_eq!(lines.len(), 1);
    assert_error(&lines[0], &id.to_string(), 21);
    assert_eq!(kind, rejected(Reason::Stale));

    // Delivered: the old jobs are dropped, and still answered as stale (not unknown).
    m.handle_generation(&lab, t);
    let j3 = assert_notify(&m.lines()[0]);
    assert!(j3.clean);
    let s4 = m.grind(&j1.id, &en2, None, meets(diff(-24)));
    assert_eq!(m.submit_err(ALICE, &s4, t, 21), Reason::Stale);
    // A duplicate of an accepted share, on a stale job: stale first.
    assert_eq!(m.submit_err(ALICE, &s1, t, 21), Reason::Stale);
    // Stale and malformed: stale first.
    let mut s5 = s4.clone();
    s5.en2 = vec![0; 2];
    assert_eq!(m.submit_err(ALICE, &s5, t, 21), Reason::Stale);
    let kind = m.send(
        &format!(
            r#"{{"id":77,"method":"mining.submit","params":["alice","{}","00000000","zz","00000000"]}}"#,
            j1.id
        ),
        t,
    );
    assert_error(&m.lines()[0], "77", 21);
    assert_eq!(kind, rejected(Reason::Stale));

    let s6 = m.grind(&j3.id, &en2, None, meets(diff(-24)));
    m.submit_ok(ALICE, &s6, t);
}

#[test]
fn malformed_parameters_are_20() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let job = m.handshake(ALICE, T0);
    let good = m.find(meets(diff(-24)));

    // extranonce2 of the wrong size, odd length, or not hex.
    for en2 in [vec![0u8; 3], vec![0; 5], vec![], vec![0; 33]] {
        let mut s = good.clone();
        s.en2 = en2.clone();
        assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other, "{en2:?}");
    }
    for en2 in ["0000000", "0000zz00"] {
        let line = format!(
            r#"{{"id":5,"method":"mining.submit","params":["alice","{}","{en2}","{:08x}","{:08x}"]}}"#,
            job.id, good.ntime, good.nonce
        );
        let kind = m.send(&line, T0);
        assert_error(&m.lines()[0], "5", 20);
        assert_eq!(kind, rejected(Reason::Other), "{en2}");
    }
    // ntime before the template's mintime, or too far ahead.
    let mut s = good.clone();
    s.ntime = MINTIME - 1;
    assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other);
    let mut s = good.clone();
    s.ntime = job.ntime + 7_001;
    assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other);
    // The edges are fine.
    let en2 = m.en2();
    let s = m.grind_at(&job.id, &en2, None, MINTIME, meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
    let s = m.grind_at(&job.id, &en2, None, job.ntime + 7_000, meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
    // ntime that is not 8 hex digits, a nonce that is not hex, too many params.
    for params in [
        format!(r#"["alice","{}","00000000","6553f1","00000000"]"#, job.id),
        format!(r#"["alice","{}","00000000","6553f100","0000000g"]"#, job.id),
        format!(
            r#"["alice","{}","00000000","6553f100","00000000","00000000","x"]"#,
            job.id
        ),
        format!(r#"["alice","{}","00000000",1700000000,"00000000"]"#, job.id),
        format!(r#"["alice","{}","00000000","6553f100"]"#, job.id),
    ] {
        let line = format!(r#"{{"id":6,"method":"mining.submit","params":{params}}}"#);
        let kind = m.send(&line, T0);
        let lines = m.lines();
        assert_eq!(lines.len(), 1, "{params}: {lines:?}");
        assert_error(&lines[0], "6", 20);
        assert_eq!(kind, rejected(Reason::Other), "{params}");
    }
    // Malformed and below the target: the parameters are judged first.
    let mut low = m.find(below(diff(-24)));
    low.ntime = MINTIME - 1;
    assert_eq!(m.submit_err(ALICE, &low, T0, 20), Reason::Other);
    // The good share is still good after all that.
    m.submit_ok(ALICE, &good, T0);
}

#[test]
fn duplicates_are_22_and_low_difficulty_is_23() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let good = m.find(meets(diff(-24)));
    m.submit_ok(ALICE, &good, T0);
    assert_eq!(m.submit_err(ALICE, &good, T0, 22), Reason::Duplicate);
    assert_eq!(
        m.submit_err(ALICE, &good, T0.plus_millis(60_000), 22),
        Reason::Duplicate
    );
    // A share that never met the target is never "a duplicate": 23 every time.
    let low = m.find(below(diff(-24)));
    assert_eq!(m.submit_err(ALICE, &low, T0, 23), Reason::LowDifficulty);
    assert_eq!(m.submit_err(ALICE, &low, T0, 23), Reason::LowDifficulty);
    // Low difficulty and version bits outside the (empty) mask: parameters first.
    let mut s = low.clone();
    s.version_bits = Some(0x0000_2000);
    assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other);
    // Another worker of the same connection resubmitting the share: still a duplicate.
    let a = m.request("mining.authorize", r#"["alice.two","x"]"#, T0);
    assert_eq!(m.lines(), vec![ok_line(a)]);
    assert_eq!(m.submit_err("alice.two", &good, T0, 22), Reason::Duplicate);
    let w = lab.engine.workers.get(ALICE).unwrap();
    assert_eq!((w.accepted(), w.rejected()), (1, 5));
}

#[test]
fn a_share_resubmitted_on_the_resent_job_is_a_duplicate() {
    // After a difficulty change the session re-sends the latest job under a new id
    // (session.rs `resend_work`). It is the same work: the same (extranonce2, ntime, nonce)
    // makes the same header on both ids, and must not be credited twice.
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    let s = m.find(meets(diff(-22)));
    m.submit_ok(ALICE, &s, T0);
    m.request(
        "mining.suggest_difficulty",
        "[0.0000002384185791015625]",
        T0,
    ); // 2^-22
    let b = assert_notify(&m.lines()[2]);
    assert_ne!(a.id, b.id);
    let again = m.header(m.job(&b.id), &s.en2, a.version, s.ntime, s.nonce);
    assert_eq!(again, s.header, "the same header under the new id");
    assert_eq!(
        m.submit_err(ALICE, &s.on_job(&b.id), T0, 22),
        Reason::Duplicate
    );
    assert_eq!(lab.engine.workers.get(ALICE).unwrap().accepted(), 1);
}

#[test]
fn a_share_resubmitted_on_an_identical_refresh_is_a_duplicate() {
    // JobBook opens a generation for every template, even one equal to the last (the liveness
    // refresh): a new job id for identical work.
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    let s = m.find(meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
    let t = T0.plus_millis(30_000);
    lab.publish(template(tip(1), HARD_BITS), t);
    m.handle_generation(&lab, t);
    let c = assert_notify(&m.lines()[0]);
    assert_ne!(a.id, c.id);
    assert_eq!(
        (&c.coinb1, &c.coinb2, &c.merkle_branch, c.ntime),
        (&a.coinb1, &a.coinb2, &a.merkle_branch, a.ntime)
    );
    assert_eq!(
        m.submit_err(ALICE, &s.on_job(&c.id), t, 22),
        Reason::Duplicate
    );
    assert_eq!(lab.engine.workers.get(ALICE).unwrap().accepted(), 1);
}

#[test]
fn a_full_duplicate_table_bounds_memory_without_forgetting_the_current_job() {
    // The table holds `dedup_capacity` shares over all remembered jobs. When it is full and only
    // the job the miner is on is left, the pool refuses further shares on that job as stale
    // rather than forget shares that could then be credited twice; a new job frees the table.
    let mut c = LabConfig::pool();
    c.dedup_capacity = 8;
    let lab = Lab::serving(c, tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let mut accepted = Vec::new();
    for i in 0..8 {
        let s = m.find(meets(diff(-24)));
        let (id, kind, lines) = m.submit(ALICE, &s, T0);
        assert_eq!(lines, vec![ok_line(id)], "share {i}: {kind:?}");
        accepted.push(s);
    }
    let s = m.find(meets(diff(-24)));
    let (_, kind, _) = m.submit(ALICE, &s, T0);
    assert_eq!(kind, LineKind::Share(Verdict::Rejected(Reason::Stale)));
    // Every remembered share is still a duplicate.
    for s in &accepted {
        let (_, kind, _) = m.submit(ALICE, s, T0);
        assert_eq!(kind, LineKind::Share(Verdict::Rejected(Reason::Duplicate)));
    }
}

// ---------------------------------------------------------------------------------------------
// Version rolling (BIP310 / BIP320)
// ---------------------------------------------------------------------------------------------

#[test]
fn version_bits_inside_the_granted_mask_are_accepted_outside_rejected() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.request(
        "mining.configure",
        r#"[["version-rolling"],{"version-rolling.mask":"00fff000"}]"#,
        T0,
    );
    m.lines();
    let job = m.handshake(ALICE, T0);
    assert_eq!(m.version_mask, 0x00ff_e000);
    let en2 = m.en2();
    for bits in [0x0000_2000, 0x00ff_e000, 0x0012_4000, 0] {
        let s = m.grind(&job.id, &en2, Some(bits), meets(diff(-24)));
        m.submit_ok(ALICE, &s, T0);
    }
    // Outside the granted mask (though inside the pool's), or outside both.
    for bits in [
        0x0000_1000,
        0x1000_0000,
        0x0100_0000,
        0x2000_0000,
        0xffff_ffff,
        0x0000_0001,
    ] {
        let mut s = m.grind(&job.id, &en2, Some(0x0000_2000), meets(diff(-24)));
        s.version_bits = Some(bits);
        assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other, "{bits:08x}");
    }
}

#[test]
fn without_configure_any_version_bits_are_rejected() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let job = m.handshake(ALICE, T0);
    let en2 = m.en2();
    for bits in [0x0000_2000, 0x1fff_e000, 0x2000_0000, 0x0000_0001] {
        let mut s = m.grind(&job.id, &en2, None, meets(diff(-24)));
        s.version_bits = Some(bits);
        assert_eq!(m.submit_err(ALICE, &s, T0, 20), Reason::Other, "{bits:08x}");
    }
    // No bits rolled at all (version_bits "00000000") is the job's own version.
    let s = m.grind(&job.id, &en2, Some(0), meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
}

// ---------------------------------------------------------------------------------------------
// Per-job difficulty and the grace period
// ---------------------------------------------------------------------------------------------

fn credited(lab: &Lab, worker: &str) -> f64 {
    lab.engine.workers.get(worker).unwrap().accepted_work()
}

#[test]
fn raised_difficulty_keeps_old_jobs_at_theirs_with_a_grace_period_for_new_ones() {
    let (lo, hi) = (diff(-24), diff(-20));
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    assert_eq!(a.difficulty, Some(lo.as_f64()));

    let t1 = T0.plus_millis(1_000);
    let id = m.request(
        "mining.suggest_difficulty",
        &format!("[{}]", hi.as_f64()),
        t1,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    assert_set_difficulty(&lines[1], hi.as_f64());
    let b = assert_notify(&lines[2]);
    assert_eq!(m.job(&b.id).difficulty, Some(hi.as_f64()));
    let en2 = m.en2();

    // Within the grace period.
    let t = t1.plus_millis(100);
    let before = credited(&lab, ALICE);
    let on_a = m.grind(&a.id, &en2, None, between(lo, hi));
    m.submit_ok(ALICE, &on_a, t);
    let on_b = m.grind(&b.id, &en2, None, between(lo, hi));
    m.submit_ok(ALICE, &on_b, t);
    assert_eq!(
        credited(&lab, ALICE) - before,
        2.0 * lo.as_f64(),
        "both credited at the lower"
    );

    // After it: the old job still at its own difficulty, the new one at its own.
    let t = t1.plus_millis(5_000);
    let on_a2 = m.grind(&a.id, &en2, None, between(lo, hi));
    m.submit_ok(ALICE, &on_a2, t);
    let on_b2 = m.grind(&b.id, &en2, None, between(lo, hi));
    assert_eq!(m.submit_err(ALICE, &on_b2, t, 23), Reason::LowDifficulty);
    let before = credited(&lab, ALICE);
    let on_b3 = m.grind(&b.id, &en2, None, meets(hi));
    m.submit_ok(ALICE, &on_b3, t);
    assert_eq!(credited(&lab, ALICE) - before, hi.as_f64());

    // The share accepted in the grace period, resubmitted after it: below its job's target
    // now, but it was accepted once, so it is a duplicate (22), not low difficulty (23).
    assert_eq!(m.submit_err(ALICE, &on_b, t, 22), Reason::Duplicate);
}

#[test]
fn lowered_difficulty_has_a_grace_period_then_each_job_keeps_its_own() {
    let (lo, hi) = (diff(-24), diff(-20));
    let lab = Lab::serving(
        LabConfig {
            start: hi,
            ..LabConfig::pool()
        },
        tip(1),
        HARD_BITS,
    );
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    assert_eq!(a.difficulty, Some(hi.as_f64()));
    let t1 = T0.plus_millis(1_000);
    m.request(
        "mining.suggest_difficulty",
        &format!("[{}]", lo.as_f64()),
        t1,
    );
    let lines = m.lines();
    assert_set_difficulty(&lines[1], lo.as_f64());
    let b = assert_notify(&lines[2]);
    let en2 = m.en2();

    // Grace: a share on the old job meeting the new, lower difficulty is accepted (credited
    // at the lower one): the miner may have switched before it saw the new job.
    let before = credited(&lab, ALICE);
    let s = m.grind(&a.id, &en2, None, between(lo, hi));
    m.submit_ok(ALICE, &s, t1.plus_millis(4_999));
    assert_eq!(credited(&lab, ALICE) - before, lo.as_f64());

    // After the grace period the old job's own difficulty applies again.
    let t = t1.plus_millis(5_000);
    let s = m.grind(&a.id, &en2, None, between(lo, hi));
    assert_eq!(m.submit_err(ALICE, &s, t, 23), Reason::LowDifficulty);
    let s = m.grind(&a.id, &en2, None, meets(hi));
    m.submit_ok(ALICE, &s, t);
    let s = m.grind(&b.id, &en2, None, between(lo, hi));
    m.submit_ok(ALICE, &s, t);
    let s = m.grind(&b.id, &en2, None, below(lo));
    assert_eq!(m.submit_err(ALICE, &s, t, 23), Reason::LowDifficulty);
}

// ---------------------------------------------------------------------------------------------
// mining.suggest_difficulty / mining.suggest_target
// ---------------------------------------------------------------------------------------------

#[test]
fn suggestions_before_subscribe_as_notifications_set_the_first_difficulty() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.notification("mining.suggest_difficulty", "[0.001]", T0);
    assert!(m.lines().is_empty(), "a notification gets no reply");
    m.handshake(ALICE, T0);
    assert_eq!(m.latest_job().difficulty, Some(0.001));

    // bfgminer's suggest_target: difficulty-1 target times 2^8 is difficulty 2^-8.
    let mut m = lab.miner(T0);
    m.notification(
        "mining.suggest_target",
        r#"["000000ffff000000000000000000000000000000000000000000000000000000"]"#,
        T0,
    );
    assert!(m.lines().is_empty());
    m.handshake(ALICE, T0);
    assert_eq!(m.latest_job().difficulty, Some(0.00390625));

    // As a request between subscribe and authorize: answered, applied at the first job.
    let mut m = lab.miner(T0);
    m.request("mining.subscribe", "[]", T0);
    m.lines();
    let id = m.request("mining.suggest_difficulty", r#"["0.25"]"#, T0);
    assert_eq!(
        m.lines(),
        vec![ok_line(id)],
        "quoted numbers are numbers too"
    );
    let a = m.request("mining.authorize", r#"["alice","x"]"#, T0);
    let lines = m.lines();
    assert_eq!(lines[0], ok_line(a));
    assert_set_difficulty(&lines[1], 0.25);
    assert_notify(&lines[2]);
}

#[test]
fn suggestions_after_authorize_resend_work_at_the_new_difficulty() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);

    // Request (Bitaxe, after the authorize result): reply, then difficulty, then a new job.
    let id = m.request("mining.suggest_difficulty", "[1000]", T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    assert_set_difficulty(&lines[1], 1000.0);
    let b = assert_notify(&lines[2]);
    assert_ne!(b.id, a.id);
    assert!(!b.clean);

    // Notification: no reply, the same difficulty-then-job.
    m.notification("mining.suggest_difficulty", "[0.5]", T0);
    let lines = m.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_set_difficulty(&lines[0], 0.5);
    assert_notify(&lines[1]);

    // suggest_target as a request: 2^-8.
    let id = m.request(
        "mining.suggest_target",
        r#"["000000ffff000000000000000000000000000000000000000000000000000000"]"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(id));
    assert_set_difficulty(&lines[1], 0.00390625);

    // The same value again: answered, nothing re-sent.
    let id = m.request("mining.suggest_difficulty", "[0.00390625]", T0);
    assert_eq!(m.lines(), vec![ok_line(id)]);
}

#[test]
fn suggestions_are_clamped_to_the_pool_bounds() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    for (suggested, want) in [
        ("1e12", MAX_DIFF),
        ("1e-15", 2f64.powi(MIN_LOG2)),
        ("5000", MAX_DIFF),
    ] {
        let id = m.request("mining.suggest_difficulty", &format!("[{suggested}]"), T0);
        let lines = m.lines();
        assert_eq!(lines[0], ok_line(id), "{suggested}");
        if lines.len() > 1 {
            assert_set_difficulty(&lines[1], want);
        }
        assert_eq!(m.difficulty, Some(want), "{suggested}");
    }
    // A target of all ones (difficulty ~2^-32) is clamped to the minimum.
    let id = m.request(
        "mining.suggest_target",
        &format!(r#"["{}"]"#, "f".repeat(64)),
        T0,
    );
    assert_eq!(m.lines()[0], ok_line(id));
    assert_eq!(m.difficulty, Some(2f64.powi(MIN_LOG2)));
}

#[test]
fn malformed_suggestions() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    for params in ["[\"abc\"]", "[-1]", "[0]", "[]", "[null]"] {
        let id = m.request("mining.suggest_difficulty", params, T0);
        assert_error(&m.lines()[0], &id.to_string(), 20);
        m.notification("mining.suggest_difficulty", params, T0);
        assert!(m.lines().is_empty(), "{params}");
    }
    for params in [
        "[\"zz\"]".to_owned(),
        format!(r#"["{}"]"#, "0".repeat(64)),
        format!(r#"["{}"]"#, "f".repeat(62)),
        "[1]".to_owned(),
    ] {
        let id = m.request("mining.suggest_target", &params, T0);
        assert_error(&m.lines()[0], &id.to_string(), 20);
        m.notification("mining.suggest_target", &params, T0);
        assert!(m.lines().is_empty(), "{params}");
    }
    assert_eq!(m.difficulty, Some(diff(-24).as_f64()), "nothing changed");
}

// ---------------------------------------------------------------------------------------------
// Vardiff
// ---------------------------------------------------------------------------------------------

#[test]
fn vardiff_raises_a_flooding_miner_with_a_new_job() {
    let lab = Lab::serving(LabConfig::pool().with_live_vardiff(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    let start = diff(-24).as_f64();
    let en2 = m.en2();
    let mut raised = None;
    for i in 0..200u64 {
        let s = m.grind(&a.id, &en2, None, meets(diff(-24)));
        let (id, kind, lines) = m.submit(ALICE, &s, T0.plus_millis(100 + i));
        assert_eq!(kind, LineKind::Share(Verdict::Accepted));
        assert_eq!(lines[0], ok_line(id));
        if lines.len() > 1 {
            assert_eq!(lines.len(), 3, "{lines:?}");
            let Msg::SetDifficulty(d) = classify(&lines[1]) else {
                panic!("{lines:?}")
            };
            let job = assert_notify(&lines[2]);
            assert!(!job.clean);
            raised = Some((i, d, job));
            break;
        }
    }
    let (i, d, b) = raised.expect("a flood of shares raises the difficulty");
    assert!(i < 100, "after {i} shares");
    assert!(d > start * 10.0, "{d} vs {start}");
    assert!(
        m.jobs.iter().filter(|j| j.id == b.id).count() == 1,
        "a new job id"
    );
    assert_eq!(m.job(&b.id).difficulty, Some(d));
    // Shares on the old job still count at its difficulty.
    let s = m.grind(
        &a.id,
        &en2,
        None,
        between(diff(-24), Difficulty::new(d).unwrap()),
    );
    m.submit_ok(ALICE, &s, T0.plus_millis(10_000));
}

#[test]
fn a_suggested_difficulty_does_not_freeze_vardiff() {
    let lab = Lab::serving(LabConfig::pool().with_live_vardiff(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.notification(
        "mining.suggest_difficulty",
        "[0.000000059604644775390625]",
        T0,
    );
    let a = m.handshake(ALICE, T0);
    assert_eq!(a.difficulty, Some(diff(-24).as_f64()));
    let en2 = m.en2();
    let mut raised = false;
    for i in 0..200u64 {
        let s = m.grind(&a.id, &en2, None, meets(diff(-24)));
        let (_, kind, lines) = m.submit(ALICE, &s, T0.plus_millis(100 + i));
        assert_eq!(kind, LineKind::Share(Verdict::Accepted));
        if lines.len() > 1 {
            raised = true;
            break;
        }
    }
    assert!(raised, "vardiff still retargets after a suggestion");
    assert!(m.difficulty.unwrap() > diff(-24).as_f64());
}

#[test]
fn vardiff_steps_a_quiet_miner_down_on_tick() {
    let lab = Lab::serving(LabConfig::pool().with_live_vardiff(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let a = m.handshake(ALICE, T0);
    m.tick(T0.plus_millis(5_000));
    m.tick(T0.plus_millis(29_999));
    assert!(m.lines().is_empty(), "not before the retarget interval");
    m.tick(T0.plus_millis(30_000));
    let lines = m.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let Msg::SetDifficulty(d) = classify(&lines[0]) else {
        panic!("{lines:?}")
    };
    assert!(d < diff(-24).as_f64(), "{d}");
    let b = assert_notify(&lines[1]);
    assert_ne!(b.id, a.id);
    assert!(!b.clean);
    // Down to the floor, never below it.
    let mut t = T0.plus_millis(30_000);
    for _ in 0..40 {
        t = t.plus_millis(30_000);
        m.tick(t);
    }
    assert_eq!(m.difficulty, Some(2f64.powi(MIN_LOG2)));
    let ids: HashSet<_> = m.jobs.iter().map(|j| &j.id).collect();
    assert_eq!(ids.len(), m.jobs.len());
    // A session without work is not ticked into sending anything.
    let mut idle = lab.miner(T0);
    idle.request("mining.subscribe", "[]", T0);
    idle.lines();
    idle.tick(T0.plus_millis(120_000));
    assert!(idle.lines().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Other methods, malformed input
// ---------------------------------------------------------------------------------------------

#[test]
fn other_methods() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let id = m.request("mining.extranonce.subscribe", "[]", T0);
    assert_eq!(m.lines(), vec![ok_line(id)]);
    let kind = m.send(r#"{"id":99,"method":"mining.ping","params":[]}"#, T0);
    assert_eq!(kind, LineKind::Other);
    assert_eq!(m.lines(), vec![r#"{"id":99,"result":"pong","error":null}"#]);
    let id = m.request("mining.ping", "[]", T0);
    assert_eq!(
        m.lines(),
        vec![format!(r#"{{"id":{id},"result":"pong","error":null}}"#)]
    );
    let id = m.request("client.get_version", "[]", T0);
    let lines = m.lines();
    let v: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(v["id"], json!(id));
    assert!(
        v["result"].as_str().unwrap().starts_with("stratumlab/"),
        "{lines:?}"
    );
    assert_eq!(v["error"], Value::Null);
    // Unknown methods, and pool-to-miner methods sent by a miner: 20.
    for method in [
        "mining.get_transactions",
        "mining.capabilities",
        "mining.notify",
        "mining.set_difficulty",
        "client.reconnect",
    ] {
        let id = m.request(method, "[]", T0);
        let msg = assert_error(&m.lines()[0], &id.to_string(), 20);
        assert!(!msg.is_empty());
    }
    // The same as notifications: no reply.
    for method in [
        "mining.capabilities",
        "mining.whatever",
        "client.show_message",
    ] {
        m.notification(method, r#"[{"notify":[],"set_difficulty":{}}]"#, T0);
        assert!(m.lines().is_empty(), "{method}");
    }
    // Notifications without any id member.
    m.send(r#"{"method":"mining.whatever","params":[]}"#, T0);
    assert!(m.lines().is_empty());
    // Responses from the miner (to our get_version, say): nothing to answer.
    m.send(r#"{"id":1,"result":"cgminer/4.12.1","error":null}"#, T0);
    assert!(m.lines().is_empty());
    assert_eq!(m.session.wants_close(), None);
}

#[test]
fn malformed_json_is_answered_with_a_null_id_and_too_much_of_it_closes() {
    let mut c = LabConfig::pool();
    c.sv1.max_bad_lines = 5;
    let lab = Lab::serving(c, tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let bad: [&[u8]; 5] = [
        b"{",
        b"not json",
        br#"{"id":1,"method":"mining.subscribe","params":[]} trailing"#,
        b"[1,2,3]",
        b"{\"id\":1,\"method\":\"mining.ping\",\"params\":[\"\xff\"]}",
    ];
    for line in bad {
        m.send_bytes(line, T0);
        let lines = m.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_error(&lines[0], "null", 20);
        assert_eq!(
            m.session.wants_close(),
            None,
            "five bad lines are tolerated"
        );
    }
    m.send("}", T0);
    assert_error(&m.lines()[0], "null", 20);
    assert_eq!(m.session.wants_close(), Some(Close::TooManyBadLines));

    // Below the limit the connection stays open and keeps working.
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    for _ in 0..5 {
        m.send("{oops", T0);
    }
    assert_eq!(m.lines().len(), 5);
    assert_eq!(m.session.wants_close(), None);
    let s = m.find(meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
    m.send("{oops", T0);
    assert_eq!(m.session.wants_close(), Some(Close::TooManyBadLines));

    // A line over the limit: answered, then closed.
    let mut m = lab.miner(T0);
    m.session.line_too_long();
    m.collect();
    let lines = m.lines();
    assert_error(&lines[0], "null", 20);
    assert_eq!(m.session.wants_close(), Some(Close::LineTooLong));
}

#[test]
fn fast_and_general_submit_readers_agree() {
    // The session reads plain submits on a fast path and everything else with the general
    // reader; the verdicts must not depend on which one a line takes. A "jsonrpc" member
    // sends a submit down the general reader.
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    let job = m.handshake(ALICE, T0);
    let general = |line: String| line.replacen('{', r#"{"jsonrpc":"2.0","#, 1);
    for slow in [false, true] {
        let form = |l: String| if slow { general(l) } else { l };
        let send = |m: &mut Miner, s: &Share, id: u64| {
            let kind = m.send(&form(Miner::submit_line(ALICE, s, id)), T0);
            (kind, m.lines())
        };
        let good = m.find(meets(diff(-24)));
        let (kind, lines) = send(&mut m, &good, 50);
        assert_eq!(lines, vec![ok_line(50)], "slow {slow}");
        assert_eq!(kind, LineKind::Share(Verdict::Accepted));
        let (kind, lines) = send(&mut m, &good, 51);
        assert_error(&lines[0], "51", 22);
        assert_eq!(kind, rejected(Reason::Duplicate));
        let low = m.find(below(diff(-24)));
        let (kind, lines) = send(&mut m, &low, 52);
        assert_error(&lines[0], "52", 23);
        assert_eq!(kind, rejected(Reason::LowDifficulty));
        let (kind, lines) = send(&mut m, &good.on_job("abcdef"), 53);
        assert_error(&lines[0], "53", 21);
        assert_eq!(kind, rejected(Reason::InvalidJob));
        let mut short = m.find(meets(diff(-24)));
        short.en2 = vec![1, 2, 3];
        let (kind, lines) = send(&mut m, &short, 54);
        assert_error(&lines[0], "54", 20);
        assert_eq!(kind, rejected(Reason::Other));
        let (kind, lines) = send(&mut m, &good, 55);
        assert_error(&lines[0], "55", 22);
        assert_eq!(kind, rejected(Reason::Duplicate));
    }
    // A share accepted on one path is a duplicate on the other.
    let s = m.grind(&job.id, &[9, 9, 9, 9], None, meets(diff(-24)));
    m.submit_ok(ALICE, &s, T0);
    m.send(&general(Miner::submit_line(ALICE, &s, 60)), T0);
    assert_error(&m.lines()[0], "60", 22);
    // String ids are echoed on both paths.
    for (en2, slow) in [([8u8; 4], false), ([7; 4], true)] {
        let s = m.grind(&job.id, &en2, None, meets(diff(-24)));
        let line = Miner::submit_line(ALICE, &s, 0).replacen(r#""id":0"#, r#""id":"s-1""#, 1);
        m.send(&if slow { general(line) } else { line }, T0);
        assert_eq!(m.lines(), vec![ok_line("\"s-1\"")]);
    }
}

// ---------------------------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------------------------

/// Checks a found block against the share that found it.
fn check_block(lab: &mut Lab, m: &Miner, s: &Share, payout: &primitives::bitcoin::ScriptBuf) {
    let fb = lab.next_block().expect("a found block");
    assert!(lab.next_block().is_none(), "one block per share");
    assert_eq!(fb.hash, s.hash);
    assert_eq!(fb.height, HEIGHT);
    assert_eq!(fb.conn, m.session.conn());
    let block: Block = consensus::deserialize(&fb.block).expect("the block deserializes");
    assert_eq!(consensus::serialize(&block.header), s.header.to_vec());
    assert_eq!(block.block_hash(), BlockHash::from(s.hash));
    assert!(block.header.validate_pow(block.header.target()).is_ok());
    assert!(block.check_merkle_root(), "merkle root");
    assert_eq!(block.bip34_block_height().unwrap(), u64::from(HEIGHT));
    assert_eq!(block.txdata.len(), 4);
    assert_eq!(block.txdata[1..], [fake_tx(1), fake_tx(2), fake_tx(3)]);
    let cb = &block.txdata[0];
    assert!(cb.is_coinbase());
    let job = m.job(&s.job_id);
    assert_eq!(
        consensus::serialize(cb),
        m.coinbase(job, &s.en2),
        "the coinbase the miner hashed"
    );
    let extranonce = [&m.extranonce1[..], &s.en2].concat();
    assert!(
        cb.input[0]
            .script_sig
            .as_bytes()
            .windows(8)
            .any(|w| w == extranonce),
        "the coinbase carries extranonce1 || extranonce2"
    );
    assert_eq!(cb.output[0].script_pubkey, *payout);
    assert_eq!(cb.output[0].value, Amount::from_sat(SUBSIDY_SAT + 600));
    assert_eq!(block.header.prev_blockhash, BlockHash::from(tip(1)));
    assert_eq!(block.header.bits.to_consensus(), EASY_BITS.to_consensus());
    assert_eq!(block.header.nonce, s.nonce);
    assert_eq!(block.header.time, s.ntime);
}

#[test]
fn a_share_meeting_the_network_target_is_a_block() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), EASY_BITS);
    let mut m = lab.miner(T0);
    let job = m.handshake(ALICE, T0);
    let net = meets_bits(EASY_BITS);
    let share = meets(diff(-24));
    let s = m.grind(&job.id, &[0xde, 0xad, 0xbe, 0xef], None, |h| {
        net(h) && share(h)
    });
    m.submit_ok(ALICE, &s, T0);
    check_block(&mut lab, &m, &s, &pool_script());

    // Below the share target but meeting the network's (possible when the share target is
    // set above it): still a block, never turned away.
    let s = m.grind(&job.id, &[1, 2, 3, 4], None, |h| net(h) && !share(h));
    m.submit_ok(ALICE, &s, T0);
    check_block(&mut lab, &m, &s, &pool_script());

    // Neither: rejected, no block.
    let s = m.grind(&job.id, &[1, 2, 3, 4], None, |h| !net(h) && !share(h));
    assert_eq!(m.submit_err(ALICE, &s, T0, 23), Reason::LowDifficulty);
    assert!(lab.next_block().is_none());
}

#[test]
fn a_solo_block_with_rolled_version_pays_the_miner() {
    let mut lab = Lab::serving(LabConfig::solo(), tip(1), EASY_BITS);
    let (addr, script) = p2wpkh_address([0x44; 20], KnownHrp::Regtest);
    let mut m = lab.miner(T0);
    m.request(
        "mining.configure",
        r#"[["version-rolling"],{"version-rolling.mask":"ffffffff"}]"#,
        T0,
    );
    m.lines();
    let job = m.handshake(&format!("{addr}.bitaxe"), T0);
    let s = m.grind(
        &job.id,
        &[7, 7, 7, 7],
        Some(0x0aaa_a000),
        meets_bits(EASY_BITS),
    );
    m.submit_ok(&format!("{addr}.bitaxe"), &s, T0);
    check_block(&mut lab, &m, &s, &script);
    // The header carries the rolled version: the job's outside the mask, the miner's inside.
    assert_eq!(
        u32::from_le_bytes(s.header[0..4].try_into().unwrap()),
        0x2aaa_a000
    );
}

#[test]
fn shares_on_a_hard_network_target_find_no_block() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    for _ in 0..10 {
        let s = m.find(meets(diff(-24)));
        m.submit_ok(ALICE, &s, T0);
    }
    assert!(lab.next_block().is_none());
}

// ---------------------------------------------------------------------------------------------
// Stopping and resuming work
// ---------------------------------------------------------------------------------------------

#[test]
fn stopped_work_sends_no_notify_until_published_again() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    lab.engine.stop_work();
    assert!(!lab.engine.is_serving());
    m.handle_generation(&lab, T0);
    assert!(m.lines().is_empty());
    m.tick(T0.plus_millis(60_000));
    assert!(m.lines().is_empty());

    // A miner arriving meanwhile is answered but gets no work.
    let mut late = lab.miner(T0);
    late.request("mining.subscribe", "[]", T0);
    let a = late.request("mining.authorize", r#"["bob","x"]"#, T0);
    let lines = late.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[1], ok_line(a));
    assert!(!late.session.is_working());

    let t = T0.plus_millis(90_000);
    lab.publish(template(tip(2), HARD_BITS), t);
    m.handle_generation(&lab, t);
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(assert_notify(&lines[0]).clean);
    late.handle_generation(&lab, t);
    let lines = late.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_set_difficulty(&lines[0], diff(-24).as_f64());
    assert_eq!(assert_notify(&lines[1]).prev_hash, tip(2));
    let s = late.find(meets(diff(-24)));
    late.submit_ok("bob", &s, t);
}

// ---------------------------------------------------------------------------------------------
// Real miners' handshakes (tests/data/handshakes/*.jsonl, read from the miners' sources; see
// tests/data/miner_handshakes.md)
// ---------------------------------------------------------------------------------------------

fn handshake_steps(miner: &str) -> Vec<Value> {
    let path = format!(
        "{}/tests/data/handshakes/{miner}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{path}: {l}: {e}")))
        .collect()
}

/// The pool the replays run against: suggestions (512, 1000) are clamped to 2^-20 so that the
/// replayed submits can be ground quickly.
fn replay_lab() -> Lab {
    let mut c = LabConfig::pool();
    c.vardiff.max = diff(-20);
    Lab::serving(c, tip(1), HARD_BITS)
}

/// The miner's submit line with real values: its own key order, spacing, id and worker, the
/// params replaced by a share ground on the latest job at that job's difficulty (version bits
/// kept where the granted mask allows them).
fn real_submit(m: &mut Miner, line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    let params = v["params"].as_array().unwrap();
    let worker = params[0].as_str().unwrap().to_owned();
    let version_bits = params
        .get(5)
        .map(|b| u32::from_str_radix(b.as_str().unwrap(), 16).unwrap() & m.version_mask);
    let job = m.latest_job().clone();
    let d = Difficulty::new(job.difficulty.expect("a difficulty before the job")).unwrap();
    let en2: Vec<u8> = (1..=m.extranonce2_size as u8).collect();
    let s = m.grind(&job.id, &en2, version_bits, meets(d));
    let start = line.find("\"params\"").unwrap();
    let open = start + line[start..].find('[').unwrap();
    let close = open + line[open..].find(']').unwrap();
    let sep = if line[open..close].contains("\", \"") {
        ", "
    } else {
        ","
    };
    let mut fields = vec![
        worker,
        s.job_id.clone(),
        primitives::hex::encode(&s.en2),
        format!("{:08x}", s.ntime),
        format!("{:08x}", s.nonce),
    ];
    if let Some(b) = s.version_bits {
        fields.push(format!("{b:08x}"));
    }
    let array = fields
        .iter()
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(sep);
    format!("{}[{array}]{}", &line[..open], &line[close + 1..])
}

fn reply_id(line: &str) -> Option<Value> {
    match classify(line) {
        Msg::Reply { id, .. } => Some(id),
        _ => None,
    }
}

/// Replays `miner`'s sequence (with or without its optional steps) and checks each
/// expectation the way that miner reads the pool's lines:
/// - a `must_be_next_line` reply is the very next line received;
/// - before a blocking reply only what every one of these miners handles may come
///   (`mining.set_difficulty` > 0, `mining.notify`), plus, where `skips_other_replies`,
///   replies to its other requests (bfgminer skips those while waiting for "auth");
/// - `mining.set_difficulty` comes before the `mining.notify` it applies to;
/// - every submit is accepted, and every request with an id gets exactly one reply, the id
///   echoed verbatim.
fn replay(miner: &str, with_optional: bool, skips_other_replies: bool) -> Miner {
    let lab = replay_lab();
    let mut m = lab.miner(T0);
    let mut pending: std::collections::VecDeque<String> = Default::default();
    let mut requests: Vec<Value> = Vec::new();
    for step in handshake_steps(miner) {
        if step.get("optional").is_some() && !with_optional {
            continue;
        }
        let ctx = format!("{miner} (optional steps: {with_optional}) at {step}");
        if let Some(line) = step.get("send").and_then(Value::as_str) {
            let (env, method) = sv1::parse_line(line.as_bytes()).expect("the miner's line parses");
            let submit = method == Some(sv1::Method::Submit);
            let line = if submit {
                real_submit(&mut m, line)
            } else {
                line.to_owned()
            };
            if let Some(id) = env.id() {
                requests.push(serde_json::from_str(id).unwrap());
            }
            let kind = m.send(&line, T0);
            if submit {
                assert_eq!(kind, LineKind::Share(Verdict::Accepted), "{ctx}: {line}");
            }
            pending.extend(m.lines());
            continue;
        }
        match step["expect"].as_str().expect("send or expect") {
            "reply" => {
                let want: Value = serde_json::from_str(step["id"].as_str().unwrap()).unwrap();
                if !requests.contains(&want) {
                    // The reply to an optional request that was left out.
                    continue;
                }
                let pos = pending
                    .iter()
                    .position(|l| reply_id(l).as_ref() == Some(&want))
                    .unwrap_or_else(|| panic!("{ctx}: no reply; pending {pending:?}"));
                if step["must_be_next_line"] == json!(true) {
                    assert_eq!(pos, 0, "{ctx}: not the next line: {pending:?}");
                }
                if step["blocking"] == json!(true) {
                    for l in pending.iter().take(pos) {
                        match classify(l) {
                            Msg::SetDifficulty(d) => assert!(d > 0.0, "{ctx}: {l}"),
                            Msg::Notify(_) => {}
                            Msg::Reply { .. } if skips_other_replies => {}
                            _ => panic!("{ctx}: {l} before the reply the miner waits for"),
                        }
                    }
                }
                let reply = pending.remove(pos).unwrap();
                let Msg::Reply { result, error, .. } = classify(&reply) else {
                    unreachable!()
                };
                assert!(error.is_null(), "{ctx}: {reply}");
                assert!(
                    !result.is_null() && result != json!(false),
                    "{ctx}: {reply}"
                );
            }
            "mining.set_difficulty" => {
                let pos = pending
                    .iter()
                    .position(|l| matches!(classify(l), Msg::SetDifficulty(_)))
                    .unwrap_or_else(|| panic!("{ctx}: no set_difficulty in {pending:?}"));
                assert!(
                    !pending
                        .iter()
                        .take(pos)
                        .any(|l| matches!(classify(l), Msg::Notify(_))),
                    "{ctx}: a notify before the difficulty: {pending:?}"
                );
                pending.remove(pos);
            }
            "mining.notify" => {
                let pos = pending
                    .iter()
                    .position(|l| matches!(classify(l), Msg::Notify(_)))
                    .unwrap_or_else(|| panic!("{ctx}: no notify in {pending:?}"));
                pending.remove(pos);
            }
            other => panic!("{ctx}: unknown expectation {other}"),
        }
    }
    // Every request with an id got exactly one reply each, its id echoed verbatim.
    let mut replies: Vec<Value> = m.received.iter().filter_map(|l| reply_id(l)).collect();
    for id in &requests {
        let i = replies
            .iter()
            .position(|r| r == id)
            .unwrap_or_else(|| panic!("{miner}: request {id} unanswered: {:?}", m.received));
        replies.remove(i);
    }
    assert!(
        replies.is_empty(),
        "{miner}: unsolicited replies {replies:?}"
    );
    // And the jobs it got are all distinct (firmware drops a notify whose id it has seen).
    let ids: HashSet<_> = m.jobs.iter().map(|j| &j.id).collect();
    assert_eq!(ids.len(), m.jobs.len(), "{miner}: {:?}", m.received);
    m
}

/// Where the subscribe reply (the first reply with an array result) came, and its id.
fn subscribe_reply(m: &Miner) -> (usize, Value) {
    for (i, l) in m.received.iter().enumerate() {
        if let Msg::Reply { id, result, .. } = classify(l) {
            if result.is_array() {
                return (i, id);
            }
        }
    }
    panic!("no subscribe reply in {:?}", m.received)
}

#[test]
fn cgminer_handshake() {
    for optional in [false, true] {
        let m = replay("cgminer", optional, false);
        let r = &m.received;
        // The subscribe reply comes first, with an extranonce2 size cgminer accepts (2..=16).
        assert_eq!(subscribe_reply(&m), (0, json!(0)));
        assert!((2..=16).contains(&m.extranonce2_size));
        // "The first line it does not handle is the authorize reply, id unchecked."
        assert_eq!(r[1], ok_line(1), "{r:?}");
        assert!(
            matches!(classify(&r[2]), Msg::SetDifficulty(d) if d > 0.0),
            "{r:?}"
        );
        assert_notify(&r[3]);
        if optional {
            // --suggest-diff 512, clamped to the pool's maximum, re-sent with a new job.
            assert_eq!(r[4], ok_line(2));
            assert_set_difficulty(&r[5], diff(-20).as_f64());
            assert!(!assert_notify(&r[6]).clean);
        }
    }
}

#[test]
fn cgminer_vmask_build_reads_the_configure_reply_as_the_next_line() {
    // USE_VMASK builds send configure first (id 0) and read exactly the next line: it must be
    // the reply, "version-rolling": true with a non-zero hex mask.
    let lab = replay_lab();
    let mut m = lab.miner(T0);
    m.send(
        r#"{"id": 0, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff"}]}"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 1, "{lines:?}");
    let Msg::Reply { id, result, error } = classify(&lines[0]) else {
        panic!("{lines:?}")
    };
    assert_eq!((id, error), (json!(0), Value::Null));
    assert_eq!(result["version-rolling"], json!(true));
    let mask = u32::from_str_radix(result["version-rolling.mask"].as_str().unwrap(), 16).unwrap();
    assert_ne!(mask, 0);
    m.send(
        r#"{"id": 1, "method": "mining.subscribe", "params": ["cgminer/4.12.1"]}"#,
        T0,
    );
    assert_eq!(m.lines().len(), 1);
    m.send(
        r#"{"id": 2, "method": "mining.authorize", "params": ["acct.rig1", "x"]}"#,
        T0,
    );
    assert_eq!(m.lines()[0], ok_line(2));
    let job = m.latest_job().id.clone();
    let d = Difficulty::new(m.difficulty.unwrap()).unwrap();
    let en2 = m.en2();
    let s = m.grind(&job, &en2, Some(0x0000_6000), meets(d));
    m.submit_ok("acct.rig1", &s, T0);
}

#[test]
fn bfgminer_handshake() {
    for optional in [false, true] {
        let m = replay("bfgminer", optional, true);
        let r = &m.received;
        // The suggest_target notification sent before subscribe got no reply: the subscribe
        // reply, read as the very next line, is the first line of all.
        assert_eq!(subscribe_reply(&m), (0, json!(0)));
        assert!(m.extranonce2_size >= 1);
        // String ids echoed verbatim.
        assert!(r.contains(&ok_line("\"auth\"")), "{r:?}");
        // The suggested target (difficulty 1, clamped to the pool's 2^-20) set the first
        // difficulty; without it, the pool's start.
        let first = r
            .iter()
            .find_map(|l| match classify(l) {
                Msg::SetDifficulty(d) => Some(d),
                _ => None,
            })
            .unwrap();
        let want = if optional { diff(-20) } else { diff(-24) };
        assert_eq!(first, want.as_f64(), "{r:?}");
        if optional {
            assert!(r.contains(&ok_line("\"xnsub\"")), "{r:?}");
            // The transparency probe is answered (an error is an answer).
            let probe = r
                .iter()
                .find(|l| l.contains("\"txlist1f\""))
                .expect("answered");
            assert_error(probe, "\"txlist1f\"", 20);
        }
    }
}

#[test]
fn cpuminer_handshake() {
    for optional in [false, true] {
        let m = replay("cpuminer", optional, false);
        let r = &m.received;
        assert_eq!(subscribe_reply(&m), (0, json!(1)));
        assert!((1..=100).contains(&m.extranonce2_size));
        // Only notify / set_difficulty / client.* may precede the authorize reply: it is next.
        assert_eq!(r[1], ok_line(2), "{r:?}");
        // stratum_notify's checks: 64-digit prevhash and branches, 8-digit version/nbits/ntime.
        for l in r {
            if let Msg::Notify(_) = classify(l) {
                let v: Value = serde_json::from_str(l).unwrap();
                let p = v["params"].as_array().unwrap();
                let hex = |x: &Value, n: usize| {
                    let s = x.as_str().unwrap();
                    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
                };
                assert!(hex(&p[1], 64), "{l}");
                for b in p[4].as_array().unwrap() {
                    assert!(hex(b, 64), "{l}");
                }
                for field in &p[5..8] {
                    assert!(hex(field, 8), "{l}");
                }
            }
        }
    }
}

#[test]
fn bitaxe_handshake() {
    for optional in [false, true] {
        let m = replay("bitaxe", optional, false);
        let r = &m.received;
        // configure, subscribe and authorize went out back to back; the answers come in that
        // order, the configure reply first of all, then the difficulty before the first job.
        assert!(
            r[0].starts_with(
                r#"{"id":1,"result":{"version-rolling":true,"version-rolling.mask":"1fffe000"}"#
            ),
            "{r:?}"
        );
        assert_eq!(subscribe_reply(&m), (1, json!(2)));
        assert!(m.extranonce2_size <= 32, "ESP-Miner clamps it to 32");
        assert_eq!(r[2], ok_line(3));
        assert_set_difficulty(&r[3], diff(-24).as_f64());
        assert!(assert_notify(&r[4]).clean);
        if optional {
            // suggest_difficulty 1000 after the authorize result: answered, then the
            // (clamped) difficulty and the job again under a new id.
            assert_eq!(r[5], ok_line(4));
            assert_set_difficulty(&r[6], diff(-20).as_f64());
            let again = assert_notify(&r[7]);
            assert_ne!(again.id, m.jobs[0].id);
            assert_eq!(r[8], ok_line(5), "extranonce.subscribe answered true");
        }
    }
}

#[test]
fn older_esp_miner_reads_the_configure_reply_synchronously_after_subscribe() {
    // Older ESP-Miner firmware (tests/data/miner_handshakes.md): subscribe (1), then configure
    // (2) read as the next line; suggest_difficulty (3) before authorize (4).
    let lab = replay_lab();
    let mut m = lab.miner(T0);
    m.send(
        r#"{"id": 1, "method": "mining.subscribe", "params": ["bitaxe/BM1366/v2.1.5"]}"#,
        T0,
    );
    assert_eq!(m.lines().len(), 1);
    m.send(
        r#"{"id": 2, "method": "mining.configure", "params": [["version-rolling"], {"version-rolling.mask": "ffffffff"}]}"#,
        T0,
    );
    assert_eq!(
        m.lines(),
        vec![
            r#"{"id":2,"result":{"version-rolling":true,"version-rolling.mask":"1fffe000"},"error":null}"#
        ]
    );
    m.send(
        r#"{"id": 3, "method": "mining.suggest_difficulty", "params": [1000]}"#,
        T0,
    );
    assert_eq!(m.lines(), vec![ok_line(3)]);
    m.send(
        r#"{"id": 4, "method": "mining.authorize", "params": ["acct.bitaxe", "x"]}"#,
        T0,
    );
    let lines = m.lines();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0], ok_line(4));
    assert_set_difficulty(&lines[1], diff(-20).as_f64());
    assert_notify(&lines[2]);
    // Six params, "00000000" when nothing was rolled.
    let s = m.find(meets(diff(-20)));
    let s = Share {
        version_bits: Some(0),
        ..s
    };
    m.submit_ok("acct.bitaxe", &s, T0);
}

/// The store could not confirm a read's shares in time: their acknowledgements become errors
/// that say so, in their place among the other replies, and the replies that are not share
/// acknowledgements stay as they were.
#[test]
fn unconfirmed_acknowledgements_become_errors_in_their_place() {
    let dir = tempfile::tempdir().unwrap();
    let store = pool::store::Store::open(pool::store::StoreConfig::new(dir.path().join("pool.db")))
        .unwrap();
    let mut lab = Lab::with_store(LabConfig::pool(), Some(store));
    lab.publish(template(tip(1), HARD_BITS), T0);
    let mut m = lab.miner(T0);
    m.handshake(ALICE, T0);
    let job = m.latest_job().id.clone();
    let a = m.grind(&job, &[1, 0, 0, 0xff], None, meets(diff(-24)));
    let b = m.grind(&job, &[2, 0, 0, 0xff], None, meets(diff(-24)));
    // One read: a share, a ping, a share (as the shell feeds a read's lines before writing),
    // with new work (a shared notify line) arriving between the first two.
    m.session
        .handle_line(Miner::submit_line(ALICE, &a, 100).as_bytes(), T0);
    lab.publish(template(tip(1), HARD_BITS), T0);
    m.session
        .handle_generation(lab.engine.current().as_ref(), T0);
    for l in [
        r#"{"id":101,"method":"mining.ping","params":[]}"#.to_owned(),
        Miner::submit_line(ALICE, &b, 102),
    ] {
        m.session.handle_line(l.as_bytes(), T0);
    }
    assert!(m.session.take_pending_ticket().is_some());
    assert!(m.session.refuse_unconfirmed());
    // Written as the shell writes: the session's own bytes with the shared line in its place.
    let written = m.session.poll_transmit().concat();
    let n = written.len();
    m.session.transmitted(n);
    let out: Vec<String> = String::from_utf8(written)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(out.len(), 4, "{out:?}");
    assert_error(&out[0], "100", 20);
    assert!(out[0].contains("not confirmed"), "{}", out[0]);
    assert_notify(&out[1]);
    assert_eq!(
        serde_json::from_str::<Value>(&out[2]).unwrap()["result"],
        "pong"
    );
    assert_error(&out[3], "102", 20);
    // Confirmed in time, the next share is acknowledged as usual.
    let c = m.grind(&job, &[3, 0, 0, 0xff], None, meets(diff(-24)));
    m.submit_ok(ALICE, &c, T0);
}
