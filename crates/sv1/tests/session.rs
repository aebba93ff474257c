//! The SV1 session every role runs, driven line by line on a virtual clock with a judge that
//! records what it was asked: the protocol's flows (subscribe and authorize in either order,
//! work once both are done, hints, vardiff, the order of a share's checks and their codes) are
//! the session's, whatever judges the shares.

use std::sync::Arc;

use mining::Reject;
use primitives::{Difficulty, Timestamp};
use sv1::server::Share;
use sv1::session::{
    Admitted, Close, Conn, Judge, Judged, Outcome, Refusal, Session, ShareRef, Subscription,
};
use sv1::{Authorize, ErrorCode};

/// A judge whose answers the test sets, and which records what it was told.
#[derive(Default)]
struct Toy {
    /// Subscribes wait until this is set; `Some(false)`: no extranonce left.
    extranonce: Option<bool>,
    difficulty: f64,
    working: bool,
    next_verdict: Option<Result<bool, Reject>>,
    issued: Vec<String>,
    reissued: Vec<f64>,
    refused: Vec<String>,
    ticks_change: bool,
}

impl Judge for Toy {
    type Worker = String;
    type Work = Arc<[u8]>;
    type Accepted = u32;
    type Cx<'a> = Option<Arc<[u8]>>;

    fn worker_name(w: &String) -> &str {
        w
    }
    fn version(&self, _: &Self::Cx<'_>) -> &'static str {
        "toy/1"
    }
    fn max_workers(&self, _: &Self::Cx<'_>) -> usize {
        2
    }
    fn max_bad_lines(&self, _: &Self::Cx<'_>) -> u32 {
        2
    }
    fn subscribe(&mut self, _: &mut Self::Cx<'_>, _again: bool) -> Subscription {
        match self.extranonce {
            None => Subscription::Wait,
            Some(false) => Subscription::Full("full up"),
            Some(true) => Subscription::Granted {
                id: 7,
                extranonce1: vec![0xab, 0xcd],
                extranonce2_size: 4,
            },
        }
    }
    fn admit(
        &mut self,
        _: &mut Self::Cx<'_>,
        a: &Authorize<'_>,
        known: bool,
        _: Timestamp,
    ) -> Option<Admitted<String>> {
        if a.user.starts_with("banned") {
            return None;
        }
        Some(match known {
            true => Admitted::Known,
            false => Admitted::New(a.user.to_string()),
        })
    }
    fn offered_version_mask(&self, _: &Self::Cx<'_>) -> u32 {
        0x1fff_e000
    }
    fn set_version_mask(&mut self, _: u32) {}
    fn difficulty(&self) -> Difficulty {
        Difficulty::saturating(self.difficulty)
    }
    fn set_difficulty(&mut self, d: Difficulty, _: Timestamp) -> Difficulty {
        self.difficulty = d.as_f64().max(1.0);
        self.difficulty()
    }
    fn set_minimum(&mut self, _: Difficulty, _: Timestamp) {}
    fn vardiff_tick(&mut self, _: Timestamp) -> bool {
        if self.ticks_change {
            self.difficulty /= 2.0;
        }
        self.ticks_change
    }
    fn is_working(&self) -> bool {
        self.working
    }
    fn current_work(&self, cx: &Self::Cx<'_>) -> Option<Arc<[u8]>> {
        cx.clone()
    }
    fn issue(
        &mut self,
        _: &mut Self::Cx<'_>,
        _: &mut Conn<String>,
        work: &Arc<[u8]>,
        _: Timestamp,
    ) -> Option<Arc<[u8]>> {
        self.working = true;
        self.issued.push(String::from_utf8_lossy(work).into_owned());
        Some(work.clone())
    }
    fn reissue(
        &mut self,
        _: &mut Self::Cx<'_>,
        conn: &mut Conn<String>,
        old: Difficulty,
        _: Timestamp,
    ) {
        self.reissued.push(old.as_f64());
        conn.out().extend_from_slice(b"again\n");
    }
    fn judge(
        &mut self,
        _: &mut Self::Cx<'_>,
        conn: &mut Conn<String>,
        worker: usize,
        share: &Share<'_>,
        _: Timestamp,
    ) -> Result<Judged<u32>, Refusal> {
        assert_eq!(conn.workers()[worker], share.worker);
        match self.next_verdict.take().expect("a verdict set") {
            Ok(retarget) => {
                let old = self.difficulty();
                if retarget {
                    self.difficulty *= 2.0;
                }
                Ok(Judged {
                    accepted: share.nonce,
                    retarget_from: retarget.then_some(old),
                })
            }
            Err(r) => Err(Refusal::Reject(r)),
        }
    }
    fn check_job(&self, _: &Self::Cx<'_>, job_id: &str) -> Result<(), Reject> {
        match job_id {
            "old" => Err(Reject::Stale),
            _ => Ok(()),
        }
    }
    fn refused(
        &mut self,
        _: &mut Self::Cx<'_>,
        worker: Option<&String>,
        share: ShareRef<'_>,
        why: &Refusal,
        _: Timestamp,
    ) {
        self.refused
            .push(format!("{} {:?} {:?}", share.id, worker, why));
    }
}

const T0: Timestamp = Timestamp::from_millis(1_000);

struct Rig {
    s: Session<Toy>,
    work: Option<Arc<[u8]>>,
}

impl Rig {
    fn new(extranonce: Option<bool>) -> Rig {
        Rig {
            s: Session::new(Toy {
                extranonce,
                difficulty: 8.0,
                ..Toy::default()
            }),
            work: Some(Arc::from(&b"job-1\n"[..])),
        }
    }

    fn line(&mut self, l: &str) -> Outcome<u32> {
        self.s.handle_line(l.as_bytes(), T0, &mut self.work)
    }

    /// What was written since the last call, as lines.
    fn written(&mut self) -> Vec<String> {
        let out = self.s.take_output();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn ready(&mut self) {
        self.line(r#"{"id":1,"method":"mining.subscribe","params":[]}"#);
        self.line(r#"{"id":2,"method":"mining.authorize","params":["w.1","x"]}"#);
        self.written();
    }

    fn submit(&mut self, worker: &str, job: &str) -> Outcome<u32> {
        self.line(&format!(
            r#"{{"id":9,"method":"mining.submit","params":["{worker}","{job}","00000000","5f5e1000","0000002a"]}}"#
        ))
    }
}

#[test]
fn work_starts_once_subscribed_and_authorized_in_either_order() {
    for subscribe_first in [true, false] {
        let mut r = Rig::new(Some(true));
        let sub = r#"{"id":1,"method":"mining.subscribe","params":[]}"#;
        let auth = r#"{"id":2,"method":"mining.authorize","params":["w.1","x"]}"#;
        let (a, b) = if subscribe_first {
            (sub, auth)
        } else {
            (auth, sub)
        };
        r.line(a);
        assert!(r.s.judge().issued.is_empty(), "no work before both");
        r.line(b);
        let out = r.written();
        assert_eq!(r.s.judge().issued, ["job-1\n"]);
        // The answers, then the difficulty before the job it applies to.
        assert_eq!(out.len(), 4, "{out:?}");
        assert!(out.iter().any(|l| l.contains("\"abcd\",4")), "{out:?}");
        assert!(
            out[2].contains("mining.set_difficulty") && out[2].contains('8'),
            "{out:?}"
        );
        assert_eq!(out[3], "job-1");
        assert!(r.s.is_authorized() && r.s.is_working());
    }
}

#[test]
fn a_subscribe_the_role_cannot_answer_yet_is_answered_when_it_can() {
    let mut r = Rig::new(None);
    r.line(r#"{"id":"s","method":"mining.subscribe","params":[]}"#);
    r.line(r#"{"id":2,"method":"mining.authorize","params":["w.1","x"]}"#);
    assert_eq!(r.written().len(), 1, "only the authorize is answered");
    assert!(r.s.wants_subscription() && !r.s.is_subscribed());
    r.s.judge_mut().extranonce = Some(true);
    r.s.subscription_ready(T0, &mut r.work);
    let out = r.written();
    assert!(out[0].starts_with(r#"{"id":"s","result":[["#), "{out:?}");
    assert_eq!(r.s.judge().issued.len(), 1);

    // A role out of extranonces answers with its reason and closes.
    let mut r = Rig::new(Some(false));
    r.line(r#"{"id":1,"method":"mining.subscribe","params":[]}"#);
    assert!(r.written()[0].contains("full up"));
    assert_eq!(r.s.wants_close(), Some(Close::Full));
}

#[test]
fn shares_are_checked_in_the_customary_order() {
    let mut r = Rig::new(Some(true));
    // Not subscribed: 25, before anything else is looked at.
    assert!(matches!(
        r.submit("w.1", "1"),
        Outcome::Refused(ErrorCode::NotSubscribed)
    ));
    assert!(r.written()[0].contains("[25,"));
    r.ready();
    // A worker the connection never authorized: 24.
    assert!(matches!(
        r.submit("w.2", "1"),
        Outcome::Refused(ErrorCode::Unauthorized)
    ));
    // The judge's reject, with its code and text.
    r.s.judge_mut().next_verdict = Some(Err(Reject::Duplicate));
    assert!(matches!(
        r.submit("w.1", "1"),
        Outcome::Rejected(Reject::Duplicate)
    ));
    let out = r.written();
    assert!(out[0].contains("[24,"), "{out:?}");
    assert!(out[1].contains("[22,\"Duplicate share\""), "{out:?}");
    // Each refusal reached the judge's records, the worker named once known.
    let refused = &r.s.judge().refused;
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused[0].contains("None Code(NotSubscribed)"));
    assert!(refused[2].contains("Some(\"w.1\") Reject(Duplicate)"));

    // Accepted: acknowledged, and a retarget tells the new difficulty and re-sends work.
    r.s.judge_mut().next_verdict = Some(Ok(true));
    assert!(matches!(r.submit("w.1", "1"), Outcome::Accepted(42)));
    let out = r.written();
    assert_eq!(out[0], r#"{"id":9,"result":true,"error":null}"#);
    assert!(out[1].contains("mining.set_difficulty") && out[1].contains("16"));
    assert_eq!(out[2], "again");
    assert_eq!(r.s.judge().reissued, [8.0]);
}

#[test]
fn a_malformed_submit_is_answered_after_the_checks_that_come_first() {
    let mut r = Rig::new(Some(true));
    let bad = |job: &str| {
        format!(r#"{{"id":5,"method":"mining.submit","params":["w.1","{job}","00",7,"00"]}}"#)
    };
    assert!(matches!(
        r.line(&bad("1")),
        Outcome::Refused(ErrorCode::NotSubscribed)
    ));
    r.ready();
    // A stale job is told as such, not as a bad parameter.
    assert!(matches!(
        r.line(&bad("old")),
        Outcome::Rejected(Reject::Stale)
    ));
    assert!(r.s.wants_close().is_none());
    // Then the parameter; past the role's tolerance the connection is closed.
    for _ in 0..3 {
        assert!(matches!(
            r.line(&bad("1")),
            Outcome::Refused(ErrorCode::Other)
        ));
    }
    assert_eq!(r.s.wants_close(), Some(Close::TooManyBadLines));
    let out = r.written();
    assert!(out[1].contains("[20,"), "{out:?}");
}

#[test]
fn hints_and_vardiff_retarget_a_working_miner_and_only_it() {
    let mut r = Rig::new(Some(true));
    // Before work, a hint in the authorize sets the starting difficulty.
    r.line(r#"{"id":1,"method":"mining.subscribe","params":[]}"#);
    r.line(r#"{"id":2,"method":"mining.authorize","params":["w.1","d=64"]}"#);
    let out = r.written();
    assert!(
        out[2].contains("mining.set_difficulty") && out[2].contains("64"),
        "{out:?}"
    );
    assert!(r.s.judge().reissued.is_empty());

    // A notification hint is not answered; a change re-sends the latest job.
    r.line(r#"{"id":null,"method":"mining.suggest_difficulty","params":[128]}"#);
    assert_eq!(r.written()[1], "again");
    // The same difficulty again changes nothing and sends nothing but the answer.
    r.line(r#"{"id":3,"method":"mining.suggest_difficulty","params":[128]}"#);
    assert_eq!(r.written(), [r#"{"id":3,"result":true,"error":null}"#]);

    // Vardiff on a tick.
    r.s.judge_mut().ticks_change = true;
    r.s.handle_tick(T0, &mut r.work);
    let out = r.written();
    assert!(out[0].contains("64"), "{out:?}");
    assert_eq!(r.s.judge().reissued, [64.0, 128.0]);
}

#[test]
fn worker_names_are_bounded_and_the_judge_has_the_last_word() {
    let mut r = Rig::new(Some(true));
    let auth = |id: u32, name: &str| {
        format!(r#"{{"id":{id},"method":"mining.authorize","params":["{name}","x"]}}"#)
    };
    r.line(&auth(1, "a"));
    r.line(&auth(2, "a"));
    r.line(&auth(3, "banned.1"));
    r.line(&auth(4, "b"));
    r.line(&auth(5, "c"));
    r.line(&auth(6, "\\u0007bell"));
    let out = r.written();
    let ok: Vec<bool> = out.iter().map(|l| l.contains("\"result\":true")).collect();
    // Known names again are fine; the third name is past the allowance of two.
    assert_eq!(ok, [true, true, false, true, false, false], "{out:?}");
    assert_eq!(r.s.workers(), ["a", "b"]);
}
