//! Extensions on the SV2 front end: negotiation (0x0001) and worker-specific hashrate tracking
//! (0x0002), driven through the sans-IO session.

#[allow(dead_code)]
mod support;

use std::sync::Arc;

use pool::sv2::{Session, Sv2Config, MAX_TRACKED_WORKERS, TRACKED_IDLE_MS};
use primitives::{sha256d, Target};
use support::*;
use sv2::messages::extensions::{
    RequestExtensions, RequestExtensionsError, RequestExtensionsSuccess,
};
use sv2::messages::mining::{
    NewExtendedMiningJob, SetNewPrevHash, SubmitSharesExtended, UpdateChannel,
};
use sv2::messages::{Common, Extensions, Mining};
use sv2::Message;

fn session(lab: &Lab, required: Vec<u16>) -> Session {
    let config = Sv2Config {
        required_extensions: required,
        ..Sv2Config::default()
    };
    let mut s = Session::new(lab.engine.clone(), Arc::new(config));
    s.handle_message(setup_connection(0, 0), T0);
    assert!(matches!(
        &transmits(&mut s)[..],
        [Message::Common(Common::SetupConnectionSuccess(_))]
    ));
    s
}

fn request(s: &mut Session, ids: &[u16]) -> Vec<Message> {
    s.handle_message(
        RequestExtensions {
            request_id: 3,
            requested_extensions: ids.to_vec(),
        }
        .into(),
        T0,
    );
    transmits(s)
}

/// An extended channel as a farm proxy holds it.
struct Farm {
    channel_id: u32,
    target: Target,
    prefix: Vec<u8>,
    job: NewExtendedMiningJob,
    prev: SetNewPrevHash,
    seq: u32,
    nonce: u32,
}

impl Farm {
    fn open(s: &mut Session, user: &str) -> Farm {
        s.handle_message(open_extended(user), T0);
        let out = transmits(s);
        let [Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ok)), Message::Mining(Mining::NewExtendedMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
            &out[..]
        else {
            panic!("{out:?}");
        };
        Farm {
            channel_id: ok.channel_id,
            target: ok.target,
            prefix: ok.extranonce_prefix.clone(),
            job: job.clone(),
            prev: prev.clone(),
            seq: 0,
            nonce: 0,
        }
    }

    /// The next share meeting the channel's target, from `worker` if given.
    fn share(&mut self, worker: Option<&str>) -> Message {
        let extranonce = [9u8, 8, 7, 6];
        let root = extended_root(&self.job, &[&self.prefix[..], &extranonce].concat());
        let nonce = (self.nonce..)
            .find(|&n| {
                let header = sv2_header(self.job.version, &self.prev, &root, n);
                self.target.is_met_by(&sha256d(&header).0)
            })
            .unwrap();
        self.nonce = nonce + 1;
        self.seq += 1;
        SubmitSharesExtended {
            channel_id: self.channel_id,
            sequence_number: self.seq,
            job_id: self.job.job_id,
            nonce,
            ntime: self.prev.min_ntime,
            version: self.job.version,
            extranonce: extranonce.to_vec(),
            user_identity: worker.map(str::to_owned),
        }
        .into()
    }
}

fn accepted(lab: &Lab, worker: &str) -> u64 {
    lab.engine.workers.get(worker).map_or(0, |w| w.accepted())
}

#[test]
fn the_pool_supports_worker_tracking_and_says_what_it_does_not() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![]);
    assert_eq!(
        request(&mut s, &[0x4001, 2]),
        vec![Message::Extensions(Extensions::RequestExtensionsSuccess(
            RequestExtensionsSuccess {
                request_id: 3,
                supported_extensions: vec![2],
            }
        ))]
    );
    assert_eq!(s.extensions(), &[2]);

    let mut s = session(&lab, vec![]);
    assert_eq!(
        request(&mut s, &[0x4001]),
        vec![Message::Extensions(Extensions::RequestExtensionsError(
            RequestExtensionsError {
                request_id: 3,
                unsupported_extensions: vec![0x4001],
                required_extensions: vec![],
            }
        ))]
    );
    assert!(s.extensions().is_empty());
    // It mines on without extensions.
    Farm::open(&mut s, "acct");
    assert!(s.wants_close().is_none());
}

#[test]
fn a_required_extension_must_be_negotiated_before_a_channel_opens() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![2]);
    let out = request(&mut s, &[]);
    assert!(
        matches!(&out[..], [Message::Extensions(Extensions::RequestExtensionsError(e))] if e.required_extensions == vec![2]),
        "{out:?}"
    );
    // Asked again with it: used.
    request(&mut s, &[2]);
    assert_eq!(s.extensions(), &[2]);
    Farm::open(&mut s, "acct");

    // A connection that never asks is closed at its first channel.
    let mut s = session(&lab, vec![2]);
    s.handle_message(open_extended("acct"), T0);
    assert!(transmits(&mut s).is_empty());
    let why = format!("{:?}", s.wants_close());
    assert!(why.contains("required extensions"), "{why}");
}

#[test]
fn shares_naming_a_worker_are_accounted_to_it_under_the_channels_account() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![]);
    request(&mut s, &[2]);
    let mut farm = Farm::open(&mut s, "farm.proxy1");
    let sent = [
        ("rig-1", 3),
        ("farm.rig-2", 2),
        // Another account's name is kept under the channel's account.
        ("mallory.rig", 1),
    ];
    for (worker, n) in sent {
        for _ in 0..n {
            let m = farm.share(Some(worker));
            s.handle_message(m, T0);
        }
    }
    s.flush();
    let out = transmits(&mut s);
    let acked: u32 = out
        .iter()
        .map(|m| match m {
            Message::Mining(Mining::SubmitSharesSuccess(ok)) => ok.new_submits_accepted_count,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(acked, 6);
    assert_eq!(accepted(&lab, "farm.rig-1"), 3);
    assert_eq!(accepted(&lab, "farm.rig-2"), 2);
    assert_eq!(accepted(&lab, "farm.mallory.rig"), 1);
    assert_eq!(accepted(&lab, "mallory.rig"), 0);
    assert_eq!(accepted(&lab, "farm.proxy1"), 0, "the channel's own worker");
    // The workers leave the list's connected count with their channel.
    assert_eq!(
        lab.engine.workers.get("farm.rig-1").unwrap().connections(),
        1
    );
    s.closed(T0);
    assert_eq!(
        lab.engine.workers.get("farm.rig-1").unwrap().connections(),
        0
    );
}

#[test]
fn without_the_extension_a_user_identity_is_ignored() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![]);
    let mut farm = Farm::open(&mut s, "farm.proxy1");
    for _ in 0..2 {
        let m = farm.share(Some("rig-1"));
        s.handle_message(m, T0);
    }
    s.flush();
    transmits(&mut s);
    assert_eq!(accepted(&lab, "farm.proxy1"), 2);
    assert!(lab.engine.workers.get("farm.rig-1").is_none());
}

fn acked(out: &[Message]) -> u32 {
    out.iter()
        .map(|m| match m {
            Message::Mining(Mining::SubmitSharesSuccess(ok)) => ok.new_submits_accepted_count,
            other => panic!("{other:?}"),
        })
        .sum()
}

#[test]
fn alike_names_are_one_worker_and_a_bad_share_names_nobody() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![]);
    request(&mut s, &[2]);
    let mut farm = Farm::open(&mut s, "farm.proxy1");
    for id in ["rig-1", "farm.rig-1"] {
        let m = farm.share(Some(id));
        s.handle_message(m, T0);
    }
    // A share the pool refuses (an extranonce of the wrong size) takes no name on.
    let Message::Mining(Mining::SubmitSharesExtended(mut bad)) = farm.share(Some("ghost")) else {
        unreachable!()
    };
    bad.extranonce.pop();
    s.handle_message(bad.into(), T0);
    s.flush();
    transmits(&mut s);
    assert_eq!(accepted(&lab, "farm.rig-1"), 2);
    assert!(lab.engine.workers.get("farm.ghost").is_none());
    assert_eq!(s.tracked_workers(), 1);
}

#[test]
fn the_channel_aims_at_every_workers_rate_and_forgets_idle_workers() {
    let lab = Lab::serving(LabConfig::pool(), tip(4), HARD_BITS);
    let mut s = session(&lab, vec![]);
    request(&mut s, &[2]);
    let mut farm = Farm::open(&mut s, "farm.proxy1");
    let base = s.channel(farm.channel_id).unwrap().shares_per_minute();
    for id in ["a", "b", "c"] {
        let m = farm.share(Some(id));
        s.handle_message(m, T0);
    }
    s.flush();
    transmits(&mut s);
    let id = farm.channel_id;
    let aim = |s: &Session| s.channel(id).unwrap().shares_per_minute();
    assert_eq!(aim(&s), 3.0 * base);
    // A declared hash rate is turned into a difficulty at the channel's aim, not one worker's:
    // here, half the channel's difficulty.
    let now_d = s.channel(id).unwrap().difficulty().as_f64();
    let update = |rate: f32| -> Message {
        UpdateChannel {
            channel_id: id,
            nominal_hash_rate: rate,
            maximum_target: Target::from_le_bytes(&[0xff; 32]),
        }
        .into()
    };
    let rate = (now_d / 2.0 * 4_294_967_296.0 * 3.0 * base / 60.0) as f32;
    s.handle_message(update(rate), T0);
    let out = transmits(&mut s);
    let [Message::Mining(Mining::SetTarget(t))] = &out[..] else {
        panic!("{out:?}")
    };
    let d = primitives::Difficulty::from_target(t.maximum_target).as_f64();
    let want = f64::from(rate) * 60.0 / (3.0 * base) / 4_294_967_296.0;
    assert!((d / want - 1.0).abs() < 0.01, "{d} vs {want}");
    // A rate that would raise it is not followed: the channel's stated rate cannot say how many
    // workers share it, and only three have shown themselves. Vardiff raises it from shares.
    s.handle_message(update(rate * 16.0), T0);
    assert!(transmits(&mut s).is_empty());
    assert!((s.channel(id).unwrap().difficulty().as_f64() / d - 1.0).abs() < 0.01);
    // One worker goes on; the other two go quiet and leave.
    let later = T0.plus_millis(TRACKED_IDLE_MS / 2);
    let m = farm.share(Some("a"));
    s.handle_message(m, later);
    s.flush();
    transmits(&mut s);
    s.handle_tick(T0.plus_millis(TRACKED_IDLE_MS));
    assert_eq!(s.tracked_workers(), 1);
    assert_eq!(aim(&s), base);
    assert_eq!(lab.engine.workers.get("farm.b").unwrap().connections(), 0);
    assert_eq!(lab.engine.workers.get("farm.a").unwrap().connections(), 1);
}

#[test]
fn a_connection_tracks_a_bounded_number_of_workers_and_credits_the_rest() {
    // Shares at 2^-30: four hashes each.
    let lab = Lab::serving(
        LabConfig {
            start: diff(-30),
            ..LabConfig::pool()
        },
        tip(4),
        HARD_BITS,
    );
    let mut s = session(&lab, vec![]);
    request(&mut s, &[2]);
    let mut farm = Farm::open(&mut s, "farm.proxy1");
    let extra = 3;
    for i in 0..MAX_TRACKED_WORKERS + extra {
        let m = farm.share(Some(&format!("rig{i}")));
        s.handle_message(m, T0);
    }
    s.flush();
    let out = transmits(&mut s);
    assert_eq!(
        acked(&out) as usize,
        MAX_TRACKED_WORKERS + extra,
        "none refused"
    );
    assert_eq!(s.tracked_workers(), MAX_TRACKED_WORKERS);
    assert_eq!(
        accepted(&lab, "farm.proxy1"),
        extra as u64,
        "the rest: the channel's worker"
    );
}
