//! The event sink every role emits through.
//!
//! Emitting encodes the event into the current buffer under a short lock; a background thread
//! writes full buffers to the file and hands them back for reuse. The buffers are allocated once,
//! so steady-state emission does not allocate, and their number is fixed, so memory is bounded:
//! when the writer falls behind and every buffer is in flight, `emit` waits for one (a stall, which
//! is counted) rather than drop an event. A partly filled buffer is written after at most one
//! flush interval, so a reader tailing a live file sees events promptly even at low rates.
//!
//! The timestamp of [`EventSink::emit`] is taken under the lock, so a file written only through
//! `emit` is sorted by time.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::now_ns;
use crate::encode::{encode_header, encode_record, MAX_ENCODED_RECORD};
use crate::schema::{EventKind, Header};

/// Buffering of an [`EventSink`].
#[derive(Clone, Copy, Debug)]
pub struct SinkOptions {
    /// A buffer is handed to the writer thread once it holds this many bytes.
    pub buffer_bytes: usize,
    /// Buffers in all, including the one being filled (at least 2). Memory use is about
    /// `buffers * buffer_bytes`.
    pub buffers: usize,
    /// Longest time an event waits in a partly filled buffer before it is written.
    pub flush_interval: Duration,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions {
            buffer_bytes: 64 * 1024,
            // Half a megabyte in flight rides out the writer thread being descheduled for a few
            // milliseconds on a busy host without stalling emitters.
            buffers: 8,
            // Each wake-up of the writer costs a role tens of microseconds on a shared VM,
            // about what a whole share costs the pool: at 50 ms the timer alone was 20 of them a
            // second, 4 µs of every share at 300 shares/s. Events are read after a run, or by
            // someone tailing a live file, for whom a quarter of a second is still prompt.
            flush_interval: Duration::from_millis(250),
        }
    }
}

/// Counters of a sink, cumulative since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SinkStats {
    /// Events passed to `emit`/`emit_at`.
    pub events_emitted: u64,
    /// Events the writer thread has written to the file.
    pub events_written: u64,
    /// Bytes written to the file, header included.
    pub bytes_written: u64,
    /// Emits (and flushes) that had to wait for a free buffer because the writer fell behind.
    pub stalls: u64,
    /// Total time spent in those waits.
    pub stall_ns: u64,
    /// Events that could not be written because the file failed (see the error `flush` returns).
    pub events_lost: u64,
}

/// Where events go: a file written by a background thread, or nowhere ([`EventSink::disabled`]).
///
/// Clones share the file. Usable from plain threads and async tasks alike; `emit` blocks only
/// while the writer is behind by all its buffers (backpressure). The file is flushed and the
/// writer thread joined when [`EventSink::finish`] is called on the last clone or the last clone is
/// dropped; a process that ends through `std::process::exit` runs no destructors, so roles call
/// `finish` (or drop their sinks) before exiting. After a crash the file holds everything up to
/// about one flush interval before it, possibly ending in a partial record.
#[derive(Clone, Default)]
pub struct EventSink {
    inner: Option<Arc<Handle>>,
}

impl EventSink {
    /// A sink that records nothing, for roles run without `--events`: emitting costs one branch.
    pub const fn disabled() -> Self {
        EventSink { inner: None }
    }

    /// Creates (or truncates) `path` and writes the file header for `role` and `config`.
    pub fn create(path: impl AsRef<Path>, role: &str, config: &str) -> io::Result<Self> {
        Self::create_with(path, role, config, SinkOptions::default())
    }

    /// [`EventSink::create`] with explicit buffering.
    pub fn create_with(
        path: impl AsRef<Path>,
        role: &str,
        config: &str,
        options: SinkOptions,
    ) -> io::Result<Self> {
        let path = path.as_ref();
        let with_path =
            |e: io::Error| io::Error::new(e.kind(), format!("events file {}: {e}", path.display()));
        let file = File::create(path).map_err(with_path)?;
        Self::from_writer(file, &Header::new(role, config), options).map_err(with_path)
    }

    /// A sink writing to any byte stream (a file, a pipe, a test's slow writer).
    pub fn from_writer(
        mut out: impl Write + Send + 'static,
        header: &Header,
        options: SinkOptions,
    ) -> io::Result<Self> {
        let mut head = Vec::new();
        encode_header(&mut head, header);
        // Written before returning so that a file that exists always starts with a header.
        out.write_all(&head)?;
        out.flush()?;

        let buffers = options.buffers.max(2);
        let threshold = options.buffer_bytes.max(1);
        // Room for one more record past the threshold, so encoding never grows a buffer.
        let capacity = threshold + MAX_ENCODED_RECORD;
        let core = Arc::new(Core {
            state: Mutex::new(State {
                current: Vec::with_capacity(capacity),
                current_events: 0,
                free: (1..buffers).map(|_| Vec::with_capacity(capacity)).collect(),
                queue: VecDeque::with_capacity(buffers),
                enqueued: 0,
                written: 0,
                shutdown: false,
                writer_gone: false,
                failed: None,
                stats: SinkStats {
                    bytes_written: head.len() as u64,
                    ..SinkStats::default()
                },
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            threshold,
            // A zero interval would turn the writer's idle wait into a spin.
            flush_interval: options.flush_interval.max(Duration::from_millis(1)),
        });
        let thread = std::thread::Builder::new()
            .name("events-writer".into())
            .spawn({
                let core = Arc::clone(&core);
                move || core.run_writer(out)
            })?;
        Ok(EventSink {
            inner: Some(Arc::new(Handle {
                core,
                thread: Mutex::new(Some(thread)),
            })),
        })
    }

    /// Whether events go anywhere: lets a caller skip computing fields only events need.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Records `kind` stamped with [`crate::now_ns`].
    #[inline]
    pub fn emit(&self, kind: impl Into<EventKind>) {
        if let Some(h) = &self.inner {
            h.core.push(None, &kind.into());
        }
    }

    /// Records `kind` with a timestamp the caller took (CLOCK_MONOTONIC ns), e.g. when bytes
    /// arrived. Files written this way are sorted only as far as callers' timestamps are.
    #[inline]
    pub fn emit_at(&self, ts_ns: u64, kind: impl Into<EventKind>) {
        if let Some(h) = &self.inner {
            h.core.push(Some(ts_ns), &kind.into());
        }
    }

    /// Writes everything emitted so far (by any clone) to the file, waiting for the writer.
    /// Fails if the file has failed; events emitted after the failure are counted as lost.
    pub fn flush(&self) -> io::Result<()> {
        match &self.inner {
            Some(h) => h.core.flush(),
            None => Ok(()),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> SinkStats {
        match &self.inner {
            Some(h) => h.core.lock().stats,
            None => SinkStats::default(),
        }
    }

    /// Flushes and, if this is the last clone, stops the writer thread and closes the file.
    /// Returns the counters, or the file's error if writing failed.
    pub fn finish(self) -> io::Result<SinkStats> {
        let Some(h) = self.inner else {
            return Ok(SinkStats::default());
        };
        let flushed = h.core.flush();
        let core = Arc::clone(&h.core);
        if let Ok(handle) = Arc::try_unwrap(h) {
            handle.stop();
        }
        flushed?;
        let st = core.lock();
        match &st.failed {
            Some(e) => Err(e.to_io()),
            None => Ok(st.stats),
        }
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

/// Owned by the clones of one sink: dropping the last one stops the writer.
struct Handle {
    core: Arc<Core>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Handle {
    fn stop(&self) {
        {
            let mut st = self.core.lock();
            st.shutdown = true;
        }
        self.core.work.notify_all();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            // A writer that panicked has already marked itself gone; nothing more to recover.
            let _ = t.join();
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Core {
    state: Mutex<State>,
    /// The writer waits here for buffers (or shutdown).
    work: Condvar,
    /// Emitters wait here for a free buffer, flushers for their buffers to be written.
    space: Condvar,
    threshold: usize,
    flush_interval: Duration,
}

struct State {
    /// The buffer being filled.
    current: Vec<u8>,
    current_events: u64,
    /// Empty buffers, ready to become `current`.
    free: Vec<Vec<u8>>,
    /// Full buffers waiting for the writer, oldest first, with their event counts.
    queue: VecDeque<(Vec<u8>, u64)>,
    /// Buffers handed to the writer so far, and buffers it has finished: a flush waits until the
    /// second reaches what the first was when it started.
    enqueued: u64,
    written: u64,
    shutdown: bool,
    writer_gone: bool,
    failed: Option<Failure>,
    stats: SinkStats,
}

/// The first write error, kept to report from every later flush (io::Error is not Clone).
struct Failure {
    kind: io::ErrorKind,
    message: String,
}

impl Failure {
    fn to_io(&self) -> io::Error {
        io::Error::new(
            self.kind,
            format!("writing events failed: {}", self.message),
        )
    }
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing under this lock can leave the state half-updated, so a poisoned lock (a panic
        // elsewhere while holding it) is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn push(&self, ts: Option<u64>, kind: &EventKind) {
        let mut st = self.lock();
        if st.current.len() >= self.threshold {
            st = self.hand_off(st);
        }
        // Taken under the lock so that the file is in timestamp order.
        let ts = ts.unwrap_or_else(now_ns);
        encode_record(&mut st.current, ts, kind);
        st.current_events += 1;
        st.stats.events_emitted += 1;
        if st.writer_gone {
            // Nothing will write this buffer again: count its events as lost rather than block.
            st.stats.events_lost += st.current_events;
            st.current.clear();
            st.current_events = 0;
        } else if st.current.len() >= self.threshold && !st.free.is_empty() {
            // Hand it over now, while a buffer is free, so the writer starts early; if none is
            // free the next emit waits for one.
            st = self.hand_off(st);
        }
        drop(st);
    }

    /// Queues the current buffer for the writer and replaces it with a free one, waiting (and
    /// counting a stall) when none is free.
    fn hand_off<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if st.free.is_empty() && !st.writer_gone {
            let start = now_ns();
            st.stats.stalls += 1;
            while st.free.is_empty() && !st.writer_gone {
                st = self.space.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.stats.stall_ns += now_ns().saturating_sub(start);
        }
        let Some(fresh) = st.free.pop() else {
            // The writer is gone and holds the other buffers: drop what cannot be written.
            st.stats.events_lost += st.current_events;
            st.current.clear();
            st.current_events = 0;
            return st;
        };
        let full = std::mem::replace(&mut st.current, fresh);
        let events = std::mem::take(&mut st.current_events);
        st.queue.push_back((full, events));
        st.enqueued += 1;
        self.work.notify_one();
        st
    }

    fn flush(&self) -> io::Result<()> {
        let mut st = self.lock();
        if !st.current.is_empty() {
            st = self.hand_off(st);
        }
        let target = st.enqueued;
        while st.written < target && !st.writer_gone {
            st = self.space.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(f) = &st.failed {
            return Err(f.to_io());
        }
        if st.written < target {
            return Err(io::Error::other("the events writer thread stopped"));
        }
        Ok(())
    }

    fn run_writer(&self, mut out: impl Write) {
        // Marks the writer gone however it ends, so that nobody waits for it forever.
        struct Gone<'a>(&'a Core);
        impl Drop for Gone<'_> {
            fn drop(&mut self) {
                self.0.lock().writer_gone = true;
                self.0.space.notify_all();
            }
        }
        let _gone = Gone(self);

        let mut st = self.lock();
        loop {
            if let Some((mut buf, events)) = st.queue.pop_front() {
                let skip = st.failed.is_some();
                drop(st);
                // After a failure the file may end in a partial buffer; writing more after it
                // would put garbage mid-file, so later buffers are dropped and counted instead.
                let result = if skip {
                    Ok(())
                } else {
                    out.write_all(&buf).and_then(|()| out.flush())
                };
                st = self.lock();
                match result {
                    Ok(()) if !skip => {
                        st.stats.events_written += events;
                        st.stats.bytes_written += buf.len() as u64;
                    }
                    Ok(()) => st.stats.events_lost += events,
                    Err(e) => {
                        st.stats.events_lost += events;
                        st.failed = Some(Failure {
                            kind: e.kind(),
                            message: e.to_string(),
                        });
                    }
                }
                buf.clear();
                st.free.push(buf);
                st.written += 1;
                self.space.notify_all();
                continue;
            }
            if st.shutdown {
                if st.current.is_empty() {
                    return;
                }
                let last = std::mem::take(&mut st.current);
                let events = std::mem::take(&mut st.current_events);
                st.queue.push_back((last, events));
                st.enqueued += 1;
                continue;
            }
            let (guard, timeout) = self
                .work
                .wait_timeout(st, self.flush_interval)
                .unwrap_or_else(|e| e.into_inner());
            st = guard;
            // A wake without a timeout means buffers were queued, and those carry everything
            // emitted before them; only an idle interval leaves events waiting in `current`.
            if timeout.timed_out() && st.queue.is_empty() && !st.current.is_empty() {
                if let Some(fresh) = st.free.pop() {
                    let part = std::mem::replace(&mut st.current, fresh);
                    let events = std::mem::take(&mut st.current_events);
                    st.queue.push_back((part, events));
                    st.enqueued += 1;
                }
            }
        }
    }
}
