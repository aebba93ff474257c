//! The network as one sans-IO state machine: the caller passes time in, the network says what
//! happened and when it next needs to be called.
//!
//! Three kinds of events drive it, each at an exact simulated instant: a transaction arrives
//! (Poisson, its own random stream), the rest of the network finds a block (Poisson, another
//! stream), a fee-driven template check comes due. Events are run in time order whatever the
//! granularity of `advance` calls, so outputs depend on the seed and on when blocks are
//! submitted, not on how often the shell polls.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use primitives::bitcoin::Transaction;
use primitives::coinbase::{witness_commitment, CoinbaseSpec, Payout, WITNESS_RESERVED_VALUE};
use primitives::{merkle_root, sha256d, CompactTarget, Difficulty, Hash256, Header, Target};

use crate::chain::{block_subsidy, BlockSource, Chain, StoredBlock};
use crate::checks::{self, CheckedBlock, HeaderContext, SubmitError};
use crate::config::{ConfigError, SimnetConfig, CHAIN_NAME};
use crate::dist::{self, Rng};
use crate::mempool::{Mempool, Selection, TxEntry};
use crate::template::{Template, TemplateBase, TEMPLATE_VERSION};
use crate::time::SimTime;
use crate::txgen;

/// What happened inside the network, for the shell to turn into events and notifications.
#[derive(Clone, Debug)]
pub enum Output {
    TemplateCreated(Arc<Template>),
    TipChanged {
        at: SimTime,
        hash: Hash256,
        height: u32,
        prev_hash: Hash256,
        source: BlockSource,
    },
    /// The answer to a submitted block (`Ok` is bitcoind's `null`).
    BlockVerdict {
        at: SimTime,
        /// None when the bytes did not decode.
        hash: Option<Hash256>,
        /// None when the parent is unknown or the bytes did not decode.
        height: Option<u32>,
        result: Result<(), SubmitError>,
    },
}

/// A submitted block that became the tip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub hash: Hash256,
    pub height: u32,
}

pub type SubmitResult = Result<Accepted, SubmitError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    // Declaration order breaks ties between events at the same instant.
    TxArrival,
    NetworkBlock,
    TemplateCheck,
}

pub struct Network {
    config: SimnetConfig,
    bits: CompactTarget,
    target: Target,
    chain: Chain,
    mempool: Mempool,
    tx_rng: Rng,
    block_rng: Rng,
    /// Where the rest of the network's coinbases pay.
    network_payout: Vec<u8>,
    now: SimTime,
    next_tx_at: SimTime,
    next_block_at: SimTime,
    template: Arc<Template>,
    next_template_id: u64,
    /// A fee-driven template check is due then (arrivals came in within the interval).
    template_check_at: Option<SimTime>,
    outputs: Vec<Output>,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Network")
            .field("now", &self.now)
            .field("tip", &self.chain.tip_hash())
            .field("height", &self.chain.tip_height())
            .field("mempool", &self.mempool.len())
            .field("template", &self.template.id)
            .field("next_deadline", &self.next_deadline())
            .finish_non_exhaustive()
    }
}

impl Network {
    pub fn new(config: SimnetConfig) -> Result<Network, ConfigError> {
        config.validate()?;
        let bits = config.network_difficulty.to_target().to_compact_lossy();
        // The header check uses what nBits decodes to, which the lossy encoding may round down.
        let target = Target::from_compact(bits).unwrap_or(Target::ZERO);
        let seed = config.seed;
        let label = |l: &str| [&seed.to_le_bytes()[..], l.as_bytes()].concat();
        let network_payout = [&[0x00, 0x14][..], &sha256d(&label("payout")).0[..20]].concat();

        let base = base_block(&config, bits, &network_payout, sha256d(&label("parent")));
        let mut mempool = Mempool::new(config.mempool.max_vsize);
        let mut init_rng = dist::stream(seed, "simnet/initial-mempool");
        for _ in 0..config.mempool.initial_txs {
            let g = txgen::generate(
                &mut init_rng,
                &config.mempool.vsize,
                &config.mempool.fee_rate,
            );
            // A repeated txid is a 2^-256 event; skipping it keeps this total.
            let _ = mempool.insert(Arc::new(TxEntry::new(g.tx, g.fee, SimTime::ZERO)));
        }

        let mut tx_rng = dist::stream(seed, "simnet/tx-arrivals");
        let mut block_rng = dist::stream(seed, "simnet/network-blocks");
        let next_tx_at = next_arrival(&mut tx_rng, SimTime::ZERO, config.mempool.arrival_rate);
        let next_block_at = next_block(&mut block_rng, SimTime::ZERO, &config);

        let chain = Chain::new(base);
        let placeholder = Arc::new(Template::build(
            TemplateBase {
                id: 0,
                now: SimTime::ZERO,
                prev_hash: chain.tip_hash(),
                height: chain.tip_height() + 1,
                bits,
                target,
                curtime: 0,
                mintime: 0,
            },
            Selection::default(),
        ));
        let mut net = Network {
            config,
            bits,
            target,
            chain,
            mempool,
            tx_rng,
            block_rng,
            network_payout,
            now: SimTime::ZERO,
            next_tx_at,
            next_block_at,
            template: placeholder,
            next_template_id: 1,
            template_check_at: None,
            outputs: Vec::new(),
        };
        net.new_template(SimTime::ZERO);
        Ok(net)
    }

    /// Runs everything due up to `now` and returns what happened since the last call (outputs
    /// of `submit_block` calls included). Time never goes backwards: an earlier `now` than the
    /// last one is taken as the last one.
    pub fn advance(&mut self, now: SimTime) -> Vec<Output> {
        self.run_until(now);
        std::mem::take(&mut self.outputs)
    }

    /// When the network next has something to do; `None` if nothing will ever happen without
    /// a submission.
    pub fn next_deadline(&self) -> Option<SimTime> {
        let (t, _) = self.next_event();
        (t != SimTime::NEVER).then_some(t)
    }

    /// Judges a serialized block (`submitblock`). Events due up to `now` run first, so the
    /// block is judged against the network as it is at `now`. The verdict, and a new tip and
    /// template if it is accepted, also come out of the next `advance` as outputs.
    pub fn submit_block(&mut self, now: SimTime, raw: &[u8]) -> SubmitResult {
        self.run_until(now);
        match checks::decode(raw) {
            Ok(block) => self.submit(block),
            Err(e) => {
                self.outputs.push(Output::BlockVerdict {
                    at: self.now,
                    hash: None,
                    height: None,
                    result: Err(e.clone()),
                });
                Err(e)
            }
        }
    }

    /// [`Network::submit_block`] for a block already decoded.
    pub fn submit_block_decoded(
        &mut self,
        now: SimTime,
        block: primitives::bitcoin::Block,
    ) -> SubmitResult {
        self.run_until(now);
        self.submit(block)
    }

    /// A template built now from the current mempool and tip, without publishing it (it
    /// carries the id the next published template will have).
    pub fn preview_template(&self, now: SimTime) -> Template {
        Template::build(
            self.template_base(now),
            self.mempool.select(self.tx_weight_limit()),
        )
    }

    // Accessors for the endpoints.

    pub fn config(&self) -> &SimnetConfig {
        &self.config
    }

    pub fn chain_name(&self) -> &'static str {
        CHAIN_NAME
    }

    /// The latest template.
    pub fn template(&self) -> &Arc<Template> {
        &self.template
    }

    pub fn chain(&self) -> &Chain {
        &self.chain
    }

    pub fn mempool(&self) -> &Mempool {
        &self.mempool
    }

    pub fn tip(&self) -> &Arc<StoredBlock> {
        self.chain.tip()
    }

    pub fn height(&self) -> u32 {
        self.chain.tip_height()
    }

    pub fn block(&self, hash: &Hash256) -> Option<&Arc<StoredBlock>> {
        self.chain.block(hash)
    }

    pub fn block_hash(&self, height: u32) -> Option<Hash256> {
        self.chain.hash_at(height)
    }

    pub fn mempool_entry(&self, txid: &Hash256) -> Option<&Arc<TxEntry>> {
        self.mempool.get(txid)
    }

    /// A mempool transaction's raw bytes (as Core without `-txindex` serves only these).
    pub fn raw_transaction(&self, txid: &Hash256) -> Option<&[u8]> {
        self.mempool.get(txid).map(|e| &e.raw[..])
    }

    /// Median time past of the tip (`mediantime`).
    pub fn median_time_past(&self) -> u32 {
        self.chain
            .median_time_past(&self.chain.tip_hash())
            .unwrap_or(0)
    }

    pub fn bits(&self) -> CompactTarget {
        self.bits
    }

    /// The target `bits` decodes to.
    pub fn target(&self) -> Target {
        self.target
    }

    /// The difficulty of [`Network::target`] (what `getdifficulty` reports).
    pub fn difficulty(&self) -> Difficulty {
        Difficulty::from_target(self.target)
    }

    /// The simulated time the network has run to.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Unix seconds at simulated time `t`.
    pub fn unix_time(&self, t: SimTime) -> u64 {
        self.config.start_unix_time + t.as_secs()
    }

    // The event loop.

    fn next_event(&self) -> (SimTime, Event) {
        let mut next = (self.next_tx_at, Event::TxArrival);
        for candidate in [
            (self.next_block_at, Event::NetworkBlock),
            (
                self.template_check_at.unwrap_or(SimTime::NEVER),
                Event::TemplateCheck,
            ),
        ] {
            next = next.min(candidate);
        }
        next
    }

    fn run_until(&mut self, now: SimTime) {
        let now = now.max(self.now);
        loop {
            let (t, event) = self.next_event();
            if t > now || t == SimTime::NEVER {
                break;
            }
            self.now = t;
            match event {
                Event::TxArrival => self.on_tx_arrival(t),
                Event::NetworkBlock => self.on_network_block(t),
                Event::TemplateCheck => self.check_template(t),
            }
        }
        self.now = now;
    }

    fn on_tx_arrival(&mut self, t: SimTime) {
        let m = &self.config.mempool;
        let g = txgen::generate(&mut self.tx_rng, &m.vsize, &m.fee_rate);
        self.next_tx_at = next_arrival(&mut self.tx_rng, t, m.arrival_rate);
        let _ = self.mempool.insert(Arc::new(TxEntry::new(g.tx, g.fee, t)));
        let due = self.template.created_at + self.config.template_interval;
        if t >= due {
            self.check_template(t);
        } else if self.template_check_at.is_none() {
            self.template_check_at = Some(due);
        }
    }

    /// A new template for the same tip, if it would gain more than `fee_delta` in fees.
    fn check_template(&mut self, t: SimTime) {
        self.template_check_at = None;
        let (fees, _) = self.mempool.selection_fees(self.tx_weight_limit());
        if fees.saturating_sub(self.template.total_fees) > self.config.fee_delta {
            self.new_template(t);
        }
    }

    fn on_network_block(&mut self, t: SimTime) {
        self.next_block_at = next_block(&mut self.block_rng, t, &self.config);
        let payout = self.network_payout.clone();
        self.find_block(t, payout);
    }

    /// The rest of the network finds a block right now, paying `payout_script` (Core's
    /// `generatetoaddress`). The scheduled network blocks keep their times: the Poisson process
    /// is memoryless, so an extra block does not shift it.
    pub fn mine_now(&mut self, now: SimTime, payout_script: Vec<u8>) -> Hash256 {
        self.run_until(now);
        self.find_block(self.now, payout_script)
    }

    fn find_block(&mut self, t: SimTime, payout_script: Vec<u8>) -> Hash256 {
        let prev = self.chain.tip().clone();
        let height = prev.height + 1;
        let selection = self.mempool.select(self.tx_weight_limit());
        let wtxids: Vec<Hash256> = selection.txs.iter().map(|e| e.wtxid).collect();
        let mut spec = CoinbaseSpec::new(height, 8);
        spec.tag = b"/simnet/".to_vec();
        spec.payouts.push(Payout {
            script_pubkey: payout_script.into(),
            value: primitives::bitcoin::Amount::from_sat(block_subsidy(height) + selection.fees),
        });
        spec.witness_commitment = Some(witness_commitment(&wtxids, &WITNESS_RESERVED_VALUE));
        // The time in the extranonce keeps two network blocks on one parent apart.
        let coinbase = coinbase_tx(&spec, &t.as_nanos().to_le_bytes());
        let txids: Vec<Hash256> = std::iter::once(coinbase.compute_txid().into())
            .chain(selection.txs.iter().map(|e| e.txid))
            .collect();
        let mintime = self.chain.median_time_past(&prev.hash).unwrap_or(0) + 1;
        let mut header = Header {
            version: TEMPLATE_VERSION,
            prev_hash: prev.hash,
            merkle_root: merkle_root(&txids),
            time: (self.unix_time(t) as u32).max(mintime),
            bits: self.bits,
            nonce: 0,
        };
        self.grind(&mut header);
        for e in &selection.txs {
            self.mempool.remove(&e.txid);
        }
        let block = StoredBlock::new(
            header,
            height,
            coinbase,
            selection.txs,
            selection.fees,
            BlockSource::Network,
            t,
        );
        let hash = block.hash;
        self.connect_tip(Arc::new(block), t);
        hash
    }

    /// Real proof of work for network blocks when it is cheap (see `network_pow_budget`).
    fn grind(&self, header: &mut Header) {
        let expected = self.difficulty().as_f64() * 4_294_967_296.0;
        if expected > self.config.network_pow_budget as f64 {
            return;
        }
        // 40 times the expected work fails with probability e^-40: in practice never.
        let tries = (expected * 40.0).ceil().min(u32::MAX as f64) as u32;
        for nonce in 0..=tries {
            header.nonce = nonce;
            if self.target.is_met_by(header.block_hash().as_bytes()) {
                return;
            }
        }
    }

    fn submit(&mut self, block: primitives::bitcoin::Block) -> SubmitResult {
        let hash: Hash256 = block.block_hash().into();
        let mut height = None;
        let result = self.judge(block, &mut height);
        self.outputs.push(Output::BlockVerdict {
            at: self.now,
            hash: Some(hash),
            height,
            result: result.as_ref().map(|_| ()).map_err(|e| e.clone()),
        });
        result
    }

    fn judge(
        &mut self,
        block: primitives::bitcoin::Block,
        height_out: &mut Option<u32>,
    ) -> SubmitResult {
        let mut checked = checks::check_block(block)?;
        if self.chain.contains(&checked.hash) {
            return Err(SubmitError::Duplicate);
        }
        let prev = self
            .chain
            .block(&checked.header.prev_hash)
            .ok_or(SubmitError::PrevNotFound)?
            .clone();
        let height = prev.height + 1;
        *height_out = Some(height);
        let prev_mtp = self.chain.median_time_past(&prev.hash).unwrap_or(0);
        checks::check_header_in_context(
            &checked.header,
            &HeaderContext {
                bits: self.bits,
                prev_median_time: prev_mtp,
                now_unix: self.unix_time(self.now),
            },
        )?;
        checks::check_block_in_context(&mut checked, height, prev_mtp)?;

        let t = self.now;
        if prev.hash == self.chain.tip_hash() {
            let (entries, fees) = checks::check_connect(&checked, block_subsidy(height), |txid| {
                self.mempool.get(txid).cloned()
            })?;
            for e in &entries {
                self.mempool.remove(&e.txid);
            }
            let block = stored(checked, height, entries, fees, t);
            let hash = block.hash;
            self.connect_tip(Arc::new(block), t);
            Ok(Accepted { hash, height })
        } else if height > self.chain.tip_height() {
            self.reorg(checked, height, t)
        } else {
            // A valid block on a branch no longer than ours: kept, not connected, so its
            // transactions are not checked against the mempool (Core does the same).
            let entries = unchecked_entries(&checked, &self.mempool, t);
            self.chain
                .insert(Arc::new(stored(checked, height, entries, 0, t)));
            Err(SubmitError::Inconclusive)
        }
    }

    /// The submitted block makes a side branch longer than the main chain: connect the
    /// branch if every block of it passes the connect checks against the transactions then
    /// available (the mempool plus those of the blocks the branch replaces).
    fn reorg(&mut self, checked: CheckedBlock, height: u32, t: SimTime) -> SubmitResult {
        let prev_hash = checked.header.prev_hash;
        let side = self.chain.branch_to(&prev_hash);
        let fork_height = side.first().map_or(height - 1, |b| b.height - 1);
        // Transactions of the main-chain blocks that would be disconnected.
        let mut returning: HashMap<Hash256, Arc<TxEntry>> = Default::default();
        for h in fork_height + 1..=self.chain.tip_height() {
            let b = self
                .chain
                .block(&self.chain.hash_at(h).expect("main chain height"))
                .expect("main chain block");
            returning.extend(b.txs.iter().map(|e| (e.txid, e.clone())));
        }
        let mut used = HashSet::new();
        let mut validated = Vec::with_capacity(side.len());
        for b in &side {
            let block = b.to_block();
            let txids = b.txids();
            let as_checked = CheckedBlock {
                block,
                hash: b.hash,
                header: b.header,
                txids,
            };
            let (entries, fees) =
                checks::check_connect(&as_checked, block_subsidy(b.height), |txid| {
                    available(txid, &self.mempool, &returning, &used)
                })?;
            used.extend(entries.iter().map(|e| e.txid));
            validated.push(stored(as_checked, b.height, entries, fees, b.received));
        }
        let (entries, fees) = checks::check_connect(&checked, block_subsidy(height), |txid| {
            available(txid, &self.mempool, &returning, &used)
        })?;
        let new_tip = stored(checked, height, entries, fees, t);
        let accepted = Accepted {
            hash: new_tip.hash,
            height,
        };

        // Every check passed: switch branches.
        for b in validated {
            self.chain.insert(Arc::new(b));
        }
        let new_tip = Arc::new(new_tip);
        self.chain.insert(new_tip.clone());
        let disconnected = self.chain.set_tip(&new_tip.hash);
        let mut mined = HashSet::new();
        for h in (fork_height + 1..=self.chain.tip_height()).filter_map(|h| self.chain.hash_at(h)) {
            let b = self.chain.block(&h).expect("connected block");
            mined.extend(b.txs.iter().map(|e| e.txid));
        }
        for b in &disconnected {
            for e in &b.txs {
                if !mined.contains(&e.txid) {
                    let _ = self.mempool.insert(e.clone());
                }
            }
        }
        for txid in &mined {
            self.mempool.remove(txid);
        }
        self.announce_tip(&new_tip, t);
        Ok(accepted)
    }

    fn connect_tip(&mut self, block: Arc<StoredBlock>, t: SimTime) {
        self.chain.insert(block.clone());
        self.chain.set_tip(&block.hash);
        self.announce_tip(&block, t);
    }

    fn announce_tip(&mut self, block: &StoredBlock, t: SimTime) {
        self.outputs.push(Output::TipChanged {
            at: t,
            hash: block.hash,
            height: block.height,
            prev_hash: block.header.prev_hash,
            source: block.source,
        });
        self.new_template(t);
    }

    fn new_template(&mut self, t: SimTime) {
        let template = Arc::new(self.preview_template(t));
        self.next_template_id += 1;
        self.template_check_at = None;
        self.template = template.clone();
        self.outputs.push(Output::TemplateCreated(template));
    }

    fn template_base(&self, now: SimTime) -> TemplateBase {
        let tip = self.chain.tip();
        let mintime = self.chain.median_time_past(&tip.hash).unwrap_or(0) + 1;
        TemplateBase {
            id: self.next_template_id,
            now,
            prev_hash: tip.hash,
            height: tip.height + 1,
            bits: self.bits,
            target: self.target,
            curtime: (self.unix_time(now) as u32).max(mintime),
            mintime,
        }
    }

    fn tx_weight_limit(&self) -> u64 {
        self.config.block_max_weight - self.config.coinbase_reserved_weight
    }
}

fn next_arrival(rng: &mut Rng, from: SimTime, rate: f64) -> SimTime {
    if rate <= 0.0 {
        return SimTime::NEVER;
    }
    let gap = dist::exponential(rng, 1.0 / rate);
    // A vanishing rate can put the next arrival past any representable time: never.
    std::time::Duration::try_from_secs_f64(gap).map_or(SimTime::NEVER, |d| from.saturating_add(d))
}

fn next_block(rng: &mut Rng, from: SimTime, config: &SimnetConfig) -> SimTime {
    if config.block_interval.is_zero() {
        return SimTime::NEVER;
    }
    let gap = dist::exponential(rng, config.block_interval.as_secs_f64());
    std::time::Duration::try_from_secs_f64(gap).map_or(SimTime::NEVER, |d| from.saturating_add(d))
}

/// The block the network starts from: a coinbase-only block at the start height, found ten
/// minutes before the start.
fn base_block(
    config: &SimnetConfig,
    bits: CompactTarget,
    payout: &[u8],
    parent: Hash256,
) -> StoredBlock {
    let height = config.start_height;
    let mut spec = CoinbaseSpec::new(height, 8);
    spec.tag = b"/simnet/".to_vec();
    spec.payouts.push(Payout {
        script_pubkey: payout.to_vec().into(),
        value: primitives::bitcoin::Amount::from_sat(block_subsidy(height)),
    });
    spec.witness_commitment = Some(witness_commitment(&[], &WITNESS_RESERVED_VALUE));
    let coinbase = coinbase_tx(&spec, &config.seed.to_le_bytes());
    let header = Header {
        version: TEMPLATE_VERSION,
        prev_hash: parent,
        merkle_root: coinbase.compute_txid().into(),
        time: config.start_unix_time.saturating_sub(600) as u32,
        bits,
        nonce: 0,
    };
    StoredBlock::new(
        header,
        height,
        coinbase,
        Vec::new(),
        0,
        BlockSource::Start,
        SimTime::ZERO,
    )
}

fn coinbase_tx(spec: &CoinbaseSpec, extranonce: &[u8; 8]) -> Transaction {
    spec.build()
        .and_then(|parts| parts.transaction(extranonce))
        .expect("the network's own coinbase is well formed")
}

fn stored(
    checked: CheckedBlock,
    height: u32,
    entries: Vec<Arc<TxEntry>>,
    fees: u64,
    t: SimTime,
) -> StoredBlock {
    let coinbase = checked
        .block
        .txdata
        .into_iter()
        .next()
        .expect("checked blocks have a coinbase");
    StoredBlock::new(
        checked.header,
        height,
        coinbase,
        entries,
        fees,
        BlockSource::Submitted,
        t,
    )
}

/// Entries for a side block's transactions: ours where we have them, fresh ones (fee unknown,
/// recorded as zero) where we do not.
fn unchecked_entries(checked: &CheckedBlock, mempool: &Mempool, t: SimTime) -> Vec<Arc<TxEntry>> {
    checked.block.txdata[1..]
        .iter()
        .zip(&checked.txids[1..])
        .map(|(tx, txid)| match mempool.get(txid) {
            Some(e) => e.clone(),
            None => Arc::new(TxEntry::new(tx.clone(), 0, t)),
        })
        .collect()
}

fn available(
    txid: &Hash256,
    mempool: &Mempool,
    returning: &HashMap<Hash256, Arc<TxEntry>>,
    used: &HashSet<Hash256>,
) -> Option<Arc<TxEntry>> {
    if used.contains(txid) {
        return None;
    }
    mempool.get(txid).or_else(|| returning.get(txid)).cloned()
}
