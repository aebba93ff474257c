//! What the farm proxy needs from its upstream, whatever protocol it speaks: the SV2 extended
//! channel of the translator ([`crate::upstream::UpstreamChannel`]) or the SV1 connection of the
//! aggregating SV1 proxy ([`crate::sv1_upstream`]). Everything device-side (sessions, jobs,
//! local share checks, extranonce split, forwarding by sequence number) is the same for both;
//! [`crate::Translator`] is written once over this trait.
//!
//! In both protocols the upstream hands out an extranonce prefix (SV2's channel prefix, SV1's
//! `extranonce1`) and a number of bytes to roll after it (SV2's `extranonce_size`, SV1's
//! `extranonce2_size`); the devices split the rolled bytes.

use std::sync::Arc;

use primitives::Target;

use crate::shares::LocalShare;
use crate::upstream::{ChannelRequest, UpstreamError, UpstreamEvent, Work};

/// The upstream as the aggregated translator sees it: an SV2 extended channel
/// ([`crate::upstream`]) or one SV1 connection ([`crate::sv1_upstream`]).
pub trait Uplink {
    /// A message to the upstream.
    type Out;
    /// A message from the upstream.
    type In;

    /// Asks for the channel (or subscription): what to send, in order, into `out`.
    fn open(&mut self, request: &ChannelRequest, out: &mut Vec<Self::Out>);

    /// One message from the upstream, and what it changed.
    fn handle_message(&mut self, m: Self::In) -> Result<UpstreamEvent, UpstreamError>;

    /// The submission of a share the devices found that meets the upstream target, under
    /// `sequence_number` (what the verdict is matched by), naming the device's `worker` where
    /// the upstream tracks workers (SV2 extension 0x0002; at most 32 bytes).
    fn submit(
        &mut self,
        sequence_number: u32,
        share: &LocalShare,
        worker: Option<&str>,
    ) -> Self::Out;

    /// Tells the upstream the hash rate behind the channel, where the protocol has a way
    /// (SV2 `UpdateChannel`); `None` where it has none.
    fn announce_rate(&mut self, nominal_hash_rate: f32, max_target: Target) -> Option<Self::Out>;

    /// The channel is open: work and submissions flow.
    fn is_open(&self) -> bool;

    /// The channel's id where the protocol has one (events name it).
    fn channel_id(&self) -> Option<u32>;

    /// The bytes the upstream fixed at the start of the extranonce.
    fn extranonce_prefix(&self) -> &Arc<[u8]>;

    /// Bytes of extranonce rolled after the prefix.
    fn extranonce_size(&self) -> usize;

    /// The share target submissions must meet now.
    fn target(&self) -> Target;

    /// The version bits the upstream lets devices roll (SV1's granted `version-rolling.mask`);
    /// devices are given no more than this. SV2 says per job instead.
    fn version_mask(&self) -> u32 {
        u32::MAX
    }

    /// Work that arrived before the channel was open (an SV1 pool may send its first job
    /// before answering the authorize), handed over once it is.
    fn take_held_work(&mut self) -> Option<Work> {
        None
    }
}
