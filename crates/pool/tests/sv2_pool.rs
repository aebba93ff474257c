//! The whole SV2 pool in process: templates from simnet's Template Provider, an SV2 miner over
//! Noise on a standard channel, a block found through it going back as `SubmitSolution` and
//! becoming the provider's tip; the share stored before it is acknowledged; no work once the
//! provider is gone. Then, without sockets, group channels: how jobs reach the standard
//! channels of a proxy's connection (one extended job per group) and of an end device's (one
//! standard job per channel), and how their shares are judged.

#[allow(dead_code)]
mod support;
mod sv2_support;

use std::net::SocketAddr;
use std::time::Duration;

use pool::service::{PoolSettings, RunningPool};
use primitives::{sha256d, CompactTarget, Target};
use support::{setup_connection, sv2_header};
use sv2::messages::common::mining_flags;
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::messages::{Common, Mining};
use sv2::Message;
use sv2_support::{connect, recv, serving, until, WAIT};

fn settings(tp: SocketAddr, store: &std::path::Path) -> PoolSettings {
    sv2_support::pool_settings(tp, store, 0x33)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sv2_miner_finds_a_block_through_the_pool_and_the_provider_takes_it() {
    let (node, tp_addr, stop_tp) = sv2_support::template_provider(11, 100).await;
    let dir = tempfile::tempdir().unwrap();
    let pool = RunningPool::start(settings(tp_addr, &dir.path().join("pool.sqlite")))
        .await
        .unwrap();
    let sv2_addr = pool.sv2_addr.expect("sv2 bound");
    // Work is served once the provider's first template is in.
    serving(&pool).await;

    let mut conn = connect(sv2_addr).await;
    // A header-only device: standard jobs on its own channel.
    conn.send_message(&setup_connection(0, mining_flags::REQUIRES_STANDARD_JOBS))
        .await
        .unwrap();
    assert!(matches!(
        recv(&mut conn).await,
        Message::Common(Common::SetupConnectionSuccess(_))
    ));
    conn.send_message(
        &OpenStandardMiningChannel {
            request_id: 1,
            user_identity: "carol".into(),
            nominal_hash_rate: 0.0,
            max_target: Target::from_le_bytes(&[0xff; 32]),
        }
        .into(),
    )
    .await
    .unwrap();
    let Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)) = recv(&mut conn).await
    else {
        panic!("channel opened");
    };
    let Message::Mining(Mining::NewMiningJob(job)) = recv(&mut conn).await else {
        panic!("a job");
    };
    let Message::Mining(Mining::SetNewPrevHash(prev)) = recv(&mut conn).await else {
        panic!("its prev hash");
    };
    let net = Target::from_compact(CompactTarget::from_consensus(prev.nbits)).unwrap();
    let (nonce, hash) = (0u32..)
        .find_map(|n| {
            let h = sha256d(&sv2_header(job.version, &prev, &job.merkle_root, n));
            (net.is_met_by(&h.0) && ok.target.is_met_by(&h.0)).then_some((n, h))
        })
        .unwrap();
    conn.send_message(
        &SubmitSharesStandard {
            channel_id: ok.channel_id,
            sequence_number: 1,
            job_id: job.job_id,
            nonce,
            ntime: prev.min_ntime,
            version: job.version,
        }
        .into(),
    )
    .await
    .unwrap();
    // The acknowledgement, then the new tip's job (our block's hash as prev hash).
    let mut acked = false;
    let next_prev = tokio::time::timeout(WAIT, async {
        loop {
            match recv(&mut conn).await {
                Message::Mining(Mining::SubmitSharesSuccess(s)) => {
                    assert_eq!(s.new_submits_accepted_count, 1);
                    acked = true;
                }
                Message::Mining(Mining::SetNewPrevHash(p)) => return p,
                Message::Mining(Mining::NewMiningJob(_)) => {}
                other => panic!("unexpected {}", other.name()),
            }
        }
    })
    .await
    .expect("the next tip");
    assert!(acked, "the share was acknowledged before the tip moved");
    // The share was timed, as the SV1 front end times its shares (the processing histogram).
    assert_eq!(pool.engine.stats.processing().count(), 1);
    assert_eq!(next_prev.prev_hash, hash.0, "our block is the tip");
    assert_eq!(node.read(|n| n.chain().tip_hash()), hash);
    until(Duration::from_millis(10), || {
        pool.engine
            .stats
            .snapshot(pool::Timestamp::from_millis(0))
            .blocks
            .accepted
            != 0
    })
    .await
    .expect("the provider's next tip counts as the block's acceptance");

    // The provider goes away: the pool stops handing out work.
    let _ = stop_tp.send(());
    until(Duration::from_millis(20), || !pool.engine.is_serving())
        .await
        .expect("no work without the provider");
    pool.shutdown().await.unwrap();
}

/// Group channels over the sans-IO session. The client side here is a proxy written from the
/// spec alone: it derives each standard channel's merkle root from the group's extended job and
/// the channel's extranonce prefix (spec 5.3.16).
mod groups {
    use std::sync::Arc;

    use pool::sv2::{Session, Sv2Config};
    use primitives::bitcoin::{consensus, Block, KnownHrp};
    use primitives::{sha256d, CompactTarget, Target};
    use sv2::messages::common::mining_flags;
    use sv2::messages::mining::{
        CloseChannel, NewExtendedMiningJob, OpenExtendedMiningChannel, OpenStandardMiningChannel,
        OpenStandardMiningChannelSuccess, SetNewPrevHash, SubmitSharesStandard,
    };
    use sv2::messages::{Common, Mining};
    use sv2::Message;

    use crate::support::*;

    const PROXY: u32 = 0;
    const DEVICE: u32 = mining_flags::REQUIRES_STANDARD_JOBS;

    fn connect(lab: &Lab, flags: u32) -> Session {
        let mut s = Session::new(lab.engine.clone(), Arc::new(Sv2Config::default()));
        s.handle_message(
            setup_connection(0, flags | mining_flags::REQUIRES_VERSION_ROLLING),
            T0,
        );
        assert!(matches!(
            &transmits(&mut s)[..],
            [Message::Common(Common::SetupConnectionSuccess(_))]
        ));
        s
    }

    /// Opens a standard channel; checks its first job is its own standard job (spec 5.3.15).
    fn open(s: &mut Session, request_id: u32, user: &str) -> OpenStandardMiningChannelSuccess {
        s.handle_message(
            OpenStandardMiningChannel {
                request_id,
                user_identity: user.into(),
                nominal_hash_rate: 0.0,
                max_target: Target::from_le_bytes(&[0xff; 32]),
            }
            .into(),
            T0,
        );
        let out = transmits(s);
        let [Message::Mining(Mining::OpenStandardMiningChannelSuccess(ok)), Message::Mining(Mining::NewMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
            &out[..]
        else {
            panic!("open reply, then the channel's own job: {out:?}");
        };
        assert_eq!(
            (job.channel_id, prev.channel_id),
            (ok.channel_id, ok.channel_id)
        );
        ok.clone()
    }

    fn new_tip(lab: &mut Lab, s: &mut Session, n: u8, bits: CompactTarget) -> Vec<Message> {
        lab.publish(template(tip(n), bits), T0);
        s.handle_generation(lab.engine.current().as_ref(), T0);
        transmits(s)
    }

    /// The first nonce (from `from`) whose header on `root` meets `target`, and the header.
    fn grind(
        job: &NewExtendedMiningJob,
        prev: &SetNewPrevHash,
        root: [u8; 32],
        target: Target,
        from: u32,
    ) -> (u32, [u8; 80]) {
        for n in from.. {
            let h = sv2_header(job.version, prev, &root, n);
            if target.is_met_by(&sha256d(&h).0) {
                return (n, h);
            }
        }
        unreachable!("a nonce meets the target")
    }

    fn share(channel_id: u32, seq: u32, job: &NewExtendedMiningJob, nonce: u32) -> Message {
        SubmitSharesStandard {
            channel_id,
            sequence_number: seq,
            job_id: job.job_id,
            nonce,
            ntime: job.min_ntime.unwrap_or(MINTIME).max(CURTIME),
            version: job.version,
        }
        .into()
    }

    fn group_job(out: &[Message]) -> (NewExtendedMiningJob, SetNewPrevHash) {
        let [Message::Mining(Mining::NewExtendedMiningJob(job)), Message::Mining(Mining::SetNewPrevHash(prev))] =
            out
        else {
            panic!("one extended job and its prev hash: {out:?}");
        };
        (job.clone(), prev.clone())
    }

    #[test]
    fn a_proxy_gets_one_extended_job_per_group_and_an_end_device_one_job_per_channel() {
        let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
        let mut proxy = connect(&lab, PROXY);
        let a = open(&mut proxy, 1, "alice.rig1");
        let b = open(&mut proxy, 2, "bob.rig7");
        // One payout (pool mode): one group, its id not a channel's.
        assert_eq!(a.group_channel_id, b.group_channel_id);
        let group = a.group_channel_id;
        assert!(group != 0 && group != a.channel_id && group != b.channel_id);
        assert_eq!(proxy.group_ids().collect::<Vec<_>>(), [group]);
        // Every member's full extended extranonce has the same size (spec 5.2.3).
        assert_eq!(a.extranonce_prefix.len(), b.extranonce_prefix.len());

        // A new tip: one future extended job and its prev hash, both on the group.
        let (job, prev) = group_job(&new_tip(&mut lab, &mut proxy, 2, HARD_BITS));
        assert_eq!((job.channel_id, prev.channel_id), (group, group));
        assert_eq!(job.min_ntime, None);
        assert_eq!(prev.job_id, job.job_id);
        assert_eq!(prev.prev_hash, tip(2).0);
        // Each member's job is the one the proxy derives, under the group's job id.
        for m in [&a, &b] {
            let issued = proxy.channel(m.channel_id).unwrap().latest_job().unwrap();
            assert_eq!(issued.wire_id, u64::from(job.job_id));
            assert_eq!(
                issued.merkle_root.unwrap().0,
                extended_root(&job, &m.extranonce_prefix)
            );
        }
        // Same tip, new template: one extended job, active at once.
        lab.publish(template(tip(2), HARD_BITS), T0);
        proxy.handle_generation(lab.engine.current().as_ref(), T0);
        let out = transmits(&mut proxy);
        assert!(
            matches!(&out[..], [Message::Mining(Mining::NewExtendedMiningJob(j))]
                if j.channel_id == group && j.min_ntime.is_some()),
            "{out:?}"
        );

        // An end device (REQUIRES_STANDARD_JOBS): a standard job per channel, never a group's.
        let mut device = connect(&lab, DEVICE);
        let c = open(&mut device, 1, "carol.rig1");
        let d = open(&mut device, 2, "carol.rig2");
        let out = new_tip(&mut lab, &mut device, 3, HARD_BITS);
        let jobs: Vec<u32> = out
            .iter()
            .map(|m| match m {
                Message::Mining(Mining::NewMiningJob(j)) => {
                    assert_eq!(j.min_ntime, None);
                    j.channel_id
                }
                Message::Mining(Mining::SetNewPrevHash(p)) => p.channel_id,
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            jobs,
            [c.channel_id, c.channel_id, d.channel_id, d.channel_id]
        );
    }

    #[test]
    fn shares_on_a_group_job_are_judged_per_channel_on_the_root_the_proxy_derived() {
        let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
        let mut proxy = connect(&lab, PROXY);
        let a = open(&mut proxy, 1, "alice.rig1");
        let b = open(&mut proxy, 2, "alice.rig2");
        let (job, prev) = group_job(&new_tip(&mut lab, &mut proxy, 2, HARD_BITS));
        let mut seq = 0;
        for m in [&a, &b] {
            let root = extended_root(&job, &m.extranonce_prefix);
            for k in 0..3 {
                let (nonce, _) = grind(&job, &prev, root, m.target, 1000 * k);
                seq += 1;
                proxy.handle_message(share(m.channel_id, seq, &job, nonce), T0);
            }
        }
        proxy.flush();
        let mut acked: Vec<(u32, u32)> = transmits(&mut proxy)
            .iter()
            .map(|m| match m {
                Message::Mining(Mining::SubmitSharesSuccess(s)) => {
                    (s.channel_id, s.new_submits_accepted_count)
                }
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        acked.sort_unstable();
        assert_eq!(acked, [(a.channel_id, 3), (b.channel_id, 3)]);
        // Shares come per standard channel, never on the group.
        let (nonce, _) = grind(
            &job,
            &prev,
            extended_root(&job, &a.extranonce_prefix),
            a.target,
            0,
        );
        proxy.handle_message(share(a.group_channel_id, 99, &job, nonce), T0);
        let out = transmits(&mut proxy);
        assert!(
            matches!(&out[..], [Message::Mining(Mining::SubmitSharesError(e))]
                if e.error_code == "invalid-channel-id"),
            "{out:?}"
        );
    }

    #[test]
    fn a_header_only_share_meeting_the_network_target_rebuilds_the_coinbase_into_a_block() {
        let mut lab = Lab::serving(LabConfig::pool(), tip(1), EASY_BITS);
        let mut proxy = connect(&lab, PROXY);
        let a = open(&mut proxy, 1, "alice.rig1");
        let (job, prev) = group_job(&new_tip(&mut lab, &mut proxy, 2, EASY_BITS));
        let net = Target::from_compact(CompactTarget::from_consensus(prev.nbits)).unwrap();
        let root = extended_root(&job, &a.extranonce_prefix);
        // The lower (harder) of the two targets: a share and a block.
        let (nonce, header) = grind(&job, &prev, root, net.min(a.target), 0);
        proxy.handle_message(share(a.channel_id, 1, &job, nonce), T0);
        let b = lab.next_block().expect("a block");
        assert_eq!(b.hash, sha256d(&header));
        let block: Block = consensus::deserialize(&b.block).expect("a whole block");
        assert_eq!(consensus::serialize(&block.header)[..], header[..]);
        // The coinbase the pool rebuilt is the one the root commits to.
        assert!(block.check_merkle_root());
        assert_eq!(block.txdata.len(), 4);
    }

    #[test]
    fn channels_paying_different_addresses_are_in_different_groups() {
        let mut lab = Lab::serving(LabConfig::solo(), tip(1), HARD_BITS);
        let mut proxy = connect(&lab, PROXY);
        let (addr1, _) = p2wpkh_address([0x11; 20], KnownHrp::Regtest);
        let (addr2, _) = p2wpkh_address([0x12; 20], KnownHrp::Regtest);
        let a = open(&mut proxy, 1, &format!("{addr1}.rig1"));
        let b = open(&mut proxy, 2, &format!("{addr2}.rig1"));
        let c = open(&mut proxy, 3, &format!("{addr1}.rig2"));
        assert_eq!(a.group_channel_id, c.group_channel_id);
        assert_ne!(a.group_channel_id, b.group_channel_id);
        let out = new_tip(&mut lab, &mut proxy, 2, HARD_BITS);
        let jobs: Vec<&NewExtendedMiningJob> = out
            .iter()
            .filter_map(|m| match m {
                Message::Mining(Mining::NewExtendedMiningJob(j)) => Some(j),
                _ => None,
            })
            .collect();
        assert_eq!(jobs.len(), 2, "{out:?}");
        let mut groups: Vec<u32> = jobs.iter().map(|j| j.channel_id).collect();
        groups.sort_unstable();
        let mut want = vec![a.group_channel_id, b.group_channel_id];
        want.sort_unstable();
        assert_eq!(groups, want);
        // Each group's coinbase pays its own address.
        assert_ne!(jobs[0].coinbase_tx_suffix, jobs[1].coinbase_tx_suffix);
    }

    #[test]
    fn closing_a_group_closes_its_channels_and_extended_channels_keep_their_own_jobs() {
        let mut lab = Lab::serving(LabConfig::pool(), tip(1), HARD_BITS);
        let mut proxy = connect(&lab, PROXY);
        let a = open(&mut proxy, 1, "alice.rig1");
        let b = open(&mut proxy, 2, "alice.rig2");
        proxy.handle_message(
            OpenExtendedMiningChannel {
                request_id: 3,
                user_identity: "alice.proxy".into(),
                nominal_hash_rate: 0.0,
                max_target: Target::from_le_bytes(&[0xff; 32]),
                min_extranonce_size: 4,
            }
            .into(),
            T0,
        );
        let out = transmits(&mut proxy);
        let Some(Message::Mining(Mining::OpenExtendedMiningChannelSuccess(ext))) = out.first()
        else {
            panic!("{out:?}");
        };
        assert_eq!(ext.group_channel_id, 0, "extended channels are not grouped");
        let ext = ext.channel_id;
        // Closing one member: the group's job still reaches the other.
        proxy.handle_message(
            CloseChannel {
                channel_id: b.channel_id,
                reason_code: "done".into(),
            }
            .into(),
            T0,
        );
        let out = new_tip(&mut lab, &mut proxy, 2, HARD_BITS);
        let to: Vec<(&str, u32)> = out.iter().map(|m| (m.name(), channel_of(m))).collect();
        assert_eq!(
            to,
            [
                ("NewExtendedMiningJob", a.group_channel_id),
                ("SetNewPrevHash", a.group_channel_id),
                ("NewExtendedMiningJob", ext),
                ("SetNewPrevHash", ext),
            ]
        );
        assert!(proxy.channel(a.channel_id).is_some() && proxy.channel(b.channel_id).is_none());
        // Closing the group closes its members (spec 5.3.9), not the extended channel.
        proxy.handle_message(
            CloseChannel {
                channel_id: a.group_channel_id,
                reason_code: "done".into(),
            }
            .into(),
            T0,
        );
        assert!(proxy.channel(a.channel_id).is_none());
        assert_eq!(proxy.channel_count(), 1);
        let out = new_tip(&mut lab, &mut proxy, 3, HARD_BITS);
        assert!(out.iter().all(|m| channel_of(m) == ext), "{out:?}");
    }

    fn channel_of(m: &Message) -> u32 {
        match m {
            Message::Mining(Mining::NewExtendedMiningJob(j)) => j.channel_id,
            Message::Mining(Mining::NewMiningJob(j)) => j.channel_id,
            Message::Mining(Mining::SetNewPrevHash(p)) => p.channel_id,
            other => panic!("unexpected {other:?}"),
        }
    }
}
