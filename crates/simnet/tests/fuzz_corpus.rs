//! The fuzz target `submit_block` (crates/simnet/fuzz) on stable: every committed corpus input
//! goes through the same function the fuzzer calls, so a fixed crash stays fixed and CI needs
//! no nightly. Also writes the seed inputs the corpus started from (`--ignored`).

mod common;

use std::path::{Path, PathBuf};

use common::Draft;
use primitives::bitcoin::consensus::serialize;
use primitives::bitcoin::Amount;
use simnet::checks::fuzz;
use simnet::{SimTime, SubmitError};

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/submit_block")
}

#[test]
fn every_corpus_input_goes_through_the_submit_path_without_a_panic() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("the committed corpus")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "corpus has {} files", files.len());
    for f in &files {
        let data = std::fs::read(f).unwrap();
        // A panic names the file through the test's output.
        eprintln!("{}", f.display());
        fuzz::submit(&data);
    }
}

/// Real blocks to start the fuzzer from: valid ones on the fuzzing network (so mutations start
/// past the checks random bytes never pass) and a few mainnet blocks.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let net = fuzz::network();
    let template = net.template().clone();
    assert!(
        template.tx_count() > 1,
        "the mempool still has transactions"
    );

    // A full block on the tip: accepted.
    let full = Draft::from_template(&template).mine();
    // An empty block on the tip's parent: stale, and its child (which the harness mines) is a
    // reorganisation.
    let mut stale = Draft::from_template(&template);
    stale.txs.clear();
    stale.prev_hash = net.tip().header.prev_hash;
    stale.spec.height = template.height - 1;
    stale.spec.payouts[0].value = Amount::from_sat(simnet::block_subsidy(template.height - 1));
    // Legacy coinbase, as some pools submit it: Core adds the reserved value.
    stale.strip_coinbase_witness = true;
    let stale = stale.mine();

    let mut seeds = vec![
        ("seed-template-block", serialize(&full)),
        ("seed-stale-empty-block", serialize(&stale)),
    ];
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../primitives/tests/data");
    for (name, file) in [
        ("seed-mainnet-genesis", "block_0_genesis.hex"),
        ("seed-mainnet-100000", "block_100000.hex"),
        ("seed-mainnet-542213", "block_542213.hex"),
    ] {
        let hex = std::fs::read_to_string(data.join(file)).unwrap();
        seeds.push((name, hex::decode(hex.trim()).unwrap()));
    }
    seeds
}

#[test]
fn the_seeds_reach_acceptance_and_a_reorg() {
    let seeds = seeds();
    let mut net = fuzz::network();
    let now = SimTime::from_secs(60);
    let accepted = net.submit_block(now, &seeds[0].1).unwrap();
    assert_eq!(accepted.height, net.height());
    let mut net = fuzz::network();
    assert_eq!(
        net.submit_block(now, &seeds[1].1),
        Err(SubmitError::Inconclusive)
    );
    for (_, data) in &seeds {
        fuzz::submit(data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    let dir = corpus_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, data) in seeds() {
        std::fs::write(dir.join(name), data).unwrap();
    }
}
