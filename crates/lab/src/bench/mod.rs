//! Benches of one role at a fixed offered load (`stratumlab bench`): the role pinned to one core,
//! its load (simnet and a fleet) on another, CPU per accepted share and share latency over a
//! window after warm-up, against other software on the same load (docs/performance.md).
//!
//! They start roles as the lab does ([`crate::process`]), read the devices' events with the
//! events crate and summarize latency with the lab's own distributions ([`crate::stats`]).

mod pin;
pub mod sv2_pool;
mod table;
mod window;

pub use window::Window;

use std::path::PathBuf;

/// Why a bench stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A role did not start or did not become ready.
    #[error(transparent)]
    Process(#[from] crate::process::ProcessError),
    /// A pinned third-party program is missing or the wrong version.
    #[error(transparent)]
    ThirdParty(#[from] crate::third_party::ThirdPartyError),
    /// A file could not be written or read.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A program the bench runs is not where it looks.
    #[error("{program} not found at {path}: {hint}")]
    Missing {
        /// What it is.
        program: &'static str,
        /// Where it looked.
        path: PathBuf,
        /// How to get it.
        hint: &'static str,
    },
    /// A row did not measure what it must (devices not ready, nothing accepted, a role failed).
    #[error("{row}: {why}")]
    Row {
        /// The row's label and offered load.
        row: String,
        /// What went wrong.
        why: String,
    },
    /// The options contradict each other.
    #[error("{0}")]
    Options(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}
