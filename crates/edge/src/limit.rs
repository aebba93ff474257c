//! Per-key rate limits and bans, decided in tens of nanoseconds.
//!
//! Every new connection asks "may this IP connect now?", and every message "may this
//! connection send now?". Both are token buckets keyed by something small (an IP address, a
//! connection id). The table is split into shards, each behind its own mutex and picked by the
//! key's hash, so threads serving different connections rarely meet on a lock, and a decision
//! is one hash, one uncontended lock and a little arithmetic. Memory is bounded: each shard holds
//! at most a fixed number of keys, and a full shard first drops buckets that have refilled
//! completely (they carry no information) before refusing to track more.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Mutex;

use hashbrown::HashTable;

use primitives::Timestamp;

/// A token bucket's settings: `rate` tokens per second, holding at most `burst`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Tokens a bucket holds at most (and starts with).
    pub burst: f64,
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    tokens: f32,
    last: Timestamp,
}

type Shard<K> = Mutex<HashTable<(K, Bucket)>>;

/// Sharded token buckets keyed by `K`.
pub struct RateLimiter<K> {
    /// Each key is hashed once: the hash picks the shard and is the table's hash too.
    shards: Box<[Shard<K>]>,
    rate: Rate,
    max_keys_per_shard: usize,
}

/// What the limiter says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Within the rate: go ahead.
    Allow,
    /// Over the rate: refuse this one.
    Limit,
    /// The table is full of active keys: the caller decides (pools usually refuse).
    Untracked,
}

impl<K: Hash + Eq + Copy> RateLimiter<K> {
    /// `max_keys`: the most keys tracked at once (memory bound), spread over the shards.
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        let shards = 64usize;
        RateLimiter {
            shards: (0..shards).map(|_| Mutex::new(HashTable::new())).collect(),
            rate,
            max_keys_per_shard: max_keys.div_ceil(shards).max(1),
        }
    }

    /// Takes one token for `key` at `now`.
    pub fn check(&self, key: K, now: Timestamp) -> Decision {
        let hash = hash_of(&key);
        let mut table = self.shards[self.shard_of(hash)]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let burst = self.rate.burst as f32;
        let per_ms = (self.rate.per_second / 1000.0) as f32;
        let bucket = match table.find_mut(hash, |(k, _)| *k == key) {
            Some((_, b)) => b,
            None => {
                if table.len() >= self.max_keys_per_shard {
                    // Full buckets are indistinguishable from absent ones: drop them.
                    table.retain(|(_, b)| {
                        b.tokens + now.millis_since(b.last) as f32 * per_ms < burst
                    });
                    if table.len() >= self.max_keys_per_shard {
                        return Decision::Untracked;
                    }
                }
                let fresh = (
                    key,
                    Bucket {
                        tokens: burst,
                        last: now,
                    },
                );
                &mut table
                    .insert_unique(hash, fresh, |(k, _)| hash_of(k))
                    .into_mut()
                    .1
            }
        };
        let elapsed_ms = (now.nanos_since(bucket.last) as f64 / 1e6) as f32;
        bucket.tokens = (bucket.tokens + elapsed_ms * per_ms).min(burst);
        bucket.last = bucket.last.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Decision::Allow
        } else {
            Decision::Limit
        }
    }

    /// Forgets `key` (a connection that closed).
    pub fn forget(&self, key: &K) {
        let hash = hash_of(key);
        let mut table = self.shards[self.shard_of(hash)]
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Ok(entry) = table.find_entry(hash, |(k, _)| k == key) {
            entry.remove();
        }
    }

    /// Keys currently tracked.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Middle bits pick the shard: the table itself takes its bucket index from the low bits
    /// and its control bytes from the top 7, and both must still vary within a shard.
    #[inline]
    fn shard_of(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.shards.len() - 1)
    }
}

#[inline]
fn hash_of<K: Hash>(key: &K) -> u64 {
    let mut h = FastHasher(0);
    key.hash(&mut h);
    h.finish()
}

/// Bans with expiry (reconnect floods, too many invalid shares), sharded like the limiter.
pub struct BanList<K> {
    shards: Box<[Mutex<HashMap<K, Timestamp, FastHash>>]>,
}

impl<K: Hash + Eq + Copy> Default for BanList<K> {
    fn default() -> Self {
        BanList {
            shards: (0..16)
                .map(|_| Mutex::new(HashMap::with_hasher(FastHash)))
                .collect(),
        }
    }
}

impl<K: Hash + Eq + Copy> BanList<K> {
    /// Bans `key` until `until` (a longer ban already held stands).
    pub fn ban(&self, key: K, until: Timestamp) {
        let mut m = self.shard(&key);
        let e = m.entry(key).or_insert(until);
        *e = (*e).max(until);
    }

    /// Whether `key` is banned at `now`; an expired ban is removed.
    pub fn is_banned(&self, key: &K, now: Timestamp) -> bool {
        let mut m = self.shard(key);
        match m.get(key) {
            Some(until) if *until > now => true,
            Some(_) => {
                m.remove(key);
                false
            }
            None => false,
        }
    }

    /// Drops expired bans; returns how many remain.
    pub fn sweep(&self, now: Timestamp) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut m = s.lock().unwrap_or_else(|p| p.into_inner());
                m.retain(|_, until| *until > now);
                m.len()
            })
            .sum()
    }

    fn shard(&self, key: &K) -> std::sync::MutexGuard<'_, HashMap<K, Timestamp, FastHash>> {
        let mut h = FastHasher(0);
        key.hash(&mut h);
        let i = (h.finish() >> 60) as usize & (self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A multiply-rotate hasher: keys here are IPs and connection ids chosen by the kernel or by
/// us, so speed matters more than resistance to crafted collisions (a peer controls at most its
/// own key; the per-shard key cap bounds the damage of many colliding addresses).
#[derive(Clone, Copy, Default)]
pub struct FastHash;

impl BuildHasher for FastHash {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(0)
    }
}

/// The hasher [`FastHash`] builds (why fast rather than keyed: there).
#[derive(Default)]
pub struct FastHasher(u64);

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // One more round so that the last word's bits reach the top.
        (self.0 ^ (self.0 >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x7f00_0000 | n))
    }

    #[test]
    fn burst_then_steady_rate() {
        let l = RateLimiter::new(
            Rate {
                per_second: 10.0,
                burst: 5.0,
            },
            1000,
        );
        let t0 = Timestamp::from_millis(1_000);
        for _ in 0..5 {
            assert_eq!(l.check(ip(1), t0), Decision::Allow);
        }
        assert_eq!(l.check(ip(1), t0), Decision::Limit, "burst used up");
        assert_eq!(l.check(ip(2), t0), Decision::Allow, "other keys unaffected");
        // 10 per second: one token every 100 ms.
        assert_eq!(l.check(ip(1), t0.plus_millis(50)), Decision::Limit);
        assert_eq!(l.check(ip(1), t0.plus_millis(100)), Decision::Allow);
        // Over a long run, allowed = burst + rate * time.
        let mut allowed = 0;
        for ms in (0..10_000).step_by(10) {
            allowed += (l.check(ip(3), t0.plus_millis(ms)) == Decision::Allow) as u32;
        }
        assert!((104..=106).contains(&allowed), "{allowed}");
    }

    #[test]
    fn memory_is_bounded_and_idle_keys_make_room() {
        let l = RateLimiter::new(
            Rate {
                per_second: 1.0,
                burst: 2.0,
            },
            640,
        );
        let t = Timestamp::from_millis(0);
        let mut untracked = 0;
        for n in 0..10_000 {
            // Two quick connections per key: their buckets are not full afterwards.
            l.check(ip(n), t);
            untracked += (l.check(ip(n), t) == Decision::Untracked) as u32;
        }
        assert!(l.len() <= 640, "tracked {}", l.len());
        assert!(untracked > 0);
        // Later every bucket has refilled: new keys evict them (64 new keys over 64 shards of
        // 10 fit unless 11 land in one shard, which these keys do not).
        let later = t.plus_millis(10_000);
        for n in 20_000..20_064 {
            assert_ne!(l.check(ip(n), later), Decision::Untracked);
        }
        l.forget(&ip(20_000));
    }

    #[test]
    fn bans_expire() {
        let b = BanList::default();
        b.ban(ip(1), Timestamp::from_millis(1_000));
        assert!(b.is_banned(&ip(1), Timestamp::from_millis(999)));
        assert!(!b.is_banned(&ip(2), Timestamp::from_millis(999)));
        assert!(!b.is_banned(&ip(1), Timestamp::from_millis(1_000)));
        b.ban(ip(3), Timestamp::from_millis(5_000));
        b.ban(ip(3), Timestamp::from_millis(2_000)); // a shorter ban does not shorten a longer one
        assert_eq!(b.sweep(Timestamp::from_millis(3_000)), 1);
        assert!(b.is_banned(&ip(3), Timestamp::from_millis(4_999)));
    }

    #[test]
    fn shards_spread_sequential_keys() {
        let l: RateLimiter<u64> = RateLimiter::new(
            Rate {
                per_second: 1.0,
                burst: 1.0,
            },
            1 << 20,
        );
        let mut counts = vec![0u32; l.shards.len()];
        for k in 0..64_000u64 {
            counts[l.shard_of(hash_of(&k))] += 1;
        }
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*min > 700 && *max < 1300, "{min}..{max}");
    }
}
