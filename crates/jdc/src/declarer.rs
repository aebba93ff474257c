//! The Job Declaration client, without I/O: tokens from the JDS, one declaration per template,
//! the transactions the JDS asks for, and what it answered.
//!
//! Tokens are asked for ahead of need (`spare_tokens` of them), so a new template is declared
//! the moment it arrives instead of a round trip later: the time to declare is on the path of
//! every custom job the pool accounts for. When templates come faster than tokens, only the
//! newest waiting one is kept: an older template would be declared only to be replaced.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use primitives::bitcoin::consensus::Decodable;
use primitives::bitcoin::{ScriptBuf, TxOut};
use sv2::messages::common::{job_declaration_flags, protocol, Common};
use sv2::messages::job_declaration::{
    AllocateMiningJobToken, DeclareMiningJob, ProvideMissingTransactionsSuccess,
};
use sv2::messages::{JobDeclaration, Message};

/// A transaction of a declared template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxData {
    /// The transaction's wtxid, internal byte order (what `wtxid_list` carries).
    pub wtxid: [u8; 32],
    /// Serialized with witness data.
    pub data: Vec<u8>,
}

/// One template to declare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declaration {
    /// The embedded engine's generation the template opened: what answers name.
    pub generation: u64,
    /// The block header version the template asks for.
    pub version: u32,
    /// `DeclareMiningJob.coinbase_tx_prefix` ([`crate::coinbase::DeclaredCoinbase::prefix`]).
    pub coinbase_prefix: Vec<u8>,
    /// `DeclareMiningJob.coinbase_tx_suffix`.
    pub coinbase_suffix: Vec<u8>,
    /// The template's transactions in block order, coinbase excluded.
    pub txs: Arc<[TxData]>,
}

/// How the [`Declarer`] talks to the JDS.
#[derive(Clone, Debug)]
pub struct DeclarerConfig {
    /// `AllocateMiningJobToken.user_identifier`.
    pub user_identifier: String,
    /// Tokens kept in hand beyond the one being used.
    pub spare_tokens: usize,
    /// `SetupConnection.endpoint_host`: the JDS's address as the JDC dialled it.
    pub endpoint_host: String,
    /// `SetupConnection.endpoint_port`.
    pub endpoint_port: u16,
}

impl Default for DeclarerConfig {
    fn default() -> Self {
        DeclarerConfig {
            user_identifier: "stratumlab-jdc".into(),
            spare_tokens: 2,
            endpoint_host: String::new(),
            endpoint_port: 0,
        }
    }
}

/// What the [`Declarer`] asks of its shell, or tells it.
#[derive(Clone, Debug, PartialEq)]
pub enum DeclarerEvent {
    /// A message for the JDS.
    Send(Message),
    /// The JDS's first token came with the pool's outputs; the first is the pool payout.
    PoolOutputs(Vec<TxOut>),
    /// The JDS accepted the declaration: this token makes the job the pool's.
    Declared {
        /// The declared template's generation ([`Declaration::generation`]).
        generation: u64,
        /// `DeclareMiningJob.Success.new_mining_job_token`, for `SetCustomMiningJob`.
        token: Vec<u8>,
    },
    /// The JDS refused it (a reason to fall back, spec 6.2).
    Refused {
        /// The refused template's generation.
        generation: u64,
        /// `DeclareMiningJob.Error.error_code`.
        code: String,
        /// `error_details`, lossily decoded as text.
        details: String,
    },
}

/// Why the JDS connection cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeclarerError {
    /// `SetupConnection.Error`, with its error code.
    #[error("JDS refused SetupConnection: {0}")]
    SetupRefused(String),
    /// A Job Declaration message (named) came before the connection was set up.
    #[error("{0} before SetupConnection.Success")]
    BeforeSetup(&'static str),
    /// `AllocateMiningJobToken.Success.coinbase_outputs` are not serialized outputs.
    #[error("the JDS's coinbase outputs do not decode: {0}")]
    Outputs(String),
    /// The JDS's outputs are empty: no pool payout to pay.
    #[error("the JDS's coinbase outputs name no pool payout output")]
    NoPayout,
    /// A message (named) only a JDS receives, or of another protocol.
    #[error("JDS sent {0}, which a client never receives")]
    Unexpected(&'static str),
}

/// The Job Declaration client's state: setup, tokens in hand and asked for, declarations in
/// flight. Feed it the JDS's messages and the templates; send what its events say.
pub struct Declarer {
    cfg: DeclarerConfig,
    ready: bool,
    next_request: u32,
    tokens: VecDeque<Vec<u8>>,
    /// Allocation requests in flight.
    allocating: usize,
    pool_outputs: Option<Vec<TxOut>>,
    waiting: Option<Declaration>,
    in_flight: HashMap<u32, Declaration>,
    /// Answers for requests we no longer track (the JDS is slow), for the status page.
    pub late_answers: u64,
}

impl Declarer {
    /// A client not set up yet; send [`Declarer::setup_connection`] first.
    pub fn new(cfg: DeclarerConfig) -> Declarer {
        Declarer {
            cfg,
            ready: false,
            next_request: 1,
            tokens: VecDeque::new(),
            allocating: 0,
            pool_outputs: None,
            waiting: None,
            in_flight: HashMap::new(),
            late_answers: 0,
        }
    }

    /// The first message on the connection: Job Declaration, Full-Template mode.
    pub fn setup_connection(&self) -> Message {
        crate::pool_channel::setup_connection(
            protocol::JOB_DECLARATION,
            job_declaration_flags::DECLARE_TX_DATA,
            &self.cfg.endpoint_host,
            self.cfg.endpoint_port,
        )
    }

    /// Set up, and the pool's outputs known: declarations can go out.
    pub fn is_ready(&self) -> bool {
        self.ready && self.pool_outputs.is_some()
    }

    /// The pool payout script: the first of the JDS's outputs (spec 6.4.3).
    pub fn pool_payout(&self) -> Option<&ScriptBuf> {
        self.pool_outputs
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| &o.script_pubkey)
    }

    /// Token requests not answered yet.
    pub fn allocating(&self) -> usize {
        self.allocating
    }

    /// Declarations sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_request;
        self.next_request = self.next_request.wrapping_add(1).max(1);
        id
    }

    fn top_up(&mut self, out: &mut Vec<DeclarerEvent>) {
        // One token for the job at hand, `spare_tokens` more for the next templates.
        let want = self.cfg.spare_tokens + 1;
        while self.tokens.len() + self.allocating < want {
            let request_id = self.request_id();
            self.allocating += 1;
            out.push(DeclarerEvent::Send(
                AllocateMiningJobToken {
                    user_identifier: self.cfg.user_identifier.clone(),
                    request_id,
                }
                .into(),
            ));
        }
    }

    /// Declares `d` now if a token is in hand, otherwise as soon as one is (replacing any
    /// template still waiting).
    pub fn declare(&mut self, d: Declaration) -> Vec<DeclarerEvent> {
        let mut out = Vec::new();
        if !self.ready {
            self.waiting = Some(d);
            return out;
        }
        match self.tokens.pop_front() {
            Some(token) => self.send_declaration(d, token, &mut out),
            None => self.waiting = Some(d),
        }
        self.top_up(&mut out);
        out
    }

    fn send_declaration(&mut self, d: Declaration, token: Vec<u8>, out: &mut Vec<DeclarerEvent>) {
        let request_id = self.request_id();
        out.push(DeclarerEvent::Send(
            DeclareMiningJob {
                request_id,
                mining_job_token: token,
                version: d.version,
                coinbase_tx_prefix: d.coinbase_prefix.clone(),
                coinbase_tx_suffix: d.coinbase_suffix.clone(),
                wtxid_list: d.txs.iter().map(|t| t.wtxid).collect(),
                excess_data: Vec::new(),
            }
            .into(),
        ));
        self.in_flight.insert(request_id, d);
    }

    /// One message from the JDS; an error means the connection cannot go on.
    pub fn handle_message(&mut self, m: Message) -> Result<Vec<DeclarerEvent>, DeclarerError> {
        let mut out = Vec::new();
        match m {
            Message::Common(Common::SetupConnectionSuccess(_)) if !self.ready => {
                self.ready = true;
                self.top_up(&mut out);
            }
            Message::Common(Common::SetupConnectionError(e)) if !self.ready => {
                return Err(DeclarerError::SetupRefused(e.error_code));
            }
            Message::Common(c) => return Err(DeclarerError::Unexpected(c.name())),
            Message::JobDeclaration(m) if !self.ready => {
                return Err(DeclarerError::BeforeSetup(m.name()));
            }
            Message::JobDeclaration(m) => self.on_jd(m, &mut out)?,
            other => return Err(DeclarerError::Unexpected(other.name())),
        }
        Ok(out)
    }

    fn on_jd(
        &mut self,
        m: JobDeclaration,
        out: &mut Vec<DeclarerEvent>,
    ) -> Result<(), DeclarerError> {
        match m {
            JobDeclaration::AllocateMiningJobTokenSuccess(s) => {
                self.allocating = self.allocating.saturating_sub(1);
                if self.pool_outputs.is_none() {
                    let outputs =
                        Vec::<TxOut>::consensus_decode(&mut s.coinbase_outputs.as_slice())
                            .map_err(|e| DeclarerError::Outputs(e.to_string()))?;
                    if outputs.is_empty() {
                        return Err(DeclarerError::NoPayout);
                    }
                    self.pool_outputs = Some(outputs.clone());
                    out.push(DeclarerEvent::PoolOutputs(outputs));
                }
                self.tokens.push_back(s.mining_job_token);
                if let Some(d) = self.waiting.take() {
                    let token = self.tokens.pop_front().expect("just pushed");
                    self.send_declaration(d, token, out);
                }
                self.top_up(out);
            }
            JobDeclaration::ProvideMissingTransactions(p) => {
                let Some(d) = self.in_flight.get(&p.request_id) else {
                    self.late_answers += 1;
                    return Ok(());
                };
                // A position past the list is the JDS's mistake; it gets what exists and will
                // refuse the job if it still lacks something.
                let transaction_list = p
                    .unknown_tx_position_list
                    .iter()
                    .filter_map(|&i| d.txs.get(usize::from(i)).map(|t| t.data.clone()))
                    .collect();
                out.push(DeclarerEvent::Send(
                    ProvideMissingTransactionsSuccess {
                        request_id: p.request_id,
                        transaction_list,
                    }
                    .into(),
                ));
            }
            JobDeclaration::DeclareMiningJobSuccess(s) => {
                match self.in_flight.remove(&s.request_id) {
                    Some(d) => out.push(DeclarerEvent::Declared {
                        generation: d.generation,
                        token: s.new_mining_job_token,
                    }),
                    None => self.late_answers += 1,
                }
            }
            JobDeclaration::DeclareMiningJobError(e) => {
                match self.in_flight.remove(&e.request_id) {
                    Some(d) => out.push(DeclarerEvent::Refused {
                        generation: d.generation,
                        code: e.error_code,
                        details: String::from_utf8_lossy(&e.error_details).into_owned(),
                    }),
                    None => self.late_answers += 1,
                }
            }
            other @ (JobDeclaration::AllocateMiningJobToken(_)
            | JobDeclaration::DeclareMiningJob(_)
            | JobDeclaration::ProvideMissingTransactionsSuccess(_)
            | JobDeclaration::PushSolution(_)) => {
                return Err(DeclarerError::Unexpected(other.name()));
            }
        }
        Ok(())
    }
}
