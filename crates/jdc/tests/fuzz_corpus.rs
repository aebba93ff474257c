//! Replays the committed corpus of `crates/jdc/fuzz` through the function the fuzz target runs
//! (`jdc::fuzz_support::jdc_core`), on stable: every input that once added coverage, and every
//! regression, must still hold the invariants. The seeds are written here (`write_seeds`,
//! ignored), and each is shown to take the path it was written for.

use jdc::fuzz_support::{jdc_core, jdc_core_stats, op};
use sv2::messages::job_declaration::DeclareMiningJobSuccess;
use sv2::messages::mining::SubmitSharesSuccess;
use sv2::Message;
use testkit::{corpus, replay_corpora};

replay_corpora! {
    every_jdc_core_corpus_input_holds_the_invariants: "jdc_core", 8, jdc_core;
}

/// A script, spelled as steps (see `jdc::fuzz_support`'s module documentation).
struct Script(Vec<u8>);

/// A step's byte: the operation, and whether the first (0xf) or second (0xe) send after it
/// fails.
const FAIL_FIRST: u8 = 0xf0;

/// Share kinds: bit 0 a block, bit 1 a hash that misses the channel's target, bit 2 outside
/// the devices' range.
const BLOCK: u8 = 1;
const SHARE: u8 = 0;

impl Script {
    /// `fallback_payout`: the JDC falls back to solo mining; `rejections`: non-stale rejections
    /// in a row before it leaves the pool (1 to 4).
    fn new(fallback_payout: bool, rejections: u8) -> Script {
        Script(vec![u8::from(fallback_payout) | (rejections - 1) << 1])
    }

    fn step(mut self, op: u8, args: &[u8]) -> Script {
        self.0.push(op);
        self.0.extend_from_slice(args);
        self
    }

    /// The newest template declared and set on the pool: its transactions fetched (none), the
    /// JDS's acceptance, the pool's.
    fn declared_template(self, new_tip: bool) -> Script {
        self.step(op::TEMPLATE, &[u8::from(new_tip)])
            .step(op::TX_DATA, &[0])
            .step(op::DECLARED, &[0])
            .step(op::JOB_VERDICT, &[0, 1])
    }

    /// A device's share on the newest template.
    fn share(self, kind: u8, nonce: u32) -> Script {
        let mut args = vec![0, kind];
        args.extend(nonce.to_le_bytes());
        self.step(op::SHARE, &args)
    }

    /// `m` as a raw payload from the JDS or the pool (`op`): its type, length and bytes.
    fn raw(self, op: u8, m: Message) -> Script {
        let mut payload = Vec::new();
        let msg_type = m.encode(&mut payload).expect("encodes");
        assert!(payload.len() < 64, "a raw step carries at most 63 bytes");
        let mut args = vec![msg_type, payload.len() as u8];
        args.extend(payload);
        self.step(op, &args)
    }

    /// The clock moves `secs` seconds on (at most 63).
    fn seconds(self, secs: u8) -> Script {
        self.step(op::TICK, &[0x80 | secs])
    }
}

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "seed-declared-set-and-a-block-pushed",
            Script::new(false, 3)
                .declared_template(false)
                .share(SHARE, 1)
                .share(BLOCK, 2)
                .step(op::SHARES_OK, &[0, 2])
                .0,
        ),
        (
            "seed-block-while-the-jds-is-away-pushed-late",
            Script::new(false, 3)
                .declared_template(false)
                .step(op::LOST, &[0])
                .step(op::TX_DATA, &[0])
                .share(BLOCK, 3)
                .seconds(2)
                .step(op::JOIN, &[1])
                .step(op::DECLARED, &[0])
                .step(op::TX_DATA, &[0])
                .step(op::DECLARED, &[0])
                .0,
        ),
        (
            "seed-job-refused-falls-back-to-solo-then-rejoins",
            Script::new(true, 3)
                .step(op::TEMPLATE, &[0])
                .step(op::TX_DATA, &[0])
                .step(op::DECLARED, &[0])
                .step(op::JOB_VERDICT, &[0, 0])
                .share(BLOCK, 4)
                .seconds(2)
                .step(op::JOIN, &[3])
                .declared_template(true)
                .0,
        ),
        (
            "seed-push-send-fails-then-pushed-late",
            Script::new(false, 3)
                .declared_template(false)
                .step(op::SHARE | FAIL_FIRST, &[0, BLOCK, 5, 0, 0, 0])
                .step(op::TX_DATA, &[0])
                .seconds(2)
                .step(op::JOIN, &[2])
                .step(op::DECLARED, &[0])
                .step(op::TX_DATA, &[0])
                .step(op::DECLARED, &[0])
                .0,
        ),
        (
            "seed-rejoins-refused-and-failed",
            Script::new(false, 3)
                .declared_template(false)
                .step(op::LOST, &[1])
                .seconds(2)
                .step(op::JOIN, &[4])
                .seconds(3)
                .step(op::JOIN, &[0])
                .seconds(5)
                .step(op::JOIN, &[1])
                .0,
        ),
        (
            "seed-invalid-shares-in-a-row-leave-the-pool",
            Script::new(true, 2)
                .declared_template(false)
                .share(SHARE, 6)
                .share(SHARE, 7)
                .step(op::SHARE_ERROR, &[1, 1])
                .step(op::SHARE_ERROR, &[0, 1])
                .0,
        ),
        (
            "seed-token-unanswered-times-out",
            Script::new(false, 3)
                .step(op::TEMPLATE, &[0])
                .step(op::TX_DATA, &[0])
                .seconds(11)
                .seconds(11)
                .0,
        ),
        (
            "seed-declaration-refused-leaves-the-pool",
            Script::new(false, 3)
                .step(op::TEMPLATE, &[0])
                .step(op::TX_DATA, &[0])
                .step(op::REFUSED, &[0, 3])
                .0,
        ),
        (
            "seed-missing-transactions-and-raw-payloads",
            Script::new(false, 3)
                .step(op::TEMPLATE, &[2])
                .step(op::TX_DATA, &[1])
                .step(op::MISSING, &[0, 2, 0, 1])
                .step(op::TOKEN, &[0])
                // The first declaration's request id: 1 and 2 went to token requests.
                .raw(
                    op::JDS_RAW,
                    DeclareMiningJobSuccess {
                        request_id: 3,
                        new_mining_job_token: b"raw-token".to_vec(),
                    }
                    .into(),
                )
                .step(op::JOB_VERDICT, &[0, 1])
                .step(op::POOL_OTHER, &[1, 9])
                .step(op::POOL_OTHER, &[0, 0xff])
                .raw(
                    op::POOL_RAW,
                    SubmitSharesSuccess {
                        channel_id: 6,
                        last_sequence_number: 0,
                        new_submits_accepted_count: 3,
                        new_shares_sum: 3,
                    }
                    .into(),
                )
                // A payload that does not decode loses the JDS.
                .step(op::JDS_RAW, &[0xff, 0])
                .0,
        ),
    ]
}

#[test]
#[ignore = "writes the seed inputs into the committed corpus"]
fn write_seeds() {
    corpus!("jdc_core").write_seeds(seeds());
}

fn stats_of(name: &str) -> jdc::core::JdcStats {
    let seeds = seeds();
    let (_, data) = seeds.iter().find(|(n, _)| *n == name).expect("a seed");
    jdc_core_stats(data)
}

#[test]
fn the_seeds_take_the_paths_they_are_named_for() {
    let s = stats_of("seed-declared-set-and-a-block-pushed");
    assert_eq!((s.declared, s.channel.jobs_set), (1, 1), "{s:?}");
    assert_eq!(
        (s.solutions_pushed, s.solutions_pushed_late),
        (1, 0),
        "{s:?}"
    );
    assert_eq!(s.channel.shares_accepted, 2, "{s:?}");

    let s = stats_of("seed-block-while-the-jds-is-away-pushed-late");
    assert_eq!((s.rejoined, s.solutions_pushed_late), (1, 1), "{s:?}");

    let s = stats_of("seed-job-refused-falls-back-to-solo-then-rejoins");
    assert_eq!(s.channel.jobs_refused, 1, "{s:?}");
    assert_eq!(
        s.solutions_pushed, 0,
        "a block mined solo is not the pool's: {s:?}"
    );
    assert_eq!((s.rejoined, s.solo, s.declared), (1, false, 2), "{s:?}");

    let s = stats_of("seed-push-send-fails-then-pushed-late");
    assert_eq!(
        (s.solutions_pushed, s.solutions_pushed_late),
        (1, 1),
        "{s:?}"
    );

    let s = stats_of("seed-rejoins-refused-and-failed");
    assert_eq!((s.rejoin_failures, s.rejoined), (2, 1), "{s:?}");

    let s = stats_of("seed-invalid-shares-in-a-row-leave-the-pool");
    assert!(s.solo && s.fallback.is_some(), "{s:?}");

    let s = stats_of("seed-declaration-refused-leaves-the-pool");
    assert_eq!((s.declared, s.declarations_refused), (0, 1), "{s:?}");
    assert!(
        s.fallback
            .as_deref()
            .is_some_and(|f| f.contains("refused a declaration")),
        "{s:?}"
    );

    let s = stats_of("seed-missing-transactions-and-raw-payloads");
    assert_eq!((s.declared, s.channel.jobs_set), (1, 1), "{s:?}");
    assert_eq!(
        s.channel.shares_accepted, 3,
        "the raw verdict reached the channel: {s:?}"
    );
    assert!(
        s.fallback
            .as_deref()
            .is_some_and(|f| f.contains("JDS connection was lost")),
        "{s:?}"
    );

    let s = stats_of("seed-token-unanswered-times-out");
    assert!(
        s.fallback.as_deref().is_some_and(|f| f.contains("token")),
        "{s:?}"
    );
}
