//! The Template Distribution client against simnet's Template Provider, in process: templates
//! become jobs, a block found on one goes back as `SubmitSolution` and becomes the tip; a
//! provider whose certificate is not signed by the configured authority serves no work.

#[allow(dead_code)]
mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use events::EventSink;
use pool::node::NodeState;
use pool::tp::{solution_from_block, TpConfig, TpFeed, TpWork};
use primitives::Difficulty;
use simnet::tdp::{serve, TdpConfig, TdpKeys};
use simnet::{MempoolConfig, Network, Node, SimnetConfig};
use support::*;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(10);

struct Provider {
    node: Node,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    serve: JoinHandle<std::io::Result<()>>,
    clock: JoinHandle<()>,
}

impl Provider {
    /// An easy network (a block every ~2^12 hashes) with transactions, no blocks of its own.
    async fn start(seed: u64) -> Provider {
        let config = SimnetConfig {
            seed,
            network_difficulty: Difficulty::new(1.0 / (1u64 << 20) as f64).unwrap(),
            block_interval: Duration::ZERO,
            mempool: MempoolConfig {
                initial_txs: 200,
                arrival_rate: 0.0,
                ..Default::default()
            },
            ..Default::default()
        };
        let node = Node::new(Network::new(config).unwrap(), "tp", EventSink::disabled());
        let clock = tokio::spawn({
            let node = node.clone();
            async move { node.run_clock(std::future::pending()).await }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = tokio::spawn(serve(
            node.clone(),
            listener,
            TdpConfig::new(TdpKeys::reference()),
            async move {
                let _ = stopped.await;
            },
        ));
        Provider {
            node,
            addr,
            stop: Some(stop),
            serve,
            clock,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let _ = tokio::time::timeout(WAIT, &mut self.serve).await;
        self.clock.abort();
    }
}

async fn next_work(
    rx: &mut watch::Receiver<Option<TpWork>>,
    want: impl Fn(&TpWork) -> bool,
) -> TpWork {
    tokio::time::timeout(WAIT, async {
        loop {
            if let Some(w) = rx.borrow_and_update().clone() {
                if want(&w) {
                    return w;
                }
            }
            rx.changed().await.expect("feed alive");
        }
    })
    .await
    .expect("a template in time")
}

/// A feed from the provider at `addr`, checking its certificate against `authority`; it
/// stops when the sender fires or is dropped.
fn spawn_feed(addr: SocketAddr, authority: [u8; 32]) -> (TpFeed, oneshot::Sender<()>) {
    let mut config = TpConfig::new(addr);
    config.authority = Some(authority);
    let (stop, stopped) = oneshot::channel::<()>();
    let feed = TpFeed::spawn(config, events::EventSink::disabled(), async move {
        let _ = stopped.await;
    });
    (feed, stop)
}

#[tokio::test]
async fn provider_templates_become_jobs_and_a_found_block_becomes_the_tip() {
    let tp = Provider::start(7).await;
    let (tip, height) = tp.node.read(|n| (n.chain().tip_hash(), n.height()));
    let (feed, stop) = spawn_feed(tp.addr, TdpKeys::reference().public_bytes());
    let mut works = feed.works();
    let w = next_work(&mut works, |_| true).await;
    assert_eq!(w.template.prev_hash, tip);
    assert_eq!(
        w.template.height,
        height + 1,
        "height read from the BIP34 prefix"
    );
    assert!(
        !w.tdp.merkle_path.is_empty(),
        "the mempool's transactions are in the path"
    );
    assert!(w.tdp.commits_to_witnesses());
    assert_eq!(feed.health().state(Instant::now()), NodeState::Ok);

    // Mine it through the engine, as any front end does.
    let mut lab = Lab::new(LabConfig::pool());
    let g = lab
        .book
        .handle_tdp_template(w.template.clone(), w.tdp.clone(), T0);
    assert_eq!(&g.merkle_branch[..], &w.tdp.merkle_path[..]);
    lab.engine.publish(g);
    let mut miner = lab.miner(T0);
    miner.handshake("alice", T0);
    let share = miner.find(meets_bits(w.template.bits));
    miner.submit_ok("alice", &share, T0);
    let found = lab.next_block().expect("the share solves the block");
    assert_eq!(found.hash, share.hash);

    let solution = solution_from_block(&w.tdp, &found.block).expect("header + coinbase");
    assert_eq!(solution.template_id, w.tdp.template_id);
    assert_eq!(solution.header_nonce, share.nonce);
    feed.solutions().send(solution).expect("feed running");

    // The provider's node takes it, and its next tip is our block.
    let next = next_work(&mut works, |n| n.template.prev_hash == found.hash).await;
    assert_eq!(next.template.height, height + 2);
    assert_eq!(tp.node.read(|n| n.chain().tip_hash()), found.hash);

    let _ = stop.send(());
    tokio::time::timeout(WAIT, feed.stopped())
        .await
        .expect("feed stops");
    tp.stop().await;
}

#[tokio::test]
async fn a_provider_signed_by_another_authority_serves_no_work_and_a_lost_one_stops_it() {
    let tp = Provider::start(8).await;
    // A valid key pair, but not the one the provider signs with.
    let wrong = TdpKeys::from_secret("SeLqn3UAUoRymWmwW7axrzJK7JfNaBR2cHCryA6cFsgFkHEF")
        .expect("a valid secret")
        .public_bytes();
    assert_ne!(wrong, TdpKeys::reference().public_bytes());
    let (feed, stop) = spawn_feed(tp.addr, wrong);
    let health = feed.health();
    tokio::time::timeout(WAIT, async {
        while !matches!(health.state(Instant::now()), NodeState::Unreachable { .. }) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the handshake fails");
    assert!(feed.works().borrow().is_none());
    let _ = stop.send(());
    tokio::time::timeout(WAIT, feed.stopped()).await.unwrap();

    // The right key: work, until the provider goes away.
    let (feed, stop) = spawn_feed(tp.addr, TdpKeys::reference().public_bytes());
    let mut works = feed.works();
    next_work(&mut works, |_| true).await;
    assert_eq!(feed.health().state(Instant::now()), NodeState::Ok);
    tp.stop().await;
    let health = feed.health();
    tokio::time::timeout(WAIT, async {
        while health.state(Instant::now()).serves_work() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("no work once the provider is gone");
    let _ = stop.send(());
    tokio::time::timeout(WAIT, feed.stopped()).await.unwrap();
}
