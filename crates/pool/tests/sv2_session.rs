//! The SV2 front end's sans-IO session over the engine: setup, channels, jobs, shares.

#[allow(dead_code)]
mod support;

use std::sync::Arc;

use pool::sv2::{Session, Sv2Config};
use primitives::{merkle_root_from_branch, sha256d, CompactTarget, Difficulty, Hash256, Target};
use support::*;
use sv2::messages::common::mining_flags;
use sv2::messages::mining::{
    CloseChannel, NewMiningJob, OpenExtendedMiningChannel, OpenExtendedMiningChannelSuccess,
    OpenStandardMiningChannel, OpenStandardMiningChannelSuccess, SetNewPrevHash, SetTarget,
    SubmitSharesError, SubmitSharesExtended, SubmitSharesStandard, SubmitSharesSuccess,
    UpdateChannel,
};
use sv2::messages::{Common, Mining};
use sv2::Message;

/// The easiest target there is: the channel's difficulty decides.
fn any_target() -> Target {
    Target::from_le_bytes(&[0xff; 32])
}

fn session(lab: &Lab) -> Session {
    let mut s = Session::new(lab.engine.clone(), Arc::new(Sv2Config::default()));
    // An end device: standard jobs per channel, not group jobs.
    s.handle_message(
        setup_connection(
            0,
            mining_flags::REQUIRES_STANDARD_JOBS | mining_flags::REQUIRES_VERSION_ROLLING,
        ),
        T0,
    );
    assert!(matches!(
        &transmits(&mut s)[..],
        [Message::Common(Common::SetupConnectionSuccess(ok))] if ok.used_version == 2 && ok.flags == 0
    ));
    s
}

fn open_standard(s: &mut Session, request_id: u32, max_target: Target) -> Vec<Message> {
    s.handle_message(
        OpenStandardMiningChannel {
            request_id,
            user_identity: "alice.rig1".into(),
            nominal_hash_rate: 0.0,
            max_target,
        }
        .into(),
        T0,
    );
    transmits(s)
}

/// A standard channel's state as its miner knows it.
struct StdMiner {
    channel_id: u32,
    target: Target,
    prefix: Vec<u8>,
    job: NewMiningJob,
    prev: SetNewPrevHash,
    seq: u32,
    nonce: u32,
}

impl StdMiner {
    fn open(s: &mut Session) -> StdMiner {
        let out = open_standard(s, 7, any_target());
        let [Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)), Message::Mining(Mining::NewMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
            &out[..]
        else {
            panic!("open reply, future job, prev hash: {out:?}");
        };
        let OpenStandardMiningChannelSuccess {
            request_id,
            channel_id,
            target,
            extranonce_prefix,
            group_channel_id,
        } = ok.clone();
        assert_eq!(request_id, 7);
        assert_ne!(group_channel_id, 0, "standard channels are grouped");
        assert_eq!(job.min_ntime, None, "the first job is a future job");
        assert_eq!((job.channel_id, prev.channel_id), (channel_id, channel_id));
        assert_eq!(prev.job_id, job.job_id);
        StdMiner {
            channel_id,
            target,
            prefix: extranonce_prefix,
            job: job.clone(),
            prev: prev.clone(),
            seq: 0,
            nonce: 0,
        }
    }

    fn header(&self, nonce: u32) -> [u8; 80] {
        sv2_header(self.job.version, &self.prev, &self.job.merkle_root, nonce)
    }

    /// The next nonce whose hash `want`s.
    fn grind(&mut self, want: impl Fn(&Hash256) -> bool) -> (u32, Hash256) {
        loop {
            let n = self.nonce;
            self.nonce += 1;
            let hash = sha256d(&self.header(n));
            if want(&hash) {
                return (n, hash);
            }
        }
    }

    fn share(&mut self, nonce: u32) -> Message {
        self.seq += 1;
        SubmitSharesStandard {
            channel_id: self.channel_id,
            sequence_number: self.seq,
            job_id: self.job.job_id,
            nonce,
            ntime: self.prev.min_ntime,
            version: self.job.version,
        }
        .into()
    }
}

fn successes(out: &[Message]) -> Vec<SubmitSharesSuccess> {
    out.iter()
        .filter_map(|m| match m {
            Message::Mining(Mining::SubmitSharesSuccess(s)) => Some(*s),
            _ => None,
        })
        .collect()
}

fn errors(out: &[Message]) -> Vec<SubmitSharesError> {
    out.iter()
        .filter_map(|m| match m {
            Message::Mining(Mining::SubmitSharesError(e)) => Some(e.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn setup_answers_the_specs_errors_and_closes() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let cases = [
        (setup_connection(2, 0), "unsupported-protocol", 0),
        (
            setup_connection(0, mining_flags::REQUIRES_WORK_SELECTION | 1),
            "unsupported-feature-flags",
            mining_flags::REQUIRES_WORK_SELECTION,
        ),
    ];
    for (m, code, flags) in cases {
        let mut s = Session::new(lab.engine.clone(), Arc::new(Sv2Config::default()));
        s.handle_message(m, T0);
        let out = transmits(&mut s);
        assert!(
            matches!(&out[..], [Message::Common(Common::SetupConnectionError(e))] if e.error_code == code && e.flags == flags),
            "{out:?}"
        );
        assert!(s.wants_close().is_some());
    }
    // Mining before setup is a protocol error.
    let mut s = Session::new(lab.engine.clone(), Arc::new(Sv2Config::default()));
    open_standard(&mut s, 1, any_target());
    assert_eq!(s.wants_close().map(|c| c.reason()), Some("protocol"));
    // Standard jobs and version rolling are both fine.
    session(&lab);
}

#[test]
fn standard_channel_jobs_commit_to_the_channels_own_coinbase() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut s = session(&lab);
    let a = StdMiner::open(&mut s);
    let b = StdMiner::open(&mut s);
    let mut other = session(&lab);
    let c = StdMiner::open(&mut other);
    // The whole extranonce is the channel's, unique across channels and connections.
    assert_eq!(a.prefix.len(), 8);
    assert!(a.prefix != b.prefix && a.prefix != c.prefix && b.prefix != c.prefix);
    assert_ne!(a.job.merkle_root, b.job.merkle_root);
    // The root is the channel's coinbase (prefix in place) up the template's branch.
    let job = s
        .channel(a.channel_id)
        .unwrap()
        .latest_job()
        .unwrap()
        .job
        .clone();
    let txid = job.coinbase.txid(&a.prefix).unwrap();
    assert_eq!(
        merkle_root_from_branch(txid, &job.merkle_branch).0,
        a.job.merkle_root
    );
    assert_eq!(a.prev.prev_hash, tip(1).0);
    assert_eq!(a.prev.nbits, HARD_BITS.to_consensus());
    assert_eq!(a.target, Difficulty::from_target(a.target).to_target());
}

#[test]
fn shares_are_judged_by_the_engine_and_acknowledged_in_batches() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut s = session(&lab);
    let mut m = StdMiner::open(&mut s);
    let target = m.target;
    let good = |h: &Hash256| target.is_met_by(&h.0);
    // Three good shares, one read: one success carrying all three.
    let mut shares = Vec::new();
    for _ in 0..3 {
        let (n, _) = m.grind(good);
        shares.push(n);
        let msg = m.share(n);
        s.handle_message(msg, T0);
    }
    assert!(
        successes(&transmits(&mut s)).is_empty(),
        "held until flushed"
    );
    s.flush();
    let ok = successes(&transmits(&mut s));
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].new_submits_accepted_count, 3);
    assert_eq!(ok[0].last_sequence_number, m.seq);
    assert_eq!(ok[0].channel_id, m.channel_id);
    assert!(ok[0].new_shares_sum >= 1);

    // A duplicate, after a good one: the good one's success goes first.
    let (n, _) = m.grind(good);
    let msg = m.share(n);
    s.handle_message(msg, T0);
    let dup = m.share(shares[0]);
    s.handle_message(dup, T0);
    let out = transmits(&mut s);
    assert!(
        matches!(&out[..], [Message::Mining(Mining::SubmitSharesSuccess(ok)), Message::Mining(Mining::SubmitSharesError(e))]
        if ok.last_sequence_number == m.seq - 1 && e.sequence_number == m.seq && e.error_code == "duplicate-share"),
        "{out:?}"
    );

    // Low difficulty, unknown job, unknown channel.
    let (n, _) = m.grind(|h| !target.is_met_by(&h.0));
    let msg = m.share(n);
    s.handle_message(msg, T0);
    let mut bad_job = m.share(0);
    if let Message::Mining(Mining::SubmitSharesStandard(x)) = &mut bad_job {
        x.job_id = 999;
    }
    s.handle_message(bad_job, T0);
    let mut bad_channel = m.share(0);
    if let Message::Mining(Mining::SubmitSharesStandard(x)) = &mut bad_channel {
        x.channel_id = 999;
    }
    s.handle_message(bad_channel, T0);
    let codes: Vec<String> = errors(&transmits(&mut s))
        .into_iter()
        .map(|e| e.error_code)
        .collect();
    assert_eq!(
        codes,
        ["difficulty-too-low", "invalid-job-id", "invalid-channel-id"]
    );
    // The duplicate before them counts too: nothing was accepted since.
    assert_eq!(s.rejected_in_a_row(), 4);

    // A new tip: a future job and its prev hash; the old job's shares are stale.
    let mut lab = lab;
    lab.publish(template(tip(2), HARD_BITS), T0);
    s.handle_generation(lab.engine.current().as_ref(), T0);
    let out = transmits(&mut s);
    assert!(
        matches!(&out[..], [Message::Mining(Mining::NewMiningJob(j)), Message::Mining(Mining::SetNewPrevHash(p))]
        if j.min_ntime.is_none() && p.job_id == j.job_id && p.prev_hash == tip(2).0),
        "{out:?}"
    );
    let (n, _) = m.grind(good);
    let msg = m.share(n);
    s.handle_message(msg, T0);
    assert_eq!(errors(&transmits(&mut s))[0].error_code, "stale-share");

    // Same tip, new template: a job active at once, no prev hash.
    lab.publish(template(tip(2), HARD_BITS), T0);
    s.handle_generation(lab.engine.current().as_ref(), T0);
    let out = transmits(&mut s);
    assert!(
        matches!(&out[..], [Message::Mining(Mining::NewMiningJob(j))] if j.min_ntime.is_some()),
        "{out:?}"
    );
}

#[test]
fn a_standard_share_that_meets_the_network_target_is_a_block() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(3), EASY_BITS);
    let mut s = session(&lab);
    let mut m = StdMiner::open(&mut s);
    let net = Target::from_compact(CompactTarget::from_consensus(m.prev.nbits)).unwrap();
    let target = m.target;
    let (n, hash) = m.grind(|h| net.is_met_by(&h.0) && target.is_met_by(&h.0));
    let msg = m.share(n);
    s.handle_message(msg, T0);
    s.flush();
    assert_eq!(successes(&transmits(&mut s)).len(), 1);
    let b = lab.next_block().expect("a block");
    assert_eq!(b.hash, hash);
    assert_eq!(&b.block[..80], &m.header(n)[..]);
}

#[test]
fn extended_channels_roll_their_own_extranonce() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(4), EASY_BITS);
    let mut s = session(&lab);
    // Asking for more extranonce than the pool gives is refused.
    s.handle_message(
        OpenExtendedMiningChannel {
            request_id: 1,
            user_identity: "bob".into(),
            nominal_hash_rate: 1e9,
            max_target: any_target(),
            min_extranonce_size: 16,
        }
        .into(),
        T0,
    );
    assert!(
        matches!(&transmits(&mut s)[..], [Message::Mining(Mining::OpenMiningChannelError(e))]
        if e.error_code == "unsupported-min-extranonce-size")
    );
    s.handle_message(
        OpenExtendedMiningChannel {
            request_id: 2,
            user_identity: "bob".into(),
            nominal_hash_rate: 0.0,
            max_target: any_target(),
            min_extranonce_size: 4,
        }
        .into(),
        T0,
    );
    let out = transmits(&mut s);
    let [Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok)), Message::Mining(Mining::NewExtendedMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
        &out[..]
    else {
        panic!("{out:?}");
    };
    let OpenExtendedMiningChannelSuccess {
        channel_id,
        target,
        extranonce_size,
        extranonce_prefix,
        ..
    } = ok.clone();
    let (version, job_id) = (job.version, job.job_id);
    assert_eq!(extranonce_size, 4);
    assert_eq!(extranonce_prefix.len(), 4);
    // Grind as an extended miner does: coinbase, root, header.
    let extranonce = [1u8, 2, 3, 4];
    let root = extended_root(job, &[&extranonce_prefix[..], &extranonce].concat());
    let net = Target::from_compact(CompactTarget::from_consensus(prev.nbits)).unwrap();
    let nonce = (0u32..)
        .find(|&n| {
            let h = sha256d(&sv2_header(version, prev, &root, n));
            target.is_met_by(&h.0) && net.is_met_by(&h.0)
        })
        .unwrap();
    let header = sv2_header(version, prev, &root, nonce);
    let share = |seq: u32, extranonce: Vec<u8>| -> Message {
        SubmitSharesExtended {
            channel_id,
            sequence_number: seq,
            job_id,
            nonce,
            ntime: prev.min_ntime,
            version,
            extranonce,
            user_identity: None,
        }
        .into()
    };
    s.handle_message(share(1, extranonce.to_vec()), T0);
    s.handle_message(share(2, vec![1, 2, 3]), T0);
    s.flush();
    let out = transmits(&mut s);
    assert!(
        matches!(&out[..], [Message::Mining(Mining::SubmitSharesSuccess(ok)), Message::Mining(Mining::SubmitSharesError(e))]
        if ok.last_sequence_number == 1 && e.error_code == "bad-extranonce-size"),
        "{out:?}"
    );
    let b = lab.next_block().expect("a block");
    assert_eq!(&b.block[..80], &header[..]);
    // A standard share on an extended channel names the wrong kind of channel.
    s.handle_message(
        SubmitSharesStandard {
            channel_id,
            sequence_number: 3,
            job_id,
            nonce,
            ntime: prev.min_ntime,
            version,
        }
        .into(),
        T0,
    );
    assert_eq!(
        errors(&transmits(&mut s))[0].error_code,
        "invalid-channel-id"
    );
}

/// `UpdateChannel` declaring `rate` on `channel_id`, answered by one `SetTarget`.
fn declare_hash_rate(s: &mut Session, channel_id: u32, rate: f32) -> SetTarget {
    s.handle_message(
        UpdateChannel {
            channel_id,
            nominal_hash_rate: rate,
            maximum_target: any_target(),
        }
        .into(),
        T0,
    );
    let out = transmits(s);
    let [Message::Mining(Mining::SetTarget(t))] = &out[..] else {
        panic!("{out:?}");
    };
    t.clone()
}

#[test]
fn update_channel_retargets_max_target_bounds_it_and_close_channel_ends_it() {
    let lab = Lab::serving(LabConfig::pool(), tip(5), HARD_BITS);
    let mut s = session(&lab);
    // A maximum target harder than the start difficulty's: the channel starts there.
    let hard = diff(-4).to_target();
    let out = open_standard(&mut s, 1, hard);
    let Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) = &out[0] else {
        panic!("{out:?}");
    };
    assert!(Difficulty::from_target(ok.target) >= diff(-4));
    let m = StdMiner::open(&mut s);
    // Declaring a hash rate sets the difficulty that gives the vardiff's share rate.
    let t = declare_hash_rate(&mut s, m.channel_id, 1e12);
    assert_eq!(t.channel_id, m.channel_id);
    // 1 TH/s at 15 shares a minute: 4 s a share, difficulty 4e12 / 2^32 (about 931).
    let d = Difficulty::from_target(t.maximum_target).as_f64();
    assert!((d / (4e12 / 4_294_967_296.0) - 1.0).abs() < 0.01, "{d}");
    s.handle_message(
        UpdateChannel {
            channel_id: 999,
            nominal_hash_rate: 1.0,
            maximum_target: any_target(),
        }
        .into(),
        T0,
    );
    assert!(
        matches!(&transmits(&mut s)[..], [Message::Mining(Mining::UpdateChannelError(e))] if e.error_code == "invalid-channel-id")
    );
    // Closed: its shares name no channel, and the worker is gone from the count.
    let before = s.channel_count();
    s.handle_message(
        CloseChannel {
            channel_id: m.channel_id,
            reason_code: "bye".into(),
        }
        .into(),
        T0,
    );
    assert_eq!(s.channel_count(), before - 1);
    let mut m = m;
    let msg = m.share(0);
    s.handle_message(msg, T0);
    assert_eq!(
        errors(&transmits(&mut s))[0].error_code,
        "invalid-channel-id"
    );
}

/// Spec 5.3.21: `SetTarget` does not apply to a job already received and active (its maximum
/// target "remains stable"). The reference translator submits by the job's target, so a share
/// meeting only the target the job went out with must still be accepted after a harder
/// `SetTarget`, however long after; one meeting the new target is accepted too.
#[test]
fn a_harder_set_target_leaves_the_active_jobs_target_as_it_was_sent() {
    let lab = Lab::serving(LabConfig::pool(), tip(6), HARD_BITS);
    let mut s = session(&lab);
    let mut m = StdMiner::open(&mut s);
    let sent_with = m.target;
    // A hash rate calling for 16 times the start difficulty (15 shares a minute: 4 s a share).
    let start = Difficulty::from_target(sent_with).as_f64();
    let t = declare_hash_rate(
        &mut s,
        m.channel_id,
        (16.0 * start * 4_294_967_296.0 / 4.0) as f32,
    );
    let harder = t.maximum_target;
    assert!(Difficulty::from_target(harder) > Difficulty::from_target(sent_with));
    // Well past any grace period a pool may keep for the old target.
    let later = pool::Timestamp::from_millis(T0.as_millis() + 3_600_000);
    let (old_only, _) = m.grind(|h| sent_with.is_met_by(&h.0) && !harder.is_met_by(&h.0));
    let msg = m.share(old_only);
    s.handle_message(msg, later);
    let (both, _) = m.grind(|h| harder.is_met_by(&h.0));
    let msg = m.share(both);
    s.handle_message(msg, later);
    s.flush();
    let out = transmits(&mut s);
    assert!(errors(&out).is_empty(), "{out:?}");
    let accepted: u32 = successes(&out)
        .iter()
        .map(|ok| ok.new_submits_accepted_count)
        .sum();
    assert_eq!(accepted, 2);
}

/// Found by the `sv2_session` fuzz target: a channel opened after the pool adopted new work but
/// before the connection was told of it (the shell reads a frame before it looks at new work)
/// got that work as its first job, and the connection then skipped the new work for every
/// other channel, which stayed on a stale tip until the next template.
#[test]
fn a_channel_opened_as_work_changes_leaves_the_other_channels_the_new_work() {
    let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut s = session(&lab);
    let first = StdMiner::open(&mut s);
    // A new tip: the engine serves it; the connection is not told yet.
    let g = lab.publish(template(tip(2), HARD_BITS), T0);
    let out = open_standard(&mut s, 8, any_target());
    let Some(Message::Mining(Mining::OpenStandardMiningChannelSuccess(second))) = out.first()
    else {
        panic!("{out:?}");
    };
    let second = second.channel_id;
    assert_eq!(
        s.channel(second)
            .unwrap()
            .latest_job()
            .unwrap()
            .job
            .generation,
        g.id
    );
    s.handle_generation(Some(&g), T0);
    let out = transmits(&mut s);
    let prev_hashes: Vec<&SetNewPrevHash> = out
        .iter()
        .filter_map(|m| match m {
            Message::Mining(Mining::SetNewPrevHash(p)) => Some(p),
            _ => None,
        })
        .collect();
    assert!(
        prev_hashes
            .iter()
            .any(|p| p.channel_id == first.channel_id && p.prev_hash == tip(2).0),
        "the first channel was not moved to the new tip: {out:?}"
    );
    let latest = s.channel(first.channel_id).unwrap().latest_job().unwrap();
    assert_eq!(latest.job.generation, g.id);
}

/// A JDC's pool gave it a new range: the engine's extranonce base moves, and every open
/// channel is told its new prefix and gets a clean job committing to it, between templates;
/// shares on work under the old prefix are stale, later channels start in the new range.
#[test]
fn a_moved_extranonce_base_moves_every_channel_with_its_jobs() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let config = Sv2Config {
        extranonce_base: vec![0xaa, 0xbb],
        ..Sv2Config::default()
    };
    let mut s = Session::new(lab.engine.clone(), Arc::new(config));
    s.handle_message(
        setup_connection(
            0,
            mining_flags::REQUIRES_STANDARD_JOBS | mining_flags::REQUIRES_VERSION_ROLLING,
        ),
        T0,
    );
    transmits(&mut s);
    let mut m = StdMiner::open(&mut s);
    assert_eq!(&m.prefix[..2], &[0xaa, 0xbb]);
    let target = m.target;
    let good = |h: &Hash256| target.is_met_by(&h.0);
    let (old_nonce, _) = m.grind(good);
    let old_share = m.share(old_nonce);

    // Nothing moved: a tick sends nothing.
    s.handle_tick(T0);
    assert!(transmits(&mut s).is_empty());

    lab.engine.move_extranonce_base(vec![0xcc, 0xdd]);
    s.handle_tick(T0);
    let out = transmits(&mut s);
    let [Message::Mining(Mining::SetExtranoncePrefix(p)), Message::Mining(Mining::NewMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
        &out[..]
    else {
        panic!("new prefix, then a clean job: {out:?}");
    };
    assert_eq!(p.channel_id, m.channel_id);
    let mut moved = m.prefix.clone();
    moved[..2].copy_from_slice(&[0xcc, 0xdd]);
    assert_eq!(p.extranonce_prefix, moved, "only the base changes");
    assert_eq!(job.min_ntime, None);
    assert_eq!(prev.job_id, job.job_id);
    let issued = s
        .channel(m.channel_id)
        .unwrap()
        .latest_job()
        .unwrap()
        .job
        .clone();
    let txid = issued.coinbase.txid(&moved).unwrap();
    assert_eq!(
        merkle_root_from_branch(txid, &issued.merkle_branch).0,
        job.merkle_root,
        "the new job commits to the new prefix"
    );
    // Only once.
    s.handle_tick(T0);
    assert!(transmits(&mut s).is_empty());

    // A share on the old job could only hash to the old coinbase: stale, not invalid.
    s.handle_message(old_share, T0);
    assert_eq!(errors(&transmits(&mut s))[0].error_code, "stale-share");
    // Work under the new prefix is accepted.
    m.prefix = moved;
    m.job = job.clone();
    m.prev = prev.clone();
    let (n, _) = m.grind(good);
    let msg = m.share(n);
    s.handle_message(msg, T0);
    s.flush();
    assert_eq!(successes(&transmits(&mut s)).len(), 1);
    // A channel opened now starts in the new range.
    let later = StdMiner::open(&mut s);
    assert_eq!(&later.prefix[..2], &[0xcc, 0xdd]);
    // A session started after the move follows it from the start.
    let mut fresh = session(&lab);
    fresh.handle_tick(T0);
    assert!(transmits(&mut fresh).is_empty());

    // A move to the same base reissues work (a JDC that rejoined: jobs paying the farm end):
    // clean jobs, no new prefix, and shares on the work before are stale.
    let (n, _) = m.grind(good);
    let before = m.share(n);
    lab.engine.move_extranonce_base(vec![0xcc, 0xdd]);
    s.handle_tick(T0);
    let out = transmits(&mut s);
    assert!(
        out.iter().all(|m| matches!(
            m,
            Message::Mining(Mining::NewMiningJob(_) | Mining::SetNewPrevHash(_))
        )),
        "{out:?}"
    );
    assert_eq!(
        out.len(),
        4,
        "a clean job for each of the two channels: {out:?}"
    );
    s.handle_message(before, T0);
    assert_eq!(errors(&transmits(&mut s))[0].error_code, "stale-share");
}

/// The store could not confirm a read's shares in time: the batch's `SubmitShares.Success`
/// becomes a `SubmitShares.Error` (`store-unavailable`) for each share it covered, and the
/// errors the engine gave stay as they were.
#[test]
fn an_unconfirmed_success_becomes_a_store_unavailable_error() {
    let lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
    let mut s = session(&lab);
    let mut m = StdMiner::open(&mut s);
    let target = m.target;
    let good = |h: &Hash256| target.is_met_by(&h.0);
    let (first, _) = m.grind(good);
    for n in [first, m.grind(good).0] {
        let msg = m.share(n);
        s.handle_message(msg, T0);
    }
    let dup = m.share(first);
    s.handle_message(dup, T0);
    s.flush();
    s.refuse_unconfirmed();
    let out = transmits(&mut s);
    assert!(successes(&out).is_empty(), "{out:?}");
    let errs = errors(&out);
    let refused: Vec<(&str, u32)> = errs
        .iter()
        .map(|e| (e.error_code.as_str(), e.sequence_number))
        .collect();
    // The two good shares, one error each, then the duplicate's own.
    assert_eq!(
        refused,
        [
            ("store-unavailable", m.seq - 2),
            ("store-unavailable", m.seq - 1),
            ("duplicate-share", m.seq)
        ],
        "{out:?}"
    );
    assert!(errs.iter().all(|e| e.channel_id == m.channel_id));
}
