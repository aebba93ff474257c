//! What the translator's tests (and the fan-out bench) share: the settings, the pool's jobs and
//! its own check of a share, and an SV1 miner's view of what the translator wrote it.

#![allow(dead_code)]

use mining::vardiff::VardiffConfig;
use primitives::bitcoin::{Amount, Network};
use primitives::coinbase::{payout_script, CoinbaseSpec, Payout};
use primitives::{
    coinbase_merkle_branch, sha256d, CompactTarget, Difficulty, ExtendedShare, Hash256, JobHeader,
    MinerChoice, Sv1Share, Target,
};
use sv2::messages::mining::{NewExtendedMiningJob, SetNewPrevHash, SubmitSharesExtended};
use translator::{DeviceId, Mode, TranslatorConfig};

/// The network's nBits: difficulty 1, so no share of these tests is a block.
pub const NBITS: u32 = 0x1d00_ffff;

/// The devices' difficulty: one hash in 2^20 meets it.
pub fn device_difficulty() -> Difficulty {
    Difficulty::new(2f64.powi(-20)).unwrap()
}

/// The upstream channel's target: one hash in 2^16 meets it.
pub fn upstream_target() -> Target {
    Difficulty::new(2f64.powi(-16)).unwrap().to_target()
}

/// The translator's settings with vardiff pinned at `d` (so that no device is sent a new
/// difficulty) and each device counted at 1 MH/s.
pub fn pinned(d: Difficulty) -> TranslatorConfig {
    TranslatorConfig {
        start_difficulty: d,
        vardiff: VardiffConfig {
            min: d,
            max: d,
            ..VardiffConfig::default()
        },
        device_hash_rate: 1e6,
        ..TranslatorConfig::default()
    }
}

/// A real coinbase with room for `extranonce_len` bytes of extranonce, tagged `tag`, paying
/// one regtest address.
pub fn coinbase(extranonce_len: usize, tag: Vec<u8>) -> CoinbaseSpec {
    let mut spec = CoinbaseSpec::new(900_000, extranonce_len);
    spec.tag = tag;
    spec.payouts.push(Payout {
        script_pubkey: payout_script(
            "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080",
            Network::Regtest,
        )
        .expect("a valid address"),
        value: Amount::from_sat(312_500_000),
    });
    spec
}

/// An upstream job as a pool builds it: `spec`'s coinbase split around the extranonce, a
/// merkle path over `txids`.
pub fn extended_job(
    channel_id: u32,
    job_id: u32,
    min_ntime: Option<u32>,
    spec: &CoinbaseSpec,
    txids: &[Hash256],
) -> NewExtendedMiningJob {
    let parts = spec.build().expect("a valid coinbase");
    NewExtendedMiningJob {
        channel_id,
        job_id,
        min_ntime,
        version: 0x2000_0000,
        version_rolling_allowed: true,
        merkle_path: coinbase_merkle_branch(txids)
            .into_iter()
            .map(|h| h.0)
            .collect(),
        coinbase_tx_prefix: parts.prefix,
        coinbase_tx_suffix: parts.suffix,
    }
}

/// The tests' job: a coinbase tagged with `tag` around `extranonce_len` bytes, and `txs`
/// transactions besides.
pub fn job(
    channel_id: u32,
    job_id: u32,
    min_ntime: Option<u32>,
    extranonce_len: usize,
    tag: u8,
    txs: u8,
) -> NewExtendedMiningJob {
    let txids: Vec<Hash256> = (0..txs).map(|i| sha256d(&[i, tag])).collect();
    let spec = coinbase(extranonce_len, vec![tag; 4]);
    extended_job(channel_id, job_id, min_ntime, &spec, &txids)
}

/// The prev hash (from `seed`) activating job `job_id` on `channel`.
pub fn prev_hash(channel: u32, job_id: u32, seed: u8) -> SetNewPrevHash {
    SetNewPrevHash {
        channel_id: channel,
        job_id,
        prev_hash: sha256d(&[seed]).0,
        min_ntime: 1_700_000_000,
        nbits: NBITS,
    }
}

/// The SV2 share checked the way the pool checks it, from its job alone: on a channel with
/// `prefix`, the job's prev hash from `seed`. The hash, and whether it meets the upstream
/// target.
pub fn pool_check(
    job: &NewExtendedMiningJob,
    s: &SubmitSharesExtended,
    prefix: &[u8],
    seed: u8,
) -> (Hash256, bool) {
    let path: Vec<Hash256> = job.merkle_path.iter().copied().map(Hash256).collect();
    let p = prev_hash(job.channel_id, job.job_id, seed);
    let c = ExtendedShare {
        job: JobHeader {
            version: job.version,
            prev_hash: Hash256(p.prev_hash),
            bits: CompactTarget::from_consensus(p.nbits),
        },
        coinbase_prefix: &job.coinbase_tx_prefix,
        extranonce_prefix: prefix,
        extranonce: &s.extranonce,
        coinbase_suffix: &job.coinbase_tx_suffix,
        merkle_path: &path,
        miner: MinerChoice {
            ntime: s.ntime,
            nonce: s.nonce,
            version: Some(s.version),
            version_mask: 0x1fff_e000,
        },
    }
    .check(&upstream_target())
    .unwrap();
    (c.hash, c.meets_share_target)
}

/// The first nonce (from `from`) whose header meets `want`, hashing the coinbase exactly as an
/// SV1 miner does from a `mining.notify`; `version_bits` are the bits rolled and their mask.
pub fn grind(
    n: &sv1::Notify<'_>,
    extranonce1: &[u8],
    extranonce2: &[u8],
    version_bits: Option<(u32, u32)>,
    from: u32,
    want: impl Fn(&Hash256) -> bool,
) -> (u32, Hash256) {
    for nonce in from.. {
        let c = Sv1Share {
            job: JobHeader {
                version: n.version,
                prev_hash: n.prev_hash,
                bits: CompactTarget::from_consensus(n.nbits),
            },
            coinb1: &n.coinb1,
            extranonce1,
            extranonce2,
            coinb2: &n.coinb2,
            merkle_branch: &n.merkle_branch,
            miner: MinerChoice {
                ntime: n.ntime,
                nonce,
                version: version_bits.map(|(b, _)| b),
                version_mask: version_bits.map_or(0, |(_, m)| m),
            },
        }
        .check(&Target::MAX)
        .unwrap();
        if want(&c.hash) {
            return (nonce, c.hash);
        }
    }
    unreachable!("some nonce meets an easy target")
}

/// One SV1 miner's view: what the translator told it.
#[derive(Default)]
pub struct Miner {
    pub extranonce1: Vec<u8>,
    pub extranonce2_size: usize,
    pub notifies: Vec<Vec<u8>>,
    pub replies: Vec<String>,
    pub difficulty: Option<f64>,
    pub set_extranonces: usize,
}

impl Miner {
    /// Takes what the translator wrote to device `id`.
    pub fn read(&mut self, t: &mut impl Mode, id: DeviceId) {
        let out = t.device_mut(id).unwrap().take_output();
        for line in out.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let text = std::str::from_utf8(line).unwrap().to_owned();
            let (env, method) = sv1::parse_line(line).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            match method {
                Some(sv1::Method::Notify) => self.notifies.push(line.to_vec()),
                Some(sv1::Method::SetDifficulty) => {
                    self.difficulty = env.params.get(0).and_then(|v| v.as_f64())
                }
                Some(sv1::Method::SetExtranonce) => {
                    // Applied from the next job (the tests' jobs all come after it).
                    let p = &v["params"];
                    self.extranonce1 = primitives::hex::decode(p[0].as_str().unwrap()).unwrap();
                    self.extranonce2_size = p[1].as_u64().unwrap() as usize;
                    self.set_extranonces += 1;
                }
                _ => {
                    // The subscribe result: [[subscriptions], extranonce1, extranonce2_size].
                    if text.contains("mining.notify\",") && text.contains("\"result\":[[") {
                        let r = &v["result"];
                        self.extranonce1 = primitives::hex::decode(r[1].as_str().unwrap()).unwrap();
                        self.extranonce2_size = r[2].as_u64().unwrap() as usize;
                    }
                    self.replies.push(text);
                }
            }
        }
    }

    pub fn latest_notify(&self) -> sv1::Notify<'_> {
        let (env, _) = sv1::parse_line(self.notifies.last().expect("a job")).unwrap();
        sv1::Notify::parse(&env).unwrap()
    }

    /// Grinds nonces on the latest job until `want` holds for the share's hash; returns the
    /// submit line and the hash.
    pub fn grind(
        &self,
        worker: &str,
        extranonce2: &[u8],
        want: impl Fn(&Hash256) -> bool,
    ) -> (Vec<u8>, Hash256) {
        let n = self.latest_notify();
        assert_eq!(extranonce2.len(), self.extranonce2_size);
        let (nonce, hash) = grind(&n, &self.extranonce1, extranonce2, None, 0, want);
        let mut line = Vec::new();
        sv1::write::submit(
            &mut line,
            7,
            worker,
            n.job_id,
            extranonce2,
            n.ntime,
            nonce,
            None,
        );
        (line, hash)
    }
}
