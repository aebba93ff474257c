//! Bandwidth per site, per link, measured RTT and per-role figures, against known byte counts.

mod metrics_support;

use events::{Direction, LinkRtt, ShortStr};
use lab::metrics::ProcessUsage;
use metrics_support::*;

fn traffic() -> Lab {
    let mut lab = Lab::new();
    let t = &mut lab.tap;
    t.push(ev(at(5.0), bytes("wan", Direction::Up, 1000))); // warm-up
    for k in 0..9 {
        t.push(ev(
            at(10.0 + 10.0 * k as f64),
            bytes("wan", Direction::Up, 300),
        ));
    }
    t.push(ev(at(50.0), bytes("wan", Direction::Down, 5000)));
    t.push(ev(at(101.0), bytes("wan", Direction::Down, 7))); // drain
    t.push(ev(at(50.0), bytes("pool-node", Direction::Up, 11)));
    for rtt_ms in [145, 147] {
        t.push(ev(
            at(30.0),
            LinkRtt {
                link: ShortStr::new("wan"),
                conn: 1,
                rtt_ns: rtt_ms * MS,
            },
        ));
    }
    // The pool counts its own socket bytes on the same link: its role figure, not the link's.
    lab.pool.extend(both_ways(50.0, "wan", 999, 4000));
    // A link only a fleet reports.
    lab.fleet()
        .push(ev(at(50.0), bytes("lan", Direction::Up, 123)));
    // A second fleet process that counts nothing.
    lab.fleets.push(Vec::new());
    lab.usage.insert(
        "sv1.pool".into(),
        ProcessUsage {
            cpu_pct_mean: Some(12.5),
            cpu_pct_max: Some(40.0),
            rss_bytes_max: Some(1 << 20),
        },
    );
    lab
}

#[test]
fn site_bandwidth_comes_from_the_wan_tap_in_the_window() {
    let r = traffic().results();
    let (farm, pool) = (&r.bandwidth.farm, &r.bandwidth.pool);
    assert_eq!((farm.tx_bytes, farm.rx_bytes), (2700, 5000));
    assert_eq!((pool.tx_bytes, pool.rx_bytes), (5000, 2700));
    assert!(near(farm.tx_bps, 30.0, 1e-12), "{farm:?}");
    assert!(near(farm.rx_bps, 5000.0 / 90.0, 1e-12));
    assert!(near(pool.rx_bps, 30.0, 1e-12));
}

#[test]
fn links_are_reported_per_name() {
    let r = traffic().results();
    let wan = &r.links["wan"];
    // The tap's count, not the pool's own.
    assert_eq!((wan.up_bytes, wan.down_bytes), (2700, 5000));
    assert_eq!(r.links["pool-node"].up_bytes, 11);
    assert_eq!(r.links["lan"].up_bytes, 123);
    assert!(near(r.links["lan"].up_bps, 123.0 / 90.0, 1e-12));
}

#[test]
fn rtt_is_configured_and_measured() {
    let r = traffic().results();
    assert_eq!(r.rtt_ms.configured, Some(145.0));
    assert_eq!(r.rtt_ms.measured, Some(146.0));
    assert_eq!(r.rtt_ms.measured_n, 2);
    assert_eq!(Lab::new().results().rtt_ms.measured, None);
}

#[test]
fn roles_pass_usage_through_and_count_their_own_bytes() {
    let r = traffic().results();
    let pool = &r.roles["sv1.pool"];
    assert_eq!(pool.cpu_pct_mean, Some(12.5));
    assert_eq!(pool.cpu_pct_max, Some(40.0));
    assert_eq!(pool.rss_bytes_max, Some(1 << 20));
    // Pool side: up arrives, down leaves.
    assert_eq!((pool.net_tx_bytes, pool.net_rx_bytes), (4000, 999));
    assert!(pool.net_bytes_reported);
    let fleet = &r.roles["sv1.fleet0"];
    assert_eq!((fleet.net_tx_bytes, fleet.net_rx_bytes), (123, 0));
    // A relay receives and sends every byte it carries, over the whole run.
    let tap = &r.roles["sv1.tap"];
    let carried = 1000 + 2700 + 5000 + 7 + 11;
    assert_eq!((tap.net_tx_bytes, tap.net_rx_bytes), (carried, carried));
    let quiet = &r.roles["sv1.fleet1"];
    assert!(!quiet.net_bytes_reported);
    assert_eq!((quiet.net_tx_bytes, quiet.cpu_pct_mean), (0, None));
}

#[test]
fn simnet_counts_in_the_configurations_whose_endpoints_it_served() {
    let mut lab = Lab::new(); // an SV1 job source: simnet's rpc and zmq
    lab.simnet.extend(both_ways(50.0, "rpc", 100, 1000));
    lab.simnet
        .push(ev(at(51.0), bytes("zmq", Direction::Down, 30)));
    // Another configuration's Template Provider traffic.
    lab.simnet
        .push(ev(at(50.0), bytes("tdp", Direction::Down, 70_000)));
    let usage = ProcessUsage {
        cpu_pct_mean: Some(3.0),
        cpu_pct_max: Some(9.0),
        rss_bytes_max: Some(1 << 22),
    };
    lab.usage.insert("simnet".into(), usage);
    let r = lab.results();
    let s = &r.roles["simnet"];
    // A server: what it read is received, what it wrote is sent.
    assert_eq!((s.net_rx_bytes, s.net_tx_bytes), (100, 1030));
    assert_eq!(s.rss_bytes_max, Some(1 << 22));
    assert_eq!(r.links["rpc"].down_bytes, 1000);
    assert!(!r.links.contains_key("tdp"), "{:?}", r.links.keys());
}
