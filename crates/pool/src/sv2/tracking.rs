//! Extension 0x0002, worker-specific hashrate tracking, on one extended channel: the workers its
//! shares name, each accounted as an SV1 worker would be (statistics, `/api/workers`, the
//! store), under the channel's account. See docs/operations.md, "Per-worker accounting behind a
//! farm proxy".
//!
//! A name is taken on at the first share of it the pool accepts (an invalid share, which costs
//! nothing to make, names nobody), if the miner's address may bring a new name (the edge's
//! allowance, asked again a second after a refusal, not at every share) and the connection has
//! room ([`MAX_TRACKED_WORKERS`] over all its channels). A name with no share for
//! [`TRACKED_IDLE_MS`] leaves, so that a farm whose devices come and go is not aimed at for
//! devices it no longer has.

use std::collections::HashMap;

use crate::engine::{Engine, Worker};
use crate::Timestamp;

/// Workers one connection's channels may account shares to by `user_identity`, together;
/// shares naming others count for their channel's own worker (and are never refused for it).
pub const MAX_TRACKED_WORKERS: usize = 4_096;

/// A tracked worker with no accepted share for this long leaves its channel (and stops
/// counting in the channel's share-rate aim); a share brings it back.
pub const TRACKED_IDLE_MS: u64 = 600_000;

/// After the edge refused a new name, how long before it is asked again.
const REFUSED_RETRY_MS: u64 = 1_000;

enum Entry {
    Tracked { worker: Worker, added: Timestamp },
    Refused { at: Timestamp },
}

/// The workers named on one channel, by the worker part of their name (see [`tracked_name`]).
#[derive(Default)]
pub(super) struct Tracked {
    entries: HashMap<Box<str>, Entry>,
    workers: usize,
}

/// What [`Tracked::take_on`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TakenOn {
    /// The name was already tracked, or could not be now: nothing changed.
    Unchanged,
    /// A new worker: the channel carries one more.
    Added,
}

impl Tracked {
    /// Workers tracked now.
    pub(super) fn workers(&self) -> usize {
        self.workers
    }

    /// Entries held (workers, and names refused a moment ago): what counts against
    /// [`MAX_TRACKED_WORKERS`].
    pub(super) fn entries(&self) -> usize {
        self.entries.len()
    }

    /// The worker `identity` names on a channel opened for `channel_user`, if tracked.
    pub(super) fn get_mut(&mut self, channel_user: &str, identity: &str) -> Option<&mut Worker> {
        match self.entries.get_mut(key(account(channel_user), identity))? {
            Entry::Tracked { worker, .. } => Some(worker),
            Entry::Refused { .. } => None,
        }
    }

    /// The worker `identity` names, if tracked.
    pub(super) fn get(&self, channel_user: &str, identity: &str) -> Option<&Worker> {
        match self.entries.get(key(account(channel_user), identity))? {
            Entry::Tracked { worker, .. } => Some(worker),
            Entry::Refused { .. } => None,
        }
    }

    /// Takes on the worker `identity` names, after a share of it was accepted: unless tracked
    /// already, refused a moment ago, past the connection's room (`room`: entries it may still
    /// add) or refused by the edge for `origin`. `share_interval_ms`: the mean time between one
    /// worker's shares that the channel aims at. The worker's hash-rate clock starts that long
    /// before the share that revealed it: shares come as a Poisson process, so the expected
    /// wait from any moment to the next share is one mean interval, and a clock started at the
    /// share itself would credit it over no time (overestimating every new worker).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_on(
        &mut self,
        engine: &Engine,
        origin: Option<std::net::IpAddr>,
        channel_user: &str,
        identity: &str,
        room: bool,
        share_interval_ms: u64,
        now: Timestamp,
    ) -> TakenOn {
        let account = account(channel_user);
        let k = key(account, identity);
        match self.entries.get(k) {
            Some(Entry::Tracked { .. }) => return TakenOn::Unchanged,
            Some(Entry::Refused { at }) if now.millis_since(*at) < REFUSED_RETRY_MS => {
                return TakenOn::Unchanged
            }
            Some(Entry::Refused { .. }) => {}
            None if !room => return TakenOn::Unchanged,
            None => {}
        }
        let name = name_of(account, k);
        let entry = if engine.may_add_worker(&name, origin, now) {
            self.workers += 1;
            let since = Timestamp::from_millis(now.as_millis().saturating_sub(share_interval_ms));
            Entry::Tracked {
                worker: engine.attach_worker_since(&name, now, since),
                added: now,
            }
        } else {
            Entry::Refused { at: now }
        };
        let added = matches!(entry, Entry::Tracked { .. });
        self.entries.insert(k.into(), entry);
        if added {
            TakenOn::Added
        } else {
            TakenOn::Unchanged
        }
    }

    /// Lets workers idle for [`TRACKED_IDLE_MS`] go, and forgets refusals old enough to ask
    /// again; whether the workers tracked changed.
    pub(super) fn expire(&mut self, engine: &Engine, now: Timestamp) -> bool {
        let before = self.workers;
        let mut left = 0;
        self.entries.retain(|_, e| match e {
            Entry::Tracked { worker, added } => {
                let last = worker.stats.last_share().unwrap_or(*added).max(*added);
                let idle = now.millis_since(last) >= TRACKED_IDLE_MS;
                if idle {
                    engine.detach_worker(worker, now);
                    left += 1;
                }
                !idle
            }
            Entry::Refused { at } => now.millis_since(*at) < REFUSED_RETRY_MS,
        });
        self.workers -= left;
        self.workers != before
    }

    /// The channel closed: every worker leaves the list.
    pub(super) fn detach_all(&self, engine: &Engine, now: Timestamp) {
        for e in self.entries.values() {
            if let Entry::Tracked { worker, .. } = e {
                engine.detach_worker(worker, now);
            }
        }
    }
}

/// The account of a channel opened for `user` (`account` or `account.worker`).
fn account(user: &str) -> &str {
    user.split('.').next().unwrap_or(user)
}

/// The part of `identity` that tells a worker apart under `account`: its worker part when it
/// names the account (`account.rig`: `rig`; `account` itself: empty), otherwise the whole of
/// it. Two identities with one key name one worker.
fn key<'a>(account: &str, identity: &'a str) -> &'a str {
    match identity.strip_prefix(account) {
        Some("") => "",
        Some(rest) => rest.strip_prefix('.').unwrap_or(identity),
        None => identity,
    }
}

fn name_of(account: &str, key: &str) -> String {
    if key.is_empty() {
        account.to_owned()
    } else {
        format!("{account}.{key}")
    }
}

/// The worker name a share's `user_identity` is accounted under, on a channel opened for
/// `channel_user` (`account` or `account.worker`): an identity that names the channel's
/// account (`account.rig`) as it is, any other under that account (`account.identity`), so
/// that no share is credited to another account than its channel's.
pub fn tracked_name(channel_user: &str, identity: &str) -> String {
    let account = account(channel_user);
    name_of(account, key(account, identity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_under_the_channels_account_and_alike_names_are_one_worker() {
        assert_eq!(tracked_name("acct", "rig"), "acct.rig");
        assert_eq!(tracked_name("acct.proxy", "acct.rig"), "acct.rig");
        assert_eq!(tracked_name("acct.proxy", "acct"), "acct");
        assert_eq!(tracked_name("acct", "acctx.rig"), "acct.acctx.rig");
        assert_eq!(tracked_name("acct", "other.rig"), "acct.other.rig");
        assert_eq!(key("acct", "rig"), key("acct", "acct.rig"));
        assert_ne!(key("acct", "acctx.rig"), key("acct", "x.rig"));
    }
}
