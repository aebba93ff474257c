//! Submitting blocks: one that becomes the tip, and one test per reason a block is turned down.

mod common;

use common::*;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::Block;
use primitives::{sha256d, CompactTarget, Hash256};
use simnet::{BlockSource, Network, Output, SubmitError};

fn fresh(seed: u64) -> Network {
    let mut net = Network::new(submit_config(seed)).unwrap();
    run(&mut net, secs(5));
    net
}

/// Submits and checks the verdict both ways it is reported.
fn expect_rejected(net: &mut Network, raw: &[u8], want: SubmitError) {
    let tip = net.chain().tip_hash();
    let at = net.now();
    common::first_node(net, at); // drain earlier outputs
    assert_eq!(net.submit_block(at, raw).unwrap_err(), want);
    let outs = common::first_node(net, at);
    assert!(
        outs.iter().any(|o| matches!(o,
            Output::BlockVerdict { result: Err(e), .. } if *e == want)),
        "no verdict {want} in {outs:?}"
    );
    assert!(
        !outs.iter().any(|o| matches!(o, Output::TipChanged { .. })),
        "a rejected block moved the tip"
    );
    assert_eq!(net.chain().tip_hash(), tip);
}

/// Mines `draft` and checks that it is turned down with `want`.
fn expect_draft_rejected(net: &mut Network, draft: &Draft, want: SubmitError) {
    expect_rejected(net, &serialize(&draft.mine()), want);
}

/// Submits `block` now; it must be accepted.
fn accept(net: &mut Network, block: &Block) {
    let at = net.now();
    net.submit_block(at, &serialize(block)).unwrap();
}

#[test]
fn a_good_block_becomes_the_tip_and_a_new_template_follows() {
    let mut net = fresh(1);
    let template = net.template().clone();
    assert!(
        template.tx_count() > 100,
        "the block should carry transactions"
    );
    assert_eq!(template.height, 900_001);
    let block = Draft::from_template(&template).mine();
    let hash: Hash256 = block.block_hash().into();
    let mempool_before = net.mempool().len();

    let at = net.now();
    let accepted = net.submit_block(at, &serialize(&block)).unwrap();
    assert_eq!((accepted.hash, accepted.height), (hash, 900_001));

    let outs = common::first_node(&mut net, at);
    let mut saw = (false, false, false);
    for o in &outs {
        match o {
            Output::BlockVerdict {
                hash: h,
                height,
                result,
                ..
            } => {
                assert_eq!(
                    (*h, *height, result.clone()),
                    (Some(hash), Some(900_001), Ok(()))
                );
                saw.0 = true;
            }
            Output::TipChanged {
                hash: h,
                height,
                prev_hash,
                source,
                at: t,
            } => {
                assert_eq!(*h, hash);
                assert_eq!(*height, 900_001);
                assert_eq!(*prev_hash, template.prev_hash);
                assert_eq!(*source, BlockSource::Submitted);
                assert_eq!(*t, at);
                saw.1 = true;
            }
            Output::TemplateCreated(t) => {
                assert_eq!(t.prev_hash, hash);
                assert_eq!(t.height, 900_002);
                assert!(t.id > template.id);
                assert_eq!(t.created_at, at);
                saw.2 = true;
            }
            Output::Mempool(e) => panic!("mempool events are off unless asked for: {e:?}"),
        }
    }
    assert_eq!(saw, (true, true, true), "{outs:?}");
    assert_eq!(net.chain().tip_hash(), hash);
    assert_eq!(net.height(), 900_001);
    assert_eq!(net.block_hash(900_001), Some(hash));
    assert_eq!(net.template().prev_hash, hash);
    // Its transactions left the mempool; what is stored is the block we sent.
    assert_eq!(net.mempool().len(), mempool_before - template.tx_count());
    assert!(template.txids.iter().all(|t| !net.mempool().contains(t)));
    let stored = net.block(&hash).unwrap();
    assert_eq!(stored.fees, template.total_fees);
    assert_eq!(stored.serialize(), serialize(&block));
    assert!(net.median_time_past() > 0);
}

#[test]
fn a_legacy_coinbase_is_completed_with_the_reserved_value_as_core_does() {
    let mut net = fresh(2);
    let mut draft = Draft::from_template(net.template());
    draft.strip_coinbase_witness = true;
    let block = draft.mine();
    assert!(block.txdata[0].input[0].witness.is_empty());
    accept(&mut net, &block);
    let stored = net.tip();
    assert_eq!(stored.coinbase.input[0].witness.len(), 1);
}

#[test]
fn high_hash() {
    let mut net = fresh(3);
    let block = Draft::from_template(net.template()).mine_failing();
    expect_rejected(&mut net, &serialize(&block), SubmitError::HighHash);
}

#[test]
fn bad_txnmrklroot() {
    let mut net = fresh(4);
    let mut draft = Draft::from_template(net.template());
    draft.merkle_override = Some(sha256d(b"not the root"));
    expect_draft_rejected(&mut net, &draft, SubmitError::BadMerkleRoot);
}

#[test]
fn bad_cb_height() {
    let mut net = fresh(5);
    let template = net.template().clone();
    for wrong in [template.height - 1, template.height + 1, 0] {
        let mut draft = Draft::from_template(&template);
        draft.spec.height = wrong;
        expect_draft_rejected(&mut net, &draft, SubmitError::BadCoinbaseHeight);
    }
}

#[test]
fn bad_cb_amount() {
    let mut net = fresh(6);
    let template = net.template().clone();
    let mut draft = Draft::from_template(&template);
    let value = template.coinbase_value + 1;
    draft.spec.payouts[0].value = primitives::bitcoin::Amount::from_sat(value);
    expect_draft_rejected(&mut net, &draft, SubmitError::BadCoinbaseAmount);
    // Exactly subsidy + fees is fine, and so is less.
    let mut draft = Draft::from_template(&template);
    draft.spec.payouts[0].value =
        primitives::bitcoin::Amount::from_sat(template.coinbase_value - 1);
    accept(&mut net, &draft.mine());
}

#[test]
fn bad_witness_merkle_match() {
    let mut net = fresh(7);
    let mut draft = Draft::from_template(net.template());
    draft.commitment_override = Some(sha256d(b"wrong commitment"));
    expect_draft_rejected(&mut net, &draft, SubmitError::BadWitnessMerkle);
    // Transactions out of template order change the wtxid tree: also a mismatch, once the
    // merkle root is recomputed.
    let mut draft = Draft::from_template(net.template());
    let correct = draft.coinbase();
    let commitment = correct.output.last().unwrap().script_pubkey.as_bytes()[6..38].to_vec();
    draft.commitment_override = Some(Hash256(commitment.try_into().unwrap()));
    draft.txs.swap(0, 1);
    expect_draft_rejected(&mut net, &draft, SubmitError::BadWitnessMerkle);
}

#[test]
fn duplicate() {
    let mut net = fresh(8);
    let block = Draft::from_template(net.template()).mine();
    accept(&mut net, &block);
    expect_rejected(&mut net, &serialize(&block), SubmitError::Duplicate);
}

#[test]
fn inconclusive_for_a_stale_block_then_a_reorg_when_its_branch_grows() {
    let mut net = fresh(9);
    let template = net.template().clone();
    let winner = Draft::from_template(&template).mine();
    // A competing block on the same parent: empty, another extranonce.
    let mut rival = Draft::from_template(&template);
    rival.txs.clear();
    rival.spec.payouts[0].value = primitives::bitcoin::Amount::from_sat(template.subsidy);
    rival.extranonce = vec![1; 8];
    let rival_block = rival.mine();
    let rival_hash: Hash256 = rival_block.block_hash().into();

    let at = net.now();
    let winner_hash = net.submit_block(at, &serialize(&winner)).unwrap().hash;
    expect_rejected(
        &mut net,
        &serialize(&rival_block),
        SubmitError::Inconclusive,
    );
    assert!(net.chain().contains(&rival_hash));
    assert!(!net.chain().is_main(&rival_hash));
    // Resubmitting the stale block: we have it.
    expect_rejected(&mut net, &serialize(&rival_block), SubmitError::Duplicate);

    // A child of the rival makes its branch longer: the tip moves over, and the winner's
    // transactions go back to the mempool.
    let mut child = Draft::from_template(&template);
    child.txs.clear();
    child.prev_hash = rival_hash;
    child.spec.height = template.height + 1;
    child.spec.payouts[0].value = primitives::bitcoin::Amount::from_sat(template.subsidy);
    child.time = template.curtime + 1;
    let child_block = child.mine();
    let at = net.now();
    let accepted = net.submit_block(at, &serialize(&child_block)).unwrap();
    assert_eq!(accepted.height, template.height + 1);
    assert_eq!(net.chain().tip_hash(), accepted.hash);
    assert!(net.chain().is_main(&rival_hash));
    assert!(!net.chain().is_main(&winner_hash));
    assert!(template.txids.iter().all(|t| net.mempool().contains(t)));
    let outs = common::first_node(&mut net, at);
    assert!(
        outs.iter().any(|o| matches!(o,
        Output::TipChanged { hash, source: BlockSource::Submitted, .. } if *hash == accepted.hash))
    );
    assert!(outs.iter().any(|o| matches!(o,
        Output::TemplateCreated(t) if t.prev_hash == accepted.hash)));
}

#[test]
fn prev_blk_not_found() {
    let mut net = fresh(10);
    let mut draft = Draft::from_template(net.template());
    draft.prev_hash = sha256d(b"nobody has this block");
    let block = draft.mine();
    let at = net.now();
    assert_eq!(
        net.submit_block(at, &serialize(&block)).unwrap_err(),
        SubmitError::PrevNotFound
    );
    let outs = common::first_node(&mut net, at);
    assert!(outs.iter().any(|o| matches!(
        o,
        Output::BlockVerdict {
            height: None,
            hash: Some(_),
            result: Err(SubmitError::PrevNotFound),
            ..
        }
    )));
}

#[test]
fn undecodable_blocks() {
    let mut net = fresh(11);
    let good = serialize(&Draft::from_template(net.template()).mine());
    for raw in [&b"not a block"[..], &good[..good.len() / 2], &[][..]] {
        expect_rejected(&mut net, raw, SubmitError::Decode);
    }
    assert_eq!(SubmitError::Decode.to_string(), "Block decode failed");
}

#[test]
fn unknown_transactions_are_missing_inputs() {
    let mut net = fresh(12);
    let mut rng = simnet::dist::stream(999, "foreign");
    let foreign = simnet::txgen::build_tx(&mut rng, 200);
    let mut draft = Draft::from_template(net.template());
    draft.txs.push(foreign);
    expect_draft_rejected(&mut net, &draft, SubmitError::MissingInputs);
    // A transaction twice (not adjacent, so the merkle tree is not mutated) is spent twice.
    let mut draft = Draft::from_template(net.template());
    let again = draft.txs[0].clone();
    draft.txs.push(again);
    expect_draft_rejected(&mut net, &draft, SubmitError::MissingInputs);
}

#[test]
fn already_confirmed_transactions_are_spent() {
    let mut net = fresh(13);
    let first = net.template().clone();
    accept(&mut net, &Draft::from_template(&first).mine());
    let mut draft = Draft::from_template(net.template());
    draft.txs.insert(0, first.transactions[0].tx.clone());
    expect_draft_rejected(&mut net, &draft, SubmitError::MissingInputs);
}

#[test]
fn bad_diffbits() {
    let mut net = fresh(14);
    let mut draft = Draft::from_template(net.template());
    draft.bits = CompactTarget::from_consensus(0x207f_ffff); // regtest's: easier than the network's
    expect_draft_rejected(&mut net, &draft, SubmitError::BadDiffBits);
}

#[test]
fn header_times_are_checked() {
    let mut net = fresh(15);
    let template = net.template().clone();
    let mut draft = Draft::from_template(&template);
    draft.time = template.mintime - 1;
    expect_draft_rejected(&mut net, &draft, SubmitError::TimeTooOld);
    let mut draft = Draft::from_template(&template);
    draft.time = (net.unix_time(net.now()) + 2 * 3600 + 1) as u32;
    expect_draft_rejected(&mut net, &draft, SubmitError::TimeTooNew);
    // mintime itself is fine.
    let mut draft = Draft::from_template(&template);
    draft.time = template.mintime;
    accept(&mut net, &draft.mine());
}

#[test]
fn structure_errors() {
    let mut net = fresh(16);
    let template = net.template().clone();
    // No coinbase first.
    let mut block = Draft::from_template(&template).mine();
    block.txdata.remove(0);
    expect_rejected(&mut net, &serialize(&block), SubmitError::NoCoinbase);
    // Old block version.
    let mut draft = Draft::from_template(&template);
    draft.version = 1;
    expect_draft_rejected(&mut net, &draft, SubmitError::BadVersion(1));
    // A coinbase paying more than all the bitcoin there is.
    let mut draft = Draft::from_template(&template);
    draft.spec.payouts[0].value = primitives::bitcoin::Amount::from_sat(u64::MAX);
    expect_draft_rejected(&mut net, &draft, SubmitError::TxOutputNegative);
}

#[test]
fn checks_run_in_cores_order() {
    let mut net = fresh(17);
    let template = net.template().clone();
    // Bad proof of work wins over an unknown parent (CheckBlock runs before the header is
    // placed in the chain).
    let mut draft = Draft::from_template(&template);
    draft.prev_hash = sha256d(b"unknown");
    expect_rejected(
        &mut net,
        &serialize(&draft.mine_failing()),
        SubmitError::HighHash,
    );
    // The merkle root is checked before the parent is looked up.
    draft.merkle_override = Some(sha256d(b"x"));
    expect_draft_rejected(&mut net, &draft, SubmitError::BadMerkleRoot);
    // Height before witness before amount.
    let mut draft = Draft::from_template(&template);
    draft.spec.height += 1;
    draft.commitment_override = Some(sha256d(b"wrong"));
    draft.spec.payouts[0].value =
        primitives::bitcoin::Amount::from_sat(template.coinbase_value + 1);
    expect_draft_rejected(&mut net, &draft, SubmitError::BadCoinbaseHeight);
    draft.spec.height -= 1;
    expect_draft_rejected(&mut net, &draft, SubmitError::BadWitnessMerkle);
    draft.commitment_override = None;
    expect_draft_rejected(&mut net, &draft, SubmitError::BadCoinbaseAmount);
    // Unknown transactions are found before the amount is summed.
    let mut rng = simnet::dist::stream(5, "foreign");
    draft.txs.push(simnet::txgen::build_tx(&mut rng, 300));
    expect_draft_rejected(&mut net, &draft, SubmitError::MissingInputs);
}

#[test]
fn garbage_never_panics() {
    let mut net = fresh(18);
    let good = serialize(&Draft::from_template(net.template()).mine());
    let mut rng = simnet::dist::stream(1, "fuzz");
    use rand_chacha::rand_core::RngCore;
    let mut next = move || rng.next_u64();
    for i in 0..600 {
        let mut raw = good.clone();
        let flips = 1 + (next() % 8) as usize;
        for _ in 0..flips {
            let pos = (next() as usize) % raw.len();
            raw[pos] ^= 1 << (next() % 8);
        }
        if i % 7 == 0 {
            raw.truncate((next() as usize) % raw.len());
        }
        let at = net.now();
        // Any verdict is fine; a panic is not. Only the unmodified block could be accepted.
        if net.submit_block(at, &raw).is_ok() {
            assert_eq!(raw, good);
        }
    }
}
