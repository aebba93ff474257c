//! The share store: what is acknowledged is in the file, in every mode, and what each mode
//! promises about when.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use pool::store::*;

// ---- allocations, counted on the thread that records ----

#[global_allocator]
static GLOBAL: testkit::alloc::Counting = testkit::alloc::Counting;

// ---- helpers ----

/// A share's hash, different for every `i`.
fn hash_of(i: u64) -> [u8; 32] {
    let mut h = [0u8; 32];
    for (k, chunk) in h.chunks_exact_mut(8).enumerate() {
        let x = i
            .wrapping_add(k as u64)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(17 + k as u32);
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    h
}

fn share(worker: WorkerKey, i: u64) -> ShareRecord {
    ShareRecord {
        worker,
        difficulty: 1024.0 + i as f64 / 8.0,
        job_id: 0x5f2a_0000 + i / 100,
        time_ms: 1_760_000_000_000 + i,
        hash: hash_of(i),
    }
}

fn config(path: &Path, durability: Durability, window: Duration) -> StoreConfig {
    StoreConfig {
        durability,
        batch_window: window,
        ..StoreConfig::new(path)
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

fn wait(store: &Store, t: Ticket) {
    runtime()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(30), store.wait_durable(t)).await
        })
        .expect("durable within 30 s")
        .expect("durable");
}

/// `f` of every share in the file at `path`, read on a connection of its own (the writer may
/// still be writing).
fn from_file<T, C: FromIterator<T>>(path: &Path, f: impl FnMut(StoredShare) -> T) -> C {
    StoreReader::open(path)
        .expect("read the store's file")
        .shares()
        .unwrap()
        .into_iter()
        .map(f)
        .collect()
}

/// How many shares the file at `path` holds.
fn share_count(path: &Path) -> u64 {
    StoreReader::open(path).unwrap().share_count().unwrap()
}

/// Another writer takes the share row of `ticket` in the file at `path`: the store's insert of
/// that share fails until the row is gone again. Its connection.
fn take_share_row(path: &Path, ticket: Ticket, worker: WorkerKey) -> rusqlite::Connection {
    let intruder = rusqlite::Connection::open(path).unwrap();
    intruder
        .execute(
            "INSERT INTO share (seq, worker, difficulty, job_id, time_ms, hash) \
             VALUES (?1, ?2, 1.0, 0, 0, zeroblob(32))",
            rusqlite::params![ticket.0 as i64, worker.0],
        )
        .unwrap();
    intruder
}

/// A batched store on `path` with a 20 ms window, and the first share of worker "w" durable.
fn one_share_durable(path: &Path) -> (Store, WorkerKey, Ticket) {
    let store = Store::open(config(path, Durability::Batched, Duration::from_millis(20))).unwrap();
    let w = store.worker("w").unwrap();
    let t0 = store.record_share(share(w, 0)).unwrap();
    wait(&store, t0);
    (store, w, t0)
}

fn block(worker: WorkerKey, n: u8) -> BlockRecord {
    BlockRecord {
        hash: [n; 32],
        height: 900_000 + u32::from(n),
        worker,
        job_id: 77 + u64::from(n),
        time_ms: 1_760_000_000_000 + u64::from(n),
        block: (0..200u32).map(|b| (b as u8) ^ n).collect(),
    }
}

// ---- the API's small types ----

#[test]
fn durability_reads_and_writes_its_three_names() {
    for (name, d) in [
        ("strict", Durability::Strict),
        ("batched", Durability::Batched),
        ("off", Durability::Off),
    ] {
        assert_eq!(name.parse::<Durability>().unwrap(), d);
        assert_eq!(d.to_string(), name);
        assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<Durability>(&format!("\"{name}\"")).unwrap(),
            d
        );
    }
    assert_eq!(Durability::default(), Durability::Batched);
    let err = "fsync".parse::<Durability>().unwrap_err().to_string();
    assert!(err.contains("fsync") && err.contains("strict"), "{err}");
    let c = StoreConfig::new("x.db");
    assert_eq!(c.batch_window, Duration::from_millis(10));
    assert_eq!(c.queue_capacity, 65536);
    assert_eq!(c.durability, Durability::Batched);
}

// ---- round trip ----

#[test]
fn shares_round_trip_through_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    let alice = store.worker("alice.rig1").unwrap();
    let bob = store.worker("bob").unwrap();
    assert_ne!(alice, bob);
    assert_eq!(
        store.worker("alice.rig1").unwrap(),
        alice,
        "interning is idempotent"
    );

    let mut sent = Vec::new();
    let mut last = Ticket(0);
    for i in 0..500u64 {
        let w = if i % 3 == 0 { bob } else { alice };
        let rec = share(w, i);
        let t = store.record_share(rec).unwrap();
        assert!(t > last, "tickets increase");
        last = t;
        sent.push((t, rec));
    }
    wait(&store, last);
    assert!(sent.iter().all(|(t, _)| store.is_durable(*t)));

    let reader = StoreReader::open(&path).unwrap();
    assert_eq!(reader.share_count().unwrap(), 500);
    let stored = reader.shares().unwrap();
    assert_eq!(stored.len(), 500);
    for ((t, rec), s) in sent.iter().zip(&stored) {
        assert_eq!(s.ticket, *t);
        let name = if rec.worker == bob {
            "bob"
        } else {
            "alice.rig1"
        };
        assert_eq!(s.worker, name);
        assert_eq!(s.difficulty, rec.difficulty);
        assert_eq!(s.job_id, rec.job_id);
        assert_eq!(s.time_ms, rec.time_ms);
        assert_eq!(s.hash, rec.hash);
    }
    let stats = store.close().unwrap();
    assert_eq!(stats.shares_written, 500);
    assert_eq!(stats.queue_len, 0);
    assert_eq!(stats.committed_ticket, last.0);
}

#[test]
fn workers_and_tickets_carry_on_across_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    let a = store.worker("a").unwrap();
    let t1 = store.record_share(share(a, 1)).unwrap();
    store.close().unwrap();

    let store = Store::open(StoreConfig::new(&path)).unwrap();
    assert_eq!(store.worker("a").unwrap(), a, "the same name keeps its key");
    let b = store.worker("b").unwrap();
    assert_ne!(a, b);
    assert!(
        store.is_durable(t1),
        "the earlier run's tickets are durable"
    );
    let t2 = store.record_share(share(b, 2)).unwrap();
    assert!(t2 > t1, "tickets go on from the file's last one");
    store.close().unwrap();

    let shares = StoreReader::open(&path).unwrap().shares().unwrap();
    let names: Vec<_> = shares
        .iter()
        .map(|s| (s.ticket, s.worker.as_str()))
        .collect();
    assert_eq!(names, [(t1, "a"), (t2, "b")]);
}

#[test]
fn an_unknown_worker_key_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::new(dir.path().join("pool.db"))).unwrap();
    let a = store.worker("a").unwrap();
    for bad in [WorkerKey(0), WorkerKey(a.0 + 1), WorkerKey(-3)] {
        match store.record_share(share(bad, 0)) {
            Err(StoreError::UnknownWorker(k)) => assert_eq!(k, bad.0),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        store.record_block(block(WorkerKey(99), 1)),
        Err(StoreError::UnknownWorker(99))
    ));
}

// ---- durability: what is reported durable is in the file ----

/// Writes shares from another thread while this one notes which tickets are reported durable
/// and then reads the file through its own connection: each such ticket must be there.
fn durable_tickets_are_in_the_file(durability: Durability, window: Duration, min_checked: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    // A short queue keeps the producer close to the writer (strict mode commits slowly).
    let store = Store::open(StoreConfig {
        queue_capacity: 512,
        ..config(&path, durability, window)
    })
    .unwrap();
    let w = store.worker("w").unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Ticket>();
    let producer = {
        let store = store.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                match store.record_share(share(w, i)) {
                    Ok(t) => {
                        tx.send(t).unwrap();
                        i += 1;
                    }
                    Err(StoreError::QueueFull) => std::thread::sleep(Duration::from_millis(1)),
                    Err(e) => panic!("{e}"),
                }
                if i.is_multiple_of(64) {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        })
    };

    // Tickets arrive in order and complete in order: the durable ones are a prefix.
    let mut pending: VecDeque<Ticket> = VecDeque::new();
    let mut checked = 0usize;
    let mut rounds_with_pending = 0;
    let started = Instant::now();
    while checked < min_checked || started.elapsed() < Duration::from_millis(300) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "too slow: {checked}"
        );
        pending.extend(rx.try_iter());
        // Which tickets does the store say are durable now?
        let mut durable = Vec::new();
        while let Some(&t) = pending.front() {
            if !store.is_durable(t) {
                break;
            }
            durable.push(t);
            pending.pop_front();
        }
        if !pending.is_empty() {
            rounds_with_pending += 1;
        }
        if durable.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        // A separate connection, while the writer keeps writing.
        let in_file: HashMap<Ticket, [u8; 32]> = from_file(&path, |s| (s.ticket, s.hash));
        for t in &durable {
            assert!(
                in_file.contains_key(t),
                "{durability}: ticket {t:?} was reported durable but is not in the file"
            );
        }
        checked += durable.len();
    }
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    // The check means something only if some tickets were seen not yet durable.
    assert!(
        rounds_with_pending > 0,
        "{durability}: every ticket was durable when first seen"
    );
    let stats = store.close().unwrap();
    assert!(stats.shares_written as usize >= checked);
}

#[test]
fn batched_durable_tickets_are_in_the_file_while_the_writer_runs() {
    durable_tickets_are_in_the_file(Durability::Batched, Duration::from_millis(5), 5000);
}

#[test]
fn strict_durable_tickets_are_in_the_file_while_the_writer_runs() {
    durable_tickets_are_in_the_file(Durability::Strict, Duration::ZERO, 200);
}

#[test]
fn strict_mode_commits_every_share_on_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(config(&path, Durability::Strict, Duration::ZERO)).unwrap();
    let w = store.worker("w").unwrap();
    let commits_before = store.stats().commits;
    let mut last = Ticket(0);
    for i in 0..50 {
        last = store.record_share(share(w, i)).unwrap();
    }
    wait(&store, last);
    let stats = store.close().unwrap();
    assert_eq!(stats.shares_written, 50);
    assert!(
        stats.commits - commits_before >= 50,
        "one commit per share: {} commits",
        stats.commits - commits_before
    );
}

#[test]
fn batched_mode_groups_a_burst_and_waits_about_one_window() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let window = Duration::from_millis(100);
    let store = Store::open(config(&path, Durability::Batched, window)).unwrap();
    let w = store.worker("w").unwrap();
    let warm = store.record_share(share(w, 0)).unwrap();
    wait(&store, warm);

    // A burst: far fewer commits than records.
    let commits_before = store.stats().commits;
    let mut last = Ticket(0);
    for i in 1..=20_000 {
        last = store.record_share(share(w, i)).unwrap();
    }
    wait(&store, last);
    let stats = store.stats();
    let commits = stats.commits - commits_before;
    assert!(
        commits * 20 <= 20_000,
        "{commits} commits for 20000 records: not grouped"
    );
    assert_eq!(stats.batch_window, window);

    // One record on an idle store: durable after about one window, not much less, not much more.
    let started = Instant::now();
    let t = store.record_share(share(w, 99_999)).unwrap();
    assert!(!store.is_durable(t), "not durable before its group commits");
    wait(&store, t);
    let waited = started.elapsed();
    assert!(
        waited >= window * 9 / 10,
        "committed after {waited:?}, before the window ({window:?}) closed"
    );
    assert!(
        waited < window + Duration::from_secs(2),
        "a record waited {waited:?} with a {window:?} window"
    );
    store.close().unwrap();
}

#[test]
fn off_mode_acknowledges_at_once_and_writes_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    // A long window: nothing would be committed during the test but for the close.
    let store = Store::open(config(&path, Durability::Off, Duration::from_secs(5))).unwrap();
    let w = store.worker("w").unwrap();
    let started = Instant::now();
    for i in 0..1000 {
        let t = store.record_share(share(w, i)).unwrap();
        assert!(store.is_durable(t), "off mode: durable at once");
    }
    runtime().block_on(async {
        let t = store.record_share(share(w, 1000)).unwrap();
        tokio::time::timeout(Duration::from_millis(50), store.wait_durable(t))
            .await
            .expect("wait_durable returns at once in off mode")
            .unwrap();
    });
    assert!(started.elapsed() < Duration::from_secs(4));
    let stats = store.close().unwrap();
    assert_eq!(stats.shares_written, 1001);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "close did not wait out the window"
    );
    assert_eq!(share_count(&path), 1001);
}

// ---- back-pressure ----

#[test]
fn a_stalled_writer_fills_the_queue_and_then_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let capacity = 8;
    let store = Store::open(StoreConfig {
        queue_capacity: capacity,
        ..config(&path, Durability::Batched, Duration::ZERO)
    })
    .unwrap();
    let w = store.worker("w").unwrap();
    let warm = store.record_share(share(w, 0)).unwrap();
    wait(&store, warm);

    // Another connection holds the write lock: the writer's next insert waits on it.
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();

    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 1..=(capacity as u64 + 2) {
        match store.record_share(share(w, i)) {
            Ok(t) => accepted.push(t),
            Err(StoreError::QueueFull) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // The writer took at most one record off the queue before stalling on the lock.
    assert!(refused >= 1, "no QueueFull with the writer stalled");
    assert!(
        (capacity..=capacity + 1).contains(&accepted.len()),
        "{} accepted with capacity {capacity}",
        accepted.len()
    );
    let stats = store.stats();
    assert!(stats.queue_full >= 1);
    assert!(stats.queue_len >= capacity - 1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        accepted.iter().all(|&t| !store.is_durable(t)),
        "nothing is durable while the writer is stalled"
    );

    // Released: everything accepted becomes durable, and the queue takes shares again.
    blocker.execute_batch("ROLLBACK").unwrap();
    wait(&store, *accepted.last().unwrap());
    let t = store.record_share(share(w, 1000)).unwrap();
    wait(&store, t);
    store.close().unwrap();
    let in_file: Vec<Ticket> = from_file(&path, |s| s.ticket);
    for t in accepted {
        assert!(in_file.contains(&t));
    }
}

// ---- blocks ----

#[test]
fn a_block_is_durable_before_its_ticket_completes_even_in_off_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let window = Duration::from_secs(5);
    let store = Store::open(config(&path, Durability::Off, window)).unwrap();
    let w = store.worker("finder").unwrap();
    for i in 0..100 {
        store.record_share(share(w, i)).unwrap();
    }
    let found = block(w, 7);
    let started = Instant::now();
    let t = store.record_block(found.clone()).unwrap();
    // A share after the block completes only with the block.
    let after = store.record_share(share(w, 100)).unwrap();
    wait(&store, t);
    let waited = started.elapsed();
    assert!(store.is_durable(after));
    assert!(
        waited < window / 2,
        "the block waited {waited:?}: it should be committed at once, not at the window's end"
    );
    // In the file now, through another connection, while the store is still open.
    let blocks = StoreReader::open(&path).unwrap().blocks().unwrap();
    assert_eq!(blocks.len(), 1);
    let b = &blocks[0];
    assert_eq!(b.ticket, t);
    assert_eq!(b.hash, found.hash);
    assert_eq!(b.height, found.height);
    assert_eq!(b.worker, "finder");
    assert_eq!(b.job_id, found.job_id);
    assert_eq!(b.time_ms, found.time_ms);
    assert_eq!(b.block, found.block);
    assert_eq!(b.result, None);
    let stats = store.close().unwrap();
    assert_eq!(stats.blocks_written, 1);
}

#[test]
fn block_results_are_recorded_and_unanswered_blocks_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    assert!(store.blocks_awaiting_answer().is_empty());
    let w = store.worker("finder").unwrap();
    let answered = block(w, 1);
    let unanswered = block(w, 2);
    wait(&store, store.record_block(answered.clone()).unwrap());
    wait(&store, store.record_block(unanswered.clone()).unwrap());
    let r1 = store
        .record_block_result(answered.hash, "inconclusive", 1_760_000_000_100)
        .unwrap();
    let r2 = store
        .record_block_result(answered.hash, "accepted", 1_760_000_000_200)
        .unwrap();
    assert!(r2 > r1);
    wait(&store, r2);

    let blocks = StoreReader::open(&path).unwrap().blocks().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].hash, answered.hash);
    assert_eq!(
        blocks[0].result.as_deref(),
        Some("accepted"),
        "the last answer counts"
    );
    assert_eq!(blocks[0].result_time_ms, Some(1_760_000_000_200));
    assert_eq!(blocks[1].hash, unanswered.hash);
    assert_eq!(blocks[1].result, None);
    store.close().unwrap();

    // A restart hands back the block that never got an answer, to be submitted again.
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    assert_eq!(
        store.blocks_awaiting_answer(),
        std::slice::from_ref(&unanswered)
    );
    let t = store
        .record_block_result(unanswered.hash, "duplicate", 1_760_000_000_300)
        .unwrap();
    wait(&store, t);
    store.close().unwrap();
    let store = Store::open(StoreConfig::new(&path)).unwrap();
    assert!(store.blocks_awaiting_answer().is_empty());
}

// ---- closing ----

#[test]
fn closing_drains_everything_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let window = Duration::from_secs(5);
    let store = Store::open(config(&path, Durability::Batched, window)).unwrap();
    let w = store.worker("w").unwrap();
    let started = Instant::now();
    let mut last = Ticket(0);
    for i in 0..30_000 {
        last = store.record_share(share(w, i)).unwrap();
    }
    let other_handle = store.clone();
    let stats = store.close().unwrap();
    assert!(
        started.elapsed() < window - Duration::from_secs(1),
        "close waited out the window"
    );
    assert_eq!(stats.shares_written, 30_000);
    assert_eq!(stats.queue_len, 0);
    assert!(other_handle.is_durable(last));
    assert!(matches!(
        other_handle.record_share(share(w, 0)),
        Err(StoreError::Closed)
    ));
    assert!(runtime()
        .block_on(other_handle.wait_durable(Ticket(last.0 + 1)))
        .is_err());
    assert_eq!(share_count(&path), 30_000);
}

#[test]
fn dropping_the_last_handle_drains_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    {
        let store = Store::open(config(&path, Durability::Off, Duration::from_secs(5))).unwrap();
        let w = store.worker("w").unwrap();
        let clone = store.clone();
        for i in 0..5000 {
            clone.record_share(share(w, i)).unwrap();
        }
        drop(store);
        // `clone` is the last handle; dropping it stops the writer after the last commit.
    }
    assert_eq!(share_count(&path), 5000);
}

// ---- errors ----

#[test]
fn an_unwritable_path_says_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-dir").join("pool.db");
    let err = Store::open(StoreConfig::new(&path)).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("unable to open"), "{msg}");

    // A file that is not a database.
    let junk = dir.path().join("junk.db");
    std::fs::write(&junk, vec![0x5a; 4096]).unwrap();
    let msg = Store::open(StoreConfig::new(&junk))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("junk.db") && msg.contains("not a database"),
        "{msg}"
    );

    let msg = StoreReader::open(dir.path().join("missing.db"))
        .err()
        .expect("a missing file cannot be read")
        .to_string();
    assert!(msg.contains("missing.db"), "{msg}");

    let zero = StoreConfig {
        queue_capacity: 0,
        ..StoreConfig::new(dir.path().join("z.db"))
    };
    assert!(matches!(Store::open(zero), Err(StoreError::Config(_))));
}

#[test]
fn a_file_from_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    Store::open(StoreConfig::new(&path))
        .unwrap()
        .close()
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    drop(conn);
    match Store::open(StoreConfig::new(&path)) {
        Err(StoreError::SchemaTooNew { found, known, .. }) => {
            assert_eq!((found, known), (SCHEMA_VERSION + 1, SCHEMA_VERSION))
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        StoreReader::open(&path),
        Err(StoreError::SchemaTooNew { .. })
    ));
}

/// Waits until `cond` holds, up to 30 s.
fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "not within 30 s: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_failing_writer_refuses_new_shares_says_why_and_recovers_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let window = Duration::from_millis(200);
    let store = Store::open(config(&path, Durability::Batched, window)).unwrap();
    let w = store.worker("w").unwrap();
    let t0 = store.record_share(share(w, 0)).unwrap();
    wait(&store, t0);
    assert_eq!(store.stats().failures, 0);

    // Another writer takes the row the store's second next share will need: that insert fails
    // until the row is gone again.
    let intruder = take_share_row(&path, Ticket(t0.0 + 2), w);

    let t1 = store.record_share(share(w, 1)).unwrap();
    let t2 = store.record_share(share(w, 2)).unwrap();
    until("the writer fails", || store.is_failing());
    let stats = store.stats();
    let (reason, _since) = stats.failing.clone().expect("failing: why");
    assert!(reason.contains("pool.db"), "{reason}");
    assert!(reason.contains("inserting a share"), "{reason}");
    assert_eq!(stats.failures, 1);
    assert!(!store.is_durable(t2), "{t2:?} was rolled back, not durable");

    // New shares are refused with the reason; nothing waits on them.
    match store.record_share(share(w, 3)) {
        Err(StoreError::Failing(r)) => assert!(r.contains("inserting a share"), "{r}"),
        other => panic!("a share while failing: {other:?}"),
    }
    let mut batch = ShareBatch::new(store.clone());
    assert!(matches!(
        batch.push(share(w, 4), pool::Timestamp::from_millis(0)),
        Err(StoreError::Failing(_))
    ));
    drop(batch);
    // A block is still taken; whoever found it learns at once that it is not stored yet, and
    // submits it without waiting.
    let b = store.record_block(block(w, 9)).unwrap();
    let rt = runtime();
    let quick = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), store.wait_durable_unless_failing(b)).await
    });
    assert!(
        matches!(quick, Ok(Err(StoreError::Failing(_)))),
        "the block's wait: {quick:?}"
    );
    // A worker named now is kept too.
    let w2 = store.worker("w2").unwrap();

    // The row is freed: the writer's next retry writes everything it held, by itself.
    intruder
        .execute(
            "DELETE FROM share WHERE seq = ?1",
            rusqlite::params![(t0.0 + 2) as i64],
        )
        .unwrap();
    drop(intruder);
    for t in [t1, t2, b] {
        wait(&store, t);
    }
    assert!(!store.is_failing());
    assert!(store.stats().failing.is_none());
    let t5 = store.record_share(share(w2, 5)).unwrap();
    wait(&store, t5);
    assert_eq!(store.stats().failures, 1);
    store.close().unwrap();

    let stored: HashMap<Ticket, [u8; 32]> = from_file(&path, |s| (s.ticket, s.hash));
    assert_eq!(stored.get(&t1), Some(&hash_of(1)));
    assert_eq!(stored.get(&t2), Some(&hash_of(2)));
    assert_eq!(stored.get(&t5), Some(&hash_of(5)));
    assert_eq!(stored.len(), 4, "the refused shares are not in the file");
    let blocks = StoreReader::open(&path).unwrap().blocks().unwrap();
    assert!(
        blocks.iter().any(|x| x.hash == [9; 32]),
        "the block held while failing"
    );
}

/// A store file moved or deleted under the pool: SQLite would go on writing to the unlinked
/// inode, and every share acknowledged then would be gone with it. The commit fails instead,
/// the store says why, and writes resume once the file is back at its path.
#[test]
fn a_store_file_taken_away_is_a_fault_until_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let aside = dir.path().join("aside.db");
    let (store, w, _) = one_share_durable(&path);

    std::fs::rename(&path, &aside).unwrap();
    let t1 = store.record_share(share(w, 1)).unwrap();
    until("the writer fails", || store.is_failing());
    let (reason, _) = store.stats().failing.expect("failing: why");
    assert!(reason.contains("no longer at its path"), "{reason}");
    assert!(!store.is_durable(t1));
    assert!(matches!(
        store.record_share(share(w, 2)),
        Err(StoreError::Failing(_))
    ));

    std::fs::rename(&aside, &path).unwrap();
    wait(&store, t1);
    assert!(!store.is_failing());
    store.close().unwrap();
    let hashes: Vec<[u8; 32]> = from_file(&path, |s| s.hash);
    assert_eq!(hashes, vec![hash_of(0), hash_of(1)]);
}

#[test]
fn a_writer_still_failing_at_close_gives_up_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let (store, w, t0) = one_share_durable(&path);
    let _intruder = take_share_row(&path, Ticket(t0.0 + 1), w);
    let t1 = store.record_share(share(w, 1)).unwrap();
    until("the writer fails", || store.is_failing());
    let other = store.clone();
    match store.close() {
        Err(StoreError::WriterFailed(reason)) => {
            assert!(reason.contains("inserting a share"), "{reason}")
        }
        other => panic!("closing while failing: {other:?}"),
    }
    let waited = runtime().block_on(other.wait_durable(t1));
    assert!(
        matches!(waited, Err(StoreError::WriterFailed(_))),
        "{waited:?}"
    );
    assert!(matches!(
        other.record_share(share(w, 2)),
        Err(StoreError::WriterFailed(_))
    ));
}

#[test]
fn handles_and_waits_cross_threads_and_tasks() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(StoreConfig::new(dir.path().join("pool.db"))).unwrap();
    send_sync(&store);
    send(store.wait_durable(Ticket(1)));
}

// ---- the hot path allocates nothing ----

fn record_share_allocates_nothing(durability: Durability) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(config(&path, durability, Duration::from_millis(2))).unwrap();
    let w = store.worker("w").unwrap();
    // Warm-up: the first lock, the first send, the writer's first batches.
    let mut last = Ticket(0);
    for i in 0..1000 {
        last = store.record_share(share(w, i)).unwrap();
    }
    wait(&store, last);

    let before = testkit::alloc::thread_allocs();
    let mut ok = 0u64;
    for i in 1000..21_000 {
        if store.record_share(share(w, i)).is_ok() {
            ok += 1;
        }
        let _ = store.is_durable(Ticket(i));
    }
    let allocations = testkit::alloc::thread_allocs() - before;
    assert_eq!(ok, 20_000);
    assert_eq!(
        allocations, 0,
        "{durability}: {allocations} allocations in 20000 record_share calls"
    );
    store.close().unwrap();
}

#[test]
fn record_share_allocates_nothing_batched() {
    record_share_allocates_nothing(Durability::Batched);
}

#[test]
fn record_share_allocates_nothing_off() {
    record_share_allocates_nothing(Durability::Off);
}

// ---- a killed process loses no acknowledged share ----

const CRASH_CHILD: &str = "POOL_STORE_CRASH_CHILD";
const CRASH_SELF_KILL: &str = "POOL_STORE_CRASH_SELF_KILL";

/// The child side of the crash test: records shares at a steady pace (so that commits are small
/// and frequent, and a kill can land at any point of one) and prints each ticket once it is
/// durable, the moment a pool would acknowledge the share, until it is killed. Does nothing
/// when run as an ordinary test.
#[test]
fn crash_child() {
    let Some(path) = std::env::var_os(CRASH_CHILD) else {
        return;
    };
    let store = Store::open(config(
        Path::new(&path),
        Durability::Batched,
        Duration::from_millis(2),
    ))
    .unwrap();
    let w = store.worker("crash").unwrap();
    // Set: kill this process right after acknowledging that many shares, the worst moment.
    let self_kill: Option<usize> = std::env::var(CRASH_SELF_KILL)
        .ok()
        .map(|n| n.parse().unwrap());
    let mut acknowledged = 0usize;
    let mut out = std::io::stdout().lock();
    let mut pending = VecDeque::new();
    // Shares of earlier (killed) runs on the file have their own numbers: go on after them.
    let mut i = store.stats().committed_ticket << 20;
    loop {
        for _ in 0..32 {
            match store.record_share(share(w, i)) {
                Ok(t) => {
                    pending.push_back((t, i));
                    i += 1;
                }
                Err(StoreError::QueueFull) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let mut printed = false;
        while let Some(&(t, n)) = pending.front() {
            if !store.is_durable(t) {
                break;
            }
            let hash = primitives::hex::encode(&hash_of(n));
            writeln!(out, "durable {} {hash}", t.0).unwrap();
            pending.pop_front();
            acknowledged += 1;
            printed = true;
        }
        if printed {
            out.flush().unwrap();
            if self_kill.is_some_and(|n| acknowledged >= n) {
                // SAFETY: kill(2) on our own pid; no memory is involved.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// How the child dies.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// SIGKILL from this process after a while: wherever the child happens to be.
    After(Duration),
    /// SIGKILL from the child itself right after it acknowledged this many shares: the moment
    /// an acknowledgement that ran ahead of its commit would be lost.
    SelfAfterAcks(usize),
}

/// Runs the child on `path` until it is killed, and returns the lines it printed
/// ("durable TICKET HASH"; the last may be cut off).
fn run_child_and_kill(path: &Path, kill: Kill) -> Vec<String> {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "crash_child",
            "--exact",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CRASH_CHILD, path);
    if let Kill::SelfAfterAcks(n) = kill {
        command.env(CRASH_SELF_KILL, n.to_string());
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("re-run this test binary as the child");
    let stdout = child.stdout.take().unwrap();
    // Read everything as it comes, so the child never waits on a full pipe.
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines() {
            match line {
                Ok(line) if line.starts_with("durable ") => lines.push(line),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        lines
    });
    if let Kill::After(run_for) = kill {
        std::thread::sleep(run_for);
        assert!(
            child.try_wait().unwrap().is_none(),
            "the child stopped on its own"
        );
        child.kill().expect("SIGKILL"); // std's Child::kill sends SIGKILL on Unix
    }
    let status = child.wait().unwrap();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child died of {status}"
    );
    reader.join().unwrap()
}

#[test]
fn a_killed_process_loses_no_acknowledged_share() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("crash.db");
    let mut acknowledged = 0;
    // Kills at unrelated moments and right after an acknowledgement, each run reopening the
    // file the last one left.
    for round in 0..6u32 {
        let jitter = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let kill = if round % 2 == 0 {
            let ms = 300 + u64::from(jitter % 300_000_000) / 1_000_000;
            Kill::After(Duration::from_millis(ms))
        } else {
            Kill::SelfAfterAcks(2000 + jitter as usize % 3000)
        };
        let lines = run_child_and_kill(&path, kill);

        let in_file: HashMap<u64, [u8; 32]> = from_file(&path, |s| (s.ticket.0, s.hash));
        let mut checked = 0;
        for line in &lines {
            let mut parts = line.split(' ').skip(1);
            let (Some(t), Some(hash)) = (parts.next(), parts.next()) else {
                continue; // cut off by the kill
            };
            let (Ok(t), Ok(hash)) = (t.parse::<u64>(), primitives::hex::decode(hash)) else {
                continue;
            };
            if hash.len() != 32 {
                continue;
            }
            let stored = in_file.get(&t).unwrap_or_else(|| {
                panic!("round {round} ({kill:?}): acknowledged share {t} is not in the file")
            });
            assert_eq!(&stored[..], &hash[..], "share {t} stored with another hash");
            checked += 1;
        }
        assert!(checked + 1 >= lines.len());
        assert!(
            checked >= 100,
            "round {round}: the child acknowledged only {checked} shares ({kill:?})"
        );
        acknowledged += checked;
    }
    eprintln!("crash test: {acknowledged} acknowledged shares over 6 kills, all in the file");
}

/// Memory keeps a bounded number of worker names; the rest stay in the file, and a name that
/// comes back after leaving memory, or after a restart, gets the key it had, and its shares are
/// stored under it.
#[test]
fn worker_names_beyond_the_memory_bound_keep_their_keys() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let bounded = || StoreConfig {
        worker_cache: 8,
        ..config(&path, Durability::Batched, Duration::from_millis(1))
    };
    let store = Store::open(bounded()).unwrap();
    let names: Vec<String> = (0..300).map(|i| format!("farm.rig{i}")).collect();
    let mut keys = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let key = store.worker(name).unwrap();
        // A share under each key makes it durable with its name before the next one comes.
        wait(&store, store.record_share(share(key, i as u64)).unwrap());
        keys.push(key);
        assert!(
            store.worker_names_in_memory() <= 8,
            "{} names in memory after {}",
            store.worker_names_in_memory(),
            i + 1
        );
    }
    let distinct: std::collections::HashSet<_> = keys.iter().collect();
    assert_eq!(distinct.len(), names.len(), "one key per name");
    // Back from the file, in an order that keeps none of them in memory for long.
    for (name, key) in names.iter().zip(&keys).rev().step_by(7) {
        assert_eq!(store.worker(name).unwrap(), *key, "{name}");
    }
    let late = store.worker(&names[3]).unwrap();
    wait(&store, store.record_share(share(late, 1000)).unwrap());
    store.close().unwrap();

    let store = Store::open(bounded()).unwrap();
    assert!(store.worker_names_in_memory() <= 8);
    for (name, key) in names.iter().zip(&keys).step_by(11) {
        assert_eq!(store.worker(name).unwrap(), *key, "{name} after a restart");
    }
    let new = store.worker("farm.new").unwrap();
    assert!(keys.iter().all(|k| *k < new), "a new name gets a new key");
    wait(&store, store.record_share(share(new, 1001)).unwrap());
    store.close().unwrap();

    let stored = StoreReader::open(&path).unwrap().shares().unwrap();
    assert_eq!(stored.len(), names.len() + 2);
    for s in &stored[..names.len()] {
        let i = (s.time_ms - 1_760_000_000_000) as usize;
        assert_eq!(s.worker, names[i]);
    }
    assert_eq!(stored[names.len()].worker, names[3]);
    assert_eq!(stored[names.len() + 1].worker, "farm.new");
}

/// Worker totals carried from earlier runs are kept for the names memory holds only: those
/// with the latest shares, however old their keys.
#[test]
fn carried_worker_totals_are_bounded_by_the_worker_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pool.db");
    let store = Store::open(config(&path, Durability::Batched, Duration::ZERO)).unwrap();
    let mut first = None;
    for i in 0..50 {
        let key = store.worker(&format!("w{i}")).unwrap();
        first.get_or_insert(key);
        wait(&store, store.record_share(share(key, i)).unwrap());
    }
    // The oldest name mines again last: it is among the most recently used.
    wait(
        &store,
        store.record_share(share(first.unwrap(), 50)).unwrap(),
    );
    store.close().unwrap();
    let store = Store::open(StoreConfig {
        worker_cache: 10,
        ..config(&path, Durability::Batched, Duration::ZERO)
    })
    .unwrap();
    let mut totals: Vec<String> = store
        .take_worker_totals()
        .into_iter()
        .map(|(name, n, _)| {
            assert_eq!(n, if &*name == "w0" { 2 } else { 1 });
            name.into()
        })
        .collect();
    totals.sort();
    let mut recent: Vec<String> = std::iter::once(0)
        .chain(41..50)
        .map(|i| format!("w{i}"))
        .collect();
    recent.sort();
    assert_eq!(totals, recent, "the ten most recently used names' totals");
    // w0's key is the oldest; it keeps it.
    assert_eq!(store.worker("w0").unwrap(), first.unwrap());
}
