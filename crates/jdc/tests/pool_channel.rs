//! The JDC's channel to the pool: opening, custom jobs, and which shares go up under which job.

use jdc::coinbase::CustomCoinbase;
use jdc::pool_channel::{CustomJob, PoolChannel, PoolChannelConfig, PoolEvent};
use pool::engine::TappedShare;
use primitives::{Hash256, Target};
use sv2::messages::common::{mining_flags, Common, SetupConnectionSuccess};
use sv2::messages::mining::{
    OpenExtendedMiningChannelSuccess, SetCustomMiningJobError, SetCustomMiningJobSuccess,
    SetTarget, SubmitSharesError, SubmitSharesSuccess,
};
use sv2::messages::{Message, Mining};

const PREFIX: [u8; 4] = [0xfa, 0xce, 0x00, 0x01];

/// A target met by hashes whose last (most significant) byte is zero.
fn pool_target() -> Target {
    let mut b = [0xff; 32];
    b[31] = 0;
    Target::from_le_bytes(&b)
}

fn hash(easy: bool) -> Hash256 {
    let mut h = [0x11; 32];
    h[31] = if easy { 0x40 } else { 0 };
    Hash256(h)
}

fn share(generation: u64, easy: bool, nonce: u32) -> TappedShare {
    TappedShare {
        generation,
        job_id: 100 + generation,
        extranonce: [
            &PREFIX[..],
            &[0x00, 0x07, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff],
        ]
        .concat(),
        version: 0x2000_4000,
        ntime: 1_750_000_100,
        nonce,
        hash: hash(easy),
        block: false,
        worker: "lab.farm.rig-0007".into(),
    }
}

fn job(generation: u64) -> CustomJob {
    CustomJob {
        generation,
        token: vec![0xdd; 49],
        version: 0x2000_0000,
        prev_hash: Hash256([0x33; 32]),
        min_ntime: 1_750_000_000,
        nbits: 0x1d00_ffff,
        coinbase: CustomCoinbase {
            tx_version: 2,
            script_prefix: vec![0x03, 0xa1, 0xbb, 0x0d, 0x0c],
            sequence: u32::MAX,
            outputs: vec![0],
            locktime: 0,
            outputs_list: Vec::new(),
        },
        merkle_path: vec![[0x44; 32]],
    }
}

fn sends(events: &[PoolEvent]) -> Vec<Mining> {
    events
        .iter()
        .filter_map(|e| match e {
            PoolEvent::Send(Message::Mining(m)) => Some(m.clone()),
            _ => None,
        })
        .collect()
}

/// The pool's `SetupConnection.Success`: what the channel sends next.
fn set_up(c: &mut PoolChannel) -> Vec<PoolEvent> {
    c.handle_message(
        SetupConnectionSuccess {
            used_version: 2,
            flags: 0,
        }
        .into(),
    )
    .unwrap()
}

fn open() -> PoolChannel {
    open_with(PoolChannelConfig::default(), |_, out| out)
}

/// Sets up a channel of `cfg`; `negotiate` answers whatever came after `SetupConnection.Success`
/// and returns the events that hold the channel request.
fn open_with(
    cfg: PoolChannelConfig,
    negotiate: impl FnOnce(&mut PoolChannel, Vec<PoolEvent>) -> Vec<PoolEvent>,
) -> PoolChannel {
    let mut c = PoolChannel::new(cfg);
    let Message::Common(Common::SetupConnection(s)) = c.setup_connection() else {
        panic!("not a SetupConnection");
    };
    assert_eq!(
        s.flags & mining_flags::REQUIRES_WORK_SELECTION,
        mining_flags::REQUIRES_WORK_SELECTION
    );
    let out = set_up(&mut c);
    let out = negotiate(&mut c, out);
    let Mining::OpenExtendedMiningChannel(o) = &sends(&out)[0] else {
        panic!("no channel request");
    };
    assert_eq!(o.min_extranonce_size, 8);
    let out = c
        .handle_message(
            OpenExtendedMiningChannelSuccess {
                request_id: o.request_id,
                channel_id: 6,
                target: pool_target(),
                extranonce_size: 8,
                extranonce_prefix: PREFIX.to_vec(),
                group_channel_id: 0,
            }
            .into(),
        )
        .unwrap();
    assert!(matches!(&out[0], PoolEvent::Opened(o) if o.channel_id == 6 && o.extranonce_size == 8));
    c
}

fn set(c: &mut PoolChannel, generation: u64) -> u32 {
    let Mining::SetCustomMiningJob(m) = &sends(&c.set_custom_job(&job(generation)))[0] else {
        panic!("no SetCustomMiningJob");
    };
    assert_eq!(m.channel_id, 6);
    assert_eq!(m.token, vec![0xdd; 49]);
    assert_eq!(m.prev_hash, [0x33; 32]);
    assert_eq!(m.merkle_path, vec![[0x44; 32]]);
    m.request_id
}

#[test]
fn shares_wait_for_their_job_and_go_up_under_it_with_the_prefix_taken_off() {
    let mut c = open();
    let request = set(&mut c, 3);
    assert!(sends(&c.share(&share(3, false, 1))).is_empty());
    assert_eq!(c.held(), 1);
    let out = c
        .handle_message(
            SetCustomMiningJobSuccess {
                channel_id: 6,
                request_id: request,
                job_id: 41,
            }
            .into(),
        )
        .unwrap();
    assert!(out.contains(&PoolEvent::JobSet {
        generation: 3,
        job_id: 41
    }));
    let m = sends(&out);
    let Mining::SubmitSharesExtended(s) = &m[0] else {
        panic!("held share not submitted: {m:?}");
    };
    assert_eq!((s.channel_id, s.job_id, s.nonce), (6, 41, 1));
    assert_eq!(
        s.extranonce,
        vec![0x00, 0x07, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff]
    );
    assert_eq!(s.version, 0x2000_4000);
    // Later shares go straight up.
    let Mining::SubmitSharesExtended(s2) = &sends(&c.share(&share(3, false, 2)))[0] else {
        panic!("not submitted");
    };
    assert_eq!(s2.sequence_number, s.sequence_number + 1);
    assert_eq!(c.held(), 0);
}

#[test]
fn shares_easier_than_the_pool_target_or_from_another_prefix_stay_below() {
    let mut c = open();
    let request = set(&mut c, 1);
    c.handle_message(
        SetCustomMiningJobSuccess {
            channel_id: 6,
            request_id: request,
            job_id: 2,
        }
        .into(),
    )
    .unwrap();
    assert!(sends(&c.share(&share(1, true, 1))).is_empty());
    let mut foreign = share(1, false, 2);
    foreign.extranonce[0] ^= 1;
    assert!(sends(&c.share(&foreign)).is_empty());
    assert_eq!((c.stats.below_target, c.stats.foreign), (1, 1));
    // A harder target from the pool applies to the next share.
    let mut hard = [0xff; 32];
    hard[31] = 0;
    hard[30] = 0;
    c.handle_message(
        SetTarget {
            channel_id: 6,
            maximum_target: Target::from_le_bytes(&hard),
        }
        .into(),
    )
    .unwrap();
    assert!(sends(&c.share(&share(1, false, 3))).is_empty());
    assert_eq!(c.stats.below_target, 2);
}

#[test]
fn a_refused_job_drops_its_held_shares_and_rejections_name_the_generation() {
    let mut c = open();
    let r1 = set(&mut c, 1);
    c.share(&share(1, false, 1));
    let out = c
        .handle_message(
            SetCustomMiningJobError {
                channel_id: 6,
                request_id: r1,
                error_code: "invalid-mining-job-token".into(),
            }
            .into(),
        )
        .unwrap();
    assert_eq!(
        out,
        vec![PoolEvent::JobRefused {
            generation: 1,
            code: "invalid-mining-job-token".into()
        }]
    );
    assert_eq!((c.held(), c.stats.dropped), (0, 1));

    let r2 = set(&mut c, 2);
    c.handle_message(
        SetCustomMiningJobSuccess {
            channel_id: 6,
            request_id: r2,
            job_id: 9,
        }
        .into(),
    )
    .unwrap();
    let Mining::SubmitSharesExtended(s) = &sends(&c.share(&share(2, false, 5)))[0] else {
        panic!("not submitted");
    };
    let out = c
        .handle_message(
            SubmitSharesError {
                channel_id: 6,
                sequence_number: s.sequence_number,
                error_code: "stale-share".into(),
            }
            .into(),
        )
        .unwrap();
    assert_eq!(
        out,
        vec![PoolEvent::ShareRejected {
            generation: 2,
            code: "stale-share".into()
        }]
    );
    c.handle_message(
        SubmitSharesSuccess {
            channel_id: 6,
            last_sequence_number: s.sequence_number,
            new_submits_accepted_count: 0,
            new_shares_sum: 0,
        }
        .into(),
    )
    .unwrap();
    assert_eq!((c.stats.shares_submitted, c.stats.shares_rejected), (1, 1));
}

#[test]
fn the_pools_own_jobs_are_not_mined_and_mining_before_open_is_an_error() {
    let mut c = PoolChannel::new(PoolChannelConfig::default());
    assert!(c.share(&share(1, false, 1)).is_empty());
    assert!(c
        .handle_message(
            SetTarget {
                channel_id: 1,
                maximum_target: Target::MAX
            }
            .into()
        )
        .is_err());
}

/// With `worker_tracking`, the JDC asks for extension 0x0002 before it opens its channel; a pool
/// that agrees gets each share named by its device's worker (the part after the account),
/// one that refuses or stays silent gets plain shares, one that requires another extension
/// ends the connection.
#[test]
fn worker_tracking_is_negotiated_before_the_channel_opens() {
    use sv2::messages::extensions::{RequestExtensionsError, RequestExtensionsSuccess};
    use sv2::messages::Extensions;
    let cfg = PoolChannelConfig {
        worker_tracking: true,
        ..PoolChannelConfig::default()
    };
    let request = |out: &[PoolEvent]| match out {
        [PoolEvent::Send(Message::Extensions(Extensions::RequestExtensions(r)))] => r.clone(),
        other => panic!("no RequestExtensions first: {other:?}"),
    };
    type Answer = Box<dyn Fn(&mut PoolChannel, u16) -> Vec<PoolEvent>>;
    let mut answers: Vec<Answer> = vec![
        Box::new(|c, id| {
            c.handle_message(
                RequestExtensionsSuccess {
                    request_id: id,
                    supported_extensions: vec![2],
                }
                .into(),
            )
            .unwrap()
        }),
        Box::new(|c, id| {
            c.handle_message(
                RequestExtensionsError {
                    request_id: id,
                    unsupported_extensions: vec![2],
                    required_extensions: vec![],
                }
                .into(),
            )
            .unwrap()
        }),
        Box::new(|c, _| {
            assert!(c.awaiting_extensions());
            c.extensions_unanswered()
        }),
    ];
    for (i, answer) in answers.drain(..).enumerate() {
        let mut c = open_with(cfg.clone(), |c, out| {
            let r = request(&out);
            assert_eq!(r.requested_extensions, vec![2]);
            answer(c, r.request_id)
        });
        let agreed = i == 0;
        assert_eq!(c.worker_tracking(), agreed);
        let request_id = set(&mut c, 1);
        c.handle_message(
            SetCustomMiningJobSuccess {
                channel_id: 6,
                request_id,
                job_id: 41,
            }
            .into(),
        )
        .unwrap();
        let Mining::SubmitSharesExtended(s) = &sends(&c.share(&share(1, false, 9)))[0] else {
            panic!("not submitted");
        };
        assert_eq!(s.job_id, 41);
        let expected = agreed.then(|| "farm.rig-0007".to_owned());
        assert_eq!(s.user_identity, expected, "answer {i}");
        assert_eq!(c.stats.worker_shares, u64::from(agreed));
        // An answer that comes after the wait is ignored: the link goes on.
        let late = RequestExtensionsSuccess {
            request_id: 1,
            supported_extensions: vec![2],
        };
        assert_eq!(c.handle_message(late.into()), Ok(Vec::new()), "answer {i}");
        assert_eq!(c.worker_tracking(), agreed);
    }
    // A pool that requires an extension the JDC does not use: the connection cannot go on.
    let mut c = PoolChannel::new(cfg);
    let r = request(&set_up(&mut c));
    let e = c
        .handle_message(
            RequestExtensionsError {
                request_id: r.request_id,
                unsupported_extensions: vec![],
                required_extensions: vec![0x0003],
            }
            .into(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("0x0003"), "{e}");
}
