//! How much presenting a second node costs the sans-IO core: one hour of network at mainnet
//! arrival rates, one node versus two (the second at 50 ms, transactions announced every 2 s).
//!
//! `cargo run --release -p simnet --example nodes_cost`

use std::time::{Duration, Instant};

use simnet::{Network, NodeSpec, SimnetConfig, Timestamp};

fn hour(nodes: Vec<NodeSpec>) -> Duration {
    let config = SimnetConfig {
        seed: 1,
        tx_announce_interval: Duration::from_secs(2),
        ..SimnetConfig::default()
    };
    let mut net = Network::with_nodes(config, nodes).unwrap();
    let start = Instant::now();
    let end = Timestamp::from_secs(3600);
    while let Some(t) = net.poll_timeout().filter(|t| *t <= end) {
        net.handle_timeout(t);
        while net.poll_event().is_some() {}
    }
    start.elapsed()
}

fn main() {
    let one = hour(vec![NodeSpec::new("pool", Duration::ZERO)]);
    let two = hour(vec![
        NodeSpec::new("pool", Duration::ZERO),
        NodeSpec::new("farm", Duration::from_millis(50)),
    ]);
    println!(
        "one simulated hour: one node {one:?}, two nodes {two:?} ({:.2}x)",
        two.as_secs_f64() / one.as_secs_f64()
    );
}
