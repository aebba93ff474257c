//! The event schema: what each role records, field by field.
//!
//! Identifiers are the emitting process's own: `conn` and `device` ids are numbers a process
//! assigns (unique within its file), `template_id`s are the job source's. The lab joins files on
//! what both sides of a wire see (job ids with channel, prev hashes, fingerprints, nonces, socket
//! addresses and labels), never on another process's private numbering.

use std::net::SocketAddr;

use primitives::{Difficulty, Hash256, Target};
use serde::ser::SerializeStruct;
use serde::Serialize;

use crate::clock;
use crate::fingerprint::Fingerprint;
use crate::job_id::JobId;
use crate::json;
use crate::short_str::ShortStr;
use crate::verdict::Verdict;

/// Bumped when a reader of the previous major could misread a file.
pub const SCHEMA_MAJOR: u16 = 1;
/// Bumped when kinds or trailing fields are added: older readers skip what they do not know.
pub const SCHEMA_MINOR: u16 = 2;

/// One timestamped event.
#[derive(Clone, Copy, PartialEq, Debug, Serialize)]
pub struct Event {
    /// CLOCK_MONOTONIC nanoseconds ([`crate::now_ns`]).
    pub ts_ns: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What a file says about the process that wrote it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct Header {
    /// [`SCHEMA_MAJOR`] of the writer.
    pub schema_major: u16,
    /// [`SCHEMA_MINOR`] of the writer.
    pub schema_minor: u16,
    /// The emitting role: "simnet", "pool", "fleet", "tap", "translator", "jdc", ...
    pub role: ShortStr,
    /// The lab configuration the process serves ("sv1", "D", ...); empty outside the lab.
    pub config: ShortStr,
    /// The emitting process's id.
    pub pid: u32,
    /// Wall clock (ns since the Unix epoch) at the instant `monotonic_ns` was read.
    pub realtime_ns: u64,
    /// CLOCK_MONOTONIC (ns) read together with `realtime_ns`: the anchor that maps `ts_ns` to wall
    /// time.
    pub monotonic_ns: u64,
}

impl Header {
    /// A header for the current process, anchored to the wall clock now.
    pub fn new(role: &str, config: &str) -> Self {
        let (realtime_ns, monotonic_ns) = clock::wall_anchor();
        Header {
            schema_major: SCHEMA_MAJOR,
            schema_minor: SCHEMA_MINOR,
            role: ShortStr::new(role),
            config: ShortStr::new(config),
            pid: std::process::id(),
            realtime_ns,
            monotonic_ns,
        }
    }

    /// The wall-clock time (ns since the Unix epoch) of a monotonic timestamp from this file.
    pub fn wall_ns(&self, ts_ns: u64) -> u64 {
        let offset = ts_ns as i128 - self.monotonic_ns as i128;
        (self.realtime_ns as i128 + offset).clamp(0, u64::MAX as i128) as u64
    }
}

/// Every kind of event. Each variant holds a struct of the same name; `From` lets callers write
/// `sink.emit(ShareSent { .. })`.
#[derive(Clone, Copy, PartialEq, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// A [`TemplateCreated`] event.
    TemplateCreated(TemplateCreated),
    /// A [`TipChanged`] event.
    TipChanged(TipChanged),
    /// A [`JobSent`] event.
    JobSent(JobSent),
    /// A [`JobReceived`] event.
    JobReceived(JobReceived),
    /// A [`JobActivated`] event.
    JobActivated(JobActivated),
    /// A [`TargetChanged`] event.
    TargetChanged(TargetChanged),
    /// A [`ShareSent`] event.
    ShareSent(ShareSent),
    /// A [`ShareResult`] event.
    ShareResult(ShareResult),
    /// A [`BlockSubmitted`] event.
    BlockSubmitted(BlockSubmitted),
    /// A [`BlockResult`] event.
    BlockResult(BlockResult),
    /// A [`LinkBytes`] event.
    LinkBytes(LinkBytes),
    /// A [`LinkRtt`] event.
    LinkRtt(LinkRtt),
    /// A [`ConnectionOpened`] event.
    ConnectionOpened(ConnectionOpened),
    /// A [`ConnectionClosed`] event.
    ConnectionClosed(ConnectionClosed),
    /// A [`HashesDone`] event.
    HashesDone(HashesDone),
    /// A [`Mark`] event.
    Mark(Mark),
    /// A [`BlockFound`] event.
    BlockFound(BlockFound),
    /// A [`LinkMessages`] event.
    LinkMessages(LinkMessages),
    /// A [`LinkHandshake`] event.
    LinkHandshake(LinkHandshake),
}

/// A node made a template available: the first moment a `getblocktemplate` call could return it,
/// or the moment `NewTemplate` was sent. Job sources that build their own templates (a pool
/// reading a node, a JDC) may emit it too, with their own `node` name.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct TemplateCreated {
    /// Short name of the node or role that made it ("pool", "farm", ...).
    pub node: ShortStr,
    /// The template's id in the emitter's numbering (the node's or job source's).
    pub template_id: u64,
    /// Height of the block the template builds.
    pub height: u32,
    /// The tip the template builds on, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub prev_hash: Hash256,
    /// Subsidy plus fees: what the coinbase may pay out.
    pub value_sats: u64,
    /// Fees of the included transactions, in satoshis.
    pub fees_sats: u64,
    /// Transactions other than the coinbase.
    pub tx_count: u32,
    /// The template's [`Fingerprint`]: its merkle path and prev hash, hashed.
    pub fingerprint: Fingerprint,
    /// An SV2 future template, announced before its prev hash is the tip.
    pub future: bool,
}

/// Where a node's new tip came from.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TipSource {
    /// A block from the rest of the network (in simnet, its Poisson block arrivals).
    Network,
    /// A block submitted to this node by the lab's own miners.
    Submitted,
}

/// A node's tip changed. simnet records when the network's new tip exists (`node` "network") and
/// when each node endpoint learns it, so relay delay between nodes is visible.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct TipChanged {
    /// The node that changed tip ("network" for the network itself).
    pub node: ShortStr,
    /// The new tip's block hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub hash: Hash256,
    /// The new tip's height.
    pub height: u32,
    /// The new tip's parent hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub prev_hash: Hash256,
    /// Where the block came from.
    pub source: TipSource,
}

/// A job source sent a job on a connection (SV1 `mining.notify`, SV2 `NewMiningJob` /
/// `NewExtendedMiningJob`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct JobSent {
    /// The emitter's id of the connection the job went out on.
    pub conn: u64,
    /// SV2 channel id; `None` for SV1.
    pub channel: Option<u32>,
    /// The job id as sent on the wire.
    pub job_id: JobId,
    /// The sender's template id, when it built the job from a template it knows.
    pub template_id: Option<u64>,
    /// `None` when the sender cannot compute it (a future job, whose prev hash is not known yet).
    pub fingerprint: Option<Fingerprint>,
    /// `None` for an SV2 future job: its prev hash comes with `SetNewPrevHash` (see
    /// [`JobActivated`]).
    pub prev_hash: Option<Hash256>,
    /// The share target in force for the job: SV1's difficulty and SV2's targets both land here.
    pub target: Target,
    /// The receiver must drop earlier jobs (SV1 `clean_jobs`; for SV2, a job following a new
    /// prev hash).
    pub clean: bool,
    /// An SV2 future job: it cannot be hashed on until its `SetNewPrevHash`.
    pub future: bool,
}

impl JobSent {
    /// The share difficulty of `target`.
    pub fn difficulty(&self) -> f64 {
        Difficulty::from_target(self.target).as_f64()
    }
}

/// A device (or a proxy's upstream side) received a job.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct JobReceived {
    /// The fleet's device id, or for a proxy the id of its upstream connection.
    pub device: u64,
    /// SV2 channel id; `None` for SV1.
    pub channel: Option<u32>,
    /// The job id as received on the wire.
    pub job_id: JobId,
    /// Computable from an SV1 notify or an SV2 extended job; `None` for SV2 standard jobs (they
    /// carry only a merkle root) and future jobs.
    pub fingerprint: Option<Fingerprint>,
    /// `None` for an SV2 future job until its `SetNewPrevHash` ([`JobActivated`]).
    pub prev_hash: Option<Hash256>,
    /// The share target in force for the job.
    pub target: Target,
    /// The receiver must drop earlier jobs (SV1 `clean_jobs`; for SV2, a job following a new prev
    /// hash).
    pub clean: bool,
    /// An SV2 future job: not workable until its `SetNewPrevHash`.
    pub future: bool,
}

impl JobReceived {
    /// The share difficulty of `target`.
    pub fn difficulty(&self) -> f64 {
        Difficulty::from_target(self.target).as_f64()
    }
}

/// An SV2 future job became workable: its `SetNewPrevHash` was sent (by a pool, on `conn`) or
/// received (by a device, `conn` being the device id). A job that is not future is workable from
/// its `JobSent`/`JobReceived`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct JobActivated {
    /// The pool's connection id (sent) or the device id (received).
    pub conn: u64,
    /// SV2 channel id; `None` for SV1.
    pub channel: Option<u32>,
    /// The job the prev hash activates.
    pub job_id: JobId,
    /// The new prev hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub prev_hash: Hash256,
    /// Now computable for extended jobs, whose merkle path the receiver holds.
    pub fingerprint: Option<Fingerprint>,
}

/// The share target of a connection or channel changed outside a job (SV1
/// `mining.set_difficulty` taking effect, SV2 `SetTarget`). Sent or received: the role tells.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct TargetChanged {
    /// The connection (or device) whose target changed.
    pub conn: u64,
    /// SV2 channel id; `None` for SV1 (the whole connection).
    pub channel: Option<u32>,
    /// The new share target.
    pub target: Target,
}

impl TargetChanged {
    /// The share difficulty of `target`.
    pub fn difficulty(&self) -> f64 {
        Difficulty::from_target(self.target).as_f64()
    }
}

/// A device (or a proxy forwarding upstream) sent a share.
#[derive(Clone, Copy, PartialEq, Debug, Serialize)]
pub struct ShareSent {
    /// The fleet's device id, or for a proxy the id of its upstream connection.
    pub device: u64,
    /// SV2 channel id; `None` for SV1.
    pub channel: Option<u32>,
    /// SV1 JSON-RPC request id, SV2 sequence number: what the verdict echoes.
    pub seq: u64,
    /// The job the share was found on, as sent on the wire.
    pub job_id: JobId,
    /// The header nonce.
    pub nonce: u32,
    /// The header nTime (Unix seconds) the share used.
    pub ntime: u32,
    /// The header version, with any rolled bits.
    pub version: u32,
    /// The difficulty of the target the share was sent against (difficulty-1 units).
    pub difficulty: f64,
    /// The header hash, when the sender computed it: it ties a block to the share that found it.
    #[serde(serialize_with = "json::opt_hash")]
    pub hash: Option<Hash256>,
}

/// Whether the emitter judged the share or was told the verdict.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Perspective {
    /// The emitter decided it (a pool; a proxy judging its downstream).
    Given,
    /// The emitter received it from upstream (a device; a proxy's upstream side).
    Received,
}

/// A share's verdict, as given by a pool or as received by a device.
#[derive(Clone, Copy, PartialEq, Debug, Serialize)]
pub struct ShareResult {
    /// The pool's connection id (given) or the device / upstream connection id (received).
    pub conn: u64,
    /// SV2 channel id; `None` for SV1.
    pub channel: Option<u32>,
    /// SV1 JSON-RPC request id or SV2 sequence number, as in [`ShareSent::seq`].
    pub seq: u64,
    /// The job the share was found on.
    pub job_id: JobId,
    /// The header nonce, to tie the verdict to its share.
    pub nonce: u32,
    /// The difficulty of the target the share was judged against (difficulty-1 units).
    pub difficulty: f64,
    /// Accepted, or why it was rejected.
    pub verdict: Verdict,
    /// Whether the emitter gave the verdict or received it.
    pub perspective: Perspective,
}

/// A role submitted a block to its node (`submitblock`, `SubmitSolution`, `PushSolution`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct BlockSubmitted {
    /// The block's header hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub hash: Hash256,
    /// The block's height.
    pub height: u32,
    /// The template it was built on, when the submitter knows it.
    pub template_id: Option<u64>,
    /// The connection whose share found it.
    pub conn: Option<u64>,
}

/// A role found a block (a device's share met the network target, or a JDC pushed one) and
/// kept it, before submitting it anywhere: the first record of every block, whatever its fate.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct BlockFound {
    /// The role that found it ("pool", "jds", ...).
    pub node: ShortStr,
    /// The block's header hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub hash: Hash256,
    /// The block's height.
    pub height: u32,
    /// The template it was built on, when the role's own.
    pub template_id: Option<u64>,
    /// The job it was found on, when the role handed out that job.
    pub job_id: Option<u64>,
    /// The connection whose share (or push) it came from.
    pub conn: Option<u64>,
    /// Written durably to the role's store before this event (false without a store, or when
    /// the store is failing: the block is then held in memory and submitted all the same).
    pub stored: bool,
}

/// A node's answer to a submitted block: recorded by the node (simnet) and by the submitter.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct BlockResult {
    /// The node that answered ("network" in simnet, or the node's short name).
    pub node: ShortStr,
    /// The submitted block's header hash, in internal byte order.
    #[serde(serialize_with = "json::hash")]
    pub hash: Hash256,
    /// The submitted block's height.
    pub height: u32,
    /// Accepted as a new tip.
    pub accepted: bool,
    /// bitcoind's words ("high-hash", "duplicate", "inconclusive", ...); empty on success.
    pub reason: ShortStr,
}

/// Which way bytes moved.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The way shares travel: from devices toward the pool. For a node's peer traffic: sent.
    Up,
    /// The way jobs travel: from the pool toward devices. For a node's peer traffic: received.
    Down,
}

/// Application bytes moved on a link since the previous `LinkBytes` for the same `conn` and
/// `direction` (a delta, so that a reader sums them).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct LinkBytes {
    /// The link's name (the tap's configured name, or "devices" for the fleet's own).
    pub link: ShortStr,
    /// The emitter's id of the connection the bytes moved on.
    pub conn: u64,
    /// Which way they moved.
    pub direction: Direction,
    /// Bytes moved since the previous `LinkBytes` for this `conn` and `direction`.
    pub bytes: u64,
}

/// Messages of one type moved on a link since the previous `LinkMessages` for the same link,
/// direction and type (deltas, like [`LinkBytes`]), as the role that framed them counted them:
/// the only place the type of a message on a Noise-encrypted link is known.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct LinkMessages {
    /// The link's name, as in [`LinkBytes::link`].
    pub link: ShortStr,
    /// Which way they moved.
    pub direction: Direction,
    /// The message's name (`SubmitSharesStandard`, `mining.submit`, `noise_handshake`, ...).
    pub message: ShortStr,
    /// Messages moved.
    pub count: u64,
    /// Their bytes on the wire: framing, encryption and payload.
    pub bytes: u64,
    /// Of those, the messages' own payload (for SV1, the JSON text without its line end).
    pub payload_bytes: u64,
}

/// A Noise handshake completed on a link, as the role at one end timed it: a server from
/// accepting the connection, a client from connecting, until either may send its first message.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct LinkHandshake {
    /// The link's name, as in [`LinkBytes::link`].
    pub link: ShortStr,
    /// How long the handshake took, in nanoseconds.
    pub duration_ns: u64,
    /// Its bytes toward the pool.
    pub up_bytes: u64,
    /// Its bytes toward the devices.
    pub down_bytes: u64,
}

/// A round-trip time measured through a link.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct LinkRtt {
    /// The link's name, as in [`LinkBytes::link`].
    pub link: ShortStr,
    /// The emitter's id of the connection measured through.
    pub conn: u64,
    /// The round trip, in nanoseconds.
    pub rtt_ns: u64,
}

/// A TCP connection was established (`conn` is the emitter's id for it; a device uses its id).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct ConnectionOpened {
    /// The emitter's id for the connection.
    pub conn: u64,
    /// The remote socket address.
    pub peer: SocketAddr,
    /// The local socket address.
    pub local: SocketAddr,
    /// Worker or device name, when known; may be empty.
    pub label: ShortStr,
}

/// A TCP connection ended (`conn` as in its [`ConnectionOpened`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct ConnectionClosed {
    /// The emitter's id for the connection, as in its [`ConnectionOpened`].
    pub conn: u64,
    /// Short reason ("eof", "reset", "timeout", "protocol", ...).
    pub reason: ShortStr,
}

/// Hashes a device (or, with `device: None`, the whole process) computed since its previous
/// `HashesDone`: a delta, so the achieved hash rate is their sum over time.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct HashesDone {
    /// The device; `None` for the whole process.
    pub device: Option<u64>,
    /// Hashes computed since the previous `HashesDone` for this `device` (a delta).
    pub hashes: u64,
}

/// A named instant ("ready", "warmup_end", "drain_start", ...): the boundaries a role or the lab
/// wants on the same time line as the events.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize)]
pub struct Mark {
    /// The mark's name.
    pub name: ShortStr,
}

/// Each kind's wire tag, JSON name and fields in wire order, listed once: the encoder and the
/// decoder both walk the list (through [`crate::codec::Field`]), and the decoder builds the
/// struct from it, so a field left out fails to compile.
macro_rules! kinds {
    ($($name:ident = $tag:literal, $json:literal { $($field:ident),* $(,)? };)*) => {
        $(impl From<$name> for EventKind {
            fn from(e: $name) -> Self {
                EventKind::$name(e)
            }
        })*

        impl EventKind {
            /// Every kind's `(tag, name)`: the tag is its wire number, the name its JSON `kind`.
            pub const ALL: &'static [(u8, &'static str)] = &[$(($tag, $json)),*];

            /// The wire tag of this kind.
            pub const fn tag(&self) -> u8 {
                match self {
                    $(EventKind::$name(_) => $tag,)*
                }
            }

            /// The snake_case name used as `kind` in JSON.
            pub const fn name(&self) -> &'static str {
                match self {
                    $(EventKind::$name(_) => $json,)*
                }
            }

            /// Appends the kind's fields in wire order.
            #[inline]
            pub(crate) fn put_fields(&self, out: &mut Vec<u8>) {
                match self {
                    $(EventKind::$name(e) => {
                        $(crate::codec::Field::put(&e.$field, out);)*
                    })*
                }
            }

            /// Reads the fields of the kind `tag` in wire order; `None` for a tag no kind has.
            pub(crate) fn get_fields(
                tag: u8,
                d: &mut crate::codec::Dec<'_>,
            ) -> Option<Result<EventKind, crate::codec::FieldError>> {
                Some(match tag {
                    $($tag => (|| -> Result<EventKind, crate::codec::FieldError> {
                        Ok(EventKind::$name($name {
                            $($field: d.get()?,)*
                        }))
                    })(),)*
                    _ => return None,
                })
            }
        }
    };
}

kinds! {
    TemplateCreated = 1, "template_created" {
        node, template_id, height, prev_hash, value_sats, fees_sats, tx_count, fingerprint, future,
    };
    TipChanged = 2, "tip_changed" { node, hash, height, prev_hash, source };
    JobSent = 3, "job_sent" {
        conn, channel, job_id, template_id, fingerprint, prev_hash, target, clean, future,
    };
    JobReceived = 4, "job_received" {
        device, channel, job_id, fingerprint, prev_hash, target, clean, future,
    };
    JobActivated = 5, "job_activated" { conn, channel, job_id, prev_hash, fingerprint };
    TargetChanged = 6, "target_changed" { conn, channel, target };
    ShareSent = 7, "share_sent" {
        device, channel, seq, job_id, nonce, ntime, version, difficulty, hash,
    };
    ShareResult = 8, "share_result" {
        conn, channel, seq, job_id, nonce, difficulty, verdict, perspective,
    };
    BlockSubmitted = 9, "block_submitted" { hash, height, template_id, conn };
    BlockResult = 10, "block_result" { node, hash, height, accepted, reason };
    LinkBytes = 11, "link_bytes" { link, conn, direction, bytes };
    LinkRtt = 12, "link_rtt" { link, conn, rtt_ns };
    ConnectionOpened = 13, "connection_opened" { conn, peer, local, label };
    ConnectionClosed = 14, "connection_closed" { conn, reason };
    HashesDone = 15, "hashes_done" { device, hashes };
    Mark = 16, "mark" { name };
    BlockFound = 17, "block_found" {
        node, hash, height, template_id, job_id, conn, stored,
    };
    LinkMessages = 18, "link_messages" { link, direction, message, count, bytes, payload_bytes };
    LinkHandshake = 19, "link_handshake" { link, duration_ns, up_bytes, down_bytes };
}

// The job kinds show their target both as hex and as a difficulty, the unit pools talk in.

impl Serialize for JobSent {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("JobSent", 10)?;
        st.serialize_field("conn", &self.conn)?;
        st.serialize_field("channel", &self.channel)?;
        st.serialize_field("job_id", &self.job_id)?;
        st.serialize_field("template_id", &self.template_id)?;
        job_fields(
            &mut st,
            self.fingerprint,
            self.prev_hash,
            self.target,
            self.clean,
            self.future,
        )?;
        st.end()
    }
}

impl Serialize for JobReceived {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("JobReceived", 9)?;
        st.serialize_field("device", &self.device)?;
        st.serialize_field("channel", &self.channel)?;
        st.serialize_field("job_id", &self.job_id)?;
        job_fields(
            &mut st,
            self.fingerprint,
            self.prev_hash,
            self.target,
            self.clean,
            self.future,
        )?;
        st.end()
    }
}

impl Serialize for TargetChanged {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("TargetChanged", 4)?;
        st.serialize_field("conn", &self.conn)?;
        st.serialize_field("channel", &self.channel)?;
        target_fields(&mut st, self.target)?;
        st.end()
    }
}

/// The fields both job kinds end with, in their order.
fn job_fields<S: SerializeStruct>(
    st: &mut S,
    fingerprint: Option<Fingerprint>,
    prev_hash: Option<Hash256>,
    target: Target,
    clean: bool,
    future: bool,
) -> Result<(), S::Error> {
    st.serialize_field("fingerprint", &fingerprint)?;
    st.serialize_field("prev_hash", &prev_hash.map(json::Hex))?;
    target_fields(st, target)?;
    st.serialize_field("clean", &clean)?;
    st.serialize_field("future", &future)
}

/// `target` in hex, then as the difficulty it stands for.
fn target_fields<S: SerializeStruct>(st: &mut S, target: Target) -> Result<(), S::Error> {
    st.serialize_field("target", &json::Hex(target))?;
    st.serialize_field("difficulty", &Difficulty::from_target(target).as_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_and_names_are_unique() {
        let mut tags: Vec<u8> = EventKind::ALL.iter().map(|k| k.0).collect();
        let mut names: Vec<&str> = EventKind::ALL.iter().map(|k| k.1).collect();
        tags.sort();
        tags.dedup();
        names.sort();
        names.dedup();
        assert_eq!(tags.len(), EventKind::ALL.len());
        assert_eq!(names.len(), EventKind::ALL.len());
    }

    #[test]
    fn wall_time_follows_the_anchor() {
        let h = Header {
            realtime_ns: 1_000_000,
            monotonic_ns: 500,
            ..Header::new("pool", "")
        };
        assert_eq!(h.wall_ns(500), 1_000_000);
        assert_eq!(h.wall_ns(1500), 1_001_000);
        assert_eq!(h.wall_ns(0), 999_500);
    }

    #[test]
    fn events_are_small_enough_to_copy() {
        // Not a format limit: a reminder that events are built and moved on hot paths.
        assert!(
            std::mem::size_of::<Event>() <= 256,
            "{}",
            std::mem::size_of::<Event>()
        );
    }
}
