//! The whole SV2 pool in process: templates from simnet's Template Provider, an SV2 miner over
//! Noise on a standard channel, a block found through it going back as `SubmitSolution` and
//! becoming the provider's tip; the share stored before it is acknowledged; no work once the
//! provider is gone.

use std::net::SocketAddr;
use std::time::Duration;

use events::EventSink;
use pool::channel::ChannelConfig;
use pool::engine::{EngineConfig, PayoutMode};
use pool::jobs::JobConfig;
use pool::node::{NodeAuth, NodeConfig};
use pool::service::{PoolSettings, RunningPool, Sv2Settings};
use pool::store::StoreConfig;
use pool::sv1::{Admission, Sv1Config};
use pool::tp::TpConfig;
use primitives::bitcoin::{Network as BtcNetwork, ScriptBuf};
use primitives::{sha256d, CompactTarget, Difficulty, Target};
use simnet::tdp::{serve, TdpConfig, TdpKeys};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use sv2::messages::common::SetupConnection;
use sv2::messages::mining::{OpenStandardMiningChannel, SubmitSharesStandard};
use sv2::messages::{Common, Mining};
use sv2::{Limits, Message, NoiseConn};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const WAIT: Duration = Duration::from_secs(10);

async fn provider() -> (Node, SocketAddr, oneshot::Sender<()>) {
    let config = SimnetConfig {
        seed: 11,
        network_difficulty: Difficulty::new(1.0 / (1u64 << 20) as f64).unwrap(),
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs: 100,
            arrival_rate: 0.0,
            ..Default::default()
        },
        ..Default::default()
    };
    let node = Node::new(Network::new(config).unwrap(), "tp", EventSink::disabled());
    tokio::spawn({
        let node = node.clone();
        async move { node.run_clock(std::future::pending()).await }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(
        node.clone(),
        listener,
        TdpConfig::new(TdpKeys::reference()),
        async move {
            let _ = stopped.await;
        },
    ));
    (node, addr, stop)
}

fn settings(tp: SocketAddr, store: &std::path::Path) -> PoolSettings {
    let mut tp = TpConfig::new(tp);
    tp.authority = Some(TdpKeys::reference().public_bytes());
    let mut script = vec![0x00, 0x14];
    script.extend_from_slice(&[0x33; 20]);
    PoolSettings {
        engine: EngineConfig {
            jobs: JobConfig::default(),
            channel: ChannelConfig::default(),
            payout: PayoutMode::Pool(ScriptBuf::from_bytes(script)),
            network: BtcNetwork::Regtest,
            start_difficulty: Difficulty::new(1.0 / (1u64 << 24) as f64).unwrap(),
        },
        node: NodeConfig::new("", NodeAuth::None),
        tp: Some(tp),
        sv1_listen: None,
        http_listen: None,
        store: Some(StoreConfig::new(store)),
        events: None,
        events_config: "sv2".into(),
        sv1: Sv1Config::default(),
        admission: Admission::default(),
        sv2_listen: Some("127.0.0.1:0".parse().unwrap()),
        sv2: Sv2Settings::default(),
    }
}

async fn recv(conn: &mut NoiseConn) -> Message {
    tokio::time::timeout(WAIT, conn.read_message())
        .await
        .expect("a message in time")
        .expect("a frame")
        .expect("extension 0")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sv2_miner_finds_a_block_through_the_pool_and_the_provider_takes_it() {
    let (node, tp_addr, stop_tp) = provider().await;
    let dir = tempfile::tempdir().unwrap();
    let pool = RunningPool::start(settings(tp_addr, &dir.path().join("pool.sqlite")))
        .await
        .unwrap();
    let sv2_addr = pool.sv2_addr.expect("sv2 bound");
    // Work is served once the provider's first template is in.
    tokio::time::timeout(WAIT, async {
        while !pool.engine.is_serving() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the pool serves work from the provider");

    let stream = TcpStream::connect(sv2_addr).await.unwrap();
    let mut conn = NoiseConn::connect_to_authority(
        stream,
        TdpKeys::reference().public_bytes(),
        Limits::default(),
    )
    .await
    .expect("handshake with the pool's authority key");
    conn.send_message(
        &SetupConnection {
            protocol: 0,
            min_version: 2,
            max_version: 2,
            flags: 0,
            endpoint_host: sv2_addr.ip().to_string(),
            endpoint_port: sv2_addr.port(),
            vendor: "test".into(),
            hardware_version: String::new(),
            firmware: String::new(),
            device_id: "miner".into(),
        }
        .into(),
    )
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
    let net = Target::from_compact(CompactTarget(prev.nbits)).unwrap();
    let mut header = [0u8; 80];
    header[0..4].copy_from_slice(&job.version.to_le_bytes());
    header[4..36].copy_from_slice(&prev.prev_hash);
    header[36..68].copy_from_slice(&job.merkle_root);
    header[68..72].copy_from_slice(&prev.min_ntime.to_le_bytes());
    header[72..76].copy_from_slice(&prev.nbits.to_le_bytes());
    let (nonce, hash) = (0u32..)
        .find_map(|n| {
            header[76..80].copy_from_slice(&n.to_le_bytes());
            let h = sha256d(&header);
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
    assert_eq!(next_prev.prev_hash, hash.0, "our block is the tip");
    assert_eq!(node.read(|n| n.chain().tip_hash()), hash);
    tokio::time::timeout(WAIT, async {
        while pool.engine.stats.snapshot(pool::Millis(0)).blocks.accepted == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the provider's next tip counts as the block's acceptance");

    // The provider goes away: the pool stops handing out work.
    let _ = stop_tp.send(());
    tokio::time::timeout(WAIT, async {
        while pool.engine.is_serving() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("no work without the provider");
    pool.shutdown().await.unwrap();
}
