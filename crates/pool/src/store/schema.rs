//! The file's tables, their versions, and the connection settings each durability needs.
//!
//! The schema version is SQLite's `user_version`. `MIGRATIONS[i]` brings a file from version
//! `i` to `i + 1`, each in its own transaction, so a file of any older version is brought up to
//! date when the store opens it, and a file of a newer version is refused rather than misread.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::{Durability, StoreError};

/// The schema version this build writes and reads.
pub(crate) const VERSION: i64 = 2;

const MIGRATIONS: &[&str] = &[
    // 0 -> 1: workers, shares, blocks and the node's answers.
    //
    // Integers the pool holds as u64 (job ids, unix milliseconds) are stored as the i64 of the
    // same bits. `seq` is the ticket the store handed out for the record: tickets are unique
    // across the three record tables and across runs on the same file.
    "CREATE TABLE worker (
         id   INTEGER PRIMARY KEY,
         name TEXT NOT NULL UNIQUE
     );
     CREATE TABLE share (
         seq        INTEGER PRIMARY KEY,
         worker     INTEGER NOT NULL REFERENCES worker(id),
         difficulty REAL NOT NULL,
         job_id     INTEGER NOT NULL,
         time_ms    INTEGER NOT NULL,
         hash       BLOB NOT NULL
     );
     CREATE TABLE block (
         seq     INTEGER PRIMARY KEY,
         hash    BLOB NOT NULL UNIQUE,
         height  INTEGER NOT NULL,
         worker  INTEGER NOT NULL REFERENCES worker(id),
         job_id  INTEGER NOT NULL,
         time_ms INTEGER NOT NULL,
         block   BLOB NOT NULL
     );
     CREATE TABLE block_result (
         seq     INTEGER PRIMARY KEY,
         hash    BLOB NOT NULL,
         result  TEXT NOT NULL,
         time_ms INTEGER NOT NULL
     );
     CREATE INDEX block_result_by_hash ON block_result(hash, seq);",
    // 1 -> 2: job declaration tokens that set a job, so that none is accepted twice across
    // restarts.
    "CREATE TABLE used_token (
         seq        INTEGER PRIMARY KEY,
         id         INTEGER NOT NULL,
         expires_ms INTEGER NOT NULL,
         time_ms    INTEGER NOT NULL,
         UNIQUE (id, expires_ms)
     );",
];

/// How long a statement waits for another connection's lock before failing. The store expects
/// to be the file's only writer; readers never block it in WAL mode.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The writer's page cache, which SQLite fills as the file grows and keeps full. The writer's
/// sustained rate (`cargo bench -p pool --bench store -- store/durable`, files of 5-8 million
/// shares) per share: 1.59 us with SQLite's default 2 MiB, 1.41 us with 4 MiB, 1.10 us with 8 MiB
/// and 1.17-1.21 us with 16 MiB; past 8 MiB a larger cache buys nothing but resident memory
/// that grows for as long as the file does (docs/performance.md, the soak).
const PAGE_CACHE_KIB: i64 = 8 << 10;

/// The page size of the files the store creates (SQLite's default).
const PAGE_SIZE: usize = 4096;

/// Sets the page cache's memory aside, resident, before SQLite starts in this process: left to
/// itself SQLite allocates a page at a time as the file grows, so the process's memory grows
/// for as long as the file does up to [`PAGE_CACHE_KIB`] (minutes at a busy pool's share rate,
/// tens of minutes at a quiet one) and the allocator's arenas fragment around the pages. With
/// the cache's slots taken up front the pool's footprint is what it will be from the start
/// (docs/operations.md, "Memory"). Only the first SQLite connection of a process can set it
/// (SQLite refuses once started, e.g. after a test opened another store); then pages come from
/// the heap as before.
fn reserve_page_cache() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use rusqlite::ffi;
        use std::ffi::{c_int, c_void};
        let mut header: c_int = 0;
        // SAFETY: SQLITE_CONFIG_PCACHE_HDRSZ takes one `int *` and writes the bytes each page
        // slot needs beside the page.
        let rc = unsafe {
            ffi::sqlite3_config(ffi::SQLITE_CONFIG_PCACHE_HDRSZ, &mut header as *mut c_int)
        };
        if rc != ffi::SQLITE_OK || header <= 0 {
            return;
        }
        let slot = (PAGE_SIZE + header as usize).next_multiple_of(8);
        // The writer's cache, and an eighth more for the readers (the names reader, the API's),
        // which draw from the same slots.
        let slots = (PAGE_CACHE_KIB as usize * 1024) / PAGE_SIZE * 9 / 8;
        // Filled with a byte other than zero, so that every page of it is touched now (zeroed
        // memory could come from the kernel untouched, and be made resident later).
        let mut memory = vec![0xa5u64; slot * slots / 8].into_boxed_slice();
        // SAFETY: SQLITE_CONFIG_PAGECACHE takes (8-byte aligned memory, slot size, slots) and
        // keeps the memory for the life of the process: once taken it is leaked, never freed.
        // SQLite checks that it has not started, and returns SQLITE_MISUSE without keeping the
        // pointer if it has.
        let rc = unsafe {
            ffi::sqlite3_config(
                ffi::SQLITE_CONFIG_PAGECACHE,
                memory.as_mut_ptr() as *mut c_void,
                slot as c_int,
                slots as c_int,
            )
        };
        if rc == ffi::SQLITE_OK {
            Box::leak(memory);
            tracing::debug!(slots, slot_bytes = slot, "store page cache reserved");
        } else {
            tracing::debug!(
                rc,
                "SQLite already started: the page cache stays on the heap"
            );
        }
    });
}

/// The WAL file is truncated back to this size after a checkpoint that could reset it.
const WAL_SIZE_LIMIT: i64 = 64 << 20;

/// Opens (creating it if needed) the file for the writer: WAL journaling, the synchronous level
/// of `durability`, the schema brought to [`VERSION`].
pub(super) fn open_for_writing(
    path: &Path,
    durability: Durability,
) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    reserve_page_cache();
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    let setup = |what| {
        move |source| StoreError::Setup {
            path: path.to_owned(),
            what,
            source,
        }
    };
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(setup("setting the busy timeout"))?;
    // The first statement that touches the file: a path that is not a database fails here.
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(setup("switching to WAL journaling"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::NotWal {
            path: path.to_owned(),
            mode,
        });
    }
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .map_err(setup("limiting the WAL file's size"))?;
    set_synchronous(&conn, durability.synchronous()).map_err(setup("setting synchronous"))?;
    conn.pragma_update(None, "cache_size", -PAGE_CACHE_KIB)
        .map_err(setup("sizing the page cache"))?;
    migrate(&conn, path)?;
    Ok(conn)
}

/// Opens the file read-only and checks that this build can read its schema.
pub(super) fn open_for_reading(path: &Path) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|source| StoreError::Open {
        path: path.to_owned(),
        source,
    })?;
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|source| StoreError::Setup {
            path: path.to_owned(),
            what: "setting the busy timeout",
            source,
        })?;
    let found = user_version(&conn).map_err(|source| StoreError::Read {
        path: path.to_owned(),
        what: "reading the schema version",
        source,
    })?;
    if found > VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_owned(),
            found,
            known: VERSION,
        });
    }
    if found < VERSION {
        // Older files are upgraded by the writer; a reader does not write.
        return Err(StoreError::Corrupt {
            path: path.to_owned(),
            what: format!(
                "schema version {found}: not a share store, or one not yet upgraded to version \
                 {VERSION} (open it with the pool once)"
            ),
        });
    }
    Ok(conn)
}

/// SQLite's `synchronous` levels the store uses. In WAL mode, FULL syncs the log at every
/// commit, which is what makes a commit durable; OFF leaves syncing to the operating system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Synchronous {
    Full,
    Off,
}

impl Durability {
    pub(super) fn synchronous(self) -> Synchronous {
        match self {
            Durability::Strict | Durability::Batched => Synchronous::Full,
            Durability::Off => Synchronous::Off,
        }
    }
}

/// Sets the level for the following commits; SQLite refuses to change it inside a transaction.
pub(super) fn set_synchronous(conn: &Connection, level: Synchronous) -> rusqlite::Result<()> {
    let value = match level {
        Synchronous::Full => "FULL",
        Synchronous::Off => "OFF",
    };
    conn.pragma_update(None, "synchronous", value)
}

fn user_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |row| row.get(0))
}

/// Brings the file to [`VERSION`]; returns the version it had.
fn migrate(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let setup = |what| {
        move |source| StoreError::Setup {
            path: path.to_owned(),
            what,
            source,
        }
    };
    let found = user_version(conn).map_err(setup("reading the schema version"))?;
    if found > VERSION {
        return Err(StoreError::SchemaTooNew {
            path: path.to_owned(),
            found,
            known: VERSION,
        });
    }
    for (from, sql) in MIGRATIONS.iter().enumerate().skip(found.max(0) as usize) {
        let to = from as i64 + 1;
        let step = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            let applied = conn
                .execute_batch(sql)
                .and_then(|()| conn.pragma_update(None, "user_version", to))
                .and_then(|()| conn.execute_batch("COMMIT"));
            if applied.is_err() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            applied
        };
        step().map_err(setup("upgrading the schema"))?;
        tracing::info!(path = %path.display(), from, to, "share store schema upgraded");
    }
    Ok(found)
}
