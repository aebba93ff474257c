//! The JDC's sans-IO core: what ties the declarer, the pool channel and the fallback policy
//! together (docs/architecture.md, "One sans-IO contract").
//!
//! Input comes through `handle_*(…, now)`: messages from the JDS and the pool, a link that
//! failed, the embedded pool's templates and tapped shares, the farm's node's transaction
//! data, the outcome of a rejoin, a deadline passed. Output is pulled: [`JdcCore::poll_transmit`]
//! for messages to the JDS or the pool, [`JdcCore::poll_event`] for what the shell does
//! (fetch a template's transactions, try a rejoin, close a link, tell the embedded pool of a
//! payout or extranonce change or a dependency's state), [`JdcCore::poll_timeout`] for when to
//! call [`JdcCore::handle_timeout`]. Time is a [`Timestamp`] on the shell's clock, passed in; the
//! core reads no clock and owns no socket.
//!
//! Contract with the shell: after every `handle_*` call it sends each polled transmit in order
//! and, when a send fails, gives that transmit back through [`JdcCore::handle_send_failed`]
//! before calling anything else. A `PushSolution` counts as pushed once queued, and is kept
//! to push again if its send fails.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use pool::engine::TappedShare;
use pool::jobs::Generation;
use pool::stats::Dependency;
use pool::tp::TxDataReply;
use primitives::bitcoin::consensus::deserialize;
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::{ScriptBuf, Transaction};
use primitives::Timestamp;
use sv2::messages::job_declaration::PushSolution;
use sv2::Message;

use crate::coinbase;
use crate::declarer::{Declaration, Declarer, DeclarerEvent, TxData};
use crate::fallback::{Fallback, FallbackConfig, FallbackReason};
use crate::pool_channel::{CustomJob, OpenedChannel, PoolChannel, PoolChannelStats, PoolEvent};

/// What the JDC has done, for its status line and summary.
#[derive(Clone, Debug, Default)]
pub struct JdcStats {
    /// The pool channels' counts, summed over rejoins.
    pub channel: PoolChannelStats,
    /// Templates the JDS accepted as declared.
    pub declared: u64,
    /// Declarations the JDS refused.
    pub declarations_refused: u64,
    /// Templates never declared because the node's transaction data did not come or did not
    /// decode.
    pub tx_data_failed: u64,
    /// Blocks sent to the JDS as `PushSolution`.
    pub solutions_pushed: u64,
    /// Of those, blocks found while the JDS was away and pushed when it returned.
    pub solutions_pushed_late: u64,
    /// Why the JDC stopped talking to an upstream, if it did.
    pub upstream_lost: Option<String>,
    /// Why the JDC left its pool, if it did (spec 6.2).
    pub fallback: Option<String>,
    /// The devices mine for the farm's own address since the fallback.
    pub solo: bool,
    /// Times the JDC set up its JDS and pool again after leaving them.
    pub rejoined: u64,
    /// Rejoin attempts that failed, and why the latest did.
    pub rejoin_failures: u64,
    /// Why the latest rejoin attempt failed; `None` if none did.
    pub rejoin_error: Option<String>,
}

impl JdcStats {
    /// As `/api/status`'s `jdc` section and the closing summary line give it.
    pub fn to_json(&self) -> serde_json::Value {
        let c = &self.channel;
        serde_json::json!({
            "declared": self.declared,
            "declarations_refused": self.declarations_refused,
            "tx_data_failed": self.tx_data_failed,
            "jobs_set": c.jobs_set,
            "jobs_refused": c.jobs_refused,
            "shares_submitted": c.shares_submitted,
            "shares_accepted": c.shares_accepted,
            "shares_rejected": c.shares_rejected,
            "shares_stale": c.shares_stale,
            "below_target": c.below_target,
            "dropped": c.dropped,
            "foreign": c.foreign,
            "worker_shares": c.worker_shares,
            "solutions_pushed": self.solutions_pushed,
            "solutions_pushed_late": self.solutions_pushed_late,
            "upstream_lost": self.upstream_lost,
            "fallback": self.fallback,
            "solo": self.solo,
            "rejoined": self.rejoined,
            "rejoin_failures": self.rejoin_failures,
            "rejoin_error": self.rejoin_error,
        })
    }
}

/// One of the JDC's two upstream links.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// The pool's Job Declarator Server.
    Jds,
    /// The pool's mining endpoint, where the JDC's channel is.
    Pool,
}

/// A message for one of the upstreams.
#[derive(Debug)]
pub struct Transmit {
    /// Where it goes.
    pub to: Link,
    /// What goes.
    pub message: Message,
    /// Its place in the order transmits were queued, both links together.
    seq: u64,
}

/// What the core asks of its shell.
#[derive(Clone, Debug, PartialEq)]
pub enum CoreEvent {
    /// Ask the farm's Template Provider for the template's transactions; the answer goes to
    /// [`JdcCore::handle_tx_data`].
    FetchTxData {
        /// The embedded pool's generation of the template.
        generation: u64,
        /// The provider's template id.
        template_id: u64,
    },
    /// Set up the JDS and the pool again, off the core; the outcome goes to
    /// [`JdcCore::handle_joined`] or [`JdcCore::handle_join_failed`].
    Rejoin,
    /// The core no longer uses this link: close it.
    Close(Link),
    /// What the embedded pool's coinbases pay from the next job on, instead of the payout it
    /// was started with (`None`: that one again).
    PayoutOverride(Option<ScriptBuf>),
    /// The embedded pool's devices move to extranonce ranges under this prefix.
    ExtranonceBase(Vec<u8>),
    /// One of the JDC's dependencies, for the embedded pool's statistics.
    Dependency {
        /// The JDS or the pool.
        which: Dependency,
        /// Usable now.
        attached: bool,
        /// Why it is not.
        why: Option<String>,
    },
}

/// A JDS and a pool, set up: what they said (the shell keeps their connections).
pub struct Setup {
    /// The declarer, with its first token.
    pub declarer: Declarer,
    /// Declarer events that came with the setup.
    pub early: Vec<DeclarerEvent>,
    /// The pool's payout output, from the JDS's first token.
    pub payout: ScriptBuf,
    /// The pool channel, open.
    pub channel: PoolChannel,
    /// What the pool said when it opened the channel.
    pub opened: OpenedChannel,
}

/// What the core needs besides its first [`Setup`].
#[derive(Clone, Debug)]
pub struct CoreConfig {
    /// The embedded pool's coinbase tag.
    pub tag: Vec<u8>,
    /// The embedded pool's whole extranonce length (the pool channel's prefix and size).
    pub extranonce_len: usize,
    /// When the JDC leaves its pool.
    pub fallback: FallbackConfig,
    /// Where the coinbase pays once the JDC has left its pool; `None` keeps the pool's.
    pub fallback_payout: Option<ScriptBuf>,
}

/// When the JDC tries its JDS and pool again after it left them: one attempt at a time, the
/// first a second after leaving, each failure doubling the wait up to a minute; the wait
/// starts over once the pool accepts a share after a rejoin (a pool that refuses the JDC
/// again at once is tried less and less often).
#[derive(Debug)]
struct Rejoin {
    at: Option<Timestamp>,
    wait: Duration,
    in_flight: bool,
    /// Rejoined, and the pool has not accepted a share since.
    unproven: bool,
}

const REJOIN_FIRST: Duration = Duration::from_secs(1);
const REJOIN_MAX: Duration = Duration::from_secs(60);

impl Default for Rejoin {
    fn default() -> Self {
        Rejoin {
            at: None,
            wait: REJOIN_FIRST,
            in_flight: false,
            unproven: false,
        }
    }
}

impl Rejoin {
    /// Left the upstreams at `now`: the next attempt after the current wait, which doubles.
    fn schedule(&mut self, now: Timestamp) {
        if self.at.is_none() && !self.in_flight {
            self.at = Some(now + self.wait);
            self.wait = (self.wait * 2).min(REJOIN_MAX);
        }
    }

    /// Whether an attempt starts now.
    fn due(&mut self, now: Timestamp) -> bool {
        match self.at {
            Some(t) if now >= t && !self.in_flight => {
                self.at = None;
                self.in_flight = true;
                true
            }
            _ => false,
        }
    }

    fn share_accepted(&mut self) {
        if self.unproven {
            self.unproven = false;
            self.wait = REJOIN_FIRST;
        }
    }
}

/// Generations remembered for declaration and `PushSolution`.
const RECENT_GENERATIONS: usize = 16;

/// Of those, how many newest keep their declaration (transactions included) while the JDS is
/// away, for a block found on one of them to be declared again and pushed when it returns.
const DECLARATIONS_KEPT: usize = 4;

/// Blocks found while the JDS was away, kept to push when it returns. Each holds its template's
/// declaration, transactions included (shared with the others on the same template): on
/// mainnet a farm finds far fewer in any outage; the lab's easy networks find one a second.
const UNPUSHED_KEPT: usize = 32;

/// How long the JDS has to accept a block's template declared again before the block is given
/// up on (declarations for the pool wait meanwhile).
const PUSH_ANSWER: Duration = Duration::from_secs(10);

/// A generation of the embedded pool, with what the JDC made of it.
struct Recent {
    g: Arc<Generation>,
    /// Its custom job, once declared (the token names it to the pool).
    job: Option<CustomJob>,
    /// Its declaration, kept only while the JDS is away or blocks are being pushed.
    declaration: Option<Declaration>,
}

/// A block found while the JDS was away: declared again, then pushed, when it returns.
struct Unpushed {
    share: TappedShare,
    g: Arc<Generation>,
    /// The template's declaration (`None` while its transactions are still being fetched).
    declaration: Option<Declaration>,
    /// Fetches of its transactions asked for since (a provider that no longer answers for the
    /// template is asked twice).
    fetches: u8,
}

/// A `PushSolution` queued or polled whose send is not known to have gone.
enum Push {
    /// A block pushed when found.
    Found(TappedShare),
    /// A block found while the JDS was away, pushed when it returned.
    Late(Unpushed),
}

/// The JDC's state between its upstreams and its embedded pool.
pub struct JdcCore {
    jds_up: bool,
    pool_up: bool,
    declarer: Declarer,
    channel: PoolChannel,
    /// The counts of the pool channels before this one (each rejoin opens another).
    earlier_channels: PoolChannelStats,
    /// What the coinbase pays: the pool's output from the JDS's latest setup.
    payout: ScriptBuf,
    /// The embedded pool's configured payout (from the first setup): a rejoin that brings
    /// another one overrides it.
    first_payout: ScriptBuf,
    /// Where the devices' extranonce ranges lie: the pool channel's prefix, and the bytes
    /// after it that are the JDC's (a new channel must have the same layout).
    base: Vec<u8>,
    extranonce_size: usize,
    config: CoreConfig,
    recent: VecDeque<Recent>,
    stats: JdcStats,
    /// A transaction-data request is in flight: at most one at a time, since a template's
    /// transactions are megabytes and a provider answers them in order with everything else
    /// it sends (a queue of them would delay the next tip).
    fetching: Option<u64>,
    /// The newest generation whose transactions wait for the request in flight to end; older
    /// ones waiting are skipped (a newer template replaces them anyway).
    next_fetch: Option<Arc<Generation>>,
    /// The generation of the JDS's latest `DeclareMiningJob.Success`.
    last_declared: Option<u64>,
    fallback: Fallback,
    /// The pool channel's accepted count last looked at: a rise resets the rejection run.
    accepted_seen: u64,
    rejoin: Rejoin,
    /// Blocks found while the JDS was away, oldest first.
    unpushed: VecDeque<Unpushed>,
    /// The generation declared again to push a block on it, and when, while the JDS has not
    /// answered.
    pushing: Option<(u64, Timestamp)>,
    /// [`JdcCore::push_step`] is to run after the current input.
    push_step_due: bool,
    transmits: VecDeque<Transmit>,
    next_seq: u64,
    events: VecDeque<CoreEvent>,
    /// Pushes by the `seq` of their transmit, until known sent.
    pushes: Vec<(u64, Push)>,
    /// Pushes whose send failed or whose link went first, kept again once the input that lost
    /// them is handled (a fallback to solo mining it led to means they are not the pool's).
    lost_pushes: Vec<Push>,
}

impl JdcCore {
    /// The core of a JDC whose JDS and pool were just set up (both links up).
    pub fn new(config: CoreConfig, setup: Setup, now: Timestamp) -> JdcCore {
        let mut core = JdcCore {
            jds_up: true,
            pool_up: true,
            declarer: setup.declarer,
            channel: setup.channel,
            earlier_channels: PoolChannelStats::default(),
            payout: setup.payout.clone(),
            first_payout: setup.payout,
            base: setup.opened.extranonce_prefix,
            extranonce_size: setup.opened.extranonce_size,
            fallback: Fallback::new(config.fallback.clone()),
            config,
            recent: VecDeque::new(),
            stats: JdcStats::default(),
            fetching: None,
            next_fetch: None,
            last_declared: None,
            accepted_seen: 0,
            rejoin: Rejoin::default(),
            unpushed: VecDeque::new(),
            pushing: None,
            push_step_due: false,
            transmits: VecDeque::new(),
            next_seq: 0,
            events: VecDeque::new(),
            pushes: Vec::new(),
            lost_pushes: Vec::new(),
        };
        core.on_declarer(setup.early, now);
        core.after(now);
        core
    }

    /// What the JDC has done so far.
    pub fn stats(&self) -> &JdcStats {
        &self.stats
    }

    /// Whether the core uses `link` now.
    pub fn is_up(&self, link: Link) -> bool {
        match link {
            Link::Jds => self.jds_up,
            Link::Pool => self.pool_up,
        }
    }

    /// The next message for an upstream.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        // Every transmit polled before this one was sent (the shell reports a failure before
        // polling again).
        self.pushes.retain(|(seq, _)| *seq >= t.seq);
        Some(t)
    }

    /// The next thing the shell is to do.
    pub fn poll_event(&mut self) -> Option<CoreEvent> {
        self.events.pop_front()
    }

    /// When [`JdcCore::handle_timeout`] has something to do, on the shell's clock.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let rejoin = self.rejoin.at.filter(|_| !self.rejoin.in_flight);
        let pushing = self.pushing.map(|(_, since)| since + PUSH_ANSWER);
        [self.fallback.poll_timeout(), rejoin, pushing]
            .into_iter()
            .flatten()
            .min()
    }

    /// A message from the JDS.
    pub fn handle_jds_message(&mut self, m: Message, now: Timestamp) {
        self.before();
        match self.declarer.handle_message(m) {
            Ok(events) => self.on_declarer(events, now),
            Err(e) => self.lose(Link::Jds, e.to_string(), now),
        }
        self.after(now);
    }

    /// A message from the pool.
    pub fn handle_pool_message(&mut self, m: Message, now: Timestamp) {
        self.before();
        match self.channel.handle_message(m) {
            Ok(events) => self.on_pool(events, now),
            Err(e) => self.lose(Link::Pool, e.to_string(), now),
        }
        self.after(now);
    }

    /// A link failed while reading (`why`: the transport's error).
    pub fn handle_link_lost(&mut self, link: Link, why: String, now: Timestamp) {
        self.before();
        self.lose(link, why, now);
        self.after(now);
    }

    /// The send of `t`, polled last, failed: its link is lost, and a block it pushed is kept
    /// to push again.
    pub fn handle_send_failed(&mut self, t: Transmit, why: String, now: Timestamp) {
        // Pushes go to the JDS only: this one, if it was one (those queued after it go with
        // the link, below).
        let failed = self.take_pushes(|seq| seq == t.seq);
        self.lost_pushes.extend(failed);
        self.lose(t.to, why, now);
        self.after(now);
    }

    /// A new generation (template) of the embedded pool.
    pub fn handle_generation(&mut self, g: Arc<Generation>, now: Timestamp) {
        self.before();
        if g.tdp.is_some() && !self.recent.iter().any(|r| r.g.id == g.id) {
            if self.recent.len() >= RECENT_GENERATIONS {
                self.recent.pop_front();
            }
            self.recent.push_back(Recent {
                g: g.clone(),
                job: None,
                declaration: None,
            });
            self.fetch_soon(g);
        }
        self.after(now);
    }

    /// The farm's provider answered for a generation's transactions
    /// ([`CoreEvent::FetchTxData`]).
    pub fn handle_tx_data(&mut self, generation: u64, reply: TxDataReply, now: Timestamp) {
        self.before();
        self.fetching = None;
        self.on_tx_data(generation, reply, now);
        if let Some(g) = self.next_fetch.take() {
            self.fetch(g);
        }
        // A block waiting to be pushed may have its template now, or its turn to be fetched.
        self.push_step_due |= !self.unpushed.is_empty();
        self.after(now);
    }

    /// A share of the devices that meets the pool's target (or is a block).
    pub fn handle_share(&mut self, share: TappedShare, now: Timestamp) {
        self.before();
        if share.block {
            // While the JDS is away, or blocks found then are still being pushed, a block
            // waits its turn behind them.
            if self.jds_up && self.pushing.is_none() && self.unpushed.is_empty() {
                self.push_solution(share.clone());
            } else {
                self.keep_unpushed(&share);
                self.push_step_due = self.jds_up;
            }
        }
        let events = self.channel.share(&share);
        self.send_pool(events);
        self.after(now);
    }

    /// A deadline of [`JdcCore::poll_timeout`] may have passed.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.before();
        if let Some(r) = self.fallback.handle_timeout(now) {
            self.leave_pool(r, now);
        }
        if self.rejoin.due(now) {
            tracing::info!("jdc: trying the JDS and the pool again");
            self.events.push_back(CoreEvent::Rejoin);
        }
        if let Some((generation, since)) = self.pushing {
            if now.since(since) >= PUSH_ANSWER {
                self.pushed_declaration_answered(generation, None);
            }
        }
        self.after(now);
    }

    /// A rejoin attempt set up both upstreams. Whether the core takes them: a channel with
    /// another extranonce layout than the devices' ranges is refused (the shell closes both
    /// connections), and the core waits longer before the next attempt.
    pub fn handle_joined(&mut self, u: Setup, now: Timestamp) -> bool {
        self.before();
        self.rejoin.in_flight = false;
        if u.opened.extranonce_prefix.len() != self.base.len()
            || u.opened.extranonce_size != self.extranonce_size
        {
            let why = format!(
                "the pool's new channel has another extranonce layout ({} + {} bytes, the devices' ranges need {} + {})",
                u.opened.extranonce_prefix.len(),
                u.opened.extranonce_size,
                self.base.len(),
                self.extranonce_size
            );
            self.rejoin_failed(why, now);
            self.after(now);
            return false;
        }
        // The payout first, then the devices' work: every job they get from the move on pays
        // the pool again, in the new channel's range; work sent before (paying the farm, or in
        // the old range) is stale from then on, so no share of it reaches the new channel.
        self.events.push_back(CoreEvent::PayoutOverride(
            (u.payout != self.first_payout).then(|| u.payout.clone()),
        ));
        self.base = u.opened.extranonce_prefix.clone();
        self.events
            .push_back(CoreEvent::ExtranonceBase(u.opened.extranonce_prefix));
        self.jds_up = true;
        self.pool_up = true;
        self.declarer = u.declarer;
        self.earlier_channels = self.earlier_channels + self.channel.stats;
        self.channel = u.channel;
        self.accepted_seen = 0;
        self.fallback = Fallback::new(self.config.fallback.clone());
        if u.payout != self.payout {
            // Coinbases built for the old payout: templates are declared afresh.
            for r in self.recent.iter_mut() {
                r.job = None;
                r.declaration = None;
            }
        }
        self.payout = u.payout;
        // The JDS acknowledged nothing on this connection yet (each declaration gets the new
        // connection's token when the JDS accepts it).
        self.last_declared = None;
        for which in [Dependency::Jds, Dependency::Pool] {
            self.events.push_back(CoreEvent::Dependency {
                which,
                attached: true,
                why: None,
            });
        }
        self.rejoin.unproven = true;
        self.stats.rejoined += 1;
        self.stats.fallback = None;
        self.stats.solo = false;
        tracing::info!(payout = %self.payout, "jdc: rejoined the JDS and the pool");
        self.pushing = None;
        self.on_declarer(u.early, now);
        // The blocks found meanwhile go to the JDS first, then the newest template is
        // declared at once, not at the next one.
        self.push_step(now);
        self.after(now);
        true
    }

    /// A rejoin attempt failed (`why`); the next waits longer.
    pub fn handle_join_failed(&mut self, why: String, now: Timestamp) {
        self.before();
        self.rejoin.in_flight = false;
        self.rejoin_failed(why, now);
        self.after(now);
    }

    /// Every transmit polled so far was sent.
    fn before(&mut self) {
        if self.transmits.is_empty() {
            self.pushes.clear();
        }
    }

    /// What follows any input: the push step it asked for, and the counters it moved.
    fn after(&mut self, now: Timestamp) {
        for p in std::mem::take(&mut self.lost_pushes) {
            self.push_failed(p);
        }
        if self.push_step_due {
            self.push_step(now);
        }
        let stats = self.channel.stats;
        if stats.shares_accepted > self.accepted_seen {
            self.accepted_seen = stats.shares_accepted;
            self.fallback.share_accepted();
            self.rejoin.share_accepted();
        }
        if self.declarer.allocating() == 0 {
            self.fallback.tokens_answered();
        }
        self.stats.channel = self.earlier_channels + stats;
    }

    fn transmit(&mut self, to: Link, message: Message) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.transmits.push_back(Transmit { to, message, seq });
        seq
    }

    fn take_pushes(&mut self, which: impl Fn(u64) -> bool) -> Vec<Push> {
        let mut taken = Vec::new();
        let mut kept = Vec::new();
        for (seq, p) in self.pushes.drain(..) {
            if which(seq) {
                taken.push(p);
            } else {
                kept.push((seq, p));
            }
        }
        self.pushes = kept;
        taken
    }

    /// The core stops using `link`: what was queued for it is dropped, and the shell closes it.
    fn link_down(&mut self, link: Link) {
        let up = match link {
            Link::Jds => &mut self.jds_up,
            Link::Pool => &mut self.pool_up,
        };
        if !std::mem::replace(up, false) {
            return;
        }
        let dropped: Vec<u64> = self
            .transmits
            .iter()
            .filter(|t| t.to == link)
            .map(|t| t.seq)
            .collect();
        self.transmits.retain(|t| t.to != link);
        let failed = self.take_pushes(|seq| dropped.contains(&seq));
        self.lost_pushes.extend(failed);
        self.events.push_back(CoreEvent::Close(link));
    }

    fn dependency_lost(&mut self, which: Dependency, why: &str) {
        self.events.push_back(CoreEvent::Dependency {
            which,
            attached: false,
            why: Some(why.to_owned()),
        });
    }

    fn lose(&mut self, link: Link, why: String, now: Timestamp) {
        let (name, which) = match link {
            Link::Jds => ("JDS", Dependency::Jds),
            Link::Pool => ("pool", Dependency::Pool),
        };
        if !self.is_up(link) {
            return;
        }
        tracing::error!(error = %why, "jdc: {name} lost; devices keep mining the farm's templates");
        self.link_down(link);
        self.dependency_lost(which, &why);
        self.stats.upstream_lost = Some(format!("{name}: {why}"));
        let left = match link {
            Link::Jds => self.fallback.jds_lost(&why),
            Link::Pool => self.fallback.pool_lost(&why),
        };
        if let Some(r) = left {
            self.leave_pool(r, now);
        }
    }

    /// Stops declaring and submitting; the devices mine for the farm from the next template.
    fn leave_pool(&mut self, r: FallbackReason, now: Timestamp) {
        // Connections closed on purpose are failed dependencies all the same: nothing declared
        // or submitted goes through them any more.
        let why = format!("left: {r}");
        self.link_down(Link::Jds);
        self.link_down(Link::Pool);
        self.dependency_lost(Dependency::Jds, &why);
        self.dependency_lost(Dependency::Pool, &why);
        let solo = self.config.fallback_payout.clone();
        match &solo {
            Some(script) => {
                tracing::error!(reason = %r, payout = %script, "jdc: falling back to solo mining on the farm's templates");
                // Jobs from the next template on pay the farm (the farm's node sends one at
                // least every template interval, and at once on a new tip).
                self.events
                    .push_back(CoreEvent::PayoutOverride(Some(script.clone())));
            }
            None => {
                tracing::error!(reason = %r, "jdc: left the pool; no fallback payout address, so the devices keep mining jobs that pay it")
            }
        }
        self.stats.fallback = Some(r.to_string());
        self.stats.solo = solo.is_some();
        self.rejoin.schedule(now);
        if solo.is_none() {
            // The newest template was declared while the JDS was there, so its declaration
            // was not kept: fetched again, for a block found on it meanwhile.
            let newest = self.recent.back();
            if let Some(g) = newest
                .filter(|r| r.declaration.is_none())
                .map(|r| r.g.clone())
            {
                self.fetch_soon(g);
            }
        }
    }

    fn rejoin_failed(&mut self, why: String, now: Timestamp) {
        tracing::warn!(error = %why, "jdc: could not rejoin the JDS and the pool; trying later");
        self.stats.rejoin_failures += 1;
        self.stats.rejoin_error = Some(why);
        self.rejoin.schedule(now);
    }

    /// Fetches `g`'s transactions now, or once the request in flight ends (replacing any
    /// other template waiting: a newer one replaces it anyway); nothing if it is the one in
    /// flight.
    fn fetch_soon(&mut self, g: Arc<Generation>) {
        match self.fetching {
            None => self.fetch(g),
            Some(id) if id == g.id => {}
            Some(_) => self.next_fetch = Some(g),
        }
    }

    fn fetch(&mut self, g: Arc<Generation>) {
        let Some(tdp) = &g.tdp else {
            return;
        };
        self.fetching = Some(g.id);
        tracing::debug!(
            generation = g.id,
            template_id = tdp.template_id,
            "jdc: transaction data requested"
        );
        self.events.push_back(CoreEvent::FetchTxData {
            generation: g.id,
            template_id: tdp.template_id,
        });
    }

    fn on_tx_data(&mut self, generation: u64, reply: TxDataReply, now: Timestamp) {
        let Some(g) = self
            .recent
            .iter()
            .find(|r| r.g.id == generation)
            .map(|r| r.g.clone())
        else {
            return;
        };
        let data = match reply {
            Ok(d) => d,
            Err(e) => {
                tracing::warn!(generation, error = %e, "jdc: no transaction data; template not declared");
                self.stats.tx_data_failed += 1;
                return;
            }
        };
        let tdp = g
            .tdp
            .as_ref()
            .expect("generations kept have a provider template");
        let (custom, declared) = match coinbase::build(
            tdp,
            &self.config.tag,
            self.config.extranonce_len,
            &self.payout,
        ) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(generation, error = %e, "jdc: cannot build the coinbase to declare");
                return;
            }
        };
        tracing::debug!(
            generation,
            txs = data.transaction_list.len(),
            "jdc: transaction data received"
        );
        let mut txs = Vec::with_capacity(data.transaction_list.len());
        for raw in data.transaction_list {
            let Ok(tx) = deserialize::<Transaction>(&raw) else {
                tracing::error!(
                    generation,
                    "jdc: the node sent a transaction that does not decode"
                );
                self.stats.tx_data_failed += 1;
                return;
            };
            txs.push(TxData {
                wtxid: tx.compute_wtxid().to_byte_array(),
                data: raw,
            });
        }
        let job = match g.job(&self.payout) {
            Ok(j) => j,
            Err(e) => {
                tracing::error!(generation, error = %e, "jdc: no job for the generation");
                return;
            }
        };
        let custom_job = CustomJob {
            generation,
            token: Vec::new(),
            version: job.version,
            prev_hash: job.prev_hash,
            min_ntime: job.ntime,
            nbits: job.bits.to_consensus(),
            coinbase: custom,
            merkle_path: g.merkle_branch.iter().map(|h| h.0).collect(),
        };
        if let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) {
            slot.job = Some(custom_job);
        }
        let declaration = Declaration {
            generation,
            version: job.version,
            coinbase_prefix: declared.prefix,
            coinbase_suffix: declared.suffix,
            txs: Arc::from(txs),
        };
        for u in self.unpushed.iter_mut() {
            if u.g.id == generation && u.declaration.is_none() {
                u.declaration = Some(declaration.clone());
            }
        }
        if !self.jds_up || self.pushing.is_some() {
            // Kept (the newest few) for a block found on it meanwhile; declared, if still the
            // newest, once the JDS is back and the blocks found without it are pushed.
            if let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) {
                slot.declaration = Some(declaration);
            }
            let n = self.recent.len();
            for r in self
                .recent
                .iter_mut()
                .take(n.saturating_sub(DECLARATIONS_KEPT))
            {
                r.declaration = None;
            }
            return;
        }
        tracing::debug!(generation, txs = declaration.txs.len(), "jdc: declaring");
        let events = self.declarer.declare(declaration);
        self.on_declarer(events, now);
    }

    /// One step of pushing the blocks found while the JDS was away, on a JDS that is back:
    /// the oldest is declared again (the JDS rebuilds a pushed block from the job it
    /// acknowledged last), and pushed once the JDS accepts the declaration; when none is left,
    /// the newest template is declared for the pool.
    fn push_step(&mut self, now: Timestamp) {
        self.push_step_due = false;
        if !self.jds_up || self.pushing.is_some() {
            return;
        }
        while let Some(u) = self.unpushed.front_mut() {
            let Some(d) = u.declaration.clone() else {
                // Its template's transactions are being fetched (they fill it in and run this
                // again), or are fetched now; a template the provider no longer answers for
                // cannot be declared.
                if self.fetching == Some(u.g.id) {
                    return;
                }
                if u.fetches < 2 {
                    u.fetches += 1;
                    let g = u.g.clone();
                    self.fetch_soon(g);
                    return;
                }
                tracing::warn!(hash = %u.share.hash, generation = u.g.id, "jdc: a block found while the JDS was away cannot be pushed: its template's transactions never came");
                self.unpushed.pop_front();
                continue;
            };
            tracing::info!(hash = %u.share.hash, generation = d.generation, "jdc: declaring a block's template again, to push the block the JDS missed");
            self.pushing = Some((d.generation, now));
            let events = self.declarer.declare(d);
            self.on_declarer(events, now);
            return;
        }
        // Done: the newest template, declared for the pool (its declaration if kept, else
        // fetched again).
        let newest = self
            .recent
            .back_mut()
            .map(|r| (r.g.clone(), r.declaration.take()));
        for r in self.recent.iter_mut() {
            r.declaration = None;
        }
        match newest {
            Some((_, Some(d))) => {
                let events = self.declarer.declare(d);
                self.on_declarer(events, now);
            }
            Some((g, None)) => self.fetch_soon(g),
            None => {}
        }
    }

    /// The JDS answered the declaration of a block's template: push the block if it took it.
    /// `declared`: `None` when the JDS did not answer in time.
    fn pushed_declaration_answered(&mut self, generation: u64, declared: Option<bool>) {
        self.pushing = None;
        self.push_step_due = true;
        let head = self.unpushed.front();
        if head
            .and_then(|u| u.declaration.as_ref())
            .map(|d| d.generation)
            != Some(generation)
        {
            return;
        }
        let u = self.unpushed.pop_front().expect("looked at");
        match declared {
            Some(true) => {}
            Some(false) => {
                tracing::warn!(hash = %u.share.hash, generation, "jdc: the JDS refused a block's template declared again; the block reached the network through the farm's node alone");
                return;
            }
            None => {
                tracing::warn!(hash = %u.share.hash, generation, "jdc: the JDS did not answer a block's template declared again in time; the block reached the network through the farm's node alone");
                return;
            }
        }
        if !self.jds_up {
            // The JDS went again: the block waits for the next rejoin.
            self.unpushed.push_front(u);
            return;
        }
        tracing::info!(hash = %u.share.hash, generation, "jdc: block found while the JDS was away, pushed to it now");
        self.stats.solutions_pushed_late += 1;
        let m = push_message(&u.g, &u.share);
        self.send_push(m, Push::Late(u));
    }

    fn on_declarer(&mut self, events: Vec<DeclarerEvent>, now: Timestamp) {
        for e in events {
            match e {
                DeclarerEvent::Send(m) => {
                    if matches!(
                        m,
                        Message::JobDeclaration(
                            sv2::messages::JobDeclaration::AllocateMiningJobToken(_)
                        )
                    ) {
                        self.fallback.token_asked(now);
                    }
                    if self.jds_up {
                        self.transmit(Link::Jds, m);
                    }
                }
                DeclarerEvent::PoolOutputs(_) => {}
                DeclarerEvent::Declared { generation, .. }
                    if self.pushing.map(|p| p.0) == Some(generation) =>
                {
                    // Declared again only to push a block on it: not a job for the pool.
                    self.last_declared = Some(generation);
                    self.pushed_declaration_answered(generation, Some(true));
                }
                DeclarerEvent::Refused { generation, .. }
                    if self.pushing.map(|p| p.0) == Some(generation) =>
                {
                    self.pushed_declaration_answered(generation, Some(false));
                }
                DeclarerEvent::Declared { generation, token } => {
                    self.stats.declared += 1;
                    self.last_declared = Some(generation);
                    let Some(slot) = self.recent.iter_mut().find(|r| r.g.id == generation) else {
                        continue;
                    };
                    let Some(job) = slot.job.as_mut() else {
                        continue;
                    };
                    job.token = token;
                    let job = job.clone();
                    let events = self.channel.set_custom_job(&job);
                    self.send_pool(events);
                }
                DeclarerEvent::Refused {
                    generation,
                    code,
                    details,
                } => {
                    tracing::warn!(
                        generation,
                        code,
                        details,
                        "jdc: JDS refused the declaration"
                    );
                    self.stats.declarations_refused += 1;
                    self.channel.forget_generation(generation);
                    if let Some(r) = self.fallback.declaration_refused(&code) {
                        self.leave_pool(r, now);
                    }
                }
            }
        }
    }

    fn send_pool(&mut self, events: Vec<PoolEvent>) {
        for e in events {
            if let PoolEvent::Send(m) = e {
                if self.pool_up {
                    self.transmit(Link::Pool, m);
                }
            }
        }
    }

    fn on_pool(&mut self, events: Vec<PoolEvent>, now: Timestamp) {
        let mut sends = Vec::new();
        for e in events {
            match e {
                PoolEvent::Send(_) => sends.push(e),
                PoolEvent::JobSet { generation, job_id } => {
                    tracing::debug!(generation, job_id, "jdc: custom job set");
                }
                PoolEvent::JobRefused { generation, code } => {
                    tracing::warn!(generation, code, "jdc: pool refused the custom job");
                    if let Some(r) = self.fallback.job_refused(&code) {
                        self.leave_pool(r, now);
                    }
                }
                PoolEvent::ShareRejected { generation, code } => {
                    tracing::warn!(generation, code, "jdc: pool rejected a share");
                    let stale = code == sv2::messages::mining::error_code::STALE_SHARE;
                    if let Some(r) = self.fallback.share_rejected(&code, stale) {
                        self.leave_pool(r, now);
                    }
                }
                PoolEvent::TargetChanged(_) | PoolEvent::Opened(_) => {}
                PoolEvent::PrefixChanged(p) if p.len() == self.base.len() => {
                    // The devices' ranges move with it (shares mined before they are told
                    // are counted foreign).
                    tracing::info!(
                        prefix_len = p.len(),
                        "jdc: the pool moved the channel's extranonce prefix; the devices follow"
                    );
                    self.base = p.clone();
                    self.events.push_back(CoreEvent::ExtranonceBase(p));
                }
                PoolEvent::PrefixChanged(p) => {
                    // Another length would change the coinbase's layout under the devices'
                    // jobs: their shares are counted as foreign until the JDC rejoins.
                    tracing::warn!(
                        prefix_len = p.len(),
                        "jdc: the pool moved the channel's extranonce prefix to another length; the devices cannot follow"
                    );
                }
            }
        }
        self.send_pool(sends);
    }

    /// A block found while the JDS is away: the farm's node has it already; the JDS gets it
    /// when it returns, unless the devices mine for the farm (then the block is not the
    /// pool's, and its coinbase is not the one a declaration would pay).
    fn keep_unpushed(&mut self, share: &TappedShare) {
        if self.stats.solo {
            return;
        }
        let Some(r) = self.recent.iter().find(|r| r.g.id == share.generation) else {
            tracing::warn!(generation = share.generation, hash = %share.hash, "jdc: block found on a template no longer remembered; the farm's node propagates it alone");
            return;
        };
        if self.unpushed.len() >= UNPUSHED_KEPT {
            let old = self.unpushed.pop_front().expect("full");
            tracing::warn!(hash = %old.share.hash, "jdc: too many blocks found while the JDS is away; the oldest will not be pushed to it");
        }
        tracing::info!(generation = share.generation, hash = %share.hash, "jdc: block found while the JDS is away; pushed to it when it returns");
        self.unpushed.push_back(Unpushed {
            share: share.clone(),
            g: r.g.clone(),
            declaration: r.declaration.clone(),
            fetches: 0,
        });
    }

    fn push_solution(&mut self, share: TappedShare) {
        // The JDS rebuilds a pushed block from the job it acknowledged last (spec 6.4.9): a
        // block on any other template reaches the network through the farm's node alone.
        let Some(g) = self
            .recent
            .iter()
            .find(|r| r.g.id == share.generation && self.last_declared == Some(r.g.id))
            .map(|r| r.g.clone())
        else {
            tracing::info!(generation = share.generation, last_declared = ?self.last_declared, hash = %share.hash, "jdc: block found on a template other than the last declared; the farm's node propagates it alone");
            return;
        };
        tracing::info!(generation = share.generation, hash = %share.hash, "jdc: block found; pushed to the JDS too");
        let m = push_message(&g, &share);
        self.send_push(m, Push::Found(share));
    }

    /// Queues a `PushSolution` on the JDS link (up: the callers checked).
    fn send_push(&mut self, m: Message, p: Push) {
        let seq = self.transmit(Link::Jds, m);
        self.pushes.push((seq, p));
        self.stats.solutions_pushed += 1;
    }

    /// A push whose send failed: the block waits for the JDS's return.
    fn push_failed(&mut self, p: Push) {
        self.stats.solutions_pushed -= 1;
        match p {
            Push::Found(share) => self.keep_unpushed(&share),
            Push::Late(u) => {
                self.stats.solutions_pushed_late -= 1;
                self.unpushed.push_front(u);
                // The push step that followed it, thinking the JDS there, may have declared
                // the next block's template again: that answer will never come, and waiting
                // for it would give up on this block (now first again) when it times out.
                self.pushing = None;
            }
        }
    }
}

/// The `PushSolution` of a block found on `g`.
fn push_message(g: &Generation, share: &TappedShare) -> Message {
    PushSolution {
        extranonce: share.extranonce.clone(),
        prev_hash: g.template.prev_hash.0,
        nonce: share.nonce,
        ntime: share.ntime,
        nbits: g.template.bits.to_consensus(),
        version: share.version,
    }
    .into()
}
