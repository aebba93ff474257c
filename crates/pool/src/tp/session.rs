//! The Template Distribution client's protocol, sans-IO: messages in, messages out and the
//! templates the pool may build work on.
//!
//! A provider sends a `NewTemplate` marked future ahead of the `SetNewPrevHash` that activates
//! it, and non-future templates for the tip it already announced. Both become a [`TpWork`] the
//! moment they are minable: the future one at its `SetNewPrevHash`, the other at once, or,
//! when the session fetches transactions, once its transactions are in.
//!
//! # Transactions
//!
//! A pool with a node beside its provider must be able to build a whole block from any template
//! it hands out, so that a block found as the provider dies can still go out through
//! `submitblock` (see `docs/operations.md`). With [`TpSessionConfig::fetch_transactions`] the
//! session asks for every template's transactions the moment its `NewTemplate` arrives (a
//! future one too, which puts the request ahead of its `SetNewPrevHash`), and holds a template
//! that only refreshes the current tip until its transactions are in, its provider says it has
//! none, or [`TpSessionConfig::hold_limit`] has passed: miners keep the previous template of
//! the same tip meanwhile, which is still valid. Refreshes that come faster than the provider
//! answers queue up, and each answer hands out its own template (dropping the older ones), so a
//! provider that refreshes more often than a round trip still moves the miners on. At the limit
//! the newest is handed out without its transactions. A new tip is handed out at once, since
//! work on the old one is worthless; only the first round trip after a tip change is
//! unprotected.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use primitives::bitcoin::Amount;
use primitives::coinbase::parse_bip34_height;
use primitives::{CompactTarget, Hash256, Timestamp};
use sv2::messages::common::{protocol, SetupConnection};
use sv2::messages::template_distribution::{
    CoinbaseOutputConstraints, NewTemplate, RequestTransactionData, RequestTransactionDataError,
    RequestTransactionDataSuccess, SetNewPrevHash, SubmitSolution,
};
use sv2::messages::{Common, TemplateDistribution};
use sv2::Message;

use crate::template::{TdpTemplate, Template};

/// What the pool tells a Template Provider, and how it treats its templates.
#[derive(Clone, Debug)]
pub struct TpSessionConfig {
    /// Room our coinbase outputs need beyond the provider's: the payout output.
    pub coinbase_output_max_additional_size: u32,
    /// Sigops our coinbase outputs add (`CoinbaseOutputConstraints`).
    pub coinbase_output_max_additional_sigops: u16,
    /// Sent in `SetupConnection`.
    pub endpoint_host: String,
    /// Sent in `SetupConnection`.
    pub endpoint_port: u16,
    /// Future templates kept while waiting for their `SetNewPrevHash`.
    pub max_future_templates: usize,
    /// Ask for every template's transactions as it arrives, and hold a same-tip template until
    /// they are in (see the module's documentation).
    pub fetch_transactions: bool,
    /// The longest a same-tip template is held for its transactions.
    pub hold_limit: Duration,
}

impl Default for TpSessionConfig {
    fn default() -> Self {
        TpSessionConfig {
            // One output: value (8), script length (1), a script of at most 34 bytes (P2WSH,
            // P2TR), with room for a P2PKH/P2SH too.
            coinbase_output_max_additional_size: 43,
            coinbase_output_max_additional_sigops: 4,
            endpoint_host: String::new(),
            endpoint_port: 0,
            max_future_templates: 16,
            fetch_transactions: false,
            // Miners keep the previous template of the tip meanwhile, so a long hold costs only
            // fresher fees; a short one hands out, under load, refreshes whose transactions were
            // a second late (a provider sending megabytes of them per template, every second).
            hold_limit: Duration::from_secs(10),
        }
    }
}

/// A minable template from the provider.
#[derive(Clone, Debug)]
pub struct TpWork {
    /// The template, as the pool's jobs read it.
    pub template: Arc<Template>,
    /// The provider's coinbase parts and merkle path for it.
    pub tdp: Arc<TdpTemplate>,
}

/// What the session hands its shell besides messages to send ([`TpSession::poll_event`]).
#[derive(Debug)]
pub enum TpEvent {
    /// A new minable template.
    Work(TpWork),
    /// The provider's answer to a `RequestTransactionData` the client sent.
    TxData(Result<RequestTransactionDataSuccess, RequestTransactionDataError>),
}

/// Why the session with the provider cannot go on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TpSessionError {
    /// The provider answered `SetupConnection.Error` (with this code).
    #[error("provider refused SetupConnection: {0}")]
    SetupRefused(String),
    /// The provider sent something the protocol does not allow here.
    #[error("protocol: {0}")]
    Protocol(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    AwaitSetup,
    Ready,
}

/// The tip the provider announced last.
#[derive(Clone, Copy, Debug)]
struct Tip {
    prev_hash: Hash256,
    header_timestamp: u32,
    bits: CompactTarget,
}

/// A same-tip template waiting for its transactions.
#[derive(Debug)]
struct Held {
    work: TpWork,
    until: Timestamp,
}

/// Requests for transaction data kept as in flight, at most: a provider that never answers
/// some must not grow the list.
const MAX_IN_FLIGHT: usize = 64;
/// Same-tip templates held at most; a newer one beyond drops the oldest.
const MAX_HELD: usize = 8;

/// The client side of a Template Distribution connection, sans IO (docs/architecture.md, "One
/// sans-IO contract"): messages and deadlines in ([`TpSession::handle_message`],
/// [`TpSession::handle_timeout`]), messages ([`TpSession::poll_transmit`]) and templates and
/// answers ([`TpSession::poll_event`]) out.
pub struct TpSession {
    cfg: TpSessionConfig,
    phase: Phase,
    tip: Option<Tip>,
    future: VecDeque<NewTemplate>,
    /// Template ids whose transactions were asked for and not yet answered, oldest first.
    in_flight: VecDeque<u64>,
    /// Same-tip templates waiting for their transactions, oldest first.
    held: VecDeque<Held>,
    transmit: VecDeque<Message>,
    events: VecDeque<TpEvent>,
}

impl TpSession {
    /// A session waiting for its `SetupConnection.Success`.
    pub fn new(cfg: TpSessionConfig) -> TpSession {
        TpSession {
            cfg,
            phase: Phase::AwaitSetup,
            tip: None,
            future: VecDeque::new(),
            in_flight: VecDeque::new(),
            held: VecDeque::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    /// The next message to send to the provider; `None` when there is none.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.transmit.pop_front()
    }

    /// The next template or answer for the shell, in order; `None` when there is none.
    pub fn poll_event(&mut self) -> Option<TpEvent> {
        self.events.pop_front()
    }

    /// What opens the connection.
    pub fn setup_connection(&self) -> Message {
        // Template Distribution defines no flags.
        SetupConnection {
            endpoint_host: self.cfg.endpoint_host.clone(),
            endpoint_port: self.cfg.endpoint_port,
            vendor: "stratumlab".into(),
            firmware: env!("CARGO_PKG_VERSION").into(),
            device_id: "pool".into(),
            ..SetupConnection::new(protocol::TEMPLATE_DISTRIBUTION)
        }
        .into()
    }

    /// Whether the provider accepted the setup.
    pub fn is_ready(&self) -> bool {
        self.phase == Phase::Ready
    }

    /// Asks for template `template_id`'s transactions (a `RequestTransactionData` to
    /// transmit), unless a request is in flight already (its answer, [`TpEvent::TxData`],
    /// serves every asker); whether it asked.
    pub fn request_transaction_data(&mut self, template_id: u64) -> bool {
        if self.in_flight.contains(&template_id) {
            return false;
        }
        if self.in_flight.len() >= MAX_IN_FLIGHT {
            self.in_flight.pop_front();
        }
        self.in_flight.push_back(template_id);
        self.transmit
            .push_back(RequestTransactionData { template_id }.into());
        true
    }

    /// When [`TpSession::handle_timeout`] is due: the end of the oldest held template's wait.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.held.front().map(|h| h.until)
    }

    /// Once the oldest held template has waited its limit, the newest is handed out without
    /// its transactions (and the rest dropped): work that stays behind would cost more than
    /// the rare block that needs them.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.held.front().is_none_or(|h| now < h.until) {
            return;
        }
        let newest = self.held.pop_back().map(|h| h.work);
        self.held.clear();
        if let Some(w) = newest {
            tracing::warn!(
                template_id = w.tdp.template_id,
                "tp: template's transactions did not come in time; handed out without them"
            );
            self.events.push_back(TpEvent::Work(w));
        }
    }

    /// Handles one message from the provider: what to send back and the templates now
    /// minable are then polled.
    pub fn handle_message(&mut self, m: Message, now: Timestamp) -> Result<(), TpSessionError> {
        match (self.phase, m) {
            (Phase::AwaitSetup, Message::Common(Common::SetupConnectionSuccess(_))) => {
                self.phase = Phase::Ready;
                self.transmit.push_back(
                    CoinbaseOutputConstraints {
                        coinbase_output_max_additional_size: self
                            .cfg
                            .coinbase_output_max_additional_size,
                        coinbase_output_max_additional_sigops: self
                            .cfg
                            .coinbase_output_max_additional_sigops,
                    }
                    .into(),
                );
                Ok(())
            }
            (Phase::AwaitSetup, Message::Common(Common::SetupConnectionError(e))) => {
                Err(TpSessionError::SetupRefused(e.error_code))
            }
            (Phase::AwaitSetup, other) => Err(TpSessionError::Protocol(format!(
                "{} before SetupConnection.Success",
                other.name()
            ))),
            (Phase::Ready, Message::TemplateDistribution(m)) => {
                self.on_tdp(m, now);
                Ok(())
            }
            (Phase::Ready, other) => Err(TpSessionError::Protocol(format!(
                "unexpected {}",
                other.name()
            ))),
        }
    }

    fn on_tdp(&mut self, m: TemplateDistribution, now: Timestamp) {
        match m {
            TemplateDistribution::NewTemplate(t) => {
                if self.cfg.fetch_transactions {
                    self.request_transaction_data(t.template_id);
                }
                self.handle_template(t, now);
            }
            TemplateDistribution::SetNewPrevHash(p) => self.on_prev_hash(p),
            TemplateDistribution::RequestTransactionDataSuccess(d) => {
                let id = d.template_id;
                self.answered(id, TpEvent::TxData(Ok(d)));
            }
            TemplateDistribution::RequestTransactionDataError(e) => {
                let id = e.template_id;
                self.answered(id, TpEvent::TxData(Err(e)));
            }
            // Anything else is the client's to send.
            other => tracing::debug!(message = other.name(), "tp: ignored"),
        }
    }

    fn handle_template(&mut self, t: NewTemplate, now: Timestamp) {
        if t.future_template {
            if self.future.len() >= self.cfg.max_future_templates.max(1) {
                self.future.pop_front();
            }
            self.future.push_back(t);
            return;
        }
        let Some(tip) = self.tip else {
            tracing::warn!(
                template_id = t.template_id,
                "tp: non-future template before any SetNewPrevHash; ignored"
            );
            return;
        };
        let work = work(&t, tip);
        if !self.cfg.fetch_transactions || !self.in_flight.contains(&t.template_id) {
            self.events.push_back(TpEvent::Work(work));
            return;
        }
        let mut until = now + self.cfg.hold_limit;
        if self.held.len() >= MAX_HELD {
            // The oldest's deadline stays the bound: dropping it must not let the wait slide.
            if let Some(dropped) = self.held.pop_front() {
                match self.held.front_mut() {
                    Some(front) => front.until = front.until.min(dropped.until),
                    None => until = until.min(dropped.until),
                }
            }
        }
        self.held.push_back(Held { work, until });
    }

    /// The provider answered for `id`: the answer, then the template it held back, if that was
    /// one (answered with transactions or without, it waits no longer), which supersedes the
    /// ones held before it.
    fn answered(&mut self, id: u64, answer: TpEvent) {
        self.in_flight.retain(|&i| i != id);
        self.events.push_back(answer);
        if let Some(at) = self.held.iter().position(|h| h.work.tdp.template_id == id) {
            let newest = self.held.drain(..=at).next_back();
            self.events.extend(newest.map(|h| TpEvent::Work(h.work)));
        }
    }

    fn on_prev_hash(&mut self, p: SetNewPrevHash) {
        let tip = Tip {
            prev_hash: Hash256(p.prev_hash),
            header_timestamp: p.header_timestamp,
            bits: CompactTarget::from_consensus(p.n_bits),
        };
        self.tip = Some(tip);
        // Templates held for their transactions were built on the old tip.
        self.held.clear();
        let activated = self
            .future
            .iter()
            .position(|t| t.template_id == p.template_id)
            .and_then(|i| self.future.remove(i));
        // Future templates are built on the tip before this one: none of them can activate now.
        self.future.clear();
        match activated {
            Some(t) => self.events.push_back(TpEvent::Work(work(&t, tip))),
            None => tracing::warn!(
                template_id = p.template_id,
                "tp: SetNewPrevHash names no future template we hold"
            ),
        }
    }

    /// The message carrying a found block back to the provider.
    pub fn submit_solution(
        tdp: &TdpTemplate,
        version: u32,
        header_timestamp: u32,
        header_nonce: u32,
        coinbase_tx: Vec<u8>,
    ) -> SubmitSolution {
        SubmitSolution {
            template_id: tdp.template_id,
            version,
            header_timestamp,
            header_nonce,
            coinbase_tx,
        }
    }
}

fn work(t: &NewTemplate, tip: Tip) -> TpWork {
    let tdp = TdpTemplate {
        template_id: t.template_id,
        coinbase_tx_version: t.coinbase_tx_version,
        coinbase_prefix: t.coinbase_prefix.clone(),
        coinbase_tx_input_sequence: t.coinbase_tx_input_sequence,
        coinbase_tx_value_remaining: t.coinbase_tx_value_remaining,
        coinbase_tx_outputs_count: t.coinbase_tx_outputs_count,
        coinbase_tx_outputs: t.coinbase_tx_outputs.clone(),
        coinbase_tx_locktime: t.coinbase_tx_locktime,
        merkle_path: t.merkle_path.iter().map(|h| Hash256(*h)).collect(),
    };
    let template = Template {
        height: parse_bip34_height(&t.coinbase_prefix).unwrap_or(0),
        prev_hash: tip.prev_hash,
        version: t.version,
        bits: tip.bits,
        // The provider's SetNewPrevHash time is the earliest the header may carry.
        curtime: tip.header_timestamp,
        mintime: tip.header_timestamp,
        median_time_past: None,
        coinbase_value: Amount::from_sat(t.coinbase_tx_value_remaining),
        // The commitment is among the provider's required outputs.
        witness_commitment: None,
        transactions: Vec::new().into(),
        longpoll_id: None,
    };
    TpWork {
        template: Arc::new(template),
        tdp: Arc::new(tdp),
    }
}

/// `SubmitSolution` for a block the engine assembled on a provider template (header, a count
/// of one, the coinbase with its witness): the header's version, time and nonce, and the
/// coinbase. `None` when the block is not that shape.
pub fn solution_from_block(tdp: &TdpTemplate, block: &[u8]) -> Option<SubmitSolution> {
    let header = block.get(..80)?;
    // The transaction count of a block of one transaction is the single byte 1.
    if block.get(80) != Some(&1) || block.len() <= 81 {
        return None;
    }
    let word = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&header[at..at + 4]);
        u32::from_le_bytes(w)
    };
    Some(TpSession::submit_solution(
        tdp,
        word(0),
        word(68),
        word(76),
        block[81..].to_vec(),
    ))
}
