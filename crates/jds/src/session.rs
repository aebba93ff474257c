//! One JDC connection as a sans-IO machine.
//!
//! The shell feeds it decoded messages with the wall-clock time and the mempool view
//! ([`Session::handle_message`]) and a periodic [`Session::handle_tick`]; it takes back blocks to
//! submit ([`Session::poll_event`]), messages to send ([`Session::poll_transmit`]) and, once, a
//! reason to close ([`Session::wants_close`]).
//!
//! Rules, in the order they apply:
//!
//! - `SetupConnection` first: Job Declaration protocol, version 2 in range, `DECLARE_TX_DATA`
//!   set (this JDS runs Full-Template mode only, as the reference one does) and no flag it does
//!   not know; otherwise `SetupConnection.Error` with the spec's code, and the connection ends.
//! - `AllocateMiningJobToken`: an allocated token and the pool's coinbase outputs, at most
//!   [`JdsConfig::allocations_per_second`] (after a burst); faster, the connection is closed.
//! - `DeclareMiningJob`: an allocated token of this JDS, unexpired and not used before; a
//!   coinbase that parses and pays the pool payout script; a witness commitment (if any) that
//!   matches the wtxids; no wtxid twice. Wtxids the mempool lacks are asked for with
//!   `ProvideMissingTransactions`; the answer must hold exactly those transactions, each hashing
//!   to its wtxid, within [`JdsConfig::missing_txs_timeout`]. Then `DeclareMiningJob.Success`
//!   with a declared token committing to the coinbase outputs, and the job becomes the
//!   connection's most recent one.
//! - `PushSolution`: the block is rebuilt from the most recent declared job and handed out for
//!   `submitblock` if its hash meets its nBits.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use pool::jd_token::{OutputsDigest, TokenError};
use primitives::bitcoin::{consensus, Transaction};
use primitives::Hash256;
use sv2::messages::common::{
    self, job_declaration_flags, SetupConnection, SetupConnectionError, SetupConnectionSuccess,
    PROTOCOL_VERSION,
};
use sv2::messages::job_declaration::{
    AllocateMiningJobToken, AllocateMiningJobTokenSuccess, DeclareMiningJob, DeclareMiningJobError,
    DeclareMiningJobSuccess, ProvideMissingTransactions, ProvideMissingTransactionsSuccess,
    PushSolution,
};
use sv2::messages::{Common, JobDeclaration};
use sv2::Message;

use crate::block::{DeclaredJob, FoundBlock};
use crate::coinbase::{CoinbaseError, DeclaredCoinbase};
use crate::config::JdsConfig;
use crate::mempool::{wtxid, Mempool};
use crate::tokens::{RedeemError, TokenIssuer};
use crate::UnixMillis;

/// `DeclareMiningJob.Error` codes this JDS sends: the reference crate's, and one in the spec's
/// `invalid-job-param-value-{field}` form for a coinbase that does not pay the pool (the
/// outputs travel in `coinbase_tx_suffix`).
pub mod error_code {
    pub use sv2::messages::job_declaration::error_code::*;
    /// The code for a coinbase that pays the pool's payout script nothing.
    pub const INVALID_COINBASE_OUTPUTS: &str = "invalid-job-param-value-coinbase-tx-suffix";
}

/// What the session asks of its shell besides sending (docs/architecture.md, "One sans-IO
/// contract": [`Session::poll_event`]).
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Store this block, then submit it to the pool-side node (`submitblock`) until it answers.
    SubmitBlock(FoundBlock),
}

/// Why the session wants its connection closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Close {
    /// `SetupConnection` refused with this code.
    Setup(&'static str),
    /// Token allocations faster than allowed.
    Rate,
    /// A message out of place or malformed; the text says which.
    Protocol(String),
}

impl Close {
    /// The short word for `ConnectionClosed` events.
    pub fn reason(&self) -> &'static str {
        match self {
            Close::Setup(_) => "setup",
            Close::Rate => "rate",
            Close::Protocol(_) => "protocol",
        }
    }
}

/// What a session did, for the role's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// `AllocateMiningJobToken.Success`es sent.
    pub tokens_allocated: u64,
    /// Declarations vouched for (`DeclareMiningJob.Success`).
    pub jobs_declared: u64,
    /// Declarations refused (`DeclareMiningJob.Error`).
    pub jobs_refused: u64,
    /// Transactions asked for in `ProvideMissingTransactions`.
    pub txs_requested: u64,
    /// `PushSolution`s received.
    pub solutions: u64,
    /// Solutions that could not become a block: no declared job, wrong extranonce length,
    /// a hash above the target.
    pub solutions_dropped: u64,
}

/// A declaration waiting for the transactions the mempool lacked.
#[derive(Debug)]
struct Pending {
    coinbase: DeclaredCoinbase,
    wtxids: Vec<Hash256>,
    txs: Vec<Option<Arc<Transaction>>>,
    missing: Vec<u16>,
    outputs: OutputsDigest,
    deadline: UnixMillis,
}

/// A refusal of a declaration: `DeclareMiningJob.Error`'s code and details.
struct Refusal {
    code: &'static str,
    details: String,
}

impl Refusal {
    fn new(code: &'static str, details: impl Into<String>) -> Refusal {
        Refusal {
            code,
            details: details.into(),
        }
    }
}

impl From<CoinbaseError> for Refusal {
    fn from(e: CoinbaseError) -> Refusal {
        Refusal::new(e.code(), e.to_string())
    }
}

/// A token bucket: `burst` at once, `per_second` after.
#[derive(Debug)]
struct Bucket {
    level: f64,
    last: UnixMillis,
}

/// One JDC connection, sans-IO: feed it messages and ticks ([`Session::handle_message`],
/// [`Session::handle_tick`]); take what it wants sent ([`Session::poll_transmit`]) and submitted
/// ([`Session::poll_event`]). The shell takes the events first, so that a pushed block is on its
/// way to the store before anything else is written.
pub struct Session {
    conn: u64,
    cfg: Arc<JdsConfig>,
    tokens: Arc<TokenIssuer>,
    setup: bool,
    allocations: Bucket,
    pending: HashMap<u32, Pending>,
    last_declared: Option<DeclaredJob>,
    transmit: VecDeque<Message>,
    events: VecDeque<Event>,
    close: Option<Close>,
    stats: SessionStats,
}

impl Session {
    /// A session for connection `conn`, before `SetupConnection`.
    pub fn new(conn: u64, cfg: Arc<JdsConfig>, tokens: Arc<TokenIssuer>) -> Session {
        Session {
            conn,
            allocations: Bucket {
                level: cfg.allocation_burst,
                last: UnixMillis(0),
            },
            cfg,
            tokens,
            setup: false,
            pending: HashMap::new(),
            last_declared: None,
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            close: None,
            stats: SessionStats::default(),
        }
    }

    /// The connection id it was made with.
    pub fn conn(&self) -> u64 {
        self.conn
    }

    /// Its counters so far.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }

    /// Why the connection should be closed; `None` while it may stay open.
    pub fn wants_close(&self) -> Option<&Close> {
        self.close.as_ref()
    }

    /// The next message to send to the JDC, in order; `None` when there is none.
    pub fn poll_transmit(&mut self) -> Option<Message> {
        self.transmit.pop_front()
    }

    /// The next thing the shell must do besides sending; `None` when there is none.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The most recent declared job, which `PushSolution` builds on.
    pub fn last_declared(&self) -> Option<&DeclaredJob> {
        self.last_declared.as_ref()
    }

    /// Declarations waiting for transactions.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    fn send(&mut self, m: impl Into<Message>) {
        self.transmit.push_back(m.into());
    }

    fn protocol_error(&mut self, why: String) {
        tracing::debug!(conn = self.conn, why, "jds: closing");
        self.close = Some(Close::Protocol(why));
    }

    /// Handles one message from the JDC at `now`, looking transactions up in `mempool`.
    pub fn handle_message(&mut self, m: Message, now: UnixMillis, mempool: &dyn Mempool) {
        if self.close.is_some() {
            return;
        }
        match (self.setup, m) {
            (false, Message::Common(Common::SetupConnection(s))) => self.on_setup(s),
            (true, Message::Common(Common::SetupConnection(_))) => {
                self.protocol_error("SetupConnection repeated".into())
            }
            (false, other) => {
                self.protocol_error(format!("{} before SetupConnection", other.name()))
            }
            (true, Message::JobDeclaration(m)) => match m {
                JobDeclaration::AllocateMiningJobToken(m) => self.on_allocate(m, now),
                JobDeclaration::DeclareMiningJob(m) => self.on_declare(m, now, mempool),
                JobDeclaration::ProvideMissingTransactionsSuccess(m) => self.on_provided(m, now),
                JobDeclaration::PushSolution(m) => self.on_solution(m),
                other => self.protocol_error(format!("unexpected {}", other.name())),
            },
            (true, other) => self.protocol_error(format!("unexpected {}", other.name())),
        }
    }

    /// Refuses declarations whose transactions did not come in time.
    pub fn handle_tick(&mut self, now: UnixMillis) {
        let mut late: Vec<u32> = self
            .pending
            .iter()
            .filter(|(_, p)| now > p.deadline)
            .map(|(id, _)| *id)
            .collect();
        late.sort_unstable();
        for id in late {
            let p = self.pending.remove(&id).expect("listed");
            self.refuse(
                id,
                Refusal::new(
                    error_code::MISSING_TXS,
                    format!(
                        "{} requested transactions were not provided within {:?}",
                        p.missing.len(),
                        self.cfg.missing_txs_timeout
                    ),
                ),
            );
        }
    }

    fn on_setup(&mut self, s: SetupConnection) {
        let refusal = if s.protocol != common::protocol::JOB_DECLARATION {
            Some((common::error_code::UNSUPPORTED_PROTOCOL, 0))
        } else if !(s.min_version..=s.max_version).contains(&PROTOCOL_VERSION) {
            Some((common::error_code::PROTOCOL_VERSION_MISMATCH, 0))
        } else if s.flags & !job_declaration_flags::DECLARE_TX_DATA != 0 {
            Some((
                common::error_code::UNSUPPORTED_FEATURE_FLAGS,
                s.flags & !job_declaration_flags::DECLARE_TX_DATA,
            ))
        } else if s.flags & job_declaration_flags::DECLARE_TX_DATA == 0 {
            Some((common::error_code::MISSING_DECLARE_TX_DATA_FLAG, 0))
        } else {
            None
        };
        if let Some((code, flags)) = refusal {
            tracing::info!(
                conn = self.conn,
                code,
                protocol = s.protocol,
                flags = s.flags,
                "jds: SetupConnection refused"
            );
            self.send(SetupConnectionError {
                flags,
                error_code: code.into(),
            });
            self.close = Some(Close::Setup(code));
            return;
        }
        tracing::debug!(conn = self.conn, vendor = %s.vendor, "jds: connection set up");
        self.setup = true;
        self.send(SetupConnectionSuccess {
            used_version: PROTOCOL_VERSION,
            flags: 0,
        });
    }

    fn on_allocate(&mut self, m: AllocateMiningJobToken, now: UnixMillis) {
        if !self.take_allocation(now) {
            tracing::warn!(conn = self.conn, user = %m.user_identifier, "jds: token allocations too fast; closing");
            self.close = Some(Close::Rate);
            return;
        }
        self.stats.tokens_allocated += 1;
        let token = self.tokens.allocate(now);
        self.send(AllocateMiningJobTokenSuccess {
            request_id: m.request_id,
            mining_job_token: token,
            coinbase_outputs: self.cfg.coinbase_outputs(),
        });
    }

    fn take_allocation(&mut self, now: UnixMillis) -> bool {
        let b = &mut self.allocations;
        let elapsed = now.0.saturating_sub(b.last.0) as f64 / 1000.0;
        b.last = now;
        b.level =
            (b.level + elapsed * self.cfg.allocations_per_second).min(self.cfg.allocation_burst);
        if b.level >= 1.0 {
            b.level -= 1.0;
            true
        } else {
            false
        }
    }

    fn refuse(&mut self, request_id: u32, r: Refusal) {
        tracing::info!(conn = self.conn, request_id, code = r.code, details = %r.details, "jds: declared job refused");
        self.stats.jobs_refused += 1;
        self.send(DeclareMiningJobError {
            request_id,
            error_code: r.code.into(),
            error_details: r.details.into_bytes(),
        });
    }

    fn on_declare(&mut self, m: DeclareMiningJob, now: UnixMillis, mempool: &dyn Mempool) {
        let request_id = m.request_id;
        if self.pending.contains_key(&request_id) {
            return self.refuse(
                request_id,
                Refusal::new(
                    error_code::INVALID_JOB,
                    "a declaration with this request_id awaits its transactions",
                ),
            );
        }
        if self.pending.len() >= self.cfg.max_pending_declarations {
            return self.refuse(
                request_id,
                Refusal::new(
                    error_code::INVALID_JOB,
                    format!(
                        "{} declarations already await their transactions",
                        self.pending.len()
                    ),
                ),
            );
        }
        match self.check_declaration(&m, now, mempool) {
            Err(r) => self.refuse(request_id, r),
            Ok(p) if p.missing.is_empty() => self.declare(request_id, p, now),
            Ok(p) => {
                self.stats.txs_requested += p.missing.len() as u64;
                self.send(ProvideMissingTransactions {
                    request_id,
                    unknown_tx_position_list: p.missing.clone(),
                });
                self.pending.insert(request_id, p);
            }
        }
    }

    /// Everything that can be checked before the transactions are all known.
    fn check_declaration(
        &self,
        m: &DeclareMiningJob,
        now: UnixMillis,
        mempool: &dyn Mempool,
    ) -> Result<Pending, Refusal> {
        self.tokens
            .redeem(&m.mining_job_token, now)
            .map_err(|e| Refusal::new(error_code::INVALID_MINING_JOB_TOKEN, token_details(e)))?;
        let coinbase = DeclaredCoinbase::parse(&m.coinbase_tx_prefix, &m.coinbase_tx_suffix)?;
        if !coinbase.pays(&self.cfg.payout_script) {
            return Err(CoinbaseError::NoPoolPayout.into());
        }
        let wtxids: Vec<Hash256> = m.wtxid_list.iter().map(|w| Hash256(*w)).collect();
        let mut seen = HashSet::with_capacity(wtxids.len());
        if let Some(dup) = wtxids.iter().position(|w| !seen.insert(*w)) {
            return Err(Refusal::new(
                error_code::INVALID_JOB,
                format!("wtxid at position {dup} ({}) is listed twice", wtxids[dup]),
            ));
        }
        coinbase.check_commitment(&wtxids)?;
        let txs: Vec<Option<Arc<Transaction>>> = wtxids.iter().map(|w| mempool.get(w)).collect();
        let missing = txs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_none())
            .map(|(i, _)| i as u16)
            .collect();
        Ok(Pending {
            outputs: OutputsDigest::of(coinbase.outputs()),
            coinbase,
            wtxids,
            txs,
            missing,
            deadline: now.plus(self.cfg.missing_txs_timeout),
        })
    }

    fn on_provided(&mut self, m: ProvideMissingTransactionsSuccess, now: UnixMillis) {
        let Some(mut p) = self.pending.remove(&m.request_id) else {
            tracing::debug!(
                conn = self.conn,
                request_id = m.request_id,
                "jds: transactions for no pending declaration"
            );
            return;
        };
        if m.transaction_list.len() != p.missing.len() {
            return self.refuse(
                m.request_id,
                Refusal::new(
                    error_code::MISSING_TXS,
                    format!(
                        "{} transactions provided for the {} requested",
                        m.transaction_list.len(),
                        p.missing.len()
                    ),
                ),
            );
        }
        for (raw, &pos) in m.transaction_list.iter().zip(&p.missing) {
            let tx: Transaction = match consensus::deserialize(raw) {
                Ok(tx) => tx,
                Err(e) => {
                    return self.refuse(
                        m.request_id,
                        Refusal::new(
                            error_code::INVALID_JOB,
                            format!("transaction for position {pos} does not parse: {e}"),
                        ),
                    )
                }
            };
            let got = wtxid(&tx);
            let want = p.wtxids[pos as usize];
            if got != want {
                return self.refuse(
                    m.request_id,
                    Refusal::new(
                        error_code::INVALID_JOB,
                        format!(
                            "transaction for position {pos} has wtxid {got}, the declaration lists {want}"
                        ),
                    ),
                );
            }
            p.txs[pos as usize] = Some(Arc::new(tx));
        }
        p.missing.clear();
        self.declare(m.request_id, p, now);
    }

    /// Every transaction is known: the last checks, then the declared token.
    fn declare(&mut self, request_id: u32, p: Pending, now: UnixMillis) {
        let txs: Vec<Arc<Transaction>> = p.txs.into_iter().map(|t| t.expect("all known")).collect();
        if !p.coinbase.has_commitment() {
            if let Some(i) = txs
                .iter()
                .position(|t| t.input.iter().any(|i| !i.witness.is_empty()))
            {
                return self.refuse(
                    request_id,
                    Refusal::new(
                        error_code::INVALID_COINBASE_TX,
                        format!("transaction at position {i} has witness data but the coinbase commits to none"),
                    ),
                );
            }
        }
        let token = self.tokens.declare(p.outputs, now);
        self.stats.jobs_declared += 1;
        tracing::debug!(
            conn = self.conn,
            request_id,
            txs = txs.len(),
            "jds: job declared"
        );
        self.last_declared = Some(DeclaredJob::new(request_id, p.coinbase, txs));
        self.send(DeclareMiningJobSuccess {
            request_id,
            new_mining_job_token: token,
        });
    }

    fn on_solution(&mut self, s: PushSolution) {
        self.stats.solutions += 1;
        let Some(job) = &self.last_declared else {
            tracing::warn!(
                conn = self.conn,
                "jds: PushSolution without a declared job; dropped"
            );
            self.stats.solutions_dropped += 1;
            return;
        };
        match job.rebuild(&s) {
            Ok(b) if b.meets_target => {
                tracing::info!(conn = self.conn, hash = %b.hash, height = ?b.height, request_id = job.request_id, "jds: block pushed by the client");
                self.events.push_back(Event::SubmitBlock(b));
            }
            Ok(b) => {
                tracing::warn!(conn = self.conn, hash = %b.hash, "jds: PushSolution above its target (high-hash); not submitted");
                self.stats.solutions_dropped += 1;
            }
            Err(e) => {
                tracing::warn!(conn = self.conn, error = %e, "jds: PushSolution does not fit the declared job; dropped");
                self.stats.solutions_dropped += 1;
            }
        }
    }
}

fn token_details(e: RedeemError) -> String {
    match e {
        RedeemError::Invalid(TokenError::Expired(ms)) => format!("token expired {ms} ms ago"),
        RedeemError::Invalid(TokenError::WrongKind { .. }) => {
            "not an allocated token (a declared token cannot declare again)".into()
        }
        RedeemError::Invalid(
            e @ (TokenError::Mac | TokenError::Length(_) | TokenError::Kind(_)),
        ) => {
            format!("not a token of this JDS: {e}")
        }
        RedeemError::Reused => e.to_string(),
    }
}
