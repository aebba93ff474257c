//! Test vectors from real mainnet blocks: the genesis block, block 100000 (pre-segwit, four
//! transactions) and block 542213 (segwit, four transactions, witness commitment).
//!
//! The raw blocks live in `tests/data/` (see its README for where each came from). The `bitcoin`
//! crate only decodes them into transactions and serves as an independent cross-check: every
//! asserted value is computed with this crate's primitives. Mainnet proof of work authenticates
//! the data: a header whose hash meets its nBits and whose merkle root matches the transactions
//! cannot be made up.

use bitcoin::consensus::{deserialize, serialize};
use bitcoin::{Amount, Block, Transaction, Witness};
use primitives::coinbase::{
    bip34_height_push, parse_bip34_height, witness_commitment, witness_commitment_script,
    CoinbaseInfo, CoinbaseParts, WITNESS_RESERVED_VALUE,
};
use primitives::hash::sha256d_header;
use primitives::merkle::merkle_step;
use primitives::share::{
    ExtendedShare, JobHeader, MinerChoice, ShareCheck, StandardShare, Sv1Share,
};
use primitives::{
    coinbase_merkle_branch, merkle_root, merkle_root_from_branch, sha256d, CompactTarget,
    Difficulty, Hash256, Header, HeaderMidstate, Target, Work,
};

/// What is known about one block, in the forms RPC and explorers print (hashes in display order).
struct Vector {
    name: &'static str,
    hex: &'static str,
    height: u32,
    hash: &'static str,
    prev_hash: &'static str,
    merkle_root: &'static str,
    version: u32,
    time: u32,
    bits: u32,
    nonce: u32,
    /// The target of `bits`, big-endian hex.
    target: &'static str,
    /// Network difficulty as Bitcoin Core's `getblock` reports it.
    difficulty: f64,
    txids: &'static [&'static str],
    coinbase_value: Amount,
    /// Where the miner's extranonce sits in the coinbase scriptSig: offset into the scriptSig,
    /// then how many bytes we treat as SV1 extranonce1 and as extranonce2.
    extranonce: (usize, usize, usize),
    segwit: bool,
}

const GENESIS: Vector = Vector {
    name: "genesis",
    hex: include_str!("data/block_0_genesis.hex"),
    height: 0,
    hash: "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
    prev_hash: "0000000000000000000000000000000000000000000000000000000000000000",
    merkle_root: "4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b",
    version: 1,
    time: 1_231_006_505,
    bits: 0x1d00_ffff,
    nonce: 2_083_236_893,
    target: "00000000ffff0000000000000000000000000000000000000000000000000000",
    difficulty: 1.0,
    txids: &["4a5e1e4baab89f3a32518a88c31bc87f618f76673e2cc77ab2127b7afdeda33b"],
    coinbase_value: Amount::from_sat(5_000_000_000),
    // scriptSig: push(ffff001d) push(04) push("The Times 03/Jan/2009 ..."): the client's
    // extraNonce is the one-byte push `01 04`.
    extranonce: (5, 1, 1),
    segwit: false,
};

const BLOCK_100000: Vector = Vector {
    name: "block 100000",
    hex: include_str!("data/block_100000.hex"),
    height: 100_000,
    hash: "000000000003ba27aa200b1cecaad478d2b00432346c3f1f3986da1afd33e506",
    prev_hash: "000000000002d01c1fccc21636b607dfd930d31d01c3a62104612a1719011250",
    merkle_root: "f3e94742aca4b5ef85488dc37c06c3282295ffec960994b2c0d5ac2a25a95766",
    version: 1,
    time: 1_293_623_863,
    bits: 0x1b04_864c,
    nonce: 274_148_111,
    target: "000000000004864c000000000000000000000000000000000000000000000000",
    difficulty: 14484.162361225399,
    txids: &[
        "8c14f0db3df150123e6f3dbbf30f8b955a8249b62ac1d1ff16284aefa3d06d87",
        "fff2525b8931402dd09222c50775608f75787bd2b87e56995a7bdd30f79702c4",
        "6359f0868171b1d194cbee1af2f16ea598ae8fad666d9b012c8ed2b79a236ec4",
        "e9a66845e05d5abc0ad04ec80f774a7e585c6e8db975962d069a522137b80c1d",
    ],
    coinbase_value: Amount::from_sat(5_000_000_000),
    // scriptSig: push(4c86041b) push(0602): the extraNonce is the two-byte push's payload.
    extranonce: (6, 1, 1),
    segwit: false,
};

const BLOCK_542213: Vector = Vector {
    name: "block 542213",
    hex: include_str!("data/block_542213.hex"),
    height: 542_213,
    hash: "000000000000000000143a2c56c0214236dadfd30df41d4a0345492ad6d861ec",
    prev_hash: "000000000000000000085a38ccf9c046c51b96add547c466ccba3612b1eb8089",
    merkle_root: "64a8b69cb7100430aec35825d54a48f4434f3db52dff8a02709aee3a659b5e13",
    version: 0x2000_0000,
    time: 1_537_429_727,
    bits: 0x1728_19a1,
    nonce: 31_692_307,
    target: "0000000000000000002819a10000000000000000000000000000000000000000",
    difficulty: 7_019_199_231_177.173,
    txids: &[
        "c399a9d747a422c9fc9261934f96c406cec3ca136280812f8abb8a3b9fdd868d",
        "66beaceb4be99da1e9824448231ab4fd37bacaee912381e779b37cf0e1dadad7",
        "6c6e3849acf1b570db352dc08f7776e99c344a56fbb2f019e1865d1b6e044889",
        "5b211bc589cbdf5ad86cab1e2fe91f01c8ab934d21536b35864d30a3ff778456",
    ],
    // 12.5 BTC subsidy plus 4874 sat of fees.
    coinbase_value: Amount::from_sat(1_250_004_874),
    // scriptSig (80 bytes): BIP34 height, "Mined by AntPool9; " tag, a merged-mining commitment
    // (fabe6d6d...), then 8 bytes that are the pool's extranonce1 (4) and the miner's
    // extranonce2 (4).
    extranonce: (72, 4, 4),
    segwit: true,
};

const ALL: [&Vector; 3] = [&GENESIS, &BLOCK_100000, &BLOCK_542213];

/// A vector with its bytes decoded.
struct Loaded {
    v: &'static Vector,
    raw: Vec<u8>,
    block: Block,
}

fn load(v: &'static Vector) -> Loaded {
    let raw = hex::decode(v.hex.trim()).unwrap_or_else(|e| panic!("{}: bad hex: {e}", v.name));
    // `deserialize` refuses trailing bytes, so the whole file is one block.
    let block: Block = deserialize(&raw).unwrap_or_else(|e| panic!("{}: {e}", v.name));
    assert_eq!(
        serialize(&block),
        raw,
        "{}: re-serializes byte for byte",
        v.name
    );
    Loaded { v, raw, block }
}

fn all() -> Vec<Loaded> {
    ALL.iter().map(|v| load(v)).collect()
}

fn display(s: &str) -> Hash256 {
    Hash256::from_display_hex(s).expect("64 hex digits")
}

impl Loaded {
    fn header_bytes(&self) -> [u8; 80] {
        self.raw[..80].try_into().expect("80 bytes")
    }

    fn header(&self) -> Header {
        Header::from_bytes(&self.header_bytes())
    }

    /// Txids computed here: SHA-256d of each transaction's legacy (witness-free) serialization.
    fn txids(&self) -> Vec<Hash256> {
        self.block
            .txdata
            .iter()
            .map(|tx| {
                let ours = sha256d(&legacy_serialization(tx));
                assert_eq!(ours, Hash256::from(tx.compute_txid()), "{}", self.v.name);
                ours
            })
            .collect()
    }

    fn coinbase(&self) -> &Transaction {
        &self.block.txdata[0]
    }

    /// The coinbase's merkle branch, from the txids computed here.
    fn coinbase_branch(&self) -> Vec<Hash256> {
        coinbase_merkle_branch(&self.txids()[1..])
    }
}

/// The serialization a txid commits to: the transaction without its witnesses.
fn legacy_serialization(tx: &Transaction) -> Vec<u8> {
    let mut stripped = tx.clone();
    for input in &mut stripped.input {
        input.witness = Witness::new();
    }
    serialize(&stripped)
}

/// The real coinbase cut as a pool would send it in `mining.notify`: coinb1, extranonce1,
/// extranonce2, coinb2 (legacy serialization, so the four concatenate to what the txid hashes).
struct CoinbaseSplit {
    coinb1: Vec<u8>,
    extranonce1: Vec<u8>,
    extranonce2: Vec<u8>,
    coinb2: Vec<u8>,
}

impl CoinbaseSplit {
    fn of(l: &Loaded) -> Self {
        let legacy = legacy_serialization(l.coinbase());
        let script_sig = l.coinbase().input[0].script_sig.as_bytes();
        // version (4) | input count (1) | null outpoint (36) | scriptSig length (1) | scriptSig
        const SCRIPT_SIG_AT: usize = 4 + 1 + 36 + 1;
        assert_eq!(legacy[SCRIPT_SIG_AT - 1] as usize, script_sig.len());
        assert_eq!(
            &legacy[SCRIPT_SIG_AT..SCRIPT_SIG_AT + script_sig.len()],
            script_sig
        );
        let (offset, en1, en2) = l.v.extranonce;
        assert!(offset + en1 + en2 <= script_sig.len(), "{}", l.v.name);
        let a = SCRIPT_SIG_AT + offset;
        let b = a + en1;
        let c = b + en2;
        CoinbaseSplit {
            coinb1: legacy[..a].to_vec(),
            extranonce1: legacy[a..b].to_vec(),
            extranonce2: legacy[b..c].to_vec(),
            coinb2: legacy[c..].to_vec(),
        }
    }

    fn extranonce(&self) -> Vec<u8> {
        [&self.extranonce1[..], &self.extranonce2[..]].concat()
    }

    /// The SV1 share of `job` on this coinbase and `branch`, as `miner` chose.
    fn sv1_share<'a>(
        &'a self,
        job: JobHeader,
        branch: &'a [Hash256],
        miner: MinerChoice,
    ) -> Sv1Share<'a> {
        Sv1Share {
            job,
            coinb1: &self.coinb1,
            extranonce1: &self.extranonce1,
            extranonce2: &self.extranonce2,
            coinb2: &self.coinb2,
            merkle_branch: branch,
            miner,
        }
    }
}

#[test]
fn vectors_decode_and_describe_the_expected_blocks() {
    for l in all() {
        let v = l.v;
        assert_eq!(l.block.txdata.len(), v.txids.len(), "{}", v.name);
        assert!(l.coinbase().is_coinbase(), "{}", v.name);
        assert_eq!(
            l.block
                .txdata
                .iter()
                .any(|tx| !tx.input[0].witness.is_empty()),
            v.segwit,
            "{}",
            v.name
        );
    }
}

#[test]
fn header_round_trips_and_hashes_to_the_known_block_hash() {
    for l in all() {
        let v = l.v;
        let bytes = l.header_bytes();
        let header = Header::from_bytes(&bytes);
        assert_eq!(
            header.to_bytes(),
            bytes,
            "{}: re-serializes to the same 80 bytes",
            v.name
        );

        assert_eq!(header.version, v.version, "{}", v.name);
        assert_eq!(header.prev_hash, display(v.prev_hash), "{}", v.name);
        assert_eq!(header.merkle_root, display(v.merkle_root), "{}", v.name);
        assert_eq!(header.time, v.time, "{}", v.name);
        assert_eq!(
            header.bits,
            CompactTarget::from_consensus(v.bits),
            "{}",
            v.name
        );
        assert_eq!(header.nonce, v.nonce, "{}", v.name);

        let hash = header.block_hash();
        assert_eq!(hash.to_string(), v.hash, "{}", v.name);
        assert_eq!(hash, display(v.hash), "{}", v.name);
        // The three ways of hashing a header agree.
        assert_eq!(sha256d(&bytes), hash, "{}", v.name);
        assert_eq!(sha256d_header(&bytes), hash, "{}", v.name);
        let midstate = HeaderMidstate::new(bytes[..64].try_into().unwrap());
        assert_eq!(
            midstate.finish(bytes[64..].try_into().unwrap()),
            hash,
            "{}",
            v.name
        );

        // Cross-check with the bitcoin crate, in both directions.
        assert_eq!(Header::from(l.block.header), header, "{}", v.name);
        assert_eq!(
            bitcoin::block::Header::from(header),
            l.block.header,
            "{}",
            v.name
        );
        assert_eq!(Hash256::from(l.block.block_hash()), hash, "{}", v.name);
    }
}

#[test]
fn bits_decode_to_a_target_the_block_hash_meets() {
    for l in all() {
        let v = l.v;
        let header = l.header();
        let target = Target::from_compact(header.bits).expect("valid nBits");
        assert_eq!(target.to_string(), v.target, "{}", v.name);
        assert!(
            target.is_met_by(&header.block_hash().0),
            "{}: proof of work",
            v.name
        );
        // A target just below the hash is not met: the comparison is a real one.
        let hash_value = Target::from_le_bytes(&header.block_hash().0).as_u256();
        let just_below = Target::from_u256(hash_value.wrapping_sub(primitives::U256::ONE));
        assert!(!just_below.is_met_by(&header.block_hash().0), "{}", v.name);

        // bits -> target -> bits.
        assert_eq!(
            target.to_compact_lossy(),
            CompactTarget::from_consensus(v.bits),
            "{}",
            v.name
        );

        // Same target, work and proof-of-work verdict as the bitcoin crate.
        let theirs = l.block.header.target();
        assert_eq!(Target::from(theirs), target, "{}", v.name);
        assert_eq!(bitcoin::Target::from(target), theirs, "{}", v.name);
        l.block
            .header
            .validate_pow(theirs)
            .unwrap_or_else(|e| panic!("{}: bitcoin crate rejects the PoW: {e}", v.name));
        assert_eq!(
            Work::from_target(target).as_u256().to_le_bytes(),
            l.block.header.work().to_le_bytes(),
            "{}",
            v.name
        );
    }
}

#[test]
fn network_difficulty_matches_the_known_values() {
    for l in all() {
        let v = l.v;
        let target = Target::from_compact(l.header().bits).unwrap();
        let d = Difficulty::from_target(target);
        // These targets have a 24-bit mantissa, so the quotient is one correctly rounded f64
        // division: it equals the value Core prints exactly.
        assert_eq!(d.as_f64(), v.difficulty, "{}", v.name);
        assert_eq!(d.as_f64(), l.block.header.difficulty_float(), "{}", v.name);
        // Back to a target: within one part in 10^12 of the real one (exact for difficulty 1).
        let back = d.to_target();
        let rel =
            (back.as_u256().to_f64() - target.as_u256().to_f64()).abs() / target.as_u256().to_f64();
        assert!(rel < 1e-12, "{}: {back} vs {target}", v.name);
    }
    assert_eq!(
        Difficulty::ONE.to_target(),
        Target::from_compact(CompactTarget::from_consensus(GENESIS.bits)).unwrap()
    );
}

#[test]
fn merkle_root_of_the_txids_matches_the_header() {
    for l in all() {
        let v = l.v;
        let txids = l.txids();
        let expected: Vec<Hash256> = v.txids.iter().map(|t| display(t)).collect();
        assert_eq!(txids, expected, "{}", v.name);
        let root = merkle_root(&txids);
        assert_eq!(root, l.header().merkle_root, "{}", v.name);
        assert_eq!(root.to_string(), v.merkle_root, "{}", v.name);
        assert_eq!(
            Some(root),
            l.block.compute_merkle_root().map(Hash256::from),
            "{}",
            v.name
        );
        assert!(l.block.check_merkle_root(), "{}", v.name);
    }
    // A one-transaction block's merkle root is its coinbase txid.
    let g = load(&GENESIS);
    assert_eq!(g.header().merkle_root, g.txids()[0]);
}

#[test]
fn coinbase_merkle_branch_reproduces_the_merkle_root() {
    for l in all() {
        let v = l.v;
        let txids = l.txids();
        let branch = coinbase_merkle_branch(&txids[1..]);
        let expected_depth = match txids.len() {
            1 => 0,
            n => (n as f64).log2().ceil() as usize,
        };
        assert_eq!(branch.len(), expected_depth, "{}", v.name);
        assert_eq!(
            merkle_root_from_branch(txids[0], &branch),
            l.header().merkle_root,
            "{}",
            v.name
        );
        // With four leaves the branch is: the coinbase's sibling, then the right pair's node.
        if txids.len() == 4 {
            assert_eq!(branch[0], txids[1], "{}", v.name);
            assert_eq!(branch[1], merkle_step(&txids[2], &txids[3]), "{}", v.name);
        }
        // Any other coinbase txid reaches another root.
        let mut other = txids[0];
        other.0[0] ^= 1;
        assert_ne!(
            merkle_root_from_branch(other, &branch),
            l.header().merkle_root,
            "{}",
            v.name
        );
    }
    assert!(coinbase_merkle_branch(&[]).is_empty());
}

#[test]
fn pre_bip34_coinbases_start_with_a_push_of_nbits_not_a_height() {
    // BIP34 (height first in the coinbase scriptSig) applies from version-2 blocks, mainnet height
    // 227931. The early client's coinbase began with a 4-byte push of the block's nBits instead,
    // which `parse_bip34_height` cannot tell from a height: it reads the nBits value. Callers must
    // only trust the result for blocks that follow BIP34.
    for (v, nbits) in [(&GENESIS, 0x1d00_ffffu32), (&BLOCK_100000, 0x1b04_864c)] {
        let l = load(v);
        let info = CoinbaseInfo::parse(l.coinbase()).unwrap();
        assert_eq!(info.script_sig[0], 0x04, "{}: a 4-byte push", v.name);
        assert_eq!(
            parse_bip34_height(&info.script_sig),
            Some(nbits),
            "{}",
            v.name
        );
        assert_eq!(info.height, Some(nbits), "{}", v.name);
        assert_eq!(
            nbits, v.bits,
            "{}: the push is the block's own nBits",
            v.name
        );
        assert_ne!(info.height, Some(v.height), "{}", v.name);
        // The bitcoin crate refuses to read a BIP34 height from a version-1 block.
        assert!(l.block.bip34_block_height().is_err(), "{}", v.name);
    }
}

#[test]
fn coinbase_parse_reads_value_and_no_witness_fields_before_segwit() {
    for v in [&GENESIS, &BLOCK_100000] {
        let l = load(v);
        let info = CoinbaseInfo::parse(l.coinbase()).unwrap();
        assert_eq!(info.value_out, v.coinbase_value, "{}", v.name);
        assert_eq!(info.witness_commitment, None, "{}", v.name);
        assert_eq!(info.witness_reserved_value, None, "{}", v.name);
        assert_eq!(
            info.script_sig,
            l.coinbase().input[0].script_sig.as_bytes(),
            "{}",
            v.name
        );
        // The block's other transactions are not coinbases.
        for tx in &l.block.txdata[1..] {
            assert!(CoinbaseInfo::parse(tx).is_err(), "{}", v.name);
        }
    }
    let genesis = CoinbaseInfo::parse(load(&GENESIS).coinbase()).unwrap();
    assert!(genesis.script_sig.windows(9).any(|w| w == b"The Times"));
}

#[test]
fn segwit_coinbase_parse_reads_bip34_height_value_and_witness_fields() {
    let l = load(&BLOCK_542213);
    let v = l.v;
    let info = CoinbaseInfo::parse(l.coinbase()).unwrap();
    assert_eq!(info.height, Some(v.height));
    assert_eq!(&info.script_sig[..4], &bip34_height_push(v.height)[..]);
    assert_eq!(l.block.bip34_block_height().unwrap(), u64::from(v.height));
    assert_eq!(info.value_out, v.coinbase_value);
    assert!(info
        .script_sig
        .windows(16)
        .any(|w| w == b"Mined by AntPool"));
    assert_eq!(
        info.witness_commitment,
        Some(
            Hash256::from_internal_hex(
                "4a657fcaa2149342376247e2e283a55a6b92dcc35d4d89e4ac7b74488cb63be2"
            )
            .unwrap()
        )
    );
    // The reserved value is the coinbase input's witness: one 32-byte item, all zeros.
    assert_eq!(info.witness_reserved_value, Some(WITNESS_RESERVED_VALUE));
    assert_eq!(
        l.coinbase().input[0].witness.to_vec(),
        vec![WITNESS_RESERVED_VALUE.to_vec()]
    );
}

#[test]
fn witness_commitment_recomputes_from_the_blocks_wtxids() {
    let l = load(&BLOCK_542213);
    let txids = l.txids();
    // wtxid: SHA-256d of the full serialization, witnesses included.
    let wtxids: Vec<Hash256> = l.block.txdata[1..]
        .iter()
        .map(|tx| {
            let ours = sha256d(&serialize(tx));
            assert_eq!(ours, Hash256::from(tx.compute_wtxid()));
            ours
        })
        .collect();
    // Transaction 2 spends a P2SH-P2WPKH output, so its wtxid differs; the other two are legacy.
    assert_eq!(wtxids[0], txids[1]);
    assert_ne!(wtxids[1], txids[2]);
    assert_eq!(wtxids[2], txids[3]);

    let info = CoinbaseInfo::parse(l.coinbase()).unwrap();
    let reserved = info.witness_reserved_value.expect("segwit coinbase");
    let commitment = witness_commitment(&wtxids, &reserved);
    assert_eq!(Some(commitment), info.witness_commitment);
    // The output script is what the coinbase carries, byte for byte (it is the last output).
    let last = l.coinbase().output.last().unwrap();
    assert_eq!(last.value, Amount::ZERO);
    assert_eq!(
        last.script_pubkey.as_bytes(),
        &witness_commitment_script(commitment)[..]
    );
    assert!(l.block.check_witness_commitment());

    // The coinbase's own wtxid is not a leaf: using it instead of zero breaks the commitment, and
    // so does leaving out a transaction or using txids for wtxids.
    let coinbase_wtxid = sha256d(&serialize(l.coinbase()));
    let with_coinbase = [&[coinbase_wtxid][..], &wtxids[..]].concat();
    let wrong = sha256d(&[merkle_root(&with_coinbase).0, reserved].concat());
    assert_ne!(wrong, commitment);
    let right = sha256d(
        &[
            merkle_root(&[&[Hash256::ZERO][..], &wtxids[..]].concat()).0,
            reserved,
        ]
        .concat(),
    );
    assert_eq!(right, commitment);
    assert_ne!(witness_commitment(&wtxids[..2], &reserved), commitment);
    assert_ne!(witness_commitment(&txids[1..], &reserved), commitment);
}

fn job_of(h: &Header) -> JobHeader {
    JobHeader {
        version: h.version,
        prev_hash: h.prev_hash,
        bits: h.bits,
    }
}

fn miner(h: &Header, nonce: u32) -> MinerChoice {
    MinerChoice {
        ntime: h.time,
        nonce,
        version: None,
        version_mask: 0,
    }
}

/// Checks a share at the block's own `nonce` (it hashes to the real block, which meets the
/// network target) and at `nonce + 1` (not a block); returns both checks.
fn real_and_next(
    v: &Vector,
    nonce: u32,
    check: impl Fn(u32) -> ShareCheck,
) -> (ShareCheck, ShareCheck) {
    let real = check(nonce);
    assert_eq!(real.hash.to_string(), v.hash, "{}", v.name);
    assert!(real.meets_network_target, "{}", v.name);
    let off = check(nonce.wrapping_add(1));
    assert!(
        !off.meets_network_target,
        "{}: nonce + 1 is not a block",
        v.name
    );
    (real, off)
}

#[test]
fn sv1_share_check_with_real_data_finds_the_real_block() {
    for l in all() {
        let v = l.v;
        let header = l.header();
        let split = CoinbaseSplit::of(&l);
        let branch = l.coinbase_branch();
        let share = |nonce: u32| split.sv1_share(job_of(&header), &branch, miner(&header, nonce));

        let (check, off) = real_and_next(v, header.nonce, |n| {
            share(n).check(&Target::DIFFICULTY_1).unwrap()
        });
        assert_eq!(check.header, header, "{}", v.name);
        assert!(check.meets_share_target, "{}", v.name);
        assert_ne!(off.hash, check.hash, "{}", v.name);
        // Share target equal to the network target: still met.
        let network = Target::from_compact(header.bits).unwrap();
        assert!(
            share(header.nonce)
                .check(&network)
                .unwrap()
                .meets_share_target,
            "{}",
            v.name
        );

        // A different extranonce2 changes the coinbase, so the merkle root, so the hash.
        let mut en2 = split.extranonce2.clone();
        en2[0] ^= 0xff;
        let other = Sv1Share {
            extranonce2: &en2,
            ..share(header.nonce)
        }
        .check(&Target::DIFFICULTY_1)
        .unwrap();
        assert_ne!(other.header.merkle_root, header.merkle_root, "{}", v.name);
        assert!(!other.meets_network_target, "{}", v.name);
    }
}

#[test]
fn sv1_version_rolling_recovers_the_real_version() {
    // BIP310: the pool's job carries other bits under the mask; the miner's submitted
    // version_bits replace them, giving back the version the real block was mined with.
    let l = load(&BLOCK_542213);
    let header = l.header();
    let split = CoinbaseSplit::of(&l);
    let branch = l.coinbase_branch();
    let mask = 0x1fff_e000;
    let job = JobHeader {
        version: header.version | 0x0000_6000,
        ..job_of(&header)
    };
    let miner = MinerChoice {
        version: Some(header.version & mask),
        version_mask: mask,
        ..miner(&header, header.nonce)
    };
    let check = split
        .sv1_share(job, &branch, miner)
        .check(&Target::DIFFICULTY_1)
        .unwrap();
    assert_eq!(check.header.version, 0x2000_0000);
    assert_eq!(check.hash.to_string(), BLOCK_542213.hash);
    assert!(check.meets_network_target);
}

#[test]
fn standard_share_check_with_real_data_finds_the_real_block() {
    for l in all() {
        let v = l.v;
        let header = l.header();
        let share = |nonce: u32| StandardShare {
            job: job_of(&header),
            merkle_root: header.merkle_root,
            miner: miner(&header, nonce),
        };
        let (check, off) = real_and_next(v, header.nonce, |n| {
            share(n).check(&Target::DIFFICULTY_1).unwrap()
        });
        assert_eq!(check.header, header, "{}", v.name);
        assert!(check.meets_share_target, "{}", v.name);
        assert_ne!(off.hash, check.hash, "{}", v.name);
    }
}

#[test]
fn extended_share_check_with_real_data_finds_the_real_block() {
    for l in all() {
        let v = l.v;
        let header = l.header();
        let split = CoinbaseSplit::of(&l);
        let path = l.coinbase_branch();
        let share = |nonce: u32| ExtendedShare {
            job: job_of(&header),
            coinbase_prefix: &split.coinb1,
            extranonce_prefix: &split.extranonce1,
            extranonce: &split.extranonce2,
            coinbase_suffix: &split.coinb2,
            merkle_path: &path,
            miner: miner(&header, nonce),
        };
        real_and_next(v, header.nonce, |n| {
            share(n).check(&Target::DIFFICULTY_1).unwrap()
        });
    }
}

#[test]
fn coinbase_parts_rebuild_the_real_coinbase_around_its_extranonce() {
    for l in all() {
        let v = l.v;
        let split = CoinbaseSplit::of(&l);
        let extranonce = split.extranonce();
        let parts = CoinbaseParts {
            prefix: split.coinb1.clone(),
            suffix: split.coinb2.clone(),
            extranonce_len: extranonce.len(),
            segwit: v.segwit,
        };
        assert_eq!(parts.txid(&extranonce).unwrap(), l.txids()[0], "{}", v.name);
        assert_eq!(
            parts.serialize(&extranonce).unwrap(),
            legacy_serialization(l.coinbase()),
            "{}",
            v.name
        );
        // With the witness reserved value added back for the segwit block, the very transaction.
        assert_eq!(
            &parts.transaction(&extranonce).unwrap(),
            l.coinbase(),
            "{}",
            v.name
        );
    }
}
