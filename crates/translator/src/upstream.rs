//! The upstream extended channel, without I/O: its opening, its extranonce space and target, and
//! its jobs.
//!
//! Jobs follow the spec's two kinds (5.3.16, 5.3.17): a `NewExtendedMiningJob` without
//! `min_ntime` is a future job, held until a `SetNewPrevHash` names it; that message makes it the
//! work and drops every other held job. A job with `min_ntime` is work at once, on the last prev
//! hash. Either way the channel hands out one [`Work`]: a job with everything a header needs.
//!
//! The share target of a job is the channel's target when the job became work: `SetTarget`
//! applies to jobs to come ("not applicable for already received jobs with min_ntime=nTime").
//! Likewise `SetExtranoncePrefix` applies to jobs sent after it, so each job keeps the prefix it
//! arrived under.

use std::sync::Arc;

use primitives::{CompactTarget, Hash256, Target};
use sv2::messages::mining::{
    NewExtendedMiningJob, OpenExtendedMiningChannel, OpenExtendedMiningChannelSuccess,
    SetNewPrevHash, SubmitSharesExtended, UpdateChannel,
};
use sv2::messages::Mining;

use crate::shares::LocalShare;
use crate::uplink::Uplink;

/// Future jobs held until one is activated (the reference pool keeps as many per channel).
pub const MAX_FUTURE_JOBS: usize = 8;

/// The largest extranonce an SV2 message carries (`B0_32`).
pub const MAX_EXTRANONCE: usize = 32;

/// A message from upstream that breaks the protocol (the translator reports it and ignores
/// the message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// A channel message (named) arrived before the channel opened.
    #[error("{0} before the channel is open")]
    NotOpen(&'static str),
    /// A message for a channel other than ours.
    #[error("{what} for channel {got}, ours is {ours}")]
    OtherChannel {
        /// The message's name.
        what: &'static str,
        /// The channel id it named.
        got: u32,
        /// Our channel's id.
        ours: u32,
    },
    /// An answer (named) to a request we did not make.
    #[error("{0} answers no request of ours")]
    Unrequested(&'static str),
    /// The extranonce prefix plus the size to roll exceed [`MAX_EXTRANONCE`] bytes.
    #[error("extranonce prefix of {prefix} bytes plus {size} to roll exceeds {MAX_EXTRANONCE}")]
    ExtranonceTooLong {
        /// The prefix's length, in bytes.
        prefix: usize,
        /// The extranonce size to roll, in bytes.
        size: usize,
    },
    /// A non-future job (this id) arrived before any `SetNewPrevHash`.
    #[error("job {0} has min_ntime but no SetNewPrevHash came before it")]
    JobBeforePrevHash(u32),
    /// `SetNewPrevHash` named this job id, which is not a held future job.
    #[error("SetNewPrevHash names job {0}, which is not a held future job")]
    PrevHashNamesNoJob(u32),
    /// `SetNewPrevHash` carried these `nbits`, which name no target.
    #[error("nBits {0:#010x} names no target")]
    Bits(u32),
    /// A message (named) that only a server receives.
    #[error("upstream sent {0}, which a client never receives")]
    Unexpected(&'static str),
}

/// What the channel asks for when it opens.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelRequest {
    /// `OpenExtendedMiningChannel.user_identity`: the account at the pool.
    pub user_identity: String,
    /// Hashes per second of every device behind the channel (0 while there are none).
    pub nominal_hash_rate: f32,
    /// The largest share target the channel may be given.
    pub max_target: Target,
    /// Bytes of extranonce the translator needs: its device bytes plus the devices'
    /// extranonce2.
    pub min_extranonce_size: u16,
}

/// The previous block and the header fields that come with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrevHash {
    /// The previous block's hash.
    pub prev_hash: Hash256,
    /// The least header time jobs on it may use, in seconds since the epoch.
    pub min_ntime: u32,
    /// The network target, as `nbits`.
    pub nbits: CompactTarget,
    /// Counts `SetNewPrevHash` messages: a job from an earlier one is stale.
    pub epoch: u64,
}

/// A job as the upstream sent it, with the extranonce prefix in force when it arrived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedJob {
    /// The job's id on the channel.
    pub job_id: u32,
    /// The header version.
    pub version: u32,
    /// Whether devices may roll the version bits.
    pub version_rolling_allowed: bool,
    /// The merkle path from the coinbase to the root.
    pub merkle_path: Vec<Hash256>,
    /// The coinbase transaction's bytes before the extranonce.
    pub coinbase_prefix: Vec<u8>,
    /// The coinbase transaction's bytes after the extranonce.
    pub coinbase_suffix: Vec<u8>,
    /// The channel's extranonce prefix when the job arrived.
    pub extranonce_prefix: Arc<[u8]>,
}

impl ExtendedJob {
    fn from_message(m: NewExtendedMiningJob, extranonce_prefix: Arc<[u8]>) -> Self {
        ExtendedJob {
            job_id: m.job_id,
            version: m.version,
            version_rolling_allowed: m.version_rolling_allowed,
            merkle_path: m.merkle_path.into_iter().map(Hash256).collect(),
            coinbase_prefix: m.coinbase_tx_prefix,
            coinbase_suffix: m.coinbase_tx_suffix,
            extranonce_prefix,
        }
    }
}

/// A job to mine now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Work {
    /// The job.
    pub job: Arc<ExtendedJob>,
    /// The previous block it builds on.
    pub prev: PrevHash,
    /// The header time to start from.
    pub ntime: u32,
    /// The channel's share target for this job.
    pub target: Target,
    /// It came with a new prev hash: every earlier job is stale.
    pub clean: bool,
}

/// What a message from upstream changed.
#[derive(Clone, Debug, PartialEq)]
pub enum UpstreamEvent {
    /// The channel opened (`OpenExtendedMiningChannelSuccess`).
    Opened,
    /// The pool refused the channel: its error code (SV1: which request was refused).
    OpenFailed(String),
    /// A future job was stored; nothing to send downstream yet.
    FutureJob(u32),
    /// A job to mine now.
    Work(Work),
    /// The channel's share target changed (`SetTarget`).
    TargetChanged(Target),
    /// The channel's extranonce prefix changed (`SetExtranoncePrefix`).
    ExtranoncePrefixChanged,
    /// `SubmitSharesSuccess`: shares up to a sequence number accepted.
    SharesAccepted {
        /// The last sequence number it covers.
        last_sequence_number: u32,
        /// How many shares it accepts.
        count: u32,
        /// The sum of the accepted shares' difficulties.
        shares_sum: u64,
    },
    /// `SubmitSharesError`: one share rejected.
    ShareRejected {
        /// The rejected share's sequence number.
        sequence_number: u32,
        /// The pool's error code (`stale-share`, `difficulty-too-low`, ...).
        error_code: String,
    },
    /// The pool closed the channel (`CloseChannel`): its reason code (SV1: why the connection
    /// ends).
    Closed(String),
    /// Something the translator neither needs nor minds (UpdateChannel.Error, group changes).
    Ignored(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Opening { request_id: u32 },
    Open { channel_id: u32, group_id: u32 },
    Closed,
}

/// One extended channel on the upstream connection.
#[derive(Debug)]
pub struct UpstreamChannel {
    state: State,
    next_request_id: u32,
    extranonce_prefix: Arc<[u8]>,
    extranonce_size: usize,
    target: Target,
    future: Vec<ExtendedJob>,
    prev: Option<PrevHash>,
    epochs: u64,
}

impl Default for UpstreamChannel {
    fn default() -> Self {
        Self::new()
    }
}

impl UpstreamChannel {
    /// A channel not yet opened.
    pub fn new() -> Self {
        UpstreamChannel {
            state: State::Idle,
            next_request_id: 1,
            extranonce_prefix: Arc::from(&[][..]),
            extranonce_size: 0,
            target: Target::ZERO,
            future: Vec::new(),
            prev: None,
            epochs: 0,
        }
    }

    /// The `OpenExtendedMiningChannel` to send; the channel is opening from now on.
    pub fn open(&mut self, r: &ChannelRequest) -> OpenExtendedMiningChannel {
        let request_id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1);
        self.state = State::Opening { request_id };
        self.future.clear();
        self.prev = None;
        OpenExtendedMiningChannel {
            request_id,
            user_identity: r.user_identity.clone(),
            nominal_hash_rate: r.nominal_hash_rate,
            max_target: r.max_target,
            min_extranonce_size: r.min_extranonce_size,
        }
    }

    /// The channel's id, once open.
    pub fn channel_id(&self) -> Option<u32> {
        match self.state {
            State::Open { channel_id, .. } => Some(channel_id),
            _ => None,
        }
    }

    /// The group the pool put the channel in (0: none), once open.
    pub fn group_id(&self) -> Option<u32> {
        match self.state {
            State::Open { group_id, .. } => Some(group_id),
            _ => None,
        }
    }

    /// The request id the next opening uses. Several channels on one connection must not
    /// share one: the pool's answer names the request, not the channel.
    pub fn set_next_request_id(&mut self, request_id: u32) {
        self.next_request_id = request_id;
    }

    /// Whether the channel is open.
    pub fn is_open(&self) -> bool {
        self.channel_id().is_some()
    }

    /// The bytes the upstream fixed at the start of the extranonce.
    pub fn extranonce_prefix(&self) -> &Arc<[u8]> {
        &self.extranonce_prefix
    }

    /// Bytes of extranonce the channel rolls after the prefix.
    pub fn extranonce_size(&self) -> usize {
        self.extranonce_size
    }

    /// The channel's current share target.
    pub fn target(&self) -> Target {
        self.target
    }

    /// The current previous block, once a `SetNewPrevHash` came.
    pub fn prev_hash(&self) -> Option<&PrevHash> {
        self.prev.as_ref()
    }

    /// Future jobs held until their `SetNewPrevHash`.
    pub fn future_jobs(&self) -> usize {
        self.future.len()
    }

    /// Takes one message from the upstream: what it changed, or how it broke the protocol.
    pub fn handle_message(&mut self, m: Mining) -> Result<UpstreamEvent, UpstreamError> {
        let name = m.name();
        match m {
            Mining::OpenExtendedMiningChannelSuccess(s) => self.on_opened(s),
            Mining::OpenMiningChannelError(e) => match self.state {
                State::Opening { request_id } if request_id == e.request_id => {
                    self.state = State::Closed;
                    Ok(UpstreamEvent::OpenFailed(e.error_code))
                }
                _ => Err(UpstreamError::Unrequested(name)),
            },
            Mining::NewExtendedMiningJob(j) => {
                self.addressed(j.channel_id, name)?;
                self.on_job(j)
            }
            Mining::SetNewPrevHash(p) => {
                self.addressed(p.channel_id, name)?;
                self.on_prev_hash(p)
            }
            Mining::SetTarget(t) => {
                self.addressed(t.channel_id, name)?;
                self.target = t.maximum_target;
                Ok(UpstreamEvent::TargetChanged(t.maximum_target))
            }
            Mining::SetExtranoncePrefix(p) => {
                self.addressed(p.channel_id, name)?;
                if p.extranonce_prefix.len() + self.extranonce_size > MAX_EXTRANONCE {
                    return Err(UpstreamError::ExtranonceTooLong {
                        prefix: p.extranonce_prefix.len(),
                        size: self.extranonce_size,
                    });
                }
                self.extranonce_prefix = p.extranonce_prefix.into();
                Ok(UpstreamEvent::ExtranoncePrefixChanged)
            }
            Mining::SubmitSharesSuccess(s) => {
                self.addressed(s.channel_id, name)?;
                Ok(UpstreamEvent::SharesAccepted {
                    last_sequence_number: s.last_sequence_number,
                    count: s.new_submits_accepted_count,
                    shares_sum: s.new_shares_sum,
                })
            }
            Mining::SubmitSharesError(e) => {
                self.addressed(e.channel_id, name)?;
                Ok(UpstreamEvent::ShareRejected {
                    sequence_number: e.sequence_number,
                    error_code: e.error_code,
                })
            }
            Mining::CloseChannel(c) => {
                self.addressed(c.channel_id, name)?;
                self.state = State::Closed;
                self.future.clear();
                Ok(UpstreamEvent::Closed(c.reason_code))
            }
            Mining::UpdateChannelError(_) | Mining::SetGroupChannel(_) => {
                Ok(UpstreamEvent::Ignored(name))
            }
            Mining::OpenStandardMiningChannelSuccess(_) | Mining::SetCustomMiningJobSuccess(_) => {
                Err(UpstreamError::Unrequested(name))
            }
            Mining::NewMiningJob(_)
            | Mining::SetCustomMiningJobError(_)
            | Mining::OpenStandardMiningChannel(_)
            | Mining::OpenExtendedMiningChannel(_)
            | Mining::UpdateChannel(_)
            | Mining::SubmitSharesStandard(_)
            | Mining::SubmitSharesExtended(_)
            | Mining::SetCustomMiningJob(_) => Err(UpstreamError::Unexpected(name)),
        }
    }

    fn on_opened(
        &mut self,
        s: OpenExtendedMiningChannelSuccess,
    ) -> Result<UpstreamEvent, UpstreamError> {
        let State::Opening { request_id } = self.state else {
            return Err(UpstreamError::Unrequested(
                "OpenExtendedMiningChannel.Success",
            ));
        };
        if request_id != s.request_id {
            return Err(UpstreamError::Unrequested(
                "OpenExtendedMiningChannel.Success",
            ));
        }
        let size = usize::from(s.extranonce_size);
        if s.extranonce_prefix.len() + size > MAX_EXTRANONCE {
            return Err(UpstreamError::ExtranonceTooLong {
                prefix: s.extranonce_prefix.len(),
                size,
            });
        }
        self.state = State::Open {
            channel_id: s.channel_id,
            group_id: s.group_channel_id,
        };
        self.extranonce_prefix = s.extranonce_prefix.into();
        self.extranonce_size = size;
        self.target = s.target;
        Ok(UpstreamEvent::Opened)
    }

    /// A message for our channel or for the group it is in (jobs and prev hashes may come per
    /// group).
    fn addressed(&self, channel: u32, what: &'static str) -> Result<(), UpstreamError> {
        match self.state {
            State::Open {
                channel_id,
                group_id,
            } => {
                if channel == channel_id || (group_id != 0 && channel == group_id) {
                    Ok(())
                } else {
                    Err(UpstreamError::OtherChannel {
                        what,
                        got: channel,
                        ours: channel_id,
                    })
                }
            }
            _ => Err(UpstreamError::NotOpen(what)),
        }
    }

    fn on_job(&mut self, m: NewExtendedMiningJob) -> Result<UpstreamEvent, UpstreamError> {
        let min_ntime = m.min_ntime;
        let job = ExtendedJob::from_message(m, self.extranonce_prefix.clone());
        let Some(min_ntime) = min_ntime else {
            let id = job.job_id;
            if self.future.len() == MAX_FUTURE_JOBS {
                self.future.remove(0);
            }
            self.future.push(job);
            return Ok(UpstreamEvent::FutureJob(id));
        };
        let Some(prev) = self.prev else {
            return Err(UpstreamError::JobBeforePrevHash(job.job_id));
        };
        Ok(UpstreamEvent::Work(Work {
            job: Arc::new(job),
            prev,
            // A share's ntime must not precede the latest SetNewPrevHash's either.
            ntime: min_ntime.max(prev.min_ntime),
            target: self.target,
            clean: false,
        }))
    }

    fn on_prev_hash(&mut self, m: SetNewPrevHash) -> Result<UpstreamEvent, UpstreamError> {
        Target::from_compact(CompactTarget::from_consensus(m.nbits))
            .map_err(|_| UpstreamError::Bits(m.nbits))?;
        self.epochs += 1;
        let prev = PrevHash {
            prev_hash: Hash256(m.prev_hash),
            min_ntime: m.min_ntime,
            nbits: CompactTarget::from_consensus(m.nbits),
            epoch: self.epochs,
        };
        self.prev = Some(prev);
        let named = self.future.iter().position(|f| f.job_id == m.job_id);
        let job = named.map(|i| self.future.swap_remove(i));
        // Only the job named is valid from now on.
        self.future.clear();
        let job = job.ok_or(UpstreamError::PrevHashNamesNoJob(m.job_id))?;
        Ok(UpstreamEvent::Work(Work {
            job: Arc::new(job),
            prev,
            ntime: m.min_ntime,
            target: self.target,
            clean: true,
        }))
    }
}

impl Uplink for UpstreamChannel {
    type Out = Mining;
    type In = Mining;

    fn open(&mut self, request: &ChannelRequest, out: &mut Vec<Mining>) {
        out.push(UpstreamChannel::open(self, request).into());
    }

    fn handle_message(&mut self, m: Mining) -> Result<UpstreamEvent, UpstreamError> {
        UpstreamChannel::handle_message(self, m)
    }

    fn submit(&mut self, sequence_number: u32, share: &LocalShare, worker: Option<&str>) -> Mining {
        SubmitSharesExtended {
            channel_id: self.channel_id().unwrap_or_default(),
            sequence_number,
            job_id: share.job.upstream.job_id,
            nonce: share.nonce,
            ntime: share.ntime,
            version: share.version,
            extranonce: share.extranonce().to_vec(),
            user_identity: worker.map(str::to_owned),
        }
        .into()
    }

    fn announce_rate(&mut self, nominal_hash_rate: f32, max_target: Target) -> Option<Mining> {
        Some(
            UpdateChannel {
                channel_id: self.channel_id()?,
                nominal_hash_rate,
                maximum_target: max_target,
            }
            .into(),
        )
    }

    fn is_open(&self) -> bool {
        UpstreamChannel::is_open(self)
    }

    fn channel_id(&self) -> Option<u32> {
        UpstreamChannel::channel_id(self)
    }

    fn extranonce_prefix(&self) -> &Arc<[u8]> {
        UpstreamChannel::extranonce_prefix(self)
    }

    fn extranonce_size(&self) -> usize {
        UpstreamChannel::extranonce_size(self)
    }

    fn target(&self) -> Target {
        UpstreamChannel::target(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sv2::messages::mining::{SetExtranoncePrefix, SetTarget};

    fn opened() -> UpstreamChannel {
        let mut u = UpstreamChannel::new();
        let open = u.open(&ChannelRequest {
            user_identity: "farm".into(),
            nominal_hash_rate: 0.0,
            max_target: Target::MAX,
            min_extranonce_size: 6,
        });
        let ev = u
            .handle_message(Mining::OpenExtendedMiningChannelSuccess(
                OpenExtendedMiningChannelSuccess {
                    request_id: open.request_id,
                    channel_id: 7,
                    target: Target::DIFFICULTY_1,
                    extranonce_size: 8,
                    extranonce_prefix: vec![1, 2, 3, 4],
                    group_channel_id: 0,
                },
            ))
            .unwrap();
        assert_eq!(ev, UpstreamEvent::Opened);
        u
    }

    fn job(id: u32, min_ntime: Option<u32>) -> Mining {
        Mining::NewExtendedMiningJob(NewExtendedMiningJob {
            channel_id: 7,
            job_id: id,
            min_ntime,
            version: 0x2000_0000,
            version_rolling_allowed: true,
            merkle_path: vec![],
            coinbase_tx_prefix: vec![0xaa],
            coinbase_tx_suffix: vec![0xbb],
        })
    }

    fn prev(job_id: u32) -> Mining {
        Mining::SetNewPrevHash(SetNewPrevHash {
            channel_id: 7,
            job_id,
            prev_hash: [9; 32],
            min_ntime: 1000,
            nbits: 0x207f_ffff,
        })
    }

    #[test]
    fn future_job_waits_for_its_prev_hash_and_the_others_are_dropped() {
        let mut u = opened();
        assert_eq!(u.extranonce_size(), 8);
        assert_eq!(&**u.extranonce_prefix(), &[1, 2, 3, 4]);
        assert_eq!(
            u.handle_message(job(1, None)),
            Ok(UpstreamEvent::FutureJob(1))
        );
        assert_eq!(
            u.handle_message(job(2, None)),
            Ok(UpstreamEvent::FutureJob(2))
        );
        let UpstreamEvent::Work(w) = u.handle_message(prev(2)).unwrap() else {
            panic!("no work")
        };
        assert!(w.clean);
        assert_eq!(w.job.job_id, 2);
        assert_eq!(w.ntime, 1000);
        assert_eq!(w.prev.epoch, 1);
        assert_eq!(u.future_jobs(), 0, "job 1 dropped with the new prev hash");
        assert_eq!(
            u.handle_message(prev(1)),
            Err(UpstreamError::PrevHashNamesNoJob(1))
        );
    }

    #[test]
    fn active_job_needs_a_prev_hash_and_keeps_the_target_it_came_with() {
        let mut u = opened();
        assert_eq!(
            u.handle_message(job(1, Some(5))),
            Err(UpstreamError::JobBeforePrevHash(1))
        );
        u.handle_message(job(2, None)).unwrap();
        u.handle_message(prev(2)).unwrap();
        let UpstreamEvent::Work(w) = u.handle_message(job(3, Some(999))).unwrap() else {
            panic!("no work")
        };
        assert!(!w.clean);
        assert_eq!(w.ntime, 1000, "never before the prev hash's min_ntime");
        assert_eq!(w.target, Target::DIFFICULTY_1);
        let easier = Target::DIFFICULTY_1.max(Target::REGTEST_LIMIT);
        u.handle_message(Mining::SetTarget(SetTarget {
            channel_id: 7,
            maximum_target: easier,
        }))
        .unwrap();
        assert_eq!(w.target, Target::DIFFICULTY_1, "the job's target stays");
        let UpstreamEvent::Work(w2) = u.handle_message(job(4, Some(1001))).unwrap() else {
            panic!("no work")
        };
        assert_eq!(w2.target, easier);
    }

    #[test]
    fn extranonce_prefix_applies_to_later_jobs_only() {
        let mut u = opened();
        u.handle_message(job(1, None)).unwrap();
        u.handle_message(Mining::SetExtranoncePrefix(SetExtranoncePrefix {
            channel_id: 7,
            extranonce_prefix: vec![5, 6],
        }))
        .unwrap();
        u.handle_message(job(2, None)).unwrap();
        let UpstreamEvent::Work(w) = u.handle_message(prev(1)).unwrap() else {
            panic!("no work")
        };
        assert_eq!(&*w.job.extranonce_prefix, &[1, 2, 3, 4]);
        assert_eq!(&**u.extranonce_prefix(), &[5, 6]);
        let too_long = Mining::SetExtranoncePrefix(SetExtranoncePrefix {
            channel_id: 7,
            extranonce_prefix: vec![0; 25],
        });
        assert!(matches!(
            u.handle_message(too_long),
            Err(UpstreamError::ExtranonceTooLong { .. })
        ));
    }

    #[test]
    fn messages_for_other_channels_or_before_opening_are_refused() {
        let mut u = UpstreamChannel::new();
        assert_eq!(
            u.handle_message(job(1, None)),
            Err(UpstreamError::NotOpen("NewExtendedMiningJob"))
        );
        let mut u = opened();
        let other = Mining::SetTarget(SetTarget {
            channel_id: 8,
            maximum_target: Target::MAX,
        });
        assert!(matches!(
            u.handle_message(other),
            Err(UpstreamError::OtherChannel { got: 8, .. })
        ));
    }
}
