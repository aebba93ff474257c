//! What every simulated device shares, whatever protocol it speaks: the clock it is driven by,
//! the observer its outcomes go to, why a connection closes, and the outcome of a hash slice.
//!
//! Devices are sans-IO: the shell hands them lines (SV1) or bytes (SV2), the time and a hash
//! allowance, and reads back bytes to send, deadlines and requests to close (the [`Device`]
//! trait). What a device learns that the fleet counts (a job, a share sent, a verdict) goes to
//! an [`Observer`] passed into each call, so a device keeps no queue of outcomes and tests can
//! record exactly what happened.

use std::fmt;
use std::time::Duration;

use primitives::{Hash256, Target};

use crate::backoff::Backoff;

/// The devices' time: CLOCK_MONOTONIC (`events::now_ns()` in the shell; any counter in tests).
pub use primitives::Timestamp;

/// How a device treats its connection, whatever protocol it speaks: how long it waits for the
/// handshake, for a verdict and for any word from the pool, how it backs off after a close,
/// and how many shares it keeps awaiting a verdict. Declared once so that both devices (and
/// the fleet's flags) mean the same by each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConnectionPolicy {
    /// Set up (subscribed and authorized, or a channel open) within this long after connecting,
    /// or the device closes.
    pub handshake_timeout: Duration,
    /// A share without a verdict after this long counts as unanswered.
    pub reply_timeout: Duration,
    /// Close when the pool sends nothing for this long (ZERO: never).
    pub silence_timeout: Duration,
    /// Reconnect delays after a connection fails or closes.
    pub backoff: Backoff,
    /// Shares awaiting a verdict at most; beyond it the oldest counts as unanswered.
    pub max_in_flight: usize,
}

impl Default for ConnectionPolicy {
    fn default() -> Self {
        ConnectionPolicy {
            handshake_timeout: Duration::from_secs(30),
            reply_timeout: Duration::from_secs(60),
            silence_timeout: Duration::ZERO,
            backoff: Backoff::default(),
            max_in_flight: 256,
        }
    }
}

/// Why a device wants its connection closed, or why it was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The pool sent `client.reconnect`.
    Reconnect,
    /// The handshake did not finish in time, or the pool went silent.
    Timeout,
    /// The pool sent something the device cannot work with (a malformed subscribe reply, a
    /// line longer than the limit).
    Protocol,
    /// The pool refused the worker.
    Unauthorized,
    /// The peer closed the connection.
    Eof,
    /// A socket error.
    Reset,
    /// The fleet is stopping.
    Stop,
    /// The pool closed the device's only channel (SV2 `CloseChannel`).
    ChannelClosed,
    /// The pool's Noise certificate is not signed by the authority key the device trusts, or is
    /// not valid now (SV2).
    Certificate,
}

impl CloseReason {
    /// The short word events carry (`ConnectionClosed.reason`).
    pub const fn as_str(self) -> &'static str {
        match self {
            CloseReason::Reconnect => "reconnect",
            CloseReason::Timeout => "timeout",
            CloseReason::Protocol => "protocol",
            CloseReason::Unauthorized => "unauthorized",
            CloseReason::Eof => "eof",
            CloseReason::Reset => "reset",
            CloseReason::Stop => "stop",
            CloseReason::ChannelClosed => "channel_closed",
            CloseReason::Certificate => "certificate",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one hash slice did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HashOutcome {
    /// Header hashes computed (each a full SHA-256d of an 80-byte header).
    pub hashes: u64,
    /// Hashes that met the share target (queued for submission).
    pub shares: u32,
    /// Of those, hashes that also met the network target (blocks).
    pub blocks: u32,
}

/// A job as a device received it.
#[derive(Clone, Copy, Debug)]
pub struct JobView<'a> {
    /// The pool's job id (`mining.notify`'s first parameter).
    pub job_id: &'a str,
    /// Internal byte order (SV1's word swap undone).
    pub prev_hash: &'a Hash256,
    /// The merkle branch from the coinbase to the root, internal byte order.
    pub merkle_branch: &'a [Hash256],
    /// The header version the job gives.
    pub version: u32,
    /// The network target in compact form.
    pub nbits: u32,
    /// The job's header time, Unix seconds.
    pub ntime: u32,
    /// `clean_jobs`: earlier jobs are no longer worth submitting on.
    pub clean: bool,
    /// The share target in force when the job arrived.
    pub target: &'a Target,
    /// The difficulty of `target`.
    pub difficulty: f64,
}

/// A share as a device sent it.
#[derive(Clone, Copy, Debug)]
pub struct SentShare<'a> {
    /// The request id its verdict will echo.
    pub seq: u64,
    /// The job the share is for.
    pub job_id: &'a str,
    /// The extranonce2 the device rolled into the coinbase.
    pub extranonce2: &'a [u8],
    /// The header time hashed, Unix seconds.
    pub ntime: u32,
    /// The header nonce.
    pub nonce: u32,
    /// The full header version hashed (job version with the rolled bits in place).
    pub version: u32,
    /// The bits sent as `version_bits`, when version rolling was negotiated.
    pub version_bits: Option<u32>,
    /// The difficulty of the target the share was found against.
    pub difficulty: f64,
    /// The header's SHA-256d, internal byte order.
    pub hash: &'a Hash256,
    /// The hash also meets the job's network target.
    pub block: bool,
}

/// A pool's answer to a share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShareVerdict {
    /// The pool accepted the share.
    Accepted,
    /// Rejected with the SV1 error code, or with `None` for `"result": false` and no error.
    Rejected(Option<i64>),
}

impl ShareVerdict {
    /// The shared rejection vocabulary (docs/metrics.md) for SV1's customary codes.
    pub fn to_event_verdict(self) -> events::Verdict {
        use events::{Reason, Verdict};
        match self {
            ShareVerdict::Accepted => Verdict::Accepted,
            ShareVerdict::Rejected(code) => Verdict::Rejected(Reason::from_sv1_code(code)),
        }
    }
}

/// A verdict as a device received it.
#[derive(Clone, Copy, Debug)]
pub struct ShareReply<'a> {
    /// The sequence number of the share answered ([`SentShare::seq`]).
    pub seq: u64,
    /// The job the share was for.
    pub job_id: &'a str,
    /// The share's nonce.
    pub nonce: u32,
    /// The difficulty the share was found against.
    pub difficulty: f64,
    /// From the share leaving the device to its verdict arriving.
    pub latency_ns: u64,
    /// What the pool said.
    pub verdict: ShareVerdict,
}

/// A job on an SV2 standard channel as a device received it or activated it: the pool fixed
/// the merkle root, the device picks version bits, time and nonce.
#[derive(Clone, Copy, Debug)]
pub struct StandardJobView<'a> {
    /// The channel id the job is for.
    pub channel: u32,
    /// `NewMiningJob.job_id`.
    pub job_id: u32,
    /// The header version the job gives.
    pub version: u32,
    /// As it goes into the header.
    pub merkle_root: &'a Hash256,
    /// As it goes into the header; `None` for a future job until its `SetNewPrevHash`.
    pub prev_hash: Option<&'a Hash256>,
    /// The network target in compact form; `None` for a future job until its `SetNewPrevHash`.
    pub nbits: Option<u32>,
    /// The time hashing starts from (the job's or the prev hash's `min_ntime`).
    pub ntime: Option<u32>,
    /// Announced ahead of its prev hash: it cannot be hashed on until activated.
    pub future: bool,
    /// The share target shares on this job must meet: the channel's target when the job became
    /// workable (a later `SetTarget` does not change it, as the spec says), or for a future job
    /// not yet activated the channel's target at receipt.
    pub target: &'a Target,
    /// The difficulty of `target`.
    pub difficulty: f64,
}

/// A share on an SV2 standard channel as a device sent it.
#[derive(Clone, Copy, Debug)]
pub struct StandardShareView<'a> {
    /// The channel id the share was sent on.
    pub channel: u32,
    /// `SubmitSharesStandard.sequence_number`.
    pub sequence_number: u32,
    /// The job the share is for.
    pub job_id: u32,
    /// The header time hashed, Unix seconds.
    pub ntime: u32,
    /// The header nonce.
    pub nonce: u32,
    /// The full header version (job version with the rolled bits in place).
    pub version: u32,
    /// The difficulty of the job's target.
    pub difficulty: f64,
    /// The header's SHA-256d, internal byte order.
    pub hash: &'a Hash256,
    /// The hash also meets the network target.
    pub block: bool,
}

/// A verdict on an SV2 share as the device worked it out: `SubmitShares.Success` acknowledges
/// shares in batches, `SubmitShares.Error` one share with an error code.
#[derive(Clone, Copy, Debug)]
pub struct StandardShareReply<'a> {
    /// The channel id.
    pub channel: u32,
    /// The settled share's sequence number.
    pub sequence_number: u32,
    /// The job the share was for.
    pub job_id: u32,
    /// The share's nonce.
    pub nonce: u32,
    /// The difficulty of the job's target.
    pub difficulty: f64,
    /// From the share leaving the device to the message that settled it arriving.
    pub latency_ns: u64,
    /// Accepted, or rejected with the shared reason.
    pub verdict: events::Verdict,
    /// The pool's error code, for a rejection.
    pub error_code: Option<&'a str>,
}

/// Where a device's outcomes go. Every method has an empty default, so an observer implements
/// only what it counts; `()` observes nothing.
#[allow(unused_variables)]
pub trait Observer {
    /// An SV1 job arrived (`mining.notify`).
    fn job_received(&mut self, device: u64, now: Timestamp, job: &JobView<'_>) {}
    /// An SV1 device's share target changed (`mining.set_difficulty` taking effect).
    fn target_changed(&mut self, device: u64, now: Timestamp, difficulty: f64, target: &Target) {}
    /// A hash met the share target: the share is queued, and will be sent or dropped.
    fn share_found(&mut self, device: u64, now: Timestamp) {}
    /// An SV1 share went out (`mining.submit`).
    fn share_sent(&mut self, device: u64, now: Timestamp, share: &SentShare<'_>) {}
    /// An SV1 share got its verdict.
    fn share_result(&mut self, device: u64, now: Timestamp, reply: &ShareReply<'_>) {}
    /// A share that got no verdict: it timed out, or its connection closed first.
    fn share_unanswered(&mut self, device: u64, now: Timestamp, seq: u64) {}
    /// A share found but never sent (the connection closed, or too many were in flight).
    fn share_dropped(&mut self, device: u64, now: Timestamp) {}
    /// The handshake finished: subscribed and authorized (SV2: the channel opened).
    fn ready(&mut self, device: u64, now: Timestamp) {}
    /// A line the device could not use (malformed JSON or parameters), or an SV2 frame or
    /// message it could not use.
    fn protocol_error(&mut self, device: u64, now: Timestamp, what: &str) {}
    /// An SV2 standard job arrived (`NewMiningJob`); a future one is workable only from its
    /// [`Observer::standard_job_activated`].
    fn standard_job_received(&mut self, device: u64, now: Timestamp, job: &StandardJobView<'_>) {}
    /// A future SV2 job became workable: its `SetNewPrevHash` arrived.
    fn standard_job_activated(&mut self, device: u64, now: Timestamp, job: &StandardJobView<'_>) {}
    /// An SV2 channel's target was set (`OpenStandardMiningChannel.Success`, `SetTarget`).
    fn channel_target_changed(
        &mut self,
        device: u64,
        now: Timestamp,
        channel: u32,
        difficulty: f64,
        target: &Target,
    ) {
    }
    /// An SV2 share went out (`SubmitSharesStandard`).
    fn standard_share_sent(&mut self, device: u64, now: Timestamp, share: &StandardShareView<'_>) {}
    /// An SV2 share was settled (acknowledged in a batch, or refused).
    fn standard_share_result(
        &mut self,
        device: u64,
        now: Timestamp,
        reply: &StandardShareReply<'_>,
    ) {
    }
    /// SV1 lines went out (`sent`) or one came in: `bytes` holds whole lines, each ended by
    /// its newline (one line without it when read). For the link's messages by type
    /// (docs/metrics.md, "Protocol cost").
    fn lines(&mut self, sent: bool, bytes: &[u8]) {}
    /// An SV2 frame went out or came in: its extension type, message type and payload size.
    fn frame(&mut self, sent: bool, extension_type: u16, msg_type: u8, payload: usize) {}
    /// Noise handshake bytes went out or came in.
    fn handshake(&mut self, sent: bool, bytes: usize) {}
}

impl Observer for () {}

/// The [`Device`] methods a device implements by calling its own inherent method of the same
/// name (where they are documented); expanded inside `impl Device for $device`, beside the
/// protocol's own `Receive`, `worker_name` and `receive`.
macro_rules! delegate_to_inherent {
    ($device:ident) => {
        fn id(&self) -> u64 {
            $device::id(self)
        }
        fn index(&self) -> u32 {
            $device::index(self)
        }
        fn wants_connect(&self, now: $crate::device::Timestamp) -> bool {
            $device::wants_connect(self, now)
        }
        fn poll_timeout(&self) -> Option<$crate::device::Timestamp> {
            $device::poll_timeout(self)
        }
        fn handle_connected(&mut self, now: $crate::device::Timestamp) {
            $device::handle_connected(self, now)
        }
        fn handle_connect_failed(&mut self, now: $crate::device::Timestamp) {
            $device::handle_connect_failed(self, now)
        }
        fn handle_closed<O: $crate::device::Observer>(
            &mut self,
            now: $crate::device::Timestamp,
            reason: $crate::device::CloseReason,
            obs: &mut O,
        ) {
            $device::handle_closed(self, now, reason, obs)
        }
        fn close_requested(&self) -> Option<$crate::device::CloseReason> {
            $device::close_requested(self)
        }
        fn is_ready(&self) -> bool {
            $device::is_ready(self)
        }
        fn can_hash(&self) -> bool {
            $device::can_hash(self)
        }
        fn handle_timeout<O: $crate::device::Observer>(
            &mut self,
            now: $crate::device::Timestamp,
            obs: &mut O,
        ) {
            $device::handle_timeout(self, now, obs)
        }
        fn hash<O: $crate::device::Observer>(
            &mut self,
            now: $crate::device::Timestamp,
            max_hashes: u64,
            obs: &mut O,
        ) -> $crate::device::HashOutcome {
            $device::hash(self, now, max_hashes, obs)
        }
        fn poll_transmit<O: $crate::device::Observer>(
            &mut self,
            out: &mut Vec<u8>,
            now: $crate::device::Timestamp,
            obs: &mut O,
        ) -> usize {
            $device::poll_transmit(self, out, now, obs)
        }
    };
}
pub(crate) use delegate_to_inherent;

/// The decimal digits of `v`, in `buf` (a worker's index in its name, without allocating).
pub(crate) fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &buf[i..]
}

/// What the tokio shell drives, whatever protocol a device speaks: a sans-IO machine that takes
/// received bytes, the time and a hash allowance, and gives back bytes to send, deadlines and
/// requests to close. `Sv1Device` and `Sv2Device` implement it by delegating to their own
/// methods of the same names (documented there).
pub trait Device: Send + 'static {
    /// What the shell keeps per connection to turn socket reads into what the device takes (SV1:
    /// the line framer, holding a line a read cut in half; SV2: nothing, the Noise state buffers
    /// partial frames itself).
    type Receive: Default + Send;

    /// The device's id in events, unique within the run.
    fn id(&self) -> u64;
    /// The device's position in the fleet, from 0.
    fn index(&self) -> u32;
    /// How the device names itself to the pool (SV1 worker, SV2 user identity).
    fn worker_name(&self) -> String;
    /// Whether the device wants a connection at `now` (none open, its backoff delay over).
    fn wants_connect(&self, now: Timestamp) -> bool;
    /// When [`Device::handle_timeout`] next has something to do; `None`: nothing pending.
    fn poll_timeout(&self) -> Option<Timestamp>;
    /// The TCP connection opened at `now`: the handshake starts.
    fn handle_connected(&mut self, now: Timestamp);
    /// Connecting failed at `now`: the backoff grows.
    fn handle_connect_failed(&mut self, now: Timestamp);
    /// The connection closed for `reason`: shares in flight go unanswered, reconnect is scheduled.
    fn handle_closed<O: Observer>(&mut self, now: Timestamp, reason: CloseReason, obs: &mut O);
    /// Why the device wants its connection closed, if it does.
    fn close_requested(&self) -> Option<CloseReason>;
    /// Whether the handshake finished (SV1: subscribed and authorized; SV2: channel open).
    fn is_ready(&self) -> bool;
    /// Whether the device has a job it can hash on now.
    fn can_hash(&self) -> bool;
    /// Deadlines reached by `now` (handshake, share timeouts, reconnect).
    fn handle_timeout<O: Observer>(&mut self, now: Timestamp, obs: &mut O);
    /// Hashes at most `max_hashes` nonces on the current job, queueing the shares found.
    fn hash<O: Observer>(&mut self, now: Timestamp, max_hashes: u64, obs: &mut O) -> HashOutcome;
    /// Appends what the device has to send to `out`; returns the bytes appended.
    fn poll_transmit<O: Observer>(
        &mut self,
        out: &mut Vec<u8>,
        now: Timestamp,
        obs: &mut O,
    ) -> usize;
    /// Bytes read from the socket at `now`; `max_message` bounds one SV1 line. An error closes
    /// the connection with that reason.
    fn receive<O: Observer>(
        &mut self,
        rx: &mut Self::Receive,
        data: &[u8],
        max_message: usize,
        now: Timestamp,
        obs: &mut O,
    ) -> Result<(), CloseReason>;
}

/// A job id as the pool spelled it, inline when short (as pools' ids are).
#[derive(Clone, PartialEq, Eq)]
pub enum JobIdBuf {
    /// Ids of at most [`JobIdBuf::INLINE`] bytes, kept in place.
    Inline {
        /// Bytes of `bytes` in use.
        len: u8,
        /// The id's bytes, zero-padded.
        bytes: [u8; JobIdBuf::INLINE],
    },
    /// Longer ids.
    Heap(Box<str>),
}

impl JobIdBuf {
    /// The longest id kept inline, bytes (the enum stays 32 bytes).
    pub const INLINE: usize = 30;

    /// Copies `s`, inline when it fits.
    pub fn new(s: &str) -> Self {
        if s.len() <= Self::INLINE {
            let mut bytes = [0; Self::INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            JobIdBuf::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            JobIdBuf::Heap(s.into())
        }
    }

    /// The id as the pool spelled it.
    pub fn as_str(&self) -> &str {
        match self {
            // Only ever filled from a &str, whole.
            JobIdBuf::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..*len as usize]).unwrap_or_default()
            }
            JobIdBuf::Heap(s) => s,
        }
    }
}

impl Default for JobIdBuf {
    fn default() -> Self {
        JobIdBuf::new("")
    }
}

impl fmt::Debug for JobIdBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// SplitMix64: a tiny seeded generator for jitter and nonce starts (statistical quality is
/// all that is needed here, and determinism from the seed, for tests).
#[derive(Clone, Copy, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`: the same seed gives the same sequence.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 uniform bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_round_trip_inline_and_on_the_heap() {
        assert_eq!(JobIdBuf::new("6512ab34").as_str(), "6512ab34");
        assert!(matches!(JobIdBuf::new("6512ab34"), JobIdBuf::Inline { .. }));
        let long = "x".repeat(JobIdBuf::INLINE + 1);
        assert!(matches!(JobIdBuf::new(&long), JobIdBuf::Heap(_)));
        assert_eq!(JobIdBuf::new(&long).as_str(), long);
        assert_eq!(std::mem::size_of::<JobIdBuf>(), 32);
    }

    #[test]
    fn rng_is_deterministic_and_spread() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mean = (0..10_000).map(|_| a.next_f64()).sum::<f64>() / 10_000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn sv1_codes_map_onto_the_shared_vocabulary() {
        use events::{Reason, Verdict};
        assert_eq!(ShareVerdict::Accepted.to_event_verdict(), Verdict::Accepted);
        for (code, reason) in [
            (Some(21), Reason::Stale),
            (Some(22), Reason::Duplicate),
            (Some(23), Reason::LowDifficulty),
            (Some(24), Reason::Unauthorized),
            (Some(20), Reason::Other),
            (Some(25), Reason::Other),
            (None, Reason::Other),
        ] {
            assert_eq!(
                ShareVerdict::Rejected(code).to_event_verdict(),
                Verdict::Rejected(reason)
            );
        }
    }
}
