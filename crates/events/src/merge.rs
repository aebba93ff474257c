//! Many files as one time line: a k-way merge by timestamp.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::Read;

use crate::reader::{EventReader, ReadError};
use crate::schema::Event;

/// Merges readers into one stream ordered by `ts_ns`; ties go to the reader listed first. Each
/// item names its source by index into the vector given to [`merge`].
///
/// The order is exact when every file is sorted by time, which files written only through
/// `EventSink::emit` are; events written with older `emit_at` timestamps come out where their
/// file placed them. Holds one pending event per reader, whatever the files' sizes.
pub struct Merge<R = std::fs::File> {
    readers: Vec<EventReader<R>>,
    heads: Vec<Option<Event>>,
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    errors: VecDeque<(usize, ReadError)>,
}

/// An error from one of the merged readers, naming which.
#[derive(Debug, thiserror::Error)]
#[error("events source #{source_index}: {error}")]
pub struct MergeError {
    /// Index of the failing reader in the vector given to [`merge`].
    pub source_index: usize,
    /// What that reader failed with.
    #[source]
    pub error: ReadError,
}

/// Merges `readers` into one time line (see [`Merge`]).
pub fn merge<R: Read>(readers: Vec<EventReader<R>>) -> Merge<R> {
    let mut m = Merge {
        heads: vec![None; readers.len()],
        heap: BinaryHeap::with_capacity(readers.len()),
        errors: VecDeque::new(),
        readers,
    };
    for i in 0..m.readers.len() {
        m.advance(i);
    }
    m
}

impl<R: Read> Merge<R> {
    /// The readers, e.g. to see which files were truncated once the merge is done.
    pub fn readers(&self) -> &[EventReader<R>] {
        &self.readers
    }

    fn advance(&mut self, i: usize) {
        match self.readers[i].next() {
            Some(Ok(e)) => {
                self.heads[i] = Some(e);
                self.heap.push(Reverse((e.ts_ns, i)));
            }
            Some(Err(e)) => self.errors.push_back((i, e)),
            None => {}
        }
    }
}

impl<R: Read> Iterator for Merge<R> {
    type Item = Result<(usize, Event), MergeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some((source_index, error)) = self.errors.pop_front() {
            return Some(Err(MergeError {
                source_index,
                error,
            }));
        }
        let Reverse((_, i)) = self.heap.pop()?;
        let event = self.heads[i].take()?;
        self.advance(i);
        Some(Ok((i, event)))
    }
}
