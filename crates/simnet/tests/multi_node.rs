//! Several nodes on one network: what reaches each node when, what their templates are, and
//! what their peer links carry.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use primitives::Hash256;
use simnet::{
    BlockSource, Network, NodeId, NodeOutput, NodeSpec, Output, PeerBytes, SimnetConfig,
    StoredBlock, Timestamp,
};

const POOL_DELAY: Duration = Duration::from_millis(20);
const FARM_DELAY: Duration = Duration::from_millis(50);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn config(seed: u64) -> SimnetConfig {
    let mut c = submit_config(seed);
    // A template on every arrival that adds fees, so templates follow mempools exactly.
    c.template_interval = Duration::ZERO;
    c.fee_delta = 0;
    c.mempool.arrival_rate = 2.0;
    c
}

fn pool_and_farm(c: SimnetConfig) -> (Network, NodeId, NodeId) {
    let net = Network::with_nodes(
        c,
        vec![
            NodeSpec::new("pool", POOL_DELAY),
            NodeSpec::new("farm", FARM_DELAY),
        ],
    )
    .unwrap();
    let (pool, farm) = (net.node_id("pool").unwrap(), net.node_id("farm").unwrap());
    (net, pool, farm)
}

/// Runs through every deadline up to `until`, collecting every node's outputs.
fn run_nodes(net: &mut Network, until: Timestamp) -> Vec<NodeOutput> {
    let mut out = Vec::new();
    while let Some(t) = net.poll_timeout() {
        if t > until {
            break;
        }
        out.extend(common::every_node(net, t));
    }
    out.extend(common::every_node(net, until));
    out
}

/// Transactions the network made after the start (the initial mempool has time zero), with
/// when the rest of the network got them.
fn arrivals(net: &Network) -> Vec<(Hash256, Timestamp)> {
    let chain = net.network_chain();
    let mut all: Vec<(Hash256, Timestamp)> = net
        .network_mempool()
        .iter_by_fee_rate()
        .map(|e| (e.txid, e.time))
        .chain(
            (chain.base_height()..=chain.tip_height())
                .filter_map(|h| chain.block(&chain.hash_at(h).unwrap()))
                .flat_map(|b| b.txs.iter().map(|e| (e.txid, e.time))),
        )
        .filter(|(_, t)| *t > Timestamp::ZERO)
        .collect();
    all.sort_by_key(|(id, t)| (*t, *id));
    all
}

fn tips_of(outputs: &[NodeOutput], node: Option<NodeId>) -> Vec<(Timestamp, Hash256)> {
    outputs
        .iter()
        .filter(|o| o.node == node)
        .filter_map(|o| match &o.output {
            Output::TipChanged { at, hash, .. } => Some((*at, *hash)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_transaction_reaches_each_node_after_its_delay() {
    let (mut net, pool, farm) = pool_and_farm(config(1));
    for step in 1..=40u64 {
        let now = Timestamp::ZERO + ms(250 * step + 7 * step);
        run_nodes(&mut net, now);
        for (txid, t) in arrivals(&net) {
            for (node, delay) in [(pool, POOL_DELAY), (farm, FARM_DELAY)] {
                let has = net.node(node).mempool().contains(&txid);
                assert_eq!(
                    has,
                    t + delay <= now,
                    "{} at {now}: tx from {t}",
                    net.node(node).name()
                );
                if has {
                    // Its mempool records when it got it.
                    assert_eq!(net.node(node).mempool_entry(&txid).unwrap().time, t + delay);
                }
            }
        }
    }
    assert!(
        arrivals(&net).len() > 10,
        "too few arrivals to say anything"
    );
}

#[test]
fn templates_differ_while_a_transaction_is_on_its_way_and_converge_after() {
    let (mut net, pool, farm) = pool_and_farm(config(2));
    run_nodes(&mut net, secs(30));
    let all = arrivals(&net);
    // Arrivals with no other within the farm's delay after them.
    let lonely: Vec<Timestamp> = all
        .windows(2)
        .filter(|w| w[1].1 > w[0].1 + FARM_DELAY * 2)
        .map(|w| w[0].1)
        .collect();
    assert!(lonely.len() > 5, "{} lonely arrivals", lonely.len());

    let (mut net, pool2, farm2) = pool_and_farm(config(2));
    assert_eq!((pool2, farm2), (pool, farm));
    let mut checked = 0;
    for t in lonely
        .into_iter()
        .filter(|t| *t > Timestamp::ZERO + FARM_DELAY)
    {
        // In the window: the pool's template has it, the farm's not yet.
        run_nodes(&mut net, t + ms(30));
        let (p, f) = (net.node(pool).template(), net.node(farm).template());
        assert_ne!(p.txids, f.txids, "at {t} + 30 ms");
        assert!(p.total_fees > f.total_fees);
        // After the farm's delay: the same transactions, the same order.
        run_nodes(&mut net, t + FARM_DELAY);
        let (p, f) = (net.node(pool).template(), net.node(farm).template());
        assert_eq!(p.txids, f.txids, "at {t} + 50 ms");
        assert_eq!(p.total_fees, f.total_fees);
        assert_eq!(p.merkle_branch, f.merkle_branch);
        checked += 1;
    }
    assert!(checked > 5);
}

#[test]
fn a_block_submitted_at_the_farm_reaches_the_pool_after_both_delays() {
    let (mut net, pool, farm) = pool_and_farm(config(3));
    let at = secs(5);
    run_nodes(&mut net, at);
    let template = net.node(farm).template().clone();
    let block = Draft::from_template(&template).mine();
    let accepted = net.submit_block_at(farm, at, &raw(&block)).unwrap();
    let hash = accepted.hash;

    // The farm at once, with a template on it.
    let outs = common::every_node(&mut net, at);
    assert_eq!(tips_of(&outs, Some(farm)), [(at, hash)]);
    assert!(outs.iter().any(|o| o.node == Some(farm)
        && matches!(&o.output, Output::TemplateCreated(t) if t.prev_hash == hash && t.created_at == at)));
    assert!(outs.iter().any(|o| o.node == Some(farm)
        && matches!(&o.output, Output::BlockVerdict { result: Ok(()), .. })));
    assert_eq!(net.node(farm).tip().hash, hash);
    assert_ne!(net.node(pool).tip().hash, hash);

    // The network after the farm's delay, the pool after the farm's and its own.
    let hub_at = at + FARM_DELAY;
    let pool_at = at + FARM_DELAY + POOL_DELAY;
    let outs = run_nodes(&mut net, Timestamp::from_nanos(pool_at.as_nanos() - 1));
    assert_eq!(tips_of(&outs, None), [(hub_at, hash)]);
    assert!(tips_of(&outs, Some(pool)).is_empty());
    assert_ne!(net.node(pool).tip().hash, hash);
    assert_eq!(net.network_chain().tip_hash(), hash);

    let outs = run_nodes(&mut net, pool_at);
    assert_eq!(tips_of(&outs, Some(pool)), [(pool_at, hash)]);
    assert!(outs.iter().any(|o| o.node == Some(pool)
        && matches!(&o.output, Output::TemplateCreated(t) if t.prev_hash == hash && t.created_at == pool_at)));
    // To the pool it came from the network; the farm's transactions left its mempool too.
    assert_eq!(net.node(pool).tip().source, BlockSource::Network);
    assert_eq!(net.node(farm).tip().source, BlockSource::Submitted);
    assert!(template
        .txids
        .iter()
        .all(|t| !net.node(pool).mempool().contains(t)));
    assert_eq!(net.node(pool).template().prev_hash, hash);
    // Nothing goes back to the farm.
    assert!(tips_of(&run_nodes(&mut net, secs(6)), Some(farm)).is_empty());
}

#[test]
fn network_blocks_reach_each_node_after_its_delay() {
    let mut c = config(4);
    c.block_interval = Duration::from_secs(5);
    let (mut net, pool, farm) = pool_and_farm(c);
    let outs = run_nodes(&mut net, secs(120));
    let hub = tips_of(&outs, None);
    assert!(hub.len() > 8, "{} network blocks", hub.len());
    for (node, delay) in [(pool, POOL_DELAY), (farm, FARM_DELAY)] {
        let want: Vec<_> = hub
            .iter()
            .map(|(t, h)| (*t + delay, *h))
            .filter(|(t, _)| *t <= secs(120))
            .collect();
        assert_eq!(tips_of(&outs, Some(node)), want);
        // Each tip brings a template on it, at the same instant.
        for (t, h) in &want {
            assert!(outs.iter().any(|o| o.node == Some(node)
                && matches!(&o.output, Output::TemplateCreated(x) if x.prev_hash == *h && x.created_at == *t)));
        }
    }
}

/// BIP152/P2P compact size length.
fn cs(n: u64) -> u64 {
    match n {
        0..=252 => 1,
        253..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

fn cmpctblock(b: &StoredBlock) -> u64 {
    let n = b.txs.len() as u64;
    24 + 80 + 8 + cs(n) + 6 * n + 1 + 1 + b.coinbase.total_size() as u64
}

/// The peer bytes the farm's link should have carried, replayed from what the network did and
/// the model's documented figures, independently of the network's own counting. `made` is
/// every transaction the network made (txid, when, size).
fn replay_farm(
    net: &Network,
    made: &[(Hash256, Timestamp, u64)],
    announce_every: Duration,
    submitted: &Arc<StoredBlock>,
    submitted_at: Timestamp,
    now: Timestamp,
) -> (PeerBytes, usize) {
    enum Ev {
        Tx(Hash256, Timestamp, u64),
        Block(Arc<StoredBlock>),
        Sent(Arc<StoredBlock>),
    }
    let every = announce_every.as_nanos() as u64;
    let chain = net.network_chain();
    let mut evs: Vec<(Timestamp, Ev)> = Vec::new();
    for &(txid, t, len) in made {
        let announced = Timestamp::from_nanos(t.as_nanos().div_ceil(every) * every);
        evs.push((announced + FARM_DELAY, Ev::Tx(txid, announced, len)));
    }
    for h in chain.base_height() + 1..=chain.tip_height() {
        let b = chain.block(&chain.hash_at(h).unwrap()).unwrap().clone();
        if b.hash != submitted.hash {
            evs.push((b.received + FARM_DELAY, Ev::Block(b)));
        }
    }
    evs.push((submitted_at, Ev::Sent(submitted.clone())));
    evs.retain(|(t, _)| *t <= now);
    evs.sort_by_key(|(t, _)| *t);

    // Every node starts with the initial mempool, which is never relayed.
    let relayed: HashSet<Hash256> = made.iter().map(|m| m.0).collect();
    let mut fetched = 0;
    let mut seen: HashSet<Hash256> = HashSet::new();
    let mut bytes = PeerBytes::default();
    let mut last_batch = None;
    for (_, ev) in evs {
        match ev {
            Ev::Tx(txid, announced, len) => {
                if last_batch != Some(announced) {
                    last_batch = Some(announced);
                    bytes.down += 25;
                    bytes.up += 25;
                }
                bytes.down += 36;
                if seen.insert(txid) {
                    bytes.up += 36;
                    bytes.down += 24 + len;
                }
            }
            Ev::Block(b) => {
                bytes.down += cmpctblock(&b);
                // BIP152 indexes: the coinbase is 0.
                let missing: Vec<(u64, u64)> = b
                    .txs
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| relayed.contains(&e.txid) && !seen.contains(&e.txid))
                    .map(|(i, e)| (i as u64 + 1, e.raw.len() as u64))
                    .collect();
                if !missing.is_empty() {
                    fetched += missing.len();
                    let k = missing.len() as u64;
                    let mut prev = None;
                    let mut idx = 0;
                    for &(i, _) in &missing {
                        idx += cs(prev.map_or(i, |p: u64| i - p - 1));
                        prev = Some(i);
                    }
                    bytes.up += 24 + 32 + cs(k) + idx;
                    bytes.down += 24 + 32 + cs(k) + missing.iter().map(|m| m.1).sum::<u64>();
                }
                seen.extend(b.txs.iter().map(|e| e.txid));
            }
            Ev::Sent(b) => bytes.up += cmpctblock(&b),
        }
    }
    (bytes, fetched)
}

/// Every transaction the network makes up to `end` with this config: the transaction stream
/// does not depend on blocks or submissions.
fn made_until(c: &SimnetConfig, end: Timestamp) -> Vec<(Hash256, Timestamp, u64)> {
    let mut c = c.clone();
    c.block_interval = Duration::ZERO;
    let mut net = Network::new(c).unwrap();
    run(&mut net, end);
    net.network_mempool()
        .iter_by_fee_rate()
        .filter(|e| e.time > Timestamp::ZERO)
        .map(|e| (e.txid, e.time, e.raw.len() as u64))
        .collect()
}

#[test]
fn peer_bytes_add_up_from_the_model() {
    let mut c = config(5);
    c.block_interval = Duration::from_secs(8);
    c.tx_announce_interval = Duration::from_secs(2);
    c.mempool.arrival_rate = 5.0;
    let announce = c.tx_announce_interval;
    let made = made_until(&c, secs(90));
    let (mut net, _pool, farm) = pool_and_farm(c);

    // Submit at the farm once it is in step with the network.
    let mut at = secs(20);
    loop {
        run_nodes(&mut net, at);
        if net.node(farm).tip().hash == net.network_chain().tip_hash() {
            break;
        }
        at += ms(100);
    }
    let block = Draft::from_template(net.node(farm).template()).mine();
    let hash = net.submit_block_at(farm, at, &raw(&block)).unwrap().hash;
    let submitted = net.node(farm).block(&hash).unwrap().clone();

    let mut fetched = 0;
    for end in [secs(40), secs(61), secs(90)] {
        run_nodes(&mut net, end);
        let (want, missing) = replay_farm(&net, &made, announce, &submitted, at, end);
        assert_eq!(net.node(farm).peer_bytes(), want, "at {end}");
        fetched = missing;
    }
    // Network blocks carried transactions not yet announced: getblocktxn was exercised.
    assert!(fetched > 0);
    let b = net.node(farm).peer_bytes();
    // Transactions dominate what comes down; what goes up is requests and one block.
    assert!(b.down > 10 * b.up, "{b:?}");
}

/// Everything observable, templates by content.
fn trace(outputs: &[NodeOutput], net: &Network) -> Vec<String> {
    let mut lines: Vec<String> = outputs
        .iter()
        .map(|o| match &o.output {
            Output::TemplateCreated(t) => format!(
                "{:?} template {} {} {} {:?} {}",
                o.node, t.id, t.created_at, t.prev_hash, t.txids, t.total_fees
            ),
            other => format!("{:?} {other:?}", o.node),
        })
        .collect();
    for id in net.node_ids() {
        let v = net.node(id);
        lines.push(format!(
            "{} {:?} {:?} {:?}",
            v.name(),
            v.peer_bytes(),
            v.tip().hash,
            v.mempool().txids()
        ));
    }
    lines
}

fn drive(seed: u64, step: Option<Duration>) -> Vec<String> {
    let mut c = config(seed);
    c.block_interval = Duration::from_secs(20);
    c.tx_announce_interval = Duration::from_secs(2);
    let (mut net, pool, farm) = pool_and_farm(c);
    let mut outputs = Vec::new();
    let end = secs(200);
    let submits = [(secs(33), farm), (secs(97), pool), (secs(150), farm)];
    let mut next_submit = 0;
    let mut now = Timestamp::ZERO;
    while now < end {
        let next = next_stop(&net, now, step, end);
        if let Some(&(t, node)) = submits.get(next_submit) {
            if next >= t {
                outputs.extend(common::every_node(&mut net, t));
                let block = Draft::from_template(net.node(node).template()).mine();
                let _ = net.submit_block_at(node, t, &raw(&block));
                next_submit += 1;
            }
        }
        outputs.extend(common::every_node(&mut net, next));
        now = next;
    }
    trace(&outputs, &net)
}

#[test]
fn same_seed_and_submissions_same_nodes_whatever_the_polling() {
    let by_deadline = drive(7, None);
    let by_step = drive(7, Some(ms(333)));
    assert!(by_deadline.len() > 50);
    assert_eq!(by_deadline, by_step);
    assert_ne!(by_deadline, drive(8, None));
}

#[test]
fn node_names_are_checked() {
    let two = |a: &str, b: &str| {
        Network::with_nodes(
            config(1),
            vec![NodeSpec::new(a, ms(1)), NodeSpec::new(b, ms(2))],
        )
        .map(|_| ())
    };
    assert!(two("pool", "farm").is_ok());
    assert!(two("pool", "pool").is_err());
    assert!(two("pool", "network").is_err());
    assert!(two("", "farm").is_err());
    assert!(Network::with_nodes(config(1), vec![]).is_err());
}
