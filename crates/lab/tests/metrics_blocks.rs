//! Blocks found, submitted and orphaned, and block propagation, against a known chain.

mod metrics_support;

use events::{BlockResult, BlockSubmitted, ShortStr, TipSource};
use metrics_support::*;

fn accepted(node: &str, hash: primitives::Hash256, height: u32) -> BlockResult {
    BlockResult {
        node: ShortStr::new(node),
        hash,
        height,
        accepted: true,
        reason: ShortStr::EMPTY,
    }
}

fn submitted(hash: primitives::Hash256, height: u32) -> BlockSubmitted {
    BlockSubmitted {
        hash,
        height,
        template_id: Some(1),
        conn: Some(1),
    }
}

/// The network's chain 1 <- B1 <- 2 <- 3 <- 4, with our B2 on 2 losing to 3.
fn chain() -> Lab {
    let mut lab = Lab::new();
    let (b1, b2, b3) = (h(501), h(502), h(503));
    let s = &mut lab.simnet;
    s.push(ev(at(0.0), tip("network", h(1), 100, h(0))));

    // B1: sent at 30 s, accepted by the job source node 40 ms later (a farm-side node heard of
    // it sooner: not the job source).
    lab.fleets[0].push(ev(at(30.0), sent(3, 1, 8.0, Some(b1))));
    s.push(ev(at(30.0) + 10 * MS, accepted("farm", b1, 101)));
    s.push(ev(at(30.0) + 40 * MS, accepted("pool", b1, 101)));
    let mut t = tip("pool", b1, 101, h(1));
    t.source = TipSource::Submitted;
    s.push(ev(at(30.0) + 40 * MS, t));
    s.push(ev(at(30.0) + 40 * MS, tip("network", b1, 101, h(1))));
    s.push(ev(at(50.0), tip("network", h(2), 102, b1)));

    // B2 on top of 2, accepted 25 ms after it was sent; the network's 3 came first and 4 built
    // on 3: B2 is orphaned.
    lab.fleets[0].push(ev(at(60.0), sent(4, 1, 8.0, Some(b2))));
    s.push(ev(at(60.0) + 10 * MS, tip("network", h(3), 103, h(2))));
    s.push(ev(at(60.0) + 25 * MS, accepted("pool", b2, 103)));
    s.push(ev(at(60.0) + 25 * MS, tip("pool", b2, 103, h(2))));
    s.push(ev(at(70.0), tip("network", h(4), 104, h(3))));

    // B3 was found in the warm-up: not counted. h(777) is another configuration's block.
    lab.fleets[0].push(ev(at(5.0), sent(5, 1, 8.0, Some(b3))));
    s.push(ev(at(5.0) + 20 * MS, accepted("pool", b3, 100)));
    s.push(ev(at(65.0), accepted("pool", h(777), 104)));

    // The pool submitted B1 twice (a retry) and B2 once.
    lab.pool.push(ev(at(30.0) + 30 * MS, submitted(b1, 101)));
    lab.pool.push(ev(at(30.0) + 35 * MS, submitted(b1, 101)));
    lab.pool.push(ev(at(60.0) + 20 * MS, submitted(b2, 103)));
    lab
}

#[test]
fn blocks_found_submitted_and_orphaned() {
    let r = chain().results();
    assert_eq!(r.blocks.found, 2);
    assert_eq!(r.blocks.submitted, 2);
    assert_eq!(r.blocks.orphaned, 1);
    assert_eq!(r.blocks.orphan_undetermined, 0);
}

#[test]
fn block_propagation_ends_at_the_job_source_node() {
    let r = chain().results();
    let p = &r.block_propagation_ms;
    assert_eq!(p.n, 2);
    assert_eq!(p.max, Some(40.0));
    assert!(near(p.mean.unwrap(), 32.5, 1e-12), "{p:?}");
    assert_eq!(p.clusters, 2);
}

#[test]
fn a_block_on_the_final_chain_is_not_orphaned() {
    let mut lab = chain();
    // The network reorganizes onto B2's branch: 5 on B2 at height 104, then 6 at 105.
    lab.simnet
        .push(ev(at(80.0), tip("network", h(5), 104, h(502))));
    lab.simnet
        .push(ev(at(90.0), tip("network", h(6), 105, h(5))));
    let r = lab.results();
    assert_eq!(r.blocks.found, 2);
    assert_eq!(r.blocks.orphaned, 0);
}

#[test]
fn no_blocks_leave_propagation_absent() {
    let r = Lab::new().results();
    assert_eq!(r.blocks.found, 0);
    assert_eq!(r.block_propagation_ms.n, 0);
    assert!(r.block_propagation_ms.absent_reason.is_some());
}

#[test]
fn a_pool_without_events_submitted_the_blocks_a_node_judged_from_its_devices() {
    let mut lab = chain();
    lab.pool_logged = false;
    // B4, a share of these devices, was submitted and refused; h(778), another
    // configuration's, was refused too.
    let b4 = h(504);
    lab.fleets[0].push(ev(at(75.0), sent(6, 1, 8.0, Some(b4))));
    for (hash, t) in [(b4, 75.05), (h(778), 76.0)] {
        lab.simnet.push(ev(
            at(t),
            BlockResult {
                accepted: false,
                reason: ShortStr::new("bad-txnmrklroot"),
                ..accepted("pool", hash, 104)
            },
        ));
    }
    lab.simnet.sort_by_key(|e| e.ts_ns);
    let r = lab.results();
    // B1 and B2 were accepted from these devices after the warm-up and B4 refused; B3 was
    // found in the warm-up; h(777) and h(778) are another configuration's.
    assert_eq!(r.blocks.found, 2);
    assert_eq!(r.blocks.submitted, 3);
}
