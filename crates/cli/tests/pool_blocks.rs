//! No found block is lost when a way out fails: the pool takes templates from simnet's
//! Template Provider through a `stratumlab tap`, with simnet's RPC beside it; SV2 devices find
//! blocks every second or so; the tap is killed, then started again. Mining goes on from the
//! node's templates while the provider is gone and from the provider once it is back; every
//! block found reaches simnet's chain or is recorded with the node's reason, none stays
//! pending, and the pool's status counts each. And a block stored just before the pool is
//! killed with SIGKILL reaches the chain after the restart.

mod support;

use std::time::{Duration, Instant};

use support::rpc_call as rpc;
use support::{
    free_port, http_get_json, start_tap, status_when, status_within, within, Role, Roles, PAYOUT,
};

/// Whether block `hash` (internal byte order) is on simnet's best chain.
fn in_chain(rpc_addr: &str, hash: &[u8; 32]) -> bool {
    let mut display = *hash;
    display.reverse();
    let v = rpc(
        rpc_addr,
        "getblockheader",
        serde_json::json!([primitives::hex::encode(&display)]),
    );
    v["result"]["confirmations"].as_i64().unwrap_or(-1) >= 1
}

/// One test at a time: each runs simnet with fee-driven templates every second (megabytes of
/// transactions a second to its pool) and real hashing devices, and four at once on CI's two
/// cores starved their devices and their transaction fetches (no block in 40 s, or a block on
/// a template handed out without its transactions).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn blocks_found_after_the_provider_is_cut_off_reach_the_chain_through_the_node() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let (rpc_addr, tdp, tdp_key) = simnet(&mut roles);
    // On a fixed port, so that it can come back where the pool looks for it.
    let tap_addr = format!("127.0.0.1:{}", free_port());
    start_tap(&mut roles, &tap_addr, &tdp);
    let store = dir.path().join("pool.sqlite");
    let url = format!("http://{rpc_addr}");
    let store_s = store.to_str().unwrap().to_owned();
    let events = dir.path().join("pool.ev");
    let mut args = pool_args(&tap_addr, &tdp_key, Some(&url), "127.0.0.1:0", &store_s);
    args.extend(["--events", events.to_str().unwrap()]);
    let pool = roles.add("pool", Role::start("pool", &args));
    let key = pool.line("sv2 authority public key");
    let sv2 = pool.line("sv2 listening on");
    let http = pool.line("http listening on");
    let fleet = sv2_fleet(&sv2, &key, "4", "120s");

    // Blocks go out through the provider first.
    status_within(
        &http,
        "no blocks through the provider",
        Duration::from_secs(30),
        || roles.logs(),
        |s| s["blocks"]["accepted"].as_u64().unwrap_or(0) >= 2,
    );
    // The allocator's side of memory: the binary runs on jemalloc, whose figures are there.
    let memory = &http_get_json(&http, "/api/status")["memory"];
    assert!(
        memory["heap_in_use_bytes"].as_u64().unwrap_or(0) > 1 << 20,
        "{memory}"
    );
    assert!(memory["heap_free_bytes"].is_u64(), "{memory}");
    let before = http_get_json(&http, "/api/status")["blocks"]["found"]
        .as_u64()
        .unwrap();
    let cut_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    roles.kill("tap");
    // The provider is gone: the status says so, work comes from the node, blocks keep coming.
    let status = status_within(
        &http,
        "no blocks from the node's templates after the provider was cut off",
        Duration::from_secs(30),
        || roles.logs(),
        |s| {
            s["dependencies"]["tp"]["up"] == false
                && s["blocks"]["found"].as_u64().unwrap_or(0) >= before + 3
        },
    );
    assert_eq!(status["dependencies"]["node"]["up"], true, "{status}");
    assert_eq!(status["serving"], true, "{status}");
    assert_eq!(status["work_source"], "node", "{status}");
    // The provider comes back: work comes from it again, and blocks go out through it.
    start_tap(&mut roles, &tap_addr, &tdp);
    let back = status_within(
        &http,
        "the pool did not go back to the provider",
        Duration::from_secs(40),
        || roles.logs(),
        |s| s["dependencies"]["tp"]["up"] == true && s["work_source"] == "tp",
    );
    let regained_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let found_back = back["blocks"]["found"].as_u64().unwrap();
    status_within(
        &http,
        "no blocks once the provider was back",
        Duration::from_secs(30),
        || roles.logs(),
        |s| s["blocks"]["found"].as_u64() >= Some(found_back + 2),
    );
    drop(fleet);
    // Every block is answered for.
    let status = status_within(
        &http,
        "blocks still pending",
        Duration::from_secs(30),
        || roles.logs(),
        |s| s["blocks"]["pending"] == 0,
    );
    roles.stop("pool");

    let blocks = pool::store::StoreReader::open(&store)
        .unwrap()
        .blocks()
        .unwrap();
    let found = status["blocks"]["found"].as_u64().unwrap();
    assert_eq!(blocks.len() as u64, found, "{status}");
    let (mut accepted, mut orphaned, mut after_cut, mut after_regain) = (0, 0, 0, 0);
    for b in &blocks {
        let result = b
            .result
            .as_deref()
            .unwrap_or_else(|| panic!("block at height {} has no recorded fate", b.height));
        if b.time_ms > regained_ms {
            after_regain += 1;
        } else if b.time_ms > cut_ms {
            after_cut += 1;
        }
        if in_chain(&rpc_addr, &b.hash) {
            assert_eq!(
                result, "accepted",
                "a block in the chain recorded as {result}"
            );
            accepted += 1;
        } else {
            // Lost a race (another device's block at its height came first): the node says so.
            assert!(
                result.contains("inconclusive") || result == "not-adopted" || result == "duplicate",
                "block at height {} is not in the chain: {result}",
                b.height
            );
            orphaned += 1;
        }
    }
    // Each block's first event says it was found and stored, before it was submitted.
    let log = events::read_file(&events).unwrap();
    for b in &blocks {
        let hash = primitives::Hash256(b.hash);
        let at = |want: &dyn Fn(&events::EventKind) -> bool| {
            log.events.iter().position(|e| want(&e.kind))
        };
        let found = at(&|k| matches!(k, events::EventKind::BlockFound(f) if f.hash == hash && f.stored && f.height == b.height))
            .unwrap_or_else(|| panic!("no block_found, stored, for height {}", b.height));
        let submitted =
            at(&|k| matches!(k, events::EventKind::BlockSubmitted(f) if f.hash == hash))
                .unwrap_or_else(|| panic!("no block_submitted for height {}", b.height));
        assert!(
            found < submitted,
            "height {}: submitted before found",
            b.height
        );
    }
    assert!(after_cut >= 3, "{after_cut} blocks found after the cut");
    assert!(
        after_regain >= 2,
        "{after_regain} blocks found once the provider was back"
    );
    assert_eq!(status["blocks"]["accepted"], accepted, "{status}");
    assert_eq!(
        status["blocks"]["orphaned"].as_u64().unwrap()
            + status["blocks"]["rejected"].as_u64().unwrap(),
        orphaned,
        "{status}"
    );
    eprintln!(
        "{} blocks found, {after_cut} while the provider was cut off, {after_regain} after it \
         came back: {accepted} in the chain, {orphaned} orphaned",
        blocks.len()
    );
}

/// simnet with its provider and its RPC, at a network difficulty that the devices meet every
/// second or so; returns the RPC and provider addresses and the provider's authority key.
fn simnet(roles: &mut Roles) -> (String, String, String) {
    let (simnet, at) = support::simnet()
        .tdp()
        .rpc()
        .arg("--network-difficulty", "0.0005")
        // Fee-driven templates every second, faster than their transactions come back over
        // the slow link: the pool holds each until its transactions are in, so that every
        // block found on one is whole (which the kill tests need to send it through the node).
        .arg("--template-interval", "1s")
        .start();
    roles.add("simnet", simnet);
    (at.rpc().into(), at.tdp().into(), at.tdp_key().into())
}

fn pool_args<'a>(
    tp: &'a str,
    tp_key: &'a str,
    url: Option<&'a str>,
    sv2: &'a str,
    store: &'a str,
) -> Vec<&'a str> {
    let mut args = vec![
        "--sv2-listen",
        sv2,
        "--tp",
        tp,
        "--tp-authority-key",
        tp_key,
        "--http-listen",
        "127.0.0.1:0",
        "--payout-address",
        PAYOUT,
        "--store",
        store,
    ];
    if let Some(url) = url {
        args.extend([
            "--node-rpc",
            url,
            "--rpc-user",
            support::RPC_USER,
            "--rpc-password",
            support::RPC_PASSWORD,
        ]);
    }
    args
}

/// The pool is killed with SIGKILL right after a device found a block, before the block got
/// out (its `SubmitSolution` held up on a slow link that dies with it): the restarted pool
/// finds the block in its store and sends it through the node, and it joins the chain.
#[test]
fn a_block_found_just_before_a_kill_9_reaches_the_chain_after_the_restart() {
    let _serial = serial();
    block_in_a_slow_link(Then::RestartWithNode);
}

/// As above, restarted with the provider alone (no node to send the block through): the block
/// stays pending until the provider's chain moves past its height by another block (the
/// devices mine on), then it is recorded lost (`not-adopted`, an orphan), not left pending.
#[test]
fn a_block_a_provider_only_pool_cannot_send_is_lost_once_another_holds_its_height() {
    let _serial = serial();
    block_in_a_slow_link(Then::RestartProviderOnly);
}

/// The provider's connection dies right after a device found a block, its `SubmitSolution`
/// still on the slow link (which dies with it): the pool, still running, sends the block
/// through the node beside the provider, and it joins the chain.
#[test]
fn a_block_found_as_the_provider_is_lost_reaches_the_chain_through_the_node() {
    let _serial = serial();
    block_in_a_slow_link(Then::LinkCut);
}

/// What happens once a block is stored and its solution is on the slow link to the provider.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    /// The pool is SIGKILLed with the link, and started again with the node beside the
    /// provider.
    RestartWithNode,
    /// Likewise, started again with the provider alone.
    RestartProviderOnly,
    /// Only the link dies; the pool runs on.
    LinkCut,
}

fn block_in_a_slow_link(then: Then) {
    let dir = tempfile::tempdir().unwrap();
    let mut roles = Roles::default();
    let (rpc_addr, tdp, tdp_key) = simnet(&mut roles);
    // Toward the provider, everything waits 2 s: the pool's solutions too.
    let tap = roles.add(
        "tap",
        Role::start(
            "tap",
            &[
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &tdp,
                "--delay-up",
                "2s",
                "--handshake",
                "false",
                "--duration",
                "600s",
            ],
        ),
    );
    let tap_addr = tap.line("tap listening on");
    let store = dir.path().join("pool.sqlite");
    let sv2 = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{rpc_addr}");
    let store_s = store.to_str().unwrap().to_owned();
    let pool = roles.add(
        "pool",
        Role::start(
            "pool",
            &pool_args(&tap_addr, &tdp_key, Some(&url), &sv2, &store_s),
        ),
    );
    let key = pool.line("sv2 authority public key");
    pool.line("sv2 listening on");
    let http = pool.line("http listening on");
    // Mining starts once the pool serves and has had time to fetch its template's
    // transactions (asked for on the slow link too), so that the block it stores is whole.
    status_within(
        &http,
        "the pool does not serve with its template's transactions",
        Duration::from_secs(40),
        || roles.logs(),
        |s| {
            s["serving"] == true
                && s["dependencies"]["tp"]["templates_with_transactions"].as_u64() >= Some(1)
        },
    );
    let fleet = sv2_fleet(&sv2, &key, "2", "60s");
    // Killed as soon as a block is in the store (it is stored before it is sent).
    let deadline = Instant::now() + Duration::from_secs(40);
    while pool::store::StoreReader::open(&store)
        .and_then(|r| r.blocks())
        .map_or(true, |b| b.is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "no block found: {}\n{}",
            http_get_json(&http, "/api/status"),
            roles.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The block is in the store, whole (the pool held fee-driven templates until their
    // transactions were in); its solution is still in the slow link.
    for b in pool::store::StoreReader::open(&store)
        .unwrap()
        .blocks()
        .unwrap()
    {
        let whole =
            primitives::bitcoin::consensus::deserialize::<primitives::bitcoin::Block>(&b.block)
                .is_ok_and(|block| block.check_merkle_root());
        assert!(
            whole,
            "the block at height {} was stored without its template's transactions ({} bytes)",
            b.height,
            b.block.len()
        );
    }
    if then == Then::LinkCut {
        roles.kill("tap");
        drop(fleet);
        let blocks = accepted_on_the_chain(&store, &rpc_addr, &roles, || {
            format!(
                "the pool did not send the block through the node: {}",
                http_get_json(&http, "/api/status")
            )
        });
        let status = status_when(&http, "no block pending", |s| {
            s["blocks"]["pending"].as_u64() == Some(0)
        });
        assert_eq!(
            status["blocks"]["accepted"].as_u64(),
            Some(accepted(&blocks)),
            "{status}"
        );
        assert_eq!(status["dependencies"]["tp"]["up"], false, "{status}");
        eprintln!(
            "{} block(s) found as the provider's link died reached the chain through the node",
            blocks.len()
        );
        roles.stop("pool");
        return;
    }
    roles.kill("pool");
    roles.kill("tap");
    drop(fleet);
    let blocks = pool::store::StoreReader::open(&store)
        .unwrap()
        .blocks()
        .unwrap();
    assert!(
        !blocks.is_empty(),
        "the found block was not stored before the kill"
    );
    eprintln!(
        "stored: {:?}",
        blocks
            .iter()
            .map(|b| (b.height, b.block.len()))
            .collect::<Vec<_>>()
    );
    for b in &blocks {
        assert!(
            !in_chain(&rpc_addr, &b.hash),
            "height {} reached the chain before the kill",
            b.height
        );
        assert_eq!(b.result, None);
    }

    if then == Then::RestartProviderOnly {
        // Restarted on the same store, straight to the provider, without the node.
        let pool = roles.add(
            "pool",
            Role::start("pool", &pool_args(&tdp, &tdp_key, None, &sv2, &store_s)),
        );
        let key = pool.line("sv2 authority public key");
        pool.line("sv2 listening on");
        let http = pool.line("http listening on");
        let earlier: Vec<[u8; 32]> = blocks.iter().map(|b| b.hash).collect();
        let n = earlier.len() as u64;
        let status = http_get_json(&http, "/api/status");
        assert_eq!(status["blocks"]["pending"].as_u64(), Some(n), "{status}");
        // The devices mine on: their first block takes the height.
        let fleet = sv2_fleet(&sv2, &key, "2", "60s");
        let settled = within(
            "the earlier run's block was not settled by the provider's tips",
            Duration::from_secs(45),
            || format!("{}\n{}", http_get_json(&http, "/api/status"), roles.logs()),
            || {
                let all = pool::store::StoreReader::open(&store)
                    .unwrap()
                    .blocks()
                    .unwrap();
                let settled: Vec<_> = all
                    .into_iter()
                    .filter(|b| earlier.contains(&b.hash) && b.result.is_some())
                    .collect();
                if settled.len() == earlier.len() {
                    Ok(settled)
                } else {
                    Err(format!("{} of {} settled", settled.len(), earlier.len()))
                }
            },
        );
        drop(fleet);
        // Its fate is the chain's: lost to the block that took its height, or (when the
        // solution had left the slow link just before the kill) accepted, the provider's tip
        // being on it.
        let mut lost = 0;
        for b in &settled {
            let want = if in_chain(&rpc_addr, &b.hash) {
                "accepted"
            } else {
                lost += 1;
                "not-adopted"
            };
            assert_eq!(b.result.as_deref(), Some(want), "height {}", b.height);
        }
        let status = status_when(&http, "no block pending", |s| {
            s["blocks"]["pending"].as_u64() == Some(0)
        });
        assert!(
            status["blocks"]["orphaned"].as_u64() >= Some(lost),
            "{status}"
        );
        eprintln!(
            "{n} block(s) found before the kill, never sent by the restarted pool: {lost} recorded not-adopted once another block held the height, {} accepted (on the chain)",
            n - lost
        );
        roles.stop("pool");
        return;
    }

    // Restarted on the same store, straight to the provider, with the node beside it.
    let pool = roles.add(
        "pool",
        Role::start(
            "pool",
            &pool_args(&tdp, &tdp_key, Some(&url), &sv2, &store_s),
        ),
    );
    pool.line("sv2 listening on");
    let http = pool.line("http listening on");
    let blocks = accepted_on_the_chain(&store, &rpc_addr, &roles, || {
        "the restarted pool did not submit the stored block".into()
    });
    // The counts run from the store's beginning: the earlier run's blocks are found and
    // accepted in this run's status.
    // No device mines after the restart: the counts are the earlier run's blocks, once each.
    let n = blocks.len() as u64;
    let status = status_when(&http, "the restored block counts", |s| {
        s["blocks"]["accepted"].as_u64() == Some(accepted(&blocks))
    });
    assert_eq!(status["blocks"]["found"].as_u64(), Some(n), "{status}");
    assert_eq!(status["blocks"]["pending"].as_u64(), Some(0), "{status}");
    eprintln!(
        "{} block(s) found before the kill reached the chain after the restart",
        blocks.len()
    );
    roles.stop("pool");
}

/// The stored blocks once every one has an answer (within 30 s; `why()` and the roles' logs
/// say what failed otherwise), each recorded accepted and on simnet's chain.
fn accepted_on_the_chain(
    store: &std::path::Path,
    rpc_addr: &str,
    roles: &Roles,
    why: impl Fn() -> String,
) -> Vec<pool::store::StoredBlock> {
    let blocks = within(
        "a stored block without an answer",
        Duration::from_secs(30),
        || format!("{}\n{}", why(), roles.logs()),
        || {
            let blocks = pool::store::StoreReader::open(store)
                .unwrap()
                .blocks()
                .unwrap();
            if blocks.iter().all(|b| b.result.is_some()) {
                Ok(blocks)
            } else {
                Err(format!("{} stored", blocks.len()))
            }
        },
    );
    // Devices that mine on until the pool dies may find a second block on the same template:
    // of the blocks at one height exactly one joins the chain, recorded accepted; the others
    // are valid but stale, recorded `inconclusive` as a node answers.
    let mut heights: Vec<u32> = blocks.iter().map(|b| b.height).collect();
    heights.sort_unstable();
    heights.dedup();
    for h in heights {
        // Each block with whether it is on the chain (one RPC question each).
        let at: Vec<_> = blocks
            .iter()
            .filter(|b| b.height == h)
            .map(|b| (b, in_chain(rpc_addr, &b.hash)))
            .collect();
        let results: Vec<_> = at.iter().map(|(b, _)| b.result.as_deref()).collect();
        let on_chain = at.iter().filter(|(_, on)| *on).count();
        assert_eq!(on_chain, 1, "height {h}: {results:?}, none in the chain");
        for (b, on) in &at {
            let want = if *on { "accepted" } else { "inconclusive" };
            assert_eq!(b.result.as_deref(), Some(want), "height {h}");
        }
    }
    blocks
}

/// How many of `blocks` were recorded accepted.
fn accepted(blocks: &[pool::store::StoredBlock]) -> u64 {
    blocks
        .iter()
        .filter(|b| b.result.as_deref() == Some("accepted"))
        .count() as u64
}

/// SV2 devices on `pool` (checking `key`) at 3 MH/s in all, for `duration`; killed when
/// dropped, a failing test's included.
fn sv2_fleet(pool: &str, key: &str, devices: &str, duration: &str) -> Role {
    Role::start(
        "fleet",
        &[
            "--pool",
            pool,
            "--protocol",
            "sv2",
            "--authority-key",
            key,
            "--devices",
            devices,
            "--hash-budget",
            "3MH/s",
            "--duration",
            duration,
        ],
    )
}
