//! For tests of the SV2 pool in process: simnet's Template Provider (no blocks of the rest of
//! the network and no new transactions, so the pool's templates change only when it finds a
//! block), and the settings of an SV2-only pool taking its templates from it.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use edge::Admission;
use events::EventSink;
use pool::channel::ChannelConfig;
use pool::engine::{EngineConfig, PayoutMode};
use pool::jobs::JobConfig;
use pool::node::{NodeAuth, NodeConfig};
use pool::service::{PoolSettings, RunningPool, Sv2Settings};
use pool::store::StoreConfig;
use pool::sv1::Sv1Config;
use pool::tp::TpConfig;
use primitives::bitcoin::{Network as BtcNetwork, ScriptBuf};
use primitives::Difficulty;
use simnet::tdp::{serve, TdpConfig, TdpKeys};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use sv2::{Limits, Message, NoiseConn};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The longest any single step may take.
pub const WAIT: Duration = Duration::from_secs(10);

/// The next message from the pool, within [`WAIT`].
pub async fn recv(conn: &mut NoiseConn) -> Message {
    tokio::time::timeout(WAIT, conn.read_message())
        .await
        .expect("a message in time")
        .expect("a frame")
        .expect("extension 0")
}

/// Waits until `done`, asking every `every`, for [`WAIT`] at most (then `Err`).
pub async fn until(
    every: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<(), tokio::time::error::Elapsed> {
    tokio::time::timeout(WAIT, async {
        while !done() {
            tokio::time::sleep(every).await;
        }
    })
    .await
}

/// Waits until the pool serves work from its provider.
pub async fn serving(pool: &RunningPool) {
    until(Duration::from_millis(10), || pool.engine.is_serving())
        .await
        .expect("the pool serves work from the provider");
}

#[allow(dead_code)] // the hostile peers connect their own way
/// A Noise connection to the pool at `addr`, whose certificate the reference authority signed.
pub async fn connect(addr: SocketAddr) -> NoiseConn {
    let stream = TcpStream::connect(addr).await.unwrap();
    NoiseConn::connect_to_authority(
        stream,
        TdpKeys::reference().public_bytes(),
        Limits::default(),
    )
    .await
    .expect("handshake with the pool's authority key")
}

/// A Template Provider signing with the reference keys, on a network of easy blocks (one in
/// about 2^20 hashes), with `initial_txs` in the mempool. Stops when the sender is dropped or
/// fired.
pub async fn template_provider(
    seed: u64,
    initial_txs: usize,
) -> (Node, SocketAddr, oneshot::Sender<()>) {
    let config = SimnetConfig {
        seed,
        network_difficulty: Difficulty::new(1.0 / (1u64 << 20) as f64).unwrap(),
        block_interval: Duration::ZERO,
        mempool: MempoolConfig {
            initial_txs,
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

/// An SV2-only pool on loopback (port 0) taking templates from `tp` (checked against the
/// reference key), paying a P2WPKH script of `payout_byte`s, storing into `store`; shares start
/// at difficulty 2^-24.
pub fn pool_settings(tp: SocketAddr, store: &Path, payout_byte: u8) -> PoolSettings {
    let mut tp = TpConfig::new(tp);
    tp.authority = Some(TdpKeys::reference().public_bytes());
    let mut script = vec![0x00, 0x14];
    script.extend_from_slice(&[payout_byte; 20]);
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
        node_beside_tp: false,
        sv1_listen: None,
        http_listen: None,
        store: Some(StoreConfig::new(store)),
        events: None,
        events_config: String::new(),
        sv1: Sv1Config::default(),
        admission: Admission::default(),
        sv2_listen: Some("127.0.0.1:0".parse().unwrap()),
        sv2: Sv2Settings::default(),
    }
}
