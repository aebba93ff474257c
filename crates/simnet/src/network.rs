//! The network as one sans-IO state machine: the caller passes time in, the network says what
//! happened and when it next needs to be called.
//!
//! Four kinds of events drive it, each at an exact simulated instant: a transaction arrives
//! (Poisson, its own random stream), the rest of the network finds a block (Poisson, another
//! stream), a transaction or block reaches a node or the rest of the network after its relay
//! delay, a node's fee-driven template check comes due. Events are run in time order whatever
//! the granularity of `handle_timeout` calls, so outputs depend on the seed and on when blocks are
//! submitted, not on how often the shell polls.
//!
//! # Nodes
//!
//! The network presents one or more named nodes ([`NodeSpec`]). The rest of the network is a
//! hub, and each node sits at its relay delay from it: the network's transactions reach a node
//! that long after they appear (announced in batches, see [`crate::relay`]), its blocks that
//! long after they are found; a block submitted at node X reaches the hub after X's delay and
//! node Y after X's plus Y's (X itself has it at once). So each node has its own chain view,
//! mempool and templates, as real nodes do. Each node's peer traffic is counted by the model in
//! [`crate::relay`]. A single node with no delay behaves exactly as the network itself: what
//! [`Network::new`] makes, and what the accessors without a node argument read.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use primitives::bitcoin::Transaction;
use primitives::coinbase::{witness_commitment, CoinbaseSpec, Payout, WITNESS_RESERVED_VALUE};
use primitives::{merkle_root, sha256d, CompactTarget, Difficulty, Hash256, Header, Target};

use crate::chain::{block_subsidy, BlockSource, Chain, History, StoredBlock};
use crate::checks::{self, CheckedBlock, HeaderContext, SubmitError};
use crate::config::{ConfigError, NodeSpec, SimnetConfig, CHAIN_NAME};
use crate::dist::{self, Rng};
use crate::ledger::{Connected, Ledger};
use crate::mempool::{Mempool, MempoolEvent, Selection, TxEntry};
use crate::relay::{self, PeerBytes};
use crate::template::{Template, TemplateBase, TEMPLATE_VERSION};
use crate::txgen;
use crate::view::NodeView;
use primitives::Timestamp;
use rand_chacha::rand_core::RngCore;

/// What happened inside the network, for the shell to turn into events and notifications.
#[derive(Clone, Debug)]
pub enum Output {
    /// A node made a new template.
    TemplateCreated(Arc<Template>),
    /// A node's tip (or, for no node, the rest of the network's) moved.
    TipChanged {
        /// When, in simulated time.
        at: Timestamp,
        /// Hash of the new tip.
        hash: Hash256,
        /// Height of the new tip.
        height: u32,
        /// Hash of its parent; not the old tip when it was a reorganisation.
        prev_hash: Hash256,
        /// Where the block came from.
        source: BlockSource,
    },
    /// A node's mempool changed (only while its events are recorded: see
    /// [`Network::record_mempool_events`]).
    Mempool(MempoolEvent),
    /// The answer to a submitted block (`Ok` is bitcoind's `null`).
    BlockVerdict {
        /// When the verdict was reached, in simulated time.
        at: Timestamp,
        /// None when the bytes did not decode.
        hash: Option<Hash256>,
        /// None when the parent is unknown or the bytes did not decode.
        height: Option<u32>,
        /// `Ok` when accepted, else Core's reject reason.
        result: Result<(), SubmitError>,
    },
}

/// An [`Output`] and whose it is.
#[derive(Clone, Debug)]
pub struct NodeOutput {
    /// The node it happened at; `None` for the rest of the network (its tip changes only).
    pub node: Option<NodeId>,
    /// What happened.
    pub output: Output,
}

/// A node of the network, by its position in the list it was created with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u32);

impl NodeId {
    /// The first node: the one the accessors without a node argument read.
    pub const FIRST: NodeId = NodeId(0);

    /// Position in the node list, from 0.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A submitted block that became the tip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// Hash of the accepted block.
    pub hash: Hash256,
    /// Its height.
    pub height: u32,
}

/// What a block submission gives back: the block that became the tip, or Core's reject reason.
pub type SubmitResult = Result<Accepted, SubmitError>;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    // Declaration order breaks ties between events at the same instant.
    TxArrival,
    NetworkBlock,
    Relay,
    TemplateCheck(usize),
}

/// Something on its way between the hub and a node.
#[derive(Clone, Debug)]
enum Relay {
    /// A transaction the hub announced to `to` at `announced`.
    Tx {
        to: NodeId,
        entry: Arc<TxEntry>,
        announced: Timestamp,
    },
    /// A block from node `from` to the hub.
    BlockUp {
        from: NodeId,
        block: Arc<StoredBlock>,
    },
    /// A block from the hub to node `to`.
    BlockDown { to: NodeId, block: Arc<StoredBlock> },
}

/// One node: its view of the network, its templates, its peer traffic.
#[derive(Debug)]
pub(crate) struct NodeState {
    pub spec: NodeSpec,
    pub ledger: Ledger,
    pub template: Arc<Template>,
    next_template_id: u64,
    /// A fee-driven template check is due then (arrivals came in within the interval).
    template_check_at: Option<Timestamp>,
    /// The announcement batch the hub last sent this node (its announce instant).
    last_batch: Option<Timestamp>,
    pub peer: PeerBytes,
}

/// The simulated network: the rest of the network's chain and mempool, and every node's own
/// view; a sans-IO state machine driven by [`Network::handle_timeout`] and read by [`Network::poll_event`] (see the crate docs).
pub struct Network {
    config: SimnetConfig,
    bits: CompactTarget,
    target: Target,
    /// The rest of the network: where transactions appear and network blocks are found.
    hub: Ledger,
    nodes: Vec<NodeState>,
    tx_rng: Rng,
    block_rng: Rng,
    /// Where the rest of the network's coinbases pay.
    network_payout: Vec<u8>,
    now: Timestamp,
    next_tx_at: Timestamp,
    next_block_at: Timestamp,
    /// Deliveries due, by (instant, order of sending).
    relays: BTreeMap<(Timestamp, u64), Relay>,
    relays_sent: u64,
    outputs: VecDeque<NodeOutput>,
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = &self.nodes[0];
        f.debug_struct("Network")
            .field("now", &self.now)
            .field("tip", &first.ledger.chain.tip_hash())
            .field("height", &first.ledger.chain.tip_height())
            .field("mempool", &first.ledger.mempool.len())
            .field("template", &first.template.id)
            .field("nodes", &self.nodes.len())
            .field("relays", &self.relays.len())
            .field("poll_timeout", &self.poll_timeout())
            .finish_non_exhaustive()
    }
}

impl Network {
    /// A network with one node, named "node", at no delay.
    pub fn new(config: SimnetConfig) -> Result<Network, ConfigError> {
        Network::with_nodes(config, vec![NodeSpec::default()])
    }

    /// A network presenting `nodes` (at least one, names unique), each at its relay delay from
    /// the rest of the network. [`NodeId`]s follow the order given.
    pub fn with_nodes(config: SimnetConfig, nodes: Vec<NodeSpec>) -> Result<Network, ConfigError> {
        config.validate()?;
        NodeSpec::validate_all(&nodes)?;
        let bits = config.network_difficulty.to_target().to_compact_lossy();
        // The header check uses what nBits decodes to, which the lossy encoding may round down.
        let target = Target::from_compact(bits).unwrap_or(Target::ZERO);
        let seed = config.seed;
        let label = |l: &str| [&seed.to_le_bytes()[..], l.as_bytes()].concat();
        let network_payout = [&[0x00, 0x14][..], &sha256d(&label("payout")).0[..20]].concat();

        let history = Arc::new(synthetic_history(
            &config,
            bits,
            &network_payout,
            sha256d(&label("parent")),
        ));
        let parent = history.last().map(|b| b.hash);
        let base = base_block(
            &config,
            bits,
            &network_payout,
            parent.unwrap_or_else(|| sha256d(&label("parent"))),
        );
        let mut mempool = Mempool::new(config.mempool.max_vsize);
        let mut init_rng = dist::stream(seed, "simnet/initial-mempool");
        for _ in 0..config.mempool.initial_txs {
            let g = txgen::generate(
                &mut init_rng,
                &config.mempool.vsize,
                &config.mempool.fee_rate,
            );
            // A repeated txid is a 2^-256 event; skipping it keeps this total.
            let _ = mempool.insert(Arc::new(TxEntry::new(g.tx, g.fee, Timestamp::ZERO)));
        }

        let mut tx_rng = dist::stream(seed, "simnet/tx-arrivals");
        let mut block_rng = dist::stream(seed, "simnet/network-blocks");
        let next_tx_at = next_arrival(&mut tx_rng, Timestamp::ZERO, config.mempool.arrival_rate);
        let next_block_at = next_block(&mut block_rng, Timestamp::ZERO, &config);

        // Every node has been in sync with the network for a while when it starts.
        let chain = Chain::with_history(base, history);
        let placeholder = Arc::new(Template::build(
            TemplateBase {
                id: 0,
                now: Timestamp::ZERO,
                prev_hash: chain.tip_hash(),
                height: chain.tip_height() + 1,
                bits,
                target,
                curtime: 0,
                mintime: 0,
            },
            Selection::default(),
        ));
        let nodes = nodes
            .into_iter()
            .map(|spec| NodeState {
                spec,
                ledger: Ledger::new(chain.clone(), mempool.clone()),
                template: placeholder.clone(),
                next_template_id: 1,
                template_check_at: None,
                last_batch: None,
                peer: PeerBytes::default(),
            })
            .collect();
        let mut net = Network {
            config,
            bits,
            target,
            hub: Ledger::new(chain, mempool),
            nodes,
            tx_rng,
            block_rng,
            network_payout,
            now: Timestamp::ZERO,
            next_tx_at,
            next_block_at,
            relays: BTreeMap::new(),
            relays_sent: 0,
            outputs: VecDeque::new(),
        };
        for id in net.node_ids() {
            net.new_template(id, Timestamp::ZERO);
        }
        Ok(net)
    }

    /// Runs everything due up to `now`; what happened comes out of [`Network::poll_event`].
    /// Time never goes backwards: an earlier `now` than the last one is taken as the last one.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.run_until(now);
        self.flush_mempool_events();
    }

    /// The next thing that happened, at a node or in the rest of the network, in order
    /// (`submit_block` verdicts included); `None` once all has been taken. A node's mempool
    /// changes come out only after the next [`Network::handle_timeout`].
    pub fn poll_event(&mut self) -> Option<NodeOutput> {
        self.outputs.pop_front()
    }

    /// Makes node `node`'s mempool changes come out as [`Output::Mempool`] (for ZMQ's
    /// transaction topics), or stops them. Off by default: most runs have no use for one
    /// output per transaction.
    pub fn record_mempool_events(&mut self, node: NodeId, on: bool) {
        self.nodes[node.index()].ledger.mempool.record_events(on);
    }

    /// Moves recorded mempool changes into the outputs, so that they come out in order with
    /// what follows them.
    fn flush_mempool_events(&mut self) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if n.ledger.mempool.has_events() {
                let id = NodeId(i as u32);
                self.outputs
                    .extend(
                        n.ledger
                            .mempool
                            .take_events()
                            .into_iter()
                            .map(|e| NodeOutput {
                                node: Some(id),
                                output: Output::Mempool(e),
                            }),
                    );
            }
        }
    }

    /// When the network next has something to do; `None` if nothing will ever happen without
    /// a submission.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let (t, _) = self.next_event();
        (t != Timestamp::MAX).then_some(t)
    }

    /// Judges a serialized block (`submitblock`) at the first node. Events due up to `now` run
    /// first, so the block is judged against the network as it is at `now`. The verdict, and a
    /// new tip and template if it is accepted, also come out of [`Network::poll_event`].
    pub fn submit_block(&mut self, now: Timestamp, raw: &[u8]) -> SubmitResult {
        self.submit_block_at(NodeId::FIRST, now, raw)
    }

    /// [`Network::submit_block`] at node `node`: it judges the block against its own view, and
    /// relays it on if valid.
    pub fn submit_block_at(&mut self, node: NodeId, now: Timestamp, raw: &[u8]) -> SubmitResult {
        self.run_until(now);
        match checks::decode(raw) {
            Ok(block) => self.submit(node, block),
            Err(e) => {
                self.emit(
                    Some(node),
                    Output::BlockVerdict {
                        at: self.now,
                        hash: None,
                        height: None,
                        result: Err(e.clone()),
                    },
                );
                Err(e)
            }
        }
    }

    /// [`Network::submit_block_at`] for a block already decoded.
    pub fn submit_block_decoded_at(
        &mut self,
        node: NodeId,
        now: Timestamp,
        block: primitives::bitcoin::Block,
    ) -> SubmitResult {
        self.run_until(now);
        self.submit(node, block)
    }

    /// A template built now from the first node's mempool and tip, without publishing it (it
    /// carries the id the next published template will have).
    pub fn preview_template(&self, now: Timestamp) -> Template {
        self.preview_template_at(NodeId::FIRST, now)
    }

    pub(crate) fn preview_template_at(&self, node: NodeId, now: Timestamp) -> Template {
        let n = &self.nodes[node.index()];
        Template::build(
            self.template_base(n, now),
            n.ledger.mempool.select(self.tx_weight_limit()),
        )
    }

    // Nodes.

    /// Every node, in order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// The node called `name`.
    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .position(|n| n.spec.name == name)
            .map(|i| NodeId(i as u32))
    }

    /// What node `node` sees. Panics if `node` is not one of this network's.
    pub fn node(&self, node: NodeId) -> NodeView<'_> {
        NodeView::new(self, &self.nodes[node.index()], node)
    }

    /// The rest of the network's best chain.
    pub fn network_chain(&self) -> &Chain {
        &self.hub.chain
    }

    /// The rest of the network's mempool.
    pub fn network_mempool(&self) -> &Mempool {
        &self.hub.mempool
    }

    // Accessors for the endpoints: the first node's view.

    /// The configuration it was built from.
    pub fn config(&self) -> &SimnetConfig {
        &self.config
    }

    /// The chain name it reports (`getblockchaininfo`'s `chain`).
    pub fn chain_name(&self) -> &'static str {
        CHAIN_NAME
    }

    /// The latest template.
    pub fn template(&self) -> &Arc<Template> {
        &self.nodes[0].template
    }

    /// The first node's chain.
    pub fn chain(&self) -> &Chain {
        &self.nodes[0].ledger.chain
    }

    /// The first node's mempool.
    pub fn mempool(&self) -> &Mempool {
        &self.nodes[0].ledger.mempool
    }

    /// The first node's tip.
    pub fn tip(&self) -> &Arc<StoredBlock> {
        self.chain().tip()
    }

    /// Height of the first node's tip (`getblockcount`).
    pub fn height(&self) -> u32 {
        self.chain().tip_height()
    }

    /// A block the first node knows, main chain or side branch.
    pub fn block(&self, hash: &Hash256) -> Option<&Arc<StoredBlock>> {
        self.chain().block(hash)
    }

    /// The first node's main-chain block hash at `height` (`getblockhash`).
    pub fn block_hash(&self, height: u32) -> Option<Hash256> {
        self.chain().hash_at(height)
    }

    /// A transaction waiting in the first node's mempool.
    pub fn mempool_entry(&self, txid: &Hash256) -> Option<&Arc<TxEntry>> {
        self.mempool().get(txid)
    }

    /// A mempool transaction's raw bytes (as Core without `-txindex` serves only these).
    pub fn raw_transaction(&self, txid: &Hash256) -> Option<&[u8]> {
        self.mempool().get(txid).map(|e| &e.raw[..])
    }

    /// Median time past of the tip (`mediantime`).
    pub fn median_time_past(&self) -> u32 {
        self.chain()
            .median_time_past(&self.chain().tip_hash())
            .unwrap_or(0)
    }

    /// The `nBits` every block carries (the difficulty is fixed).
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
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Unix seconds at simulated time `t`.
    pub fn unix_time(&self, t: Timestamp) -> u64 {
        self.config.start_unix_time + t.as_secs()
    }

    // The event loop.

    fn next_event(&self) -> (Timestamp, Event) {
        let mut next = (self.next_tx_at, Event::TxArrival);
        next = next.min((self.next_block_at, Event::NetworkBlock));
        if let Some((&(t, _), _)) = self.relays.first_key_value() {
            next = next.min((t, Event::Relay));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(t) = n.template_check_at {
                next = next.min((t, Event::TemplateCheck(i)));
            }
        }
        next
    }

    fn run_until(&mut self, now: Timestamp) {
        let now = now.max(self.now);
        loop {
            let (t, event) = self.next_event();
            if t > now || t == Timestamp::MAX {
                break;
            }
            self.now = t;
            match event {
                Event::TxArrival => self.on_tx_arrival(t),
                Event::NetworkBlock => self.on_network_block(t),
                Event::Relay => {
                    let (_, relay) = self.relays.pop_first().expect("a relay is due");
                    self.on_relay(relay, t);
                }
                Event::TemplateCheck(i) => self.check_template(NodeId(i as u32), t),
            }
        }
        self.now = now;
    }

    fn emit(&mut self, node: Option<NodeId>, output: Output) {
        self.flush_mempool_events();
        self.outputs.push_back(NodeOutput { node, output });
    }

    /// Sends `relay` to arrive at `at`; one due now is delivered at once, so that a node at no
    /// delay sees everything exactly when the rest of the network does.
    fn send(&mut self, at: Timestamp, relay: Relay) {
        if at <= self.now {
            self.on_relay(relay, self.now);
        } else {
            self.relays.insert((at, self.relays_sent), relay);
            self.relays_sent += 1;
        }
    }

    /// Sends `relay(id)` from the hub to every node but `except`, each arriving its relay delay
    /// after `from`, in node order.
    fn send_down(
        &mut self,
        from: Timestamp,
        except: Option<NodeId>,
        relay: impl Fn(NodeId) -> Relay,
    ) {
        for id in self.node_ids().filter(|&id| Some(id) != except) {
            let at = from + self.delay(id);
            self.send(at, relay(id));
        }
    }

    fn delay(&self, node: NodeId) -> Duration {
        self.nodes[node.index()].spec.relay_delay
    }

    fn on_relay(&mut self, relay: Relay, t: Timestamp) {
        match relay {
            Relay::Tx {
                to,
                entry,
                announced,
            } => self.tx_reaches_node(to, entry, announced, t),
            Relay::BlockUp { from, block } => self.block_reaches_hub(from, block, t),
            Relay::BlockDown { to, block } => self.block_reaches_node(to, &block, t),
        }
    }

    fn on_tx_arrival(&mut self, t: Timestamp) {
        let m = &self.config.mempool;
        let g = txgen::generate(&mut self.tx_rng, &m.vsize, &m.fee_rate);
        self.next_tx_at = next_arrival(&mut self.tx_rng, t, m.arrival_rate);
        let entry = Arc::new(TxEntry::new(g.tx, g.fee, t));
        self.hub.receive_tx(entry.clone());
        let announced = self.announce_instant(t);
        self.send_down(announced, None, |to| Relay::Tx {
            to,
            entry: entry.clone(),
            announced,
        });
    }

    /// When the hub announces a transaction it got at `t`: the next multiple of the announce
    /// interval, or at once.
    fn announce_instant(&self, t: Timestamp) -> Timestamp {
        let every = self.config.tx_announce_interval.as_nanos() as u64;
        if every == 0 {
            return t;
        }
        Timestamp::from_nanos(t.as_nanos().div_ceil(every).saturating_mul(every))
    }

    fn tx_reaches_node(
        &mut self,
        id: NodeId,
        entry: Arc<TxEntry>,
        announced: Timestamp,
        t: Timestamp,
    ) {
        let interval = self.config.template_interval;
        let n = &mut self.nodes[id.index()];
        if n.last_batch != Some(announced) {
            n.last_batch = Some(announced);
            let (down, up) = relay::batch_overhead();
            n.peer.add(false, down);
            n.peer.add(true, up);
        }
        let new = !n.ledger.seen.contains(&entry.txid);
        let (down, up) = relay::tx_relay(entry.raw.len(), new);
        n.peer.add(false, down);
        n.peer.add(true, up);
        if !new {
            return;
        }
        // The node's mempool records when the node got it.
        let entry = if entry.time == t {
            entry
        } else {
            Arc::new(TxEntry {
                time: t,
                ..(*entry).clone()
            })
        };
        n.ledger.receive_tx(entry);
        let due = n.template.created_at + interval;
        if t >= due {
            self.check_template(id, t);
        } else if n.template_check_at.is_none() {
            n.template_check_at = Some(due);
        }
    }

    /// A new template for the same tip, if it would gain more than `fee_delta` in fees.
    fn check_template(&mut self, id: NodeId, t: Timestamp) {
        let limit = self.tx_weight_limit();
        let n = &mut self.nodes[id.index()];
        n.template_check_at = None;
        let (fees, _) = n.ledger.mempool.selection_fees(limit);
        if fees.saturating_sub(n.template.total_fees) > self.config.fee_delta {
            self.new_template(id, t);
        }
    }

    fn on_network_block(&mut self, t: Timestamp) {
        self.next_block_at = next_block(&mut self.block_rng, t, &self.config);
        let block = Arc::new(self.build_block(&self.hub, t, self.network_payout.clone()));
        connect_own(&mut self.hub, block.clone());
        self.announce_network_tip(&block, t);
        self.send_down(t, None, |to| Relay::BlockDown {
            to,
            block: block.clone(),
        });
    }

    /// The rest of the network finds a block right now, paying `payout_script` (Core's
    /// `generatetoaddress`). The scheduled network blocks keep their times: the Poisson process
    /// is memoryless, so an extra block does not shift it.
    pub fn mine_now(&mut self, now: Timestamp, payout_script: Vec<u8>) -> Hash256 {
        self.mine_now_at(NodeId::FIRST, now, payout_script)
    }

    /// [`Network::mine_now`] at node `node` (`generatetoaddress` on its RPC): the block is
    /// built on its tip from its mempool, is its tip at once and is relayed like a submitted
    /// block.
    pub fn mine_now_at(&mut self, node: NodeId, now: Timestamp, payout_script: Vec<u8>) -> Hash256 {
        self.run_until(now);
        let t = self.now;
        let n = &self.nodes[node.index()];
        let block = Arc::new(self.build_block(&n.ledger, t, payout_script));
        connect_own(&mut self.nodes[node.index()].ledger, block.clone());
        self.announce_tip(node, &block, t);
        self.send_up(node, block.clone(), t);
        block.hash
    }

    /// A block on `ledger`'s tip with its mempool's best transactions, as the network mines.
    fn build_block(&self, ledger: &Ledger, t: Timestamp, payout_script: Vec<u8>) -> StoredBlock {
        let prev = ledger.chain.tip().clone();
        let height = prev.height + 1;
        let selection = ledger.mempool.select(self.tx_weight_limit());
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
        let mintime = ledger.chain.median_time_past(&prev.hash).unwrap_or(0) + 1;
        let mut header = Header {
            version: TEMPLATE_VERSION,
            prev_hash: prev.hash,
            merkle_root: merkle_root(&txids),
            time: (self.unix_time(t) as u32).max(mintime),
            bits: self.bits,
            nonce: 0,
        };
        self.grind(&mut header);
        StoredBlock::new(
            header,
            height,
            coinbase,
            selection.txs,
            selection.fees,
            BlockSource::Network,
            t,
        )
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

    /// A block node `from` has (found there or checked there) goes to the hub as a compact
    /// block.
    fn send_up(&mut self, from: NodeId, block: Arc<StoredBlock>, t: Timestamp) {
        let bytes = relay::compact_block(&block);
        self.nodes[from.index()].peer.add(true, bytes);
        let at = t + self.delay(from);
        self.send(at, Relay::BlockUp { from, block });
    }

    fn block_reaches_hub(&mut self, from: NodeId, block: Arc<StoredBlock>, t: Timestamp) {
        if self.hub.chain.contains(&block.hash) {
            return;
        }
        let missing = relay::unseen(&block, |e| self.hub.seen.contains(&e.txid));
        let (request, answer) = relay::missing_txs(&block, &missing);
        let peer = &mut self.nodes[from.index()].peer;
        peer.add(false, request);
        peer.add(true, answer);
        if let Connected::Tip(b) = self.hub.connect_relayed(&block, t, block.source) {
            self.announce_network_tip(&b, t);
        }
        self.send_down(t, Some(from), |to| Relay::BlockDown {
            to,
            block: block.clone(),
        });
    }

    fn block_reaches_node(&mut self, id: NodeId, block: &StoredBlock, t: Timestamp) {
        let n = &mut self.nodes[id.index()];
        if n.ledger.chain.contains(&block.hash) {
            return;
        }
        let missing = relay::unseen(block, |e| n.ledger.seen.contains(&e.txid));
        let (request, answer) = relay::missing_txs(block, &missing);
        n.peer.add(false, relay::compact_block(block) + answer);
        n.peer.add(true, request);
        // From this node's side, whoever found it, it came from the network.
        if let Connected::Tip(b) = n.ledger.connect_relayed(block, t, BlockSource::Network) {
            self.announce_tip(id, &b, t);
        }
    }

    fn submit(&mut self, node: NodeId, block: primitives::bitcoin::Block) -> SubmitResult {
        let hash: Hash256 = block.block_hash().into();
        let mut height = None;
        let mut stored = None;
        let result = self.judge(node, block, &mut height, &mut stored);
        self.emit(
            Some(node),
            Output::BlockVerdict {
                at: self.now,
                hash: Some(hash),
                height,
                result: result.as_ref().map(|_| ()).map_err(|e| e.clone()),
            },
        );
        // Every block the node stored goes on, side branches too: a later block may build on
        // one, and the network must know its parent.
        if let Some(b) = stored {
            self.send_up(node, b, self.now);
        }
        result
    }

    fn judge(
        &mut self,
        node: NodeId,
        block: primitives::bitcoin::Block,
        height_out: &mut Option<u32>,
        stored_out: &mut Option<Arc<StoredBlock>>,
    ) -> SubmitResult {
        let t = self.now;
        let now_unix = self.unix_time(t);
        let bits = self.bits;
        let ledger = &mut self.nodes[node.index()].ledger;
        let mut checked = checks::check_block(block)?;
        if ledger.chain.contains(&checked.hash) {
            return Err(SubmitError::Duplicate);
        }
        let prev = ledger
            .chain
            .block(&checked.header.prev_hash)
            .ok_or(SubmitError::PrevNotFound)?
            .clone();
        let height = prev.height + 1;
        *height_out = Some(height);
        let prev_mtp = ledger.chain.median_time_past(&prev.hash).unwrap_or(0);
        checks::check_header_in_context(
            &checked.header,
            &HeaderContext {
                bits,
                prev_median_time: prev_mtp,
                now_unix,
            },
        )?;
        checks::check_block_in_context(&mut checked, height, prev_mtp)?;

        if prev.hash == ledger.chain.tip_hash() {
            let (entries, fees) = checks::check_connect(&checked, block_subsidy(height), |txid| {
                ledger.mempool.get(txid).cloned()
            })?;
            let block = Arc::new(stored(checked, height, entries, fees, t));
            connect_own(ledger, block.clone());
            *stored_out = Some(block.clone());
            self.announce_tip(node, &block, t);
            Ok(Accepted {
                hash: block.hash,
                height,
            })
        } else if height > ledger.chain.tip_height() {
            let (accepted, block) = reorg(ledger, checked, height, t)?;
            *stored_out = Some(block.clone());
            self.announce_tip(node, &block, t);
            Ok(accepted)
        } else {
            // A valid block on a branch no longer than ours: kept, not connected, so its
            // transactions are not checked against the mempool (Core does the same).
            let entries = unchecked_entries(&checked, &ledger.mempool, t);
            let block = Arc::new(stored(checked, height, entries, 0, t));
            ledger.seen.extend(block.txs.iter().map(|e| e.txid));
            ledger.chain.insert(block.clone());
            *stored_out = Some(block);
            Err(SubmitError::Inconclusive)
        }
    }

    fn announce_tip(&mut self, node: NodeId, block: &StoredBlock, t: Timestamp) {
        self.emit(Some(node), tip_changed(block, t));
        self.new_template(node, t);
    }

    fn announce_network_tip(&mut self, block: &StoredBlock, t: Timestamp) {
        self.emit(None, tip_changed(block, t));
    }

    fn new_template(&mut self, id: NodeId, t: Timestamp) {
        let template = Arc::new(self.preview_template_at(id, t));
        let n = &mut self.nodes[id.index()];
        n.next_template_id += 1;
        n.template_check_at = None;
        n.template = template.clone();
        self.emit(Some(id), Output::TemplateCreated(template));
    }

    fn template_base(&self, n: &NodeState, now: Timestamp) -> TemplateBase {
        let tip = n.ledger.chain.tip();
        let mintime = n.ledger.chain.median_time_past(&tip.hash).unwrap_or(0) + 1;
        TemplateBase {
            id: n.next_template_id,
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

fn tip_changed(block: &StoredBlock, t: Timestamp) -> Output {
    Output::TipChanged {
        at: t,
        hash: block.hash,
        height: block.height,
        prev_hash: block.header.prev_hash,
        source: block.source,
    }
}

/// Makes a block found or checked here the tip: its transactions leave the mempool.
fn connect_own(ledger: &mut Ledger, block: Arc<StoredBlock>) {
    for e in &block.txs {
        ledger.mempool.remove(&e.txid);
    }
    ledger.seen.extend(block.txs.iter().map(|e| e.txid));
    ledger.chain.insert(block.clone());
    ledger.chain.set_tip(&block.hash);
}

/// The submitted block makes a side branch longer than the main chain: connect the branch if
/// every block of it passes the connect checks against the transactions then available (the
/// mempool plus those of the blocks the branch replaces).
fn reorg(
    ledger: &mut Ledger,
    checked: CheckedBlock,
    height: u32,
    t: Timestamp,
) -> Result<(Accepted, Arc<StoredBlock>), SubmitError> {
    let chain = &ledger.chain;
    let prev_hash = checked.header.prev_hash;
    let side = chain.branch_to(&prev_hash);
    let fork_height = side.first().map_or(height - 1, |b| b.height - 1);
    // Transactions of the main-chain blocks that would be disconnected.
    let mut returning: HashMap<Hash256, Arc<TxEntry>> = Default::default();
    for h in fork_height + 1..=chain.tip_height() {
        let b = chain
            .block(&chain.hash_at(h).expect("main chain height"))
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
                available(txid, &ledger.mempool, &returning, &used)
            })?;
        used.extend(entries.iter().map(|e| e.txid));
        validated.push(stored(as_checked, b.height, entries, fees, b.received));
    }
    let (entries, fees) = checks::check_connect(&checked, block_subsidy(height), |txid| {
        available(txid, &ledger.mempool, &returning, &used)
    })?;
    let new_tip = stored(checked, height, entries, fees, t);
    let accepted = Accepted {
        hash: new_tip.hash,
        height,
    };

    // Every check passed: switch branches.
    for b in validated {
        ledger.chain.insert(Arc::new(b));
    }
    let new_tip = Arc::new(new_tip);
    ledger.seen.extend(new_tip.txs.iter().map(|e| e.txid));
    ledger.chain.insert(new_tip.clone());
    let disconnected = ledger.chain.set_tip(&new_tip.hash);
    ledger.reorg_mempool(fork_height, &disconnected);
    Ok((accepted, new_tip))
}

fn next_arrival(rng: &mut Rng, from: Timestamp, rate: f64) -> Timestamp {
    if rate <= 0.0 {
        return Timestamp::MAX;
    }
    let gap = dist::exponential(rng, 1.0 / rate);
    // A vanishing rate can put the next arrival past any representable time: never.
    std::time::Duration::try_from_secs_f64(gap).map_or(Timestamp::MAX, |d| from + d)
}

fn next_block(rng: &mut Rng, from: Timestamp, config: &SimnetConfig) -> Timestamp {
    if config.block_interval.is_zero() {
        return Timestamp::MAX;
    }
    let gap = dist::exponential(rng, config.block_interval.as_secs_f64());
    std::time::Duration::try_from_secs_f64(gap).map_or(Timestamp::MAX, |d| from + d)
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
    let time = config.start_unix_time.saturating_sub(600) as u32;
    let coinbase = network_coinbase(height, payout, &config.seed.to_le_bytes(), true);
    coinbase_only_block(height, coinbase, parent, time, bits, 0)
}

/// The network's coinbase at `height`: the subsidy to `payout`, with a witness commitment
/// where the block must have one (the base; the history below it has no witness data).
fn network_coinbase(
    height: u32,
    payout: &[u8],
    extranonce: &[u8; 8],
    witness: bool,
) -> Transaction {
    let mut spec = CoinbaseSpec::new(height, 8);
    spec.tag = b"/simnet/".to_vec();
    spec.payouts.push(Payout {
        script_pubkey: payout.to_vec().into(),
        value: primitives::bitcoin::Amount::from_sat(block_subsidy(height)),
    });
    if witness {
        spec.witness_commitment = Some(witness_commitment(&[], &WITNESS_RESERVED_VALUE));
    }
    coinbase_tx(&spec, extranonce)
}

/// A block of the network from before the start (the base, its history): `coinbase` alone on
/// `prev`.
fn coinbase_only_block(
    height: u32,
    coinbase: Transaction,
    prev: Hash256,
    time: u32,
    bits: CompactTarget,
    nonce: u32,
) -> StoredBlock {
    let header = Header {
        version: TEMPLATE_VERSION,
        prev_hash: prev,
        merkle_root: coinbase.compute_txid().into(),
        time,
        bits,
        nonce,
    };
    StoredBlock::new(
        header,
        height,
        coinbase,
        Vec::new(),
        0,
        BlockSource::Start,
        Timestamp::ZERO,
    )
}

/// How many blocks below the start height exist, as synthetic history: two difficulty periods,
/// enough for readers that look back over recent blocks (tip ancestors, median time past,
/// `getnetworkhashps`'s 120 blocks) while costing little to make (each block's hash depends on
/// every block below it, so they are all made when the network is).
pub const HISTORY_DEPTH: u32 = 2 * 2016;

/// The blocks below the base, oldest first: coinbase-only blocks paying the network, with the
/// network's `nBits` and version, times about ten minutes apart (each a random 0-299 s early,
/// so that they always increase) ending ten minutes before the base's, the oldest one building
/// on `below`. A function of the configuration alone. Their proof of work is not ground
/// (nothing checks it below the base).
fn synthetic_history(
    config: &SimnetConfig,
    bits: CompactTarget,
    payout: &[u8],
    below: Hash256,
) -> History {
    let top = config.start_height;
    let depth = HISTORY_DEPTH.min(top);
    let base_time = config.start_unix_time.saturating_sub(600);
    let mut rng = dist::stream(config.seed, "simnet/history");
    let mut prev = if depth == top { Hash256::ZERO } else { below };
    let mut blocks = Vec::with_capacity(depth as usize);
    for height in top - depth..top {
        let coinbase = network_coinbase(height, payout, &u64::from(height).to_le_bytes(), false);
        let early = rng.next_u32() % 300;
        let time = base_time
            .saturating_sub(600 * u64::from(top - height))
            .saturating_sub(u64::from(early));
        let block = coinbase_only_block(height, coinbase, prev, time as u32, bits, rng.next_u32());
        prev = block.hash;
        blocks.push(Arc::new(block));
    }
    History::new(blocks)
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
    t: Timestamp,
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
fn unchecked_entries(checked: &CheckedBlock, mempool: &Mempool, t: Timestamp) -> Vec<Arc<TxEntry>> {
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
