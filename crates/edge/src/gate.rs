//! The gate of one listener: who may connect, the slot each admitted connection holds, bans,
//! and the counts an operator reads in `/api/status` (`admission`) and `/metrics`.
//!
//! A connection is admitted by [`Gate::admit`], which hands out a [`Slot`]: the connection
//! counts against `--max-connections` and `--max-connections-per-ip` for exactly as long as
//! the slot lives. The slot is released by its `Drop`, so a task that panics or returns early
//! gives its place back like one that closed normally; [`Slot::close`] only adds the reason to
//! the counts. Time is passed in ([`Timestamp`]); the gate reads no clock.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use primitives::Timestamp;
use serde::Serialize;

use crate::admission::Admission;
use crate::limit::{BanList, Decision, FastHash, FastHasher, Rate, RateLimiter};
use crate::listen::{listen_overflows, ListenerQueue, Listeners};

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The address is banned.
    Banned,
    /// The role holds `--max-connections` already.
    MaxConnections,
    /// The address holds `--max-connections-per-ip` already.
    MaxConnectionsPerIp,
    /// The address connects faster than `--connect-rate` (past its burst).
    ConnectRate,
    /// The connect limiter tracks as many addresses as it may, all of them active.
    TableFull,
}

impl Refusal {
    /// Every reason, in the order counters are kept.
    pub const ALL: [Refusal; 5] = [
        Refusal::Banned,
        Refusal::MaxConnections,
        Refusal::MaxConnectionsPerIp,
        Refusal::ConnectRate,
        Refusal::TableFull,
    ];

    /// The label in `/api/status` and `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Banned => "banned",
            Refusal::MaxConnections => "max_connections",
            Refusal::MaxConnectionsPerIp => "max_connections_per_ip",
            Refusal::ConnectRate => "connect_rate",
            Refusal::TableFull => "table_full",
        }
    }
}

/// Why an address was banned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BanReason {
    /// Kept connecting while refused for the connect rate.
    ConnectFlood,
    /// Sent `--invalid-share-ban-after` rejected shares in a row.
    InvalidShares,
    /// Sent a burst of messages its role could not read.
    MalformedMessages,
    /// Failed a burst of handshakes (Noise, or SV1 subscribe and authorize).
    HandshakeFailures,
}

impl BanReason {
    /// Every reason, in the order counters are kept.
    pub const ALL: [BanReason; 4] = [
        BanReason::ConnectFlood,
        BanReason::InvalidShares,
        BanReason::MalformedMessages,
        BanReason::HandshakeFailures,
    ];

    /// The label in `/api/status` and `/metrics`.
    pub fn as_str(self) -> &'static str {
        match self {
            BanReason::ConnectFlood => "connect_flood",
            BanReason::InvalidShares => "invalid_shares",
            BanReason::MalformedMessages => "malformed_messages",
            BanReason::HandshakeFailures => "handshake_failures",
        }
    }
}

/// Failed handshakes or malformed sessions an address may cause quickly before it is banned:
/// a few are a misconfigured miner, twenty in a burst is a scanner or an attack.
const STRIKES: Rate = Rate {
    per_second: 1.0,
    burst: 20.0,
};

/// Refusals for the connect rate an address may collect before its flood earns a ban.
const REFUSALS: Rate = Rate {
    per_second: 10.0,
    burst: 1_000.0,
};

/// New worker names one address may bring per second once its burst (the per-address
/// connection cap) is spent.
pub const NEW_WORKERS_PER_SECOND: f64 = 1.0;

fn new_worker_rate(a: &Admission) -> Rate {
    Rate {
        per_second: NEW_WORKERS_PER_SECOND,
        burst: a.max_connections_per_ip.max(1) as f64,
    }
}

/// Addresses each limiter tracks at once (its memory bound).
const TRACKED_ADDRESSES: usize = 100_000;

/// Reported by a slot dropped without [`Slot::close`]: its task panicked or returned early.
pub const DROPPED: &str = "task ended";

/// One listener's admission state, shared by its accept loop and its connections: the caps,
/// rates and bans of [`Admission`], and the counts they produced.
pub struct Gate {
    admission: Admission,
    open: AtomicUsize,
    per_ip: Box<[Mutex<HashMap<IpAddr, u32, FastHash>>]>,
    connect: RateLimiter<IpAddr>,
    refusals: RateLimiter<IpAddr>,
    strikes: RateLimiter<IpAddr>,
    /// Worker names never seen before, per address: one address cannot make the pool keep
    /// thousands of workers it invents.
    new_workers: RateLimiter<IpAddr>,
    bans: BanList<IpAddr>,
    refused: [AtomicU64; Refusal::ALL.len()],
    banned: [AtomicU64; BanReason::ALL.len()],
    /// Closes by the shell's reason (a fixed vocabulary per role, so a short list).
    closed: Mutex<Vec<(&'static str, u64)>>,
    refused_workers: AtomicU64,
    /// The sockets it admits from, whose accept queues the snapshot reads.
    listeners: Listeners,
}

/// The counts `/api/status` shows as `admission` (and `/metrics` as `admission_*`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AdmissionSnapshot {
    /// Open connections.
    pub connections: usize,
    /// Connections refused at accept, by [`Refusal`] (every reason present, zeros included).
    pub refused: BTreeMap<&'static str, u64>,
    /// Connections closed, by the role's reason.
    pub closed: BTreeMap<&'static str, u64>,
    /// Bans imposed since start, by [`BanReason`] (every reason present).
    pub bans: BTreeMap<&'static str, u64>,
    /// Addresses banned now.
    pub bans_active: usize,
    /// Worker names refused because their address brought too many new ones.
    pub workers_refused: u64,
    /// The accept queue of each listener the role watches ([`Gate::listeners`]), read from
    /// the kernel when the snapshot was taken.
    pub accept_queues: Vec<ListenerQueue>,
    /// Handshake packets dropped for a full accept queue, counted by the kernel for the whole
    /// network namespace ([`crate::listen::listen_overflows`]), so the same figure on every
    /// role that shares one; `None` (and absent from the JSON) where it cannot be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netns_listen_overflows: Option<u64>,
}

impl Gate {
    /// A gate enforcing `admission`, nothing admitted or refused yet.
    pub fn new(admission: Admission) -> Arc<Gate> {
        Arc::new(Gate {
            connect: RateLimiter::new(admission.connect_rate, TRACKED_ADDRESSES),
            refusals: RateLimiter::new(REFUSALS, TRACKED_ADDRESSES),
            strikes: RateLimiter::new(STRIKES, TRACKED_ADDRESSES),
            new_workers: RateLimiter::new(new_worker_rate(&admission), TRACKED_ADDRESSES),
            admission,
            open: AtomicUsize::new(0),
            per_ip: (0..16)
                .map(|_| Mutex::new(HashMap::with_hasher(FastHash)))
                .collect(),
            bans: BanList::default(),
            refused: Default::default(),
            banned: Default::default(),
            closed: Mutex::new(Vec::new()),
            refused_workers: AtomicU64::new(0),
            listeners: Listeners::default(),
        })
    }

    /// The listeners this gate admits from: a role watches each one it accepts miners on, so
    /// that the snapshot shows its accept queue.
    pub fn listeners(&self) -> &Listeners {
        &self.listeners
    }

    /// The limits it enforces.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Open connections (slots held).
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Open connections from `ip`.
    pub fn connections_from(&self, ip: IpAddr) -> usize {
        self.per_ip_shard(&ip).get(&ip).copied().unwrap_or(0) as usize
    }

    /// May `ip` connect at `now`? The slot it gets must live as long as the connection.
    pub fn admit(self: &Arc<Self>, ip: IpAddr, now: Timestamp) -> Result<Slot, Refusal> {
        let refused = self.check(ip, now);
        if let Err(why) = refused {
            self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
        }
        refused?;
        Ok(Slot {
            gate: Some(self.clone()),
            ip,
        })
    }

    fn check(&self, ip: IpAddr, now: Timestamp) -> Result<(), Refusal> {
        if self.bans.is_banned(&ip, now) {
            return Err(Refusal::Banned);
        }
        if self.open.load(Ordering::Relaxed) >= self.admission.max_connections {
            return Err(Refusal::MaxConnections);
        }
        if self.connections_from(ip) >= self.admission.max_connections_per_ip {
            return Err(Refusal::MaxConnectionsPerIp);
        }
        match self.connect.check(ip, now) {
            Decision::Allow => {}
            Decision::Limit => {
                // Over the rate: refuse this one; refused again and again, it is a flood.
                if self.refusals.check(ip, now) == Decision::Limit {
                    self.ban(ip, now, BanReason::ConnectFlood);
                }
                return Err(Refusal::ConnectRate);
            }
            Decision::Untracked => return Err(Refusal::TableFull),
        }
        // Counted under the shard's lock, so concurrent accepts from one address cannot both
        // take its last place, and the total taken by compare-and-swap, so concurrent accepts
        // from different addresses cannot both take the pool's last one.
        let mut shard = self.per_ip_shard(&ip);
        let n = shard.entry(ip).or_insert(0);
        if *n as usize >= self.admission.max_connections_per_ip {
            return Err(Refusal::MaxConnectionsPerIp);
        }
        let max = self.admission.max_connections;
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |open| {
                (open < max).then_some(open + 1)
            });
        if taken.is_err() {
            if *n == 0 {
                // No empty entries left behind for addresses that hold nothing.
                shard.remove(&ip);
            }
            return Err(Refusal::MaxConnections);
        }
        *n += 1;
        Ok(())
    }

    /// Bans `ip` for `--ban-duration` from `now`.
    pub fn ban(&self, ip: IpAddr, now: Timestamp, why: BanReason) {
        self.bans.ban(ip, now + self.admission.ban_duration);
        self.banned[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Whether `ip` is banned at `now`.
    pub fn is_banned(&self, ip: IpAddr, now: Timestamp) -> bool {
        self.bans.is_banned(&ip, now)
    }

    /// One failed handshake or malformed session from `ip`; a burst of them bans it.
    /// Returns whether this one did.
    pub fn strike(&self, ip: IpAddr, now: Timestamp, why: BanReason) -> bool {
        if self.strikes.check(ip, now) == Decision::Limit && !self.bans.is_banned(&ip, now) {
            self.ban(ip, now, why);
            return true;
        }
        false
    }

    /// May a connection from `ip` name a worker the role has never seen, at `now`? A farm
    /// behind one address may bring as many new names at once as it may open connections;
    /// after that, [`NEW_WORKERS_PER_SECOND`].
    pub fn new_worker(&self, ip: IpAddr, now: Timestamp) -> bool {
        let allowed = self.new_workers.check(ip, now) == Decision::Allow;
        if !allowed {
            self.refused_workers.fetch_add(1, Ordering::Relaxed);
        }
        allowed
    }

    /// The counts as of `now`, for `/api/status` and `/metrics`. Besides the gate's own
    /// counts, it asks the kernel for the listeners' accept queues and the namespace's
    /// overflow count: the one part of the edge the gate does not decide.
    pub fn snapshot(&self, now: Timestamp) -> AdmissionSnapshot {
        let closed = self
            .closed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        AdmissionSnapshot {
            connections: self.connections(),
            refused: Refusal::ALL
                .iter()
                .map(|r| {
                    (
                        r.as_str(),
                        self.refused[*r as usize].load(Ordering::Relaxed),
                    )
                })
                .collect(),
            closed,
            bans: BanReason::ALL
                .iter()
                .map(|r| (r.as_str(), self.banned[*r as usize].load(Ordering::Relaxed)))
                .collect(),
            bans_active: self.bans.sweep(now),
            workers_refused: self.refused_workers.load(Ordering::Relaxed),
            accept_queues: self.listeners.queues(),
            netns_listen_overflows: listen_overflows(),
        }
    }

    fn release(&self, ip: IpAddr, reason: &'static str) {
        {
            let mut shard = self.per_ip_shard(&ip);
            if let Some(n) = shard.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    shard.remove(&ip);
                }
            }
        }
        self.open.fetch_sub(1, Ordering::Relaxed);
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        match closed.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => closed.push((reason, 1)),
        }
    }

    fn per_ip_shard(&self, ip: &IpAddr) -> MutexGuard<'_, HashMap<IpAddr, u32, FastHash>> {
        let mut h = FastHasher::default();
        ip.hash(&mut h);
        let i = (h.finish() >> 60) as usize & (self.per_ip.len() - 1);
        self.per_ip[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("admission", &self.admission)
            .field("connections", &self.connections())
            .finish()
    }
}

/// An admitted connection's place in its gate, released when dropped.
pub struct Slot {
    /// Taken when the slot is released (kept small: every connection's task holds one).
    gate: Option<Arc<Gate>>,
    ip: IpAddr,
}

impl Slot {
    /// The peer's address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }

    /// Releases the slot, counting the close under `reason` (the shell's own words).
    pub fn close(mut self, reason: &'static str) {
        if let Some(gate) = self.gate.take() {
            gate.release(self.ip, reason);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release(self.ip, DROPPED);
        }
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("ip", &self.ip).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::time::Duration;

    fn ip(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
    }

    fn gate(total: usize, per_ip: usize, burst: f64) -> Arc<Gate> {
        Gate::new(Admission {
            max_connections: total,
            max_connections_per_ip: per_ip,
            connect_rate: Rate {
                per_second: 1.0,
                burst,
            },
            ban_duration: Duration::from_secs(60),
            ..Admission::default()
        })
    }

    #[test]
    fn one_address_gets_its_cap_and_the_others_the_rest() {
        let g = gate(10, 3, 100.0);
        let t = Timestamp::from_millis(1_000);
        let a: Vec<Slot> = (0..3).map(|_| g.admit(ip(1), t).unwrap()).collect();
        assert_eq!(g.admit(ip(1), t).unwrap_err(), Refusal::MaxConnectionsPerIp);
        let b: Vec<Slot> = (0..7).map(|i| g.admit(ip(2 + i / 3), t).unwrap()).collect();
        assert_eq!(g.admit(ip(9), t).unwrap_err(), Refusal::MaxConnections);
        assert_eq!(g.connections(), 10);
        drop(a);
        assert_eq!(g.connections_from(ip(1)), 0);
        assert!(g.admit(ip(1), t).is_ok(), "a freed place is taken again");
        let s = g.snapshot(t);
        assert_eq!(s.refused["max_connections_per_ip"], 1);
        assert_eq!(s.refused["max_connections"], 1);
        assert_eq!(
            s.closed[DROPPED], 4,
            "3 dropped + the one admitted just now"
        );
        drop(b);
        assert_eq!(g.connections(), 0);
    }

    #[test]
    fn a_slot_is_released_when_its_task_panics() {
        let g = gate(1, 1, 100.0);
        let slot = g.admit(ip(1), Timestamp::from_millis(0)).unwrap();
        let task = std::thread::spawn(move || {
            let _held = slot;
            panic!("connection task fails");
        });
        assert!(task.join().is_err());
        assert_eq!(g.connections(), 0);
        assert!(g.admit(ip(1), Timestamp::from_millis(0)).is_ok());
    }

    #[test]
    fn closes_are_counted_by_reason() {
        let g = gate(10, 10, 100.0);
        g.admit(ip(1), Timestamp::from_millis(0))
            .unwrap()
            .close("write timeout");
        g.admit(ip(1), Timestamp::from_millis(0))
            .unwrap()
            .close("write timeout");
        g.admit(ip(1), Timestamp::from_millis(0))
            .unwrap()
            .close("closed by peer");
        let s = g.snapshot(Timestamp::from_millis(0));
        assert_eq!(s.closed["write timeout"], 2);
        assert_eq!(s.closed["closed by peer"], 1);
        assert_eq!(s.connections, 0);
    }

    #[test]
    fn a_reconnect_flood_is_banned_and_the_ban_expires() {
        let g = gate(100_000, 100_000, 5.0);
        let t = Timestamp::from_millis(10_000);
        let mut allowed = 0;
        for _ in 0..2_000 {
            if let Ok(s) = g.admit(ip(1), t) {
                allowed += 1;
                drop(s);
            }
        }
        assert_eq!(allowed, 5, "the burst, then the rate");
        let s = g.snapshot(t);
        assert_eq!(s.bans["connect_flood"], 1);
        assert_eq!(s.bans_active, 1);
        assert!(s.refused["banned"] > 900, "{s:?}");
        assert_eq!(g.admit(ip(2), t).map(|_| ()), Ok(()), "others unaffected");
        let later = t.plus_millis(60_000);
        assert!(g.admit(ip(1), later).is_ok());
        assert_eq!(g.snapshot(later).bans_active, 0);
    }

    #[test]
    fn an_address_brings_new_workers_up_to_its_cap_then_one_a_second() {
        let g = gate(100, 5, 100.0);
        let t = Timestamp::from_millis(0);
        assert_eq!((0..20).filter(|_| g.new_worker(ip(1), t)).count(), 5);
        assert!(g.new_worker(ip(2), t), "another address is not held back");
        assert!(!g.new_worker(ip(1), t.plus_millis(500)));
        assert!(g.new_worker(ip(1), t.plus_millis(1_000)));
        assert_eq!(g.snapshot(t).workers_refused, 16);
    }

    #[test]
    fn a_burst_of_strikes_bans_but_a_few_do_not() {
        let g = gate(10, 10, 100.0);
        let t = Timestamp::from_millis(0);
        for _ in 0..20 {
            assert!(!g.strike(ip(1), t, BanReason::HandshakeFailures));
        }
        assert!(g.strike(ip(1), t, BanReason::HandshakeFailures));
        assert_eq!(g.admit(ip(1), t).unwrap_err(), Refusal::Banned);
        assert_eq!(g.snapshot(t).bans["handshake_failures"], 1);
        // One a second forever never bans.
        for s in 0..100 {
            assert!(!g.strike(
                ip(2),
                Timestamp::from_millis(s * 1_000),
                BanReason::MalformedMessages
            ));
        }
    }
}
