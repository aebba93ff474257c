//! A crowd of devices that loses its pool does not come back in one burst.
//!
//! 10,000 devices, each ready on its own connection, lose their pool at the same instant (it
//! closes everyone, as a restart does) and it stays away for 20 s: every connection attempt
//! meanwhile fails. Driven sans-IO on a simulated clock, with the default backoff (first ceiling
//! 1 s, doubling, at most 60 s, equal jitter) and no connection pacing, so the spread is the
//! devices' own. No 10 ms window may hold more than a small fraction of the first attempts, of
//! the attempts while the pool is away, or of the reconnects once it is back.

mod common;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use common::{at, handshake};
use fleet::{Backoff, CloseReason, Sv1Config, Sv1Device, Sv1Shared};

const N: u32 = 10_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
const WINDOW: u64 = 10 * MS;

/// The most events any `WINDOW`-long interval holds.
fn busiest_window(times: &mut [u64]) -> usize {
    common::busiest_window(times, WINDOW)
}

#[test]
fn ten_thousand_devices_that_lost_their_pool_come_back_spread_out() {
    let backoff = Backoff::default();
    assert_eq!(
        (backoff.base, backoff.max),
        (Duration::from_secs(1), Duration::from_secs(60))
    );
    let shared = Sv1Shared::new(Sv1Config::default()).unwrap();
    let obs = &mut ();
    let mut devs: Vec<Sv1Device> = (0..N)
        .map(|i| {
            let mut d = Sv1Device::new(Arc::clone(&shared), i as u64, i, 1, at(0));
            d.handle_connected(at(0));
            handshake(&mut d, obs, 0x1fff_e000, &[0, 0, 0, 1], 4, at(0));
            assert!(d.is_ready());
            d
        })
        .collect();

    let lost = 10 * SEC;
    let back = lost + 20 * SEC;
    let mut queue = BinaryHeap::new();
    for (i, d) in devs.iter_mut().enumerate() {
        d.handle_closed(at(lost), CloseReason::Eof, obs);
        queue.push(Reverse((d.poll_timeout().unwrap().as_nanos(), i)));
    }
    let (mut first, mut away, mut returns) = (Vec::new(), Vec::new(), Vec::new());
    let mut attempted = vec![false; N as usize];
    while let Some(Reverse((t, i))) = queue.pop() {
        let d = &mut devs[i];
        assert!(d.wants_connect(at(t)) && !d.wants_connect(at(t - 1)));
        if !std::mem::replace(&mut attempted[i], true) {
            first.push(t);
        }
        if t < back {
            away.push(t);
            d.handle_connect_failed(at(t));
            queue.push(Reverse((d.poll_timeout().unwrap().as_nanos(), i)));
        } else {
            d.handle_connected(at(t));
            returns.push(t);
        }
    }
    assert_eq!(returns.len(), N as usize, "every device came back");

    // The first attempts: spread over [base / 2, base] after the loss.
    let (lo, hi) = (first.iter().min().unwrap(), first.iter().max().unwrap());
    assert!(*lo >= lost + 500 * MS && *hi <= lost + SEC, "{lo} {hi}");
    let most = busiest_window(&mut first);
    // Uniform over 500 ms is 2% per 10 ms.
    assert!(
        most <= N as usize * 3 / 100,
        "{most} first attempts in 10 ms"
    );

    // While the pool is away, attempts thin out as the ceilings double.
    let most_away = busiest_window(&mut away);
    assert!(
        most_away <= N as usize * 3 / 100,
        "{most_away} attempts in 10 ms"
    );
    let late = away.iter().filter(|&&t| t >= lost + 10 * SEC).count();
    assert!(
        late < N as usize,
        "{late} attempts in the pool's last 10 s away"
    );

    // The reconnects once it is back: no burst, spread over many seconds.
    let most_back = busiest_window(&mut returns);
    let spread = returns[N as usize * 99 / 100] - returns[N as usize / 100];
    println!(
        "first attempts: busiest 10 ms {most} of {N}; while away: {} attempts, busiest 10 ms {most_away}; \
         back: busiest 10 ms {most_back}, 98% within {:.1} s, last after {:.1} s",
        away.len(),
        spread as f64 / 1e9,
        (returns[N as usize - 1] - back) as f64 / 1e9
    );
    assert!(
        most_back <= N as usize / 100,
        "{most_back} reconnects in 10 ms"
    );
    assert!(spread > 5 * SEC, "reconnects within {spread} ns");
    // Nobody waits longer than the longest ceiling after the pool is back.
    assert!(returns[N as usize - 1] <= back + backoff.max.as_nanos() as u64);
}
