//! One Template Distribution connection as a sans-IO state machine: client messages and new
//! templates in, messages to send and blocks to submit out. No sockets, no clock: the shell in
//! [`super::server`] feeds it, and tests drive it directly.
//!
//! # Sequencing
//!
//! 1. `SetupConnection` (must be first) -> `SetupConnection.Success` (version 2, no flags), or
//!    `SetupConnection.Error` with the spec's code and a close: `unsupported-protocol` (protocol
//!    other than Template Distribution), `protocol-version-mismatch` (range excludes 2),
//!    `unsupported-feature-flags` (any flag: the protocol defines none; the error lists them).
//! 2. `CoinbaseOutputConstraints` -> at once, the current template as `NewTemplate` with
//!    `future_template = true`, followed by the `SetNewPrevHash` that activates it: the client
//!    can start work with both in hand.
//! 3. Then, for each new template the node makes: if its previous block is the tip the client
//!    was last given, `NewTemplate` with `future_template = false` (work on it at once);
//!    otherwise a new tip: `NewTemplate` with `future_template = true` and its `SetNewPrevHash`.
//!    That is how Bitcoin Core's Template Provider sequences them: a `SetNewPrevHash` always
//!    names a future template sent just before.
//!
//! Template ids are simnet's own template ids, which only ever increase. The templates sent are
//! kept per connection for `RequestTransactionData` and `SubmitSolution`: those of the last few
//! tips (`retained_tips`), at most `max_templates`, oldest dropped first.
//!
//! # Coinbase space
//!
//! The spec has the provider reserve, for a segwit block, 1168 weight units (header, transaction
//! count, the coinbase's fixed fields, a 100-byte scriptSig, the output count and the witness
//! commitment output) plus 4 per byte of outputs the client will add, and Bitcoin Core puts a
//! floor of 2000 under it. simnet's templates already leave `coinbase_reserved_weight` (4000
//! WU by default) free; when a client asks for more, its templates drop their last (lowest fee
//! rate) transactions until the block fits, with the merkle path, commitment and value
//! recomputed. A changed constraint applies from the next template (a template id is never
//! re-sent with different contents). Sigops are not modelled by simnet (its transactions are
//! far below the block limit), so `coinbase_output_max_additional_sigops` is recorded only.

use std::collections::VecDeque;
use std::sync::Arc;

use primitives::coinbase::bip34_height_push;
use primitives::Hash256;
use sv2::messages::common::{self, protocol, SetupConnectionError, SetupConnectionSuccess};
use sv2::messages::template_distribution::{
    self as tdp, NewTemplate, RequestTransactionDataError, RequestTransactionDataSuccess,
    SetNewPrevHash,
};

use super::block::{self, SolutionBlock};
use super::codec::{ClientMessage, ServerMessage, Setup, Solution};
use crate::config::SimnetConfig;
use crate::mempool::Selection;
use crate::template::{Template, TemplateBase};

/// The only protocol version SV2 defines.
pub const PROTOCOL_VERSION: u16 = common::PROTOCOL_VERSION;

/// The coinbase fields templates ask for, as in simnet's own coinbases (`CoinbaseSpec::new`):
/// version 2, final input sequence, no lock time.
pub const COINBASE_TX_VERSION: u32 = 2;
/// `coinbase_tx_input_sequence`: final.
pub const COINBASE_TX_INPUT_SEQUENCE: u32 = u32::MAX;
/// `coinbase_tx_locktime`: none.
pub const COINBASE_TX_LOCKTIME: u32 = 0;

/// The spec's fixed reservation for a segwit block's header, counts and coinbase without the
/// client's outputs, and Bitcoin Core's floor under the total.
pub const FIXED_RESERVED_WEIGHT: u64 = 1168;
/// Bitcoin Core's floor under the total reserved weight.
pub const MIN_RESERVED_WEIGHT: u64 = 2000;

/// What `RequestTransactionData.Success` carries as `excess_data`: the coinbase witness
/// reserved value the template's commitment was computed with, as Core's provider sends it.
pub const EXCESS_DATA: [u8; 32] = primitives::coinbase::WITNESS_RESERVED_VALUE;

#[derive(Clone, Copy, Debug)]
/// What a session needs from the network's configuration and its own limits.
pub struct SessionConfig {
    /// Block weight limit (WU), as the network's templates use it.
    pub block_max_weight: u64,
    /// Weight the node's templates already leave free for the coinbase.
    pub coinbase_reserved_weight: u64,
    /// Templates of this many most recent tips stay answerable.
    pub retained_tips: usize,
    /// And at most this many templates in all.
    pub max_templates: usize,
}

impl SessionConfig {
    /// The network's block limits, with the default retention: the last 3 tips' templates, 64
    /// at most.
    pub fn from_network(config: &SimnetConfig) -> SessionConfig {
        SessionConfig {
            block_max_weight: config.block_max_weight,
            coinbase_reserved_weight: config.coinbase_reserved_weight,
            retained_tips: 3,
            max_templates: 64,
        }
    }
}

/// What the session hands its shell besides messages ([`Session::poll_event`]).
#[derive(Debug)]
pub enum TdpEvent {
    /// Hand the block to the node.
    Submit(SolutionBlock),
    /// A solution that names no template we hold or does not make a block; the protocol has no
    /// answer for it, so the shell logs it.
    DropSolution {
        /// The id the solution named.
        template_id: u64,
        /// Why it was dropped, for the log.
        reason: String,
    },
}

/// Why the session wants its connection closed, once what it has to send is sent
/// ([`Session::wants_close`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Close {
    /// Why, for logs and the `ConnectionClosed` event.
    pub reason: &'static str,
    /// The details behind it.
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AwaitSetup,
    AwaitConstraints,
    Serving,
}

/// One Template Distribution connection as a sans-IO machine (docs/architecture.md, "One sans-IO
/// contract"): client messages and new templates in; messages ([`Session::poll_transmit`]),
/// blocks for the node ([`Session::poll_event`]) and a reason to close
/// ([`Session::wants_close`]) out. The shell takes the events first.
pub struct Session {
    cfg: SessionConfig,
    phase: Phase,
    /// Transaction weight the client's templates may carry.
    tx_limit: u64,
    /// The previous block hash of the last `SetNewPrevHash` sent.
    tip: Option<Hash256>,
    /// Id of the last template sent.
    last_sent: Option<u64>,
    store: Store,
    transmit: VecDeque<ServerMessage>,
    events: VecDeque<TdpEvent>,
    close: Option<Close>,
}

impl Session {
    /// A session awaiting `SetupConnection`.
    pub fn new(cfg: SessionConfig) -> Session {
        Session {
            tx_limit: cfg
                .block_max_weight
                .saturating_sub(cfg.coinbase_reserved_weight),
            cfg,
            phase: Phase::AwaitSetup,
            tip: None,
            last_sent: None,
            store: Store::new(cfg.retained_tips, cfg.max_templates),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            close: None,
        }
    }

    /// The next message to send; `None` when there is none.
    pub fn poll_transmit(&mut self) -> Option<ServerMessage> {
        self.transmit.pop_front()
    }

    /// The next thing for the shell besides sending, in order; `None` when there is none.
    pub fn poll_event(&mut self) -> Option<TdpEvent> {
        self.events.pop_front()
    }

    /// Why the connection should be closed once what is to send is sent; `None` while it stays.
    pub fn wants_close(&self) -> Option<&Close> {
        self.close.as_ref()
    }

    fn send(&mut self, m: ServerMessage) {
        self.transmit.push_back(m);
    }

    fn close(&mut self, reason: &'static str, detail: impl Into<String>) {
        self.close = Some(Close {
            reason,
            detail: detail.into(),
        });
    }

    /// Past setup and constraints: new templates go out.
    pub fn is_serving(&self) -> bool {
        self.phase == Phase::Serving
    }

    /// A template this connection was sent, if still held.
    pub fn template(&self, id: u64) -> Option<&Arc<Template>> {
        self.store.get(id)
    }

    /// Transaction weight this client's templates may carry.
    pub fn tx_limit(&self) -> u64 {
        self.tx_limit
    }

    /// A message from the client; `current` is the node's latest template.
    pub fn handle_message(&mut self, msg: ClientMessage, current: &Arc<Template>) {
        match (self.phase, msg) {
            (Phase::AwaitSetup, ClientMessage::SetupConnection(s)) => self.setup(s),
            (_, ClientMessage::SetupConnection(_)) => {
                self.close("protocol", "SetupConnection repeated")
            }
            (Phase::AwaitSetup, other) => self.close(
                "protocol",
                format!("{} before SetupConnection", message_name(&other)),
            ),
            (
                phase,
                ClientMessage::CoinbaseOutputConstraints {
                    max_additional_size,
                    ..
                },
            ) => {
                self.tx_limit = self
                    .cfg
                    .block_max_weight
                    .saturating_sub(reserved_weight(max_additional_size));
                if phase == Phase::AwaitConstraints {
                    self.phase = Phase::Serving;
                    self.announce(current);
                }
            }
            (_, ClientMessage::RequestTransactionData { template_id }) => {
                self.transaction_data(template_id)
            }
            (_, ClientMessage::SubmitSolution(s)) => self.solution(s),
        }
    }

    /// The node made a template.
    pub fn handle_template(&mut self, t: &Arc<Template>) {
        if self.phase != Phase::Serving || self.last_sent.is_some_and(|id| t.id <= id) {
            return;
        }
        self.announce(t);
    }

    fn setup(&mut self, s: Setup) {
        let refuse = |this: &mut Session, code: &str, flags: u32| {
            this.send(ServerMessage::SetupConnectionError(SetupConnectionError {
                flags,
                error_code: code.to_owned(),
            }));
            this.close("setup", code);
        };
        if s.protocol != protocol::TEMPLATE_DISTRIBUTION {
            return refuse(self, common::error_code::UNSUPPORTED_PROTOCOL, 0);
        }
        if !(s.min_version..=s.max_version).contains(&PROTOCOL_VERSION) {
            return refuse(self, common::error_code::PROTOCOL_VERSION_MISMATCH, 0);
        }
        // Template Distribution defines no flags, so every flag set is one we do not support,
        // and the error lists them all, as the spec asks.
        if s.flags != 0 {
            return refuse(self, common::error_code::UNSUPPORTED_FEATURE_FLAGS, s.flags);
        }
        self.phase = Phase::AwaitConstraints;
        self.send(ServerMessage::SetupConnectionSuccess(
            SetupConnectionSuccess {
                used_version: PROTOCOL_VERSION,
                flags: 0,
            },
        ));
    }

    /// Sends `t` (fitted to this client's coinbase space): future plus `SetNewPrevHash` when its
    /// previous block is not the tip the client has, otherwise for immediate work.
    fn announce(&mut self, t: &Arc<Template>) {
        let fitted = fit(t, self.tx_limit);
        let new_tip = self.tip != Some(fitted.prev_hash);
        self.send(ServerMessage::NewTemplate(new_template_message(
            &fitted, new_tip,
        )));
        if new_tip {
            self.send(ServerMessage::SetNewPrevHash(set_new_prev_hash_message(
                &fitted,
            )));
            self.tip = Some(fitted.prev_hash);
        }
        self.last_sent = Some(fitted.id);
        self.store.insert(fitted);
    }

    fn transaction_data(&mut self, template_id: u64) {
        let answer = match self.store.get(template_id) {
            None => Err(tdp::error_code::TEMPLATE_ID_NOT_FOUND),
            Some(t) if self.tip != Some(t.prev_hash) => Err(tdp::error_code::STALE_TEMPLATE_ID),
            Some(t) => Ok(transaction_data_message(t)),
        };
        self.send(match answer {
            Ok(m) => ServerMessage::RequestTransactionDataSuccess(m),
            Err(code) => ServerMessage::RequestTransactionDataError(RequestTransactionDataError {
                template_id,
                error_code: code.to_owned(),
            }),
        });
    }

    fn solution(&mut self, s: Solution) {
        let Some(t) = self.store.get(s.template_id) else {
            self.events.push_back(TdpEvent::DropSolution {
                template_id: s.template_id,
                reason: tdp::error_code::TEMPLATE_ID_NOT_FOUND.to_owned(),
            });
            return;
        };
        // A solution on a template whose tip has moved on is still built and submitted: the
        // node decides (it may be a valid fork, or a duplicate), as Core does.
        let event = match block::assemble(
            t,
            s.version,
            s.header_timestamp,
            s.header_nonce,
            &s.coinbase_tx,
        ) {
            Ok(b) => TdpEvent::Submit(b),
            Err(e) => TdpEvent::DropSolution {
                template_id: s.template_id,
                reason: e.to_string(),
            },
        };
        self.events.push_back(event);
    }
}

fn message_name(m: &ClientMessage) -> &'static str {
    match m {
        ClientMessage::SetupConnection(_) => "SetupConnection",
        ClientMessage::CoinbaseOutputConstraints { .. } => "CoinbaseOutputConstraints",
        ClientMessage::RequestTransactionData { .. } => "RequestTransactionData",
        ClientMessage::SubmitSolution(_) => "SubmitSolution",
    }
}

/// Block weight kept free for a client adding `max_additional_size` bytes of outputs.
pub fn reserved_weight(max_additional_size: u32) -> u64 {
    (FIXED_RESERVED_WEIGHT + 4 * max_additional_size as u64).max(MIN_RESERVED_WEIGHT)
}

/// `t` itself when its transactions fit `tx_limit`; otherwise the same template over the
/// transactions that fit, taken in the template's (fee rate) order.
pub fn fit(t: &Arc<Template>, tx_limit: u64) -> Arc<Template> {
    if t.tx_weight <= tx_limit {
        return t.clone();
    }
    let mut selection = Selection::default();
    for tx in &t.transactions {
        if selection.weight + tx.weight <= tx_limit {
            selection.weight += tx.weight;
            selection.fees += tx.fee;
            selection.txs.push(tx.clone());
        }
    }
    let base = TemplateBase {
        id: t.id,
        now: t.created_at,
        prev_hash: t.prev_hash,
        height: t.height,
        bits: t.bits,
        target: t.target,
        curtime: t.curtime,
        mintime: t.mintime,
    };
    Arc::new(Template::build(base, selection))
}

/// The coinbase outputs a template asks for, serialized one after another without a count (the
/// count is `coinbase_tx_outputs_count`): the witness commitment, paying nothing.
pub fn coinbase_outputs(t: &Template) -> Vec<u8> {
    let script = &t.default_witness_commitment;
    let mut out = Vec::with_capacity(8 + 1 + script.len());
    out.extend_from_slice(&0u64.to_le_bytes());
    // The commitment script is 38 bytes: a one-byte CompactSize.
    out.push(script.len() as u8);
    out.extend_from_slice(script);
    out
}

/// `NewTemplate` for `t`. Field lengths are checked when it is encoded (a BIP34 push, one
/// 47-byte output and a merkle path of at most 12 levels are far inside them).
pub fn new_template_message(t: &Template, future: bool) -> NewTemplate {
    NewTemplate {
        template_id: t.id,
        future_template: future,
        version: t.version,
        coinbase_tx_version: COINBASE_TX_VERSION,
        // The BIP34 height push, what Core's provider puts first in the scriptSig; the client
        // appends its own tag and extranonce.
        coinbase_prefix: bip34_height_push(t.height),
        coinbase_tx_input_sequence: COINBASE_TX_INPUT_SEQUENCE,
        coinbase_tx_value_remaining: t.coinbase_value,
        coinbase_tx_outputs_count: 1,
        coinbase_tx_outputs: coinbase_outputs(t),
        coinbase_tx_locktime: COINBASE_TX_LOCKTIME,
        merkle_path: t.merkle_branch.iter().map(|h| h.0).collect(),
    }
}

/// The `SetNewPrevHash` that makes template `t` current.
pub fn set_new_prev_hash_message(t: &Template) -> SetNewPrevHash {
    SetNewPrevHash {
        template_id: t.id,
        // Internal byte order: as the hash appears in the next block's header.
        prev_hash: t.prev_hash.0,
        header_timestamp: t.curtime,
        n_bits: t.bits.to_consensus(),
        target: t.target,
    }
}

/// The `RequestTransactionData.Success` answer for `t`: its transactions and the coinbase
/// witness reserved value.
pub fn transaction_data_message(t: &Template) -> RequestTransactionDataSuccess {
    RequestTransactionDataSuccess {
        template_id: t.id,
        excess_data: EXCESS_DATA.to_vec(),
        transaction_list: t.transactions.iter().map(|e| e.raw.to_vec()).collect(),
    }
}

/// The templates a connection was sent, newest last.
struct Store {
    templates: VecDeque<Arc<Template>>,
    /// Previous-block hashes of the retained tips, newest last.
    tips: VecDeque<Hash256>,
    retained_tips: usize,
    max_templates: usize,
}

impl Store {
    fn new(retained_tips: usize, max_templates: usize) -> Store {
        Store {
            templates: VecDeque::new(),
            tips: VecDeque::new(),
            retained_tips: retained_tips.max(1),
            max_templates: max_templates.max(1),
        }
    }

    fn insert(&mut self, t: Arc<Template>) {
        if self.tips.back() != Some(&t.prev_hash) {
            self.tips.retain(|h| *h != t.prev_hash);
            self.tips.push_back(t.prev_hash);
            while self.tips.len() > self.retained_tips {
                self.tips.pop_front();
            }
            let tips = &self.tips;
            self.templates.retain(|old| tips.contains(&old.prev_hash));
        }
        self.templates.push_back(t);
        while self.templates.len() > self.max_templates {
            self.templates.pop_front();
        }
    }

    fn get(&self, id: u64) -> Option<&Arc<Template>> {
        self.templates.iter().rev().find(|t| t.id == id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the session produced for one input, as one list: its messages, its events, then
    /// a close (the order its shell takes them in).
    #[derive(Debug)]
    #[allow(dead_code)] // some fields are read only through Debug, in failures
    enum Action {
        Send(ServerMessage),
        Submit(SolutionBlock),
        DropSolution {
            template_id: u64,
            reason: String,
        },
        Close {
            reason: &'static str,
            detail: String,
        },
    }

    fn drain(s: &mut Session) -> Vec<Action> {
        let mut out: Vec<Action> = std::iter::from_fn(|| s.poll_transmit())
            .map(Action::Send)
            .collect();
        out.extend(std::iter::from_fn(|| s.poll_event()).map(|e| match e {
            TdpEvent::Submit(b) => Action::Submit(b),
            TdpEvent::DropSolution {
                template_id,
                reason,
            } => Action::DropSolution {
                template_id,
                reason,
            },
        }));
        out.extend(s.close.take().map(|c| Action::Close {
            reason: c.reason,
            detail: c.detail,
        }));
        out
    }

    fn feed(s: &mut Session, m: ClientMessage, current: &Arc<Template>) -> Vec<Action> {
        s.handle_message(m, current);
        drain(s)
    }

    fn solve(s: &mut Session, sol: Solution) -> Vec<Action> {
        s.solution(sol);
        drain(s)
    }

    fn offer(s: &mut Session, t: &Arc<Template>) -> Vec<Action> {
        s.handle_template(t);
        drain(s)
    }
    use crate::config::MempoolConfig;
    use crate::network::Network;
    use primitives::Timestamp;

    fn network() -> Network {
        Network::new(SimnetConfig {
            seed: 9,
            block_interval: std::time::Duration::ZERO,
            mempool: MempoolConfig {
                initial_txs: 400,
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap()
    }

    fn setup(protocol: u8, min: u16, max: u16, flags: u32) -> ClientMessage {
        ClientMessage::SetupConnection(Setup {
            protocol,
            min_version: min,
            max_version: max,
            flags,
        })
    }

    fn constraints(size: u32) -> ClientMessage {
        ClientMessage::CoinbaseOutputConstraints {
            max_additional_size: size,
            max_additional_sigops: Some(4),
        }
    }

    fn serving(net: &Network) -> Session {
        let mut s = Session::new(SessionConfig::from_network(net.config()));
        let t = net.template().clone();
        assert!(matches!(
            feed(&mut s, setup(2, 2, 2, 0), &t)[..],
            [Action::Send(ServerMessage::SetupConnectionSuccess(
                SetupConnectionSuccess {
                    used_version: 2,
                    flags: 0
                }
            ))]
        ));
        feed(&mut s, constraints(50), &t);
        assert!(s.is_serving());
        s
    }

    fn is_close(a: &Action, why: &str) -> bool {
        matches!(a, Action::Close { reason, .. } if *reason == why)
    }

    fn error_code(a: &Action) -> String {
        match a {
            Action::Send(ServerMessage::SetupConnectionError(e)) => e.error_code.clone(),
            Action::Send(ServerMessage::RequestTransactionDataError(e)) => e.error_code.clone(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn setup_errors_use_the_spec_codes_and_close() {
        let net = network();
        let t = net.template().clone();
        for (msg, code, flags) in [
            (setup(0, 2, 2, 0), "unsupported-protocol", 0),
            (setup(7, 2, 2, 0), "unsupported-protocol", 0),
            (setup(2, 3, 4, 0), "protocol-version-mismatch", 0),
            (setup(2, 2, 2, 0b101), "unsupported-feature-flags", 0b101),
        ] {
            let mut s = Session::new(SessionConfig::from_network(net.config()));
            let out = feed(&mut s, msg, &t);
            assert_eq!(out.len(), 2, "{out:?}");
            assert_eq!(error_code(&out[0]), code);
            if let Action::Send(ServerMessage::SetupConnectionError(e)) = &out[0] {
                assert_eq!(e.flags, flags);
            }
            assert!(is_close(&out[1], "setup"));
        }
    }

    #[test]
    fn messages_out_of_order_close() {
        let net = network();
        let t = net.template().clone();
        let mut s = Session::new(SessionConfig::from_network(net.config()));
        assert!(matches!(&feed(&mut s, constraints(10), &t)[..], [a] if is_close(a, "protocol")));
        let mut s = serving(&net);
        assert!(matches!(&feed(&mut s, setup(2, 2, 2, 0), &t)[..], [a] if is_close(a, "protocol")));
    }

    #[test]
    fn constraints_bring_a_future_template_and_its_prev_hash() {
        let net = network();
        let t = net.template().clone();
        let mut s = Session::new(SessionConfig::from_network(net.config()));
        feed(&mut s, setup(2, 2, 2, 0), &t);
        assert!(offer(&mut s, &t).is_empty(), "nothing before constraints");
        let out = feed(&mut s, constraints(50), &t);
        let [Action::Send(ServerMessage::NewTemplate(nt)), Action::Send(ServerMessage::SetNewPrevHash(p))] =
            &out[..]
        else {
            panic!("{out:?}")
        };
        assert!(nt.future_template);
        assert_eq!(nt.template_id, t.id);
        assert_eq!(p.template_id, t.id);
        assert_eq!(nt.coinbase_prefix, bip34_height_push(t.height));
        assert_eq!(nt.coinbase_tx_value_remaining, t.coinbase_value);
        assert_eq!(nt.coinbase_tx_outputs_count, 1);
        assert_eq!(nt.merkle_path.len(), t.merkle_branch.len());
        assert_eq!(p.prev_hash, t.prev_hash.0);
        assert_eq!(p.target, t.target);
        assert_eq!(p.n_bits, t.bits.to_consensus());
        assert_eq!(p.header_timestamp, t.curtime);
        // Sending the same template again is a no-op.
        assert!(offer(&mut s, &t).is_empty());
    }

    #[test]
    fn same_tip_templates_are_immediate_and_new_tips_are_future_with_prev_hash() {
        let mut net = network();
        let mut s = serving(&net);
        // A fee-driven template on the same tip: arrivals, then the next template check.
        let mut now = Timestamp::ZERO;
        let first = net.template().id;
        while net.template().id == first {
            now += std::time::Duration::from_secs(31);
            net.handle_timeout(now);
        }
        let t = net.template().clone();
        let out = offer(&mut s, &t);
        assert!(
            matches!(&out[..], [Action::Send(ServerMessage::NewTemplate(nt))] if !nt.future_template),
            "{out:?}"
        );
        net.mine_now(now, vec![0x51]);
        net.handle_timeout(now);
        let t = net.template().clone();
        let out = offer(&mut s, &t);
        assert!(
            matches!(&out[..], [Action::Send(ServerMessage::NewTemplate(nt)), Action::Send(ServerMessage::SetNewPrevHash(p))]
                if nt.future_template && p.template_id == t.id),
            "{out:?}"
        );
    }

    #[test]
    fn transaction_data_found_stale_and_unknown() {
        let mut net = network();
        let mut s = serving(&net);
        let t = net.template().clone();
        let out = {
            s.transaction_data(t.id);
            drain(&mut s)
        };
        let [Action::Send(ServerMessage::RequestTransactionDataSuccess(m))] = &out[..] else {
            panic!("{out:?}")
        };
        assert_eq!(m.excess_data, EXCESS_DATA);
        assert_eq!(m.transaction_list.len(), t.tx_count());
        for (got, want) in m.transaction_list.iter().zip(&t.transactions) {
            assert_eq!(&got[..], &want.raw[..]);
        }
        assert_eq!(
            error_code(
                &{
                    s.transaction_data(t.id + 1000);
                    drain(&mut s)
                }[0]
            ),
            "template-id-not-found"
        );
        net.mine_now(Timestamp::ZERO, vec![0x51]);
        net.handle_timeout(Timestamp::ZERO);
        offer(&mut s, &net.template().clone());
        assert_eq!(
            error_code(
                &{
                    s.transaction_data(t.id);
                    drain(&mut s)
                }[0]
            ),
            "stale-template-id"
        );
    }

    #[test]
    fn old_tips_are_forgotten() {
        let mut net = network();
        let mut s = serving(&net);
        let first = net.template().id;
        for _ in 0..5 {
            net.mine_now(Timestamp::ZERO, vec![0x51]);
            net.handle_timeout(Timestamp::ZERO);
            offer(&mut s, &net.template().clone());
        }
        assert!(s.template(first).is_none());
        assert!(s.template(net.template().id).is_some());
        assert_eq!(s.store.templates.len(), 3);
    }

    #[test]
    fn big_coinbase_constraints_trim_the_template() {
        let net = network();
        let t = net.template().clone();
        assert!(t.tx_count() > 10);
        let mut s = Session::new(SessionConfig::from_network(net.config()));
        feed(&mut s, setup(2, 2, 2, 0), &t);
        // The client wants almost the whole block for its outputs.
        let limit_bytes = (net.config().block_max_weight - t.tx_weight / 2) / 4;
        let out = feed(&mut s, constraints(limit_bytes as u32), &t);
        let Action::Send(ServerMessage::NewTemplate(nt)) = &out[0] else {
            panic!("{out:?}")
        };
        let sent = s.template(nt.template_id).unwrap();
        assert!(sent.tx_weight <= s.tx_limit());
        assert!(sent.tx_count() < t.tx_count());
        assert_eq!(nt.coinbase_tx_value_remaining, sent.coinbase_value);
        assert!(sent.coinbase_value < t.coinbase_value);
        assert_eq!(nt.merkle_path.len(), sent.merkle_branch.len());
        // A modest request shares the node's template as it is.
        assert!(Arc::ptr_eq(&fit(&t, t.tx_weight), &t));
        assert_eq!(reserved_weight(0), MIN_RESERVED_WEIGHT);
        assert_eq!(reserved_weight(1000), 5168);
    }

    #[test]
    fn solutions_for_unknown_templates_or_bad_coinbases_are_dropped() {
        let net = network();
        let mut s = serving(&net);
        let t = net.template();
        let sol = |id, cb: Vec<u8>| Solution {
            template_id: id,
            version: t.version,
            header_timestamp: t.curtime,
            header_nonce: 0,
            coinbase_tx: cb,
        };
        assert!(matches!(
            &solve(&mut s, sol(t.id + 5, vec![]))[..],
            [Action::DropSolution { .. }]
        ));
        assert!(matches!(
            &solve(&mut s, sol(t.id, vec![1, 2, 3]))[..],
            [Action::DropSolution { .. }]
        ));
    }
}
