//! What can go wrong with the share store, each error saying which file and which step.

use std::path::PathBuf;
use std::sync::Arc;

/// A share-store failure: opening, writing or reading the SQLite file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The configuration cannot work (a zero-sized queue, say).
    #[error("share store configuration: {0}")]
    Config(&'static str),
    /// SQLite could not open or create the file: a missing directory, no write permission, not
    /// a database.
    #[error(
        "opening the share store {path}: {source} (is its directory there and writable by this user?)"
    )]
    Open {
        /// The store's file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A step of preparing an opened file failed: a pragma, the schema, the resume state.
    #[error("preparing the share store {path}: {what}: {source}")]
    Setup {
        /// The store's file.
        path: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file was written by a newer stratumlab whose schema this build does not know.
    #[error(
        "the share store {path} has schema version {found}, newer than this build's {known}: \
         use a newer stratumlab or another file"
    )]
    SchemaTooNew {
        /// The store's file.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// The newest schema version this build knows.
        known: i64,
    },
    /// SQLite refused write-ahead logging (some network file systems cannot share memory).
    #[error(
        "the share store {path} stayed in journal mode {mode:?} instead of WAL: put it on a local \
         file system"
    )]
    NotWal {
        /// The store's file.
        path: PathBuf,
        /// The journal mode SQLite reported instead.
        mode: String,
    },
    /// The OS refused to start the writer thread.
    #[error("starting the share store's writer thread: {0}")]
    Spawn(#[source] std::io::Error),
    /// The writer is behind and the queue holds `queue_capacity` records: back off and retry
    /// (a pool answers the share as "busy" or slows the miner down). Nothing was recorded.
    #[error("the share store's queue is full (its writer is behind): back off and retry")]
    QueueFull,
    /// The worker key was not handed out by [`super::Store::worker`].
    #[error("worker key {0} was not issued by this share store")]
    UnknownWorker(i64),
    /// The writer cannot write (disk full, I/O error, a locked or removed file) and retries
    /// with backoff: this share was not recorded and must not be acknowledged; records taken
    /// before the failure are written when a retry succeeds.
    #[error("the share store cannot write and is retrying: {0}")]
    Failing(Arc<str>),
    /// The store was closed; nothing more is recorded.
    #[error("the share store is closed")]
    Closed,
    /// The writer could not write what it held when the store was closed, and stopped: nothing
    /// after the last durable ticket was stored, and nothing more will be.
    #[error("the share store's writer stopped after an error, nothing more is stored: {0}")]
    WriterFailed(Arc<str>),
    /// A query of [`super::StoreReader`] failed.
    #[error("reading the share store {path}: {what}: {source}")]
    Read {
        /// The store's file.
        path: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored value is not what this build writes (a hash that is not 32 bytes, say).
    #[error("reading the share store {path}: {what}")]
    Corrupt {
        /// The store's file.
        path: PathBuf,
        /// Which value, and what is wrong with it.
        what: String,
    },
}

/// An error of the writer thread.
#[derive(Debug, thiserror::Error)]
pub(super) enum WriteError {
    /// The step, and SQLite's complaint.
    #[error("{what}: {source}")]
    Sql {
        /// The step that failed.
        what: &'static str,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// SQLite would go on writing to the open file after it was unlinked (or renamed away), and
    /// nothing written then would be found at the path again.
    #[error(
        "the file is no longer at its path (removed or replaced): put it back, or restart the pool"
    )]
    FileGone,
}

/// Adds the step to a SQLite result inside the writer.
pub(super) trait WriteContext<T> {
    fn during(self, what: &'static str) -> Result<T, WriteError>;
}

impl<T> WriteContext<T> for rusqlite::Result<T> {
    fn during(self, what: &'static str) -> Result<T, WriteError> {
        self.map_err(|source| WriteError::Sql { what, source })
    }
}
