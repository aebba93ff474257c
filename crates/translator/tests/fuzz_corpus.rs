//! Replays the committed corpus of `crates/translator/fuzz` through the functions the fuzz
//! targets run (`translator::fuzz_support::translator_session` and
//! `translator::fuzz_support::per_device::translator_per_device`), on stable: every input that
//! once added coverage, and every regression, must still hold the invariants. `write_seeds`
//! (ignored) writes the seed inputs into the corpus.

use testkit::{corpus, replay_corpora};

use translator::fuzz_support::per_device::translator_per_device;
use translator::fuzz_support::script::Script;
use translator::fuzz_support::{line, translator_session, up};

replay_corpora! {
    every_translator_session_corpus_input_holds_the_invariants:
        "translator_session", 10, translator_session;
    every_translator_per_device_corpus_input_holds_the_invariants:
        "translator_per_device", 10, translator_per_device;
}

/// Configuration byte 0: bits 1-2 the device bytes (0, 1, 2, 4), 3-4 vardiff (pinned easiest,
/// free, pinned hard, narrow), 5 a window of 3 shares in flight, 6 one worker per device, 7 no
/// version rolling. Byte 1: bits 0-2 jobs remembered less one, 3-4 least extranonce2 (1, 2, 4,
/// 0), 5 no grace, 6 `UpdateChannel` at every tick, 7 no ntime roll.
const TWO_BYTES: u8 = 0x04;

/// A farm of `n` devices, each configured, subscribed and authorized after the channel opened,
/// with work on a block.
fn farm(sv1: bool, c0: u8, c1: u8, n: u8) -> Script {
    let mut s = Script::new(sv1, c0, c1).open();
    for d in 0..n {
        s = s.connect().configure(d).subscribe(d).authorize(d, d % 2);
    }
    s.work(1)
}

fn seeds(sv1: bool) -> Vec<(String, Vec<u8>)> {
    let name = |n: &str| format!("seed-{}-{n}", if sv1 { "sv1" } else { "sv2" });
    let mut out = Vec::new();
    let mut add = |n: &str, s: Script| out.push((name(n), s.build()));
    add(
        "shares-and-verdicts",
        farm(sv1, TWO_BYTES, 0, 2)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .submit(0, 2, 3)
            .submit_rolled(1, 2, 4, 0x0000_6000)
            .accept(1)
            .reject(0)
            .submit(0, 3, 5)
            .accept(0),
    );
    add(
        "duplicates-and-bad-fields",
        farm(sv1, TWO_BYTES, 0, 1)
            .submit(0, 1, 7)
            .resubmit(0)
            // Wrong extranonce2 size, old ntime, unknown job, unauthorized worker.
            .line(0, line::SUBMIT, &[0x00, 3, 0, 1, 0, 0, 0, 0])
            .line(0, line::SUBMIT | 0xe0, &[0x00, 1, 9, 1, 0, 0, 0, 0])
            .line(0, line::SUBMIT | 0xc0, &[0x06, 0, 1, 0, 2, 0, 0, 0, 0])
            .line(0, line::SUBMIT | 0xc0, &[0xc0, 4, 1, 0, 3, 0, 0, 0, 0, 0])
            .submit_rolled(0, 1, 8, 0xffff_ffff),
    );
    add(
        "subscribe-before-the-channel",
        Script::new(sv1, TWO_BYTES, 0)
            .connect()
            .subscribe(0)
            .authorize(0, 0)
            .connect()
            .configure(1)
            .open()
            .subscribe(1)
            .authorize(1, 1)
            .work(3)
            .submit(0, 1, 1)
            .submit(1, 1, 1),
    );
    add(
        "failover-and-back",
        farm(sv1, TWO_BYTES, 0, 2)
            .submit(0, 1, 1)
            .submit(1, 1, 1)
            .lost()
            .submit(0, 1, 2)
            .reconnected()
            .open()
            .work(2)
            .submit(0, 2, 3)
            .accept(0),
    );
    add(
        "pool-closes-the-channel",
        farm(sv1, TWO_BYTES, 0, 1)
            .submit(0, 1, 1)
            .close_channel()
            .submit(0, 1, 2)
            .reconnected()
            .open()
            .work(4),
    );
    add(
        "window-overflow",
        farm(sv1, TWO_BYTES | 0x20, 0, 1)
            .submit(0, 1, 1)
            .submit(0, 1, 2)
            .submit(0, 1, 3)
            .submit(0, 1, 4)
            .submit(0, 1, 5)
            .accept(2),
    );
    add(
        "vardiff-and-ticks",
        farm(sv1, TWO_BYTES | 0x08, 0x40, 2)
            .submit(0, 1, 1)
            .tick(0x45)
            .submit(0, 1, 2)
            .tick(0x8a)
            .submit(1, 1, 3)
            .tick(0xc2)
            .tick(0xc2)
            .tick(0xc2)
            .tick(0xc2)
            .submit(1, 2, 4),
    );
    add(
        "prefix-change",
        farm(sv1, TWO_BYTES, 0, 2)
            .prefix(3)
            .update()
            .submit(0, 1, 1)
            .work(5)
            .submit(0, 1, 2),
    );
    add(
        "targets",
        farm(sv1, TWO_BYTES, 0, 1)
            .target(4)
            .submit(0, 1, 1)
            .target(0)
            .update()
            .submit(0, 1, 2)
            .target(3)
            .submit(0, 1, 3),
    );
    add(
        "garbage-and-long-lines",
        farm(sv1, TWO_BYTES, 0, 1)
            .raw_line(0, b"{\"id\":1,\"method\":\"mining.subscribe\",\"params\":[]}")
            .raw_line(0, b"not json at all")
            .raw_line(0, b"{\"id\":2,\"method\":\"mining.submit\",\"params\":[\"farm.a\",\"1\",\"0000\",\"6553f100\",\"00000001\"]}")
            .line(0, line::OTHER, &[])
            .line(0, line::OTHER | 0x20, &[])
            .line(0, line::SUGGEST_DIFFICULTY, &[])
            .line(0, line::SUGGEST_TARGET | 0x20, &[])
            .line(0, line::PING | 0x10, &[])
            .line(0, line::EXTRANONCE_SUBSCRIBE, &[])
            .long_line(0),
    );
    add(
        "one-device-bytes-full",
        farm(sv1, 0x00, 0, 3)
            .submit(0, 1, 1)
            .close(0)
            .connect()
            .subscribe(2),
    );
    add(
        "devices-come-and-go",
        farm(sv1, TWO_BYTES | 0x40, 0x07, 3)
            .submit(2, 1, 1)
            .close(1)
            .connect()
            .configure(2)
            .subscribe(2)
            .authorize(2, 1)
            .authorize(2, 0)
            .submit(2, 1, 2)
            .close(0)
            .close(0)
            .close(0),
    );
    if sv1 {
        // A device configured before the pool answers the proxy's configure, which grants
        // fewer bits than the proxy asked for: the device must be narrowed (regression).
        add(
            "mask-narrowed-after-the-device-configured",
            Script::new(true, TWO_BYTES, 0)
                .connect()
                .configure(0)
                .upstream(up::OPEN, &[0x21, 0x00])
                .upstream(up::OPEN, &[0x2b, 0x00])
                .upstream(up::OPEN, &[0x01, 0x00])
                .upstream(up::OPEN, &[0x01, 0x00])
                .target(0)
                .subscribe(0)
                .authorize(0, 0)
                .work(1)
                .submit_rolled(0, 1, 5, 0x1f00_0000)
                .submit_rolled(0, 1, 7, 0x1f00_0000)
                .submit_rolled(0, 1, 8, 0x1f00_0000)
                .submit_rolled(0, 1, 9, 0x1f00_0000)
                .submit_rolled(0, 1, 6, 0x0000_6000),
        );
    }
    add(
        "upstream-oddities",
        farm(sv1, TWO_BYTES, 0, 1)
            .upstream(up::OTHER, &[0, 1])
            .upstream(up::OTHER, &[1, 1])
            .upstream(up::OTHER, &[2, 1])
            .upstream(up::OTHER, &[3, 1])
            .upstream(up::OTHER, &[4, 1])
            .upstream(up::OPEN, &[0, 1, 0, 0])
            .upstream(up::PREV_HASH, &[0x0c, 1, 7, 7])
            .upstream_raw(&[0x1a, 4, 1, 0, 0, 0]),
    );
    out
}

/// Per-device configuration byte 0: as [`TWO_BYTES`] without its device bytes (a device takes
/// its channel's whole extranonce), bit 0 the two-second open timeout.
const PER_DEVICE: u8 = 0x00;
const SHORT_TIMEOUT: u8 = 0x01;

/// Per-device: `n` devices, each configured, subscribed (its channel asked for) and
/// authorized, their channels opened in order (8 bytes to roll, any share forwarded, in no
/// group), each with work on a block.
fn channels(c0: u8, c1: u8, n: u8) -> Script {
    let mut s = Script::per_device(c0, c1);
    for d in 0..n {
        s = s.connect().configure(d).subscribe(d).authorize(d, d % 2);
    }
    for _ in 0..n {
        s = s.grant(0);
    }
    for k in 0..n {
        s = s.work_on(Script::chan(k), k + 1);
    }
    s
}

fn per_device_seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut add = |n: &str, s: Script| out.push((format!("seed-per-device-{n}"), s.build()));
    let (c0, c1) = (PER_DEVICE, 0);
    add(
        "shares-and-verdicts",
        channels(c0, c1, 2)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .submit(0, 2, 3)
            .submit_rolled(1, 2, 4, 0x0000_6000)
            .accept_on(Script::chan(0), 1)
            .reject_on(Script::chan(0), 0)
            .resubmit(0)
            .submit(0, 3, 5)
            .accept_on(Script::chan(0), 0),
    );
    add(
        "a-refused-channel-ends-its-device-only",
        Script::per_device(c0, c1)
            .connect()
            .subscribe(0)
            .authorize(0, 0)
            .connect()
            .subscribe(1)
            .authorize(1, 1)
            .refuse(0)
            .grant(0)
            .work_on(Script::chan(0), 2)
            .submit(0, 1, 1)
            .connect()
            .subscribe(1),
    );
    add(
        "a-device-leaves-with-shares-in-flight",
        channels(c0, c1, 2)
            .submit(0, 1, 1)
            .submit(0, 1, 2)
            .submit(1, 1, 3)
            .close(0)
            .accept_on(Script::chan(0), 0)
            .reject_on(Script::chan(0), 0)
            .submit(0, 2, 4)
            .close_on(3),
    );
    add(
        "failover-reopens-every-channel",
        channels(c0, c1, 2)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .lost()
            .submit(0, 1, 3)
            .reconnected()
            .grant(1)
            .grant(0)
            .work_on(Script::chan(0), 4)
            .work_on(Script::chan(1), 5)
            .submit(0, 2, 6)
            .submit(1, 2, 7),
    );
    let mut group = Script::per_device(c0, c1);
    for d in 0..3 {
        group = group.connect().configure(d).subscribe(d).authorize(d, 0);
    }
    for _ in 0..3 {
        group = group.grant_with(0, 0xa0, 0x00, 0);
    }
    add(
        "a-group-of-channels",
        group
            .work_on(1, 9)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .submit(2, 1, 3)
            .accept_on(1, 2)
            .update_on(1)
            .submit(2, 2, 4)
            .target_on(1, 4)
            .submit(1, 2, 5)
            .close_on(1),
    );
    add(
        "a-request-the-pool-skips",
        Script::per_device(c0 | SHORT_TIMEOUT, c1)
            .connect()
            .subscribe(0)
            .connect()
            .subscribe(1)
            .tick(0x41)
            .grant(1)
            .tick(0x82)
            .tick(0x45)
            .grant(0)
            .connect()
            .subscribe(1)
            .grant(0),
    );
    add(
        "a-silent-pool",
        Script::per_device(c0 | SHORT_TIMEOUT, c1)
            .connect()
            .subscribe(0)
            .authorize(0, 0)
            .tick(0x82)
            .tick(0x82)
            .reconnected()
            .grant(0)
            .work_on(Script::chan(0), 3)
            .submit(0, 1, 1)
            .tick(0xc1),
    );
    add(
        "a-channel-too-small",
        Script::per_device(c0, c1)
            .connect()
            .subscribe(0)
            .connect()
            .subscribe(1)
            .grant_with(0, 0x00, 0x02, 0)
            .grant_with(0, 0x14, 0x02, 0)
            .connect()
            .subscribe(1),
    );
    add(
        "a-channel-id-reused",
        channels(c0, c1, 2)
            .submit(0, 1, 1)
            .submit(0, 1, 2)
            .close(0)
            .connect()
            .subscribe(1)
            .grant_with(0x80, 0xa0, 0x02, 0)
            .work_on(Script::chan(1), 6)
            .submit(1, 1, 3),
    );
    add(
        "the-pool-closes-a-channel",
        channels(c0, c1, 2)
            .submit(0, 1, 1)
            .submit(1, 1, 2)
            .close_on(Script::chan(0))
            .submit(0, 1, 3)
            .accept_on(Script::chan(0), 0),
    );
    add(
        "prefix-targets-and-vardiff",
        channels(c0 | 0x08, 0x40, 1)
            .prefix_on(Script::chan(0), 3)
            .update_on(Script::chan(0))
            .submit(0, 1, 1)
            .target_on(Script::chan(0), 4)
            .submit(0, 1, 2)
            .tick(0x45)
            .tick(0x8a)
            .target_on(Script::chan(0), 0)
            .submit(0, 2, 3)
            .tick(0xc2),
    );
    add(
        "a-device-leaves-while-its-channel-is-asked-for",
        Script::per_device(c0, c1)
            .connect()
            .subscribe(0)
            .close(0)
            .grant(0)
            .connect()
            .subscribe(0)
            .refuse(0),
    );
    add(
        "a-full-window",
        channels(c0 | 0x20, c1, 1)
            .submit(0, 1, 1)
            .submit(0, 1, 2)
            .submit(0, 1, 3)
            .submit(0, 1, 4)
            .submit(0, 1, 5)
            .accept_on(Script::chan(0), 1),
    );
    add(
        "upstream-oddities",
        channels(c0, c1, 1)
            .upstream(up::OTHER, &[0, 4])
            .upstream(up::OTHER, &[1, 4])
            .upstream(up::OTHER, &[2, 4])
            .upstream(up::OTHER, &[3, 4])
            .upstream(up::OTHER, &[4, 4])
            .upstream(up::JOB, &[0x41, 0])
            .upstream(up::PREV_HASH, &[0x0c, 4, 1, 7, 7])
            .upstream(up::TARGET, &[1, 2])
            .upstream(up::OPEN, &[0x07, 0, 0, 0])
            .upstream_raw(&[0x1a, 4, 1, 0, 0, 0])
            .submit(0, 1, 1),
    );
    out
}

#[test]
fn the_seeds_hold_the_invariants() {
    for sv1 in [false, true] {
        for (name, data) in seeds(sv1) {
            eprintln!("{name}");
            translator_session(&data);
        }
    }
    for (name, data) in per_device_seeds() {
        eprintln!("{name}");
        translator_per_device(&data);
    }
}

#[test]
#[ignore = "writes the seed inputs into the corpus; run by hand before fuzzing afresh"]
fn write_seeds() {
    corpus!("translator_session").write_seeds([false, true].into_iter().flat_map(seeds));
    corpus!("translator_per_device").write_seeds(per_device_seeds());
}
