//! A scripted SV2 pool for driving an [`Sv2Device`] without sockets: the reference Noise
//! responder (the sv2 crate's, in memory), messages as plain values encoded by the reference
//! codecs, and an observer that keeps everything a device reported.

use std::time::Duration;

use fleet::device::{StandardJobView, StandardShareReply, StandardShareView};
use fleet::{Observer, Sv2Device, Timestamp};
use primitives::{Hash256, Target};
use sv2::messages::common::{SetupConnectionSuccess, PROTOCOL_VERSION};
use sv2::messages::mining::{
    NewMiningJob, OpenStandardMiningChannel, OpenStandardMiningChannelSuccess, SetNewPrevHash,
    SubmitSharesStandard, SubmitSharesSuccess,
};
use sv2::messages::{Common, Message, Mining};
use sv2::{AuthorityKeys, NoiseResponder};

pub const CHANNEL: u32 = 7;
pub const GROUP: u32 = 1;

/// The pool's end of one connection.
pub struct ScriptedPool {
    pub noise: NoiseResponder,
}

impl ScriptedPool {
    /// A connection certified by `keys`.
    pub fn with_keys(keys: &AuthorityKeys) -> Self {
        ScriptedPool {
            noise: NoiseResponder::new(keys, Duration::from_secs(3600), 1 << 20).unwrap(),
        }
    }

    /// A connection certified by the reference authority, which devices trust by default.
    pub fn new() -> Self {
        Self::with_keys(&AuthorityKeys::reference())
    }

    /// The device has connected: runs the Noise handshake (the device's ephemeral key in, the
    /// pool's answer back). Returns whether the device accepted the pool.
    pub fn handshake<O: Observer>(
        &mut self,
        dev: &mut Sv2Device,
        now: Timestamp,
        obs: &mut O,
    ) -> bool {
        let mut wire = Vec::new();
        dev.poll_transmit(&mut wire, now, obs);
        assert_eq!(wire.len(), 64, "an ElligatorSwift ephemeral key");
        self.noise.feed(&wire).unwrap();
        wire.clear();
        assert!(self.noise.take_handshake_bytes(&mut wire));
        // In pieces, as a socket may hand them over.
        for piece in wire.chunks(100) {
            dev.handle_bytes(piece, now, obs);
        }
        dev.handshake_done()
    }

    /// Everything the device wants sent, decrypted and decoded.
    pub fn take<O: Observer>(
        &mut self,
        dev: &mut Sv2Device,
        now: Timestamp,
        obs: &mut O,
    ) -> Vec<Message> {
        let mut wire = Vec::new();
        dev.poll_transmit(&mut wire, now, obs);
        self.noise.feed(&wire).unwrap();
        let mut out = Vec::new();
        while let Some(frame) = self.noise.next_frame() {
            let mut frame = frame.unwrap();
            assert_eq!(frame.extension(), 0);
            let m = Message::decode(frame.msg_type(), &mut frame.payload).unwrap();
            assert_eq!(frame.channel_msg(), m.channel_bit(), "{}", m.name());
            out.push(m);
        }
        out
    }

    /// The shares the device wants sent.
    pub fn take_shares<O: Observer>(
        &mut self,
        dev: &mut Sv2Device,
        now: Timestamp,
        obs: &mut O,
    ) -> Vec<SubmitSharesStandard> {
        self.take(dev, now, obs)
            .into_iter()
            .map(|m| match m {
                Message::Mining(Mining::SubmitSharesStandard(s)) => s,
                other => panic!("not a share: {other:?}"),
            })
            .collect()
    }

    /// Encrypts messages to the device and hands it the bytes.
    pub fn send<O: Observer>(
        &mut self,
        dev: &mut Sv2Device,
        now: Timestamp,
        obs: &mut O,
        msgs: &[Message],
    ) {
        let mut wire = Vec::new();
        for m in msgs {
            let mut payload = Vec::new();
            let t = m.encode(&mut payload).unwrap();
            self.noise
                .encrypt(t, m.extension_type(), &payload, &mut wire)
                .unwrap();
        }
        dev.handle_bytes(&wire, now, obs);
    }

    /// Handshake, `SetupConnection` answered with `flags`, the channel opened at `target`.
    /// Returns what the device sent to set up.
    pub fn open<O: Observer>(
        &mut self,
        dev: &mut Sv2Device,
        now: Timestamp,
        obs: &mut O,
        flags: u32,
        target: Target,
    ) -> (
        sv2::messages::common::SetupConnection,
        OpenStandardMiningChannel,
    ) {
        assert!(
            self.handshake(dev, now, obs),
            "the device accepted the pool"
        );
        let setup = match &self.take(dev, now, obs)[..] {
            [Message::Common(Common::SetupConnection(s))] => s.clone(),
            other => panic!("expected SetupConnection, got {other:?}"),
        };
        self.send(dev, now, obs, &[setup_success(flags)]);
        let open = match &self.take(dev, now, obs)[..] {
            [Message::Mining(Mining::OpenStandardMiningChannel(o))] => o.clone(),
            other => panic!("expected OpenStandardMiningChannel, got {other:?}"),
        };
        self.send(
            dev,
            now,
            obs,
            &[OpenStandardMiningChannelSuccess {
                request_id: open.request_id,
                channel_id: CHANNEL,
                target,
                extranonce_prefix: vec![0, 0, 0, 1],
                group_channel_id: GROUP,
            }
            .into()],
        );
        assert!(dev.is_ready());
        (setup, open)
    }
}

/// A standard job: its merkle root stands for a coinbase and transactions the device never sees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PoolJob {
    pub id: u32,
    pub version: u32,
    pub merkle_root: [u8; 32],
}

impl PoolJob {
    pub fn new(id: u32) -> Self {
        PoolJob {
            id,
            version: 0x2000_0000 | (id & 0xff) << 3,
            merkle_root: primitives::sha256d(&id.to_le_bytes()).0,
        }
    }

    pub fn message(&self, min_ntime: Option<u32>) -> Message {
        NewMiningJob {
            channel_id: CHANNEL,
            job_id: self.id,
            min_ntime,
            version: self.version,
            merkle_root: self.merkle_root,
        }
        .into()
    }
}

pub fn prev_hash_message(job_id: u32, n: u32, min_ntime: u32, nbits: u32) -> Message {
    SetNewPrevHash {
        channel_id: CHANNEL,
        job_id,
        prev_hash: prev_hash(n).0,
        min_ntime,
        nbits,
    }
    .into()
}

/// `SetupConnection.Success` with the pool's `flags`.
pub fn setup_success(flags: u32) -> Message {
    SetupConnectionSuccess {
        used_version: PROTOCOL_VERSION,
        flags,
    }
    .into()
}

/// `SubmitShares.Success` on the channel: the shares up to `last` settled, `accepted` of them
/// accepted, `sum` in the pool's count.
pub fn ack(last: u32, accepted: u32, sum: u64) -> Message {
    SubmitSharesSuccess {
        channel_id: CHANNEL,
        last_sequence_number: last,
        new_submits_accepted_count: accepted,
        new_shares_sum: sum,
    }
    .into()
}

/// The n-th made-up tip.
pub fn prev_hash(n: u32) -> Hash256 {
    primitives::sha256d(&(1_000_000 + n).to_le_bytes())
}

#[derive(Clone, Debug, PartialEq)]
pub struct JobRec {
    pub at: u64,
    pub channel: u32,
    pub job_id: u32,
    pub version: u32,
    pub merkle_root: Hash256,
    pub prev_hash: Option<Hash256>,
    pub ntime: Option<u32>,
    pub future: bool,
    pub target: Target,
}

impl JobRec {
    fn of(now: Timestamp, j: &StandardJobView<'_>) -> Self {
        JobRec {
            at: now.as_nanos(),
            channel: j.channel,
            job_id: j.job_id,
            version: j.version,
            merkle_root: *j.merkle_root,
            prev_hash: j.prev_hash.copied(),
            ntime: j.ntime,
            future: j.future,
            target: *j.target,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct SentRec {
    pub at: u64,
    pub channel: u32,
    pub seq: u32,
    pub job_id: u32,
    pub ntime: u32,
    pub nonce: u32,
    pub version: u32,
    pub difficulty: f64,
    pub hash: Hash256,
    pub block: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ResultRec {
    pub at: u64,
    pub seq: u32,
    pub job_id: u32,
    pub latency_ns: u64,
    pub verdict: events::Verdict,
    pub error_code: Option<String>,
}

/// Everything an SV2 device told its observer.
#[derive(Default, Debug)]
pub struct Recorder {
    pub received: Vec<JobRec>,
    pub activated: Vec<JobRec>,
    pub targets: Vec<(u64, u32, Target)>,
    pub sent: Vec<SentRec>,
    pub results: Vec<ResultRec>,
    pub found: u64,
    pub unanswered: Vec<u64>,
    pub dropped: u64,
    pub ready: u64,
    pub errors: Vec<String>,
}

impl Observer for Recorder {
    fn standard_job_received(&mut self, _d: u64, now: Timestamp, j: &StandardJobView<'_>) {
        self.received.push(JobRec::of(now, j));
    }
    fn standard_job_activated(&mut self, _d: u64, now: Timestamp, j: &StandardJobView<'_>) {
        self.activated.push(JobRec::of(now, j));
    }
    fn channel_target_changed(&mut self, _d: u64, now: Timestamp, c: u32, _diff: f64, t: &Target) {
        self.targets.push((now.as_nanos(), c, *t));
    }
    fn share_found(&mut self, _d: u64, _now: Timestamp) {
        self.found += 1;
    }
    fn standard_share_sent(&mut self, _d: u64, now: Timestamp, s: &StandardShareView<'_>) {
        self.sent.push(SentRec {
            at: now.as_nanos(),
            channel: s.channel,
            seq: s.sequence_number,
            job_id: s.job_id,
            ntime: s.ntime,
            nonce: s.nonce,
            version: s.version,
            difficulty: s.difficulty,
            hash: *s.hash,
            block: s.block,
        });
    }
    fn standard_share_result(&mut self, _d: u64, now: Timestamp, r: &StandardShareReply<'_>) {
        self.results.push(ResultRec {
            at: now.as_nanos(),
            seq: r.sequence_number,
            job_id: r.job_id,
            latency_ns: r.latency_ns,
            verdict: r.verdict,
            error_code: r.error_code.map(str::to_owned),
        });
    }
    record_session!();
}
