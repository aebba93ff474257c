//! Following the run's event files while the roles write them. A role's writer flushes every
//! quarter of a second, possibly in the middle of a record; the reader keeps a partial record
//! until the rest arrives (an [`EventReader`] at the end of a file reads on where it stopped).

use std::fs::File;
use std::path::PathBuf;

use events::{EventReader, ReadError};

use super::tracker::{LogRole, Observation, Tracker};

/// Events read per file per poll at most, so that one busy log cannot hold the caller long;
/// what is left is read on the next poll.
const MAX_EVENTS_PER_POLL: usize = 200_000;

struct Followed {
    role: LogRole,
    path: PathBuf,
    reader: Option<EventReader<File>>,
    /// The file cannot be read (corrupt): given up, said once.
    given_up: bool,
}

/// The event files of one trial, read as they grow.
#[derive(Default)]
pub struct Tail {
    files: Vec<Followed>,
}

impl Tail {
    /// Follows `files`, opening each once it exists.
    pub fn new(files: impl IntoIterator<Item = (LogRole, PathBuf)>) -> Tail {
        Tail {
            files: files
                .into_iter()
                .map(|(role, path)| Followed {
                    role,
                    path,
                    reader: None,
                    given_up: false,
                })
                .collect(),
        }
    }

    /// Reads what the files gained since the last poll into `tracker`. A file not yet created
    /// (or whose header is not yet whole) is tried again on the next poll.
    pub fn poll(&mut self, tracker: &mut Tracker, out: &mut Vec<Observation>) {
        for (i, f) in self.files.iter_mut().enumerate() {
            if f.given_up {
                continue;
            }
            if f.reader.is_none() {
                match EventReader::open(&f.path) {
                    Ok(r) => f.reader = Some(r),
                    Err(ReadError::Open { .. } | ReadError::TruncatedHeader { .. }) => continue,
                    Err(e) => {
                        tracing::warn!(path = %f.path.display(), error = %e, "live view: events file unreadable");
                        f.given_up = true;
                        continue;
                    }
                }
            }
            let reader = f.reader.as_mut().expect("opened above");
            for event in reader.by_ref().take(MAX_EVENTS_PER_POLL) {
                match event {
                    Ok(e) => tracker.on_event(i, &f.role, e.ts_ns, &e.kind, out),
                    Err(e) => {
                        tracing::warn!(path = %f.path.display(), error = %e, "live view: events file unreadable");
                        f.given_up = true;
                        break;
                    }
                }
            }
        }
    }
}
