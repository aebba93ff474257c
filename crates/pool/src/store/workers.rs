//! Worker names to keys, with a bounded number of names in memory.
//!
//! Any miner can name a new worker (a farm has thousands; an attacker, as many as it likes), and
//! every name stays in the file for the history of shares. Memory keeps at most the configured
//! number ([`super::StoreConfig::worker_cache`]) in two generations: names go into the young
//! one; when it is half the bound, the old generation leaves memory and the young one becomes
//! the old. A name found in the old generation moves back to the young one, so a name in use
//! stays (a worker's connections hold their key; only a new authorization looks it up). A name
//! that is not in memory is looked up in the file before it gets a new key, so a name keeps its
//! key however long it was away.
//!
//! A name whose key the writer has not committed yet is never dropped: the file could not give
//! it back, and a second key for the same name would break the name's uniqueness in the file.
//! It moves to the young generation instead, and leaves with a later turn once committed. While
//! half the bound or more are uncommitted (a writer that keeps failing), the generations do not
//! turn: a turn would only carry them all over again, at a cost that grows with them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OptionalExtension};

use super::StoreError;

pub(super) struct WorkerNames {
    young: HashMap<Box<str>, i64>,
    old: HashMap<Box<str>, i64>,
    /// The young generation's size at which the generations turn (half the bound).
    half: usize,
    /// The key the next new name gets.
    next: i64,
    /// The file holds names that memory does not (some were not loaded at open, or have left
    /// since): a name not in memory must be looked up there before it gets a new key.
    partial: bool,
    /// Opened with the store, so that it reads the file the writer writes even if another
    /// one is put at its path later.
    reader: Connection,
    path: PathBuf,
}

impl WorkerNames {
    /// `loaded`: the names read at open, most recently used first (at most the bound);
    /// `partial`: the file holds more; `next`: the key after the highest in the file; `reader`:
    /// a read-only connection to the store's file.
    pub(crate) fn new(
        loaded: Vec<(Box<str>, i64)>,
        partial: bool,
        bound: usize,
        next: i64,
        reader: Connection,
        path: &Path,
    ) -> WorkerNames {
        let half = (bound / 2).max(1);
        let mut names = WorkerNames {
            young: HashMap::new(),
            old: HashMap::new(),
            half,
            next,
            partial,
            reader,
            path: path.to_owned(),
        };
        // Every loaded name is committed: the most recently used half young, the rest old.
        let mut loaded = loaded.into_iter();
        names.young.extend(loaded.by_ref().take(half));
        names.old.extend(loaded.by_ref().take(half));
        names.partial |= loaded.next().is_some();
        names
    }

    /// The key of `name` if it has one, from memory or else the file; `committed`: every key
    /// up to this one is in the file.
    pub(crate) fn find(&mut self, name: &str, committed: i64) -> Result<Option<i64>, StoreError> {
        if let Some(&key) = self.young.get(name) {
            return Ok(Some(key));
        }
        if let Some((name, key)) = self.old.remove_entry(name) {
            self.put(name, key, committed);
            return Ok(Some(key));
        }
        if !self.partial {
            return Ok(None);
        }
        let Some(key) = self.read(name)? else {
            return Ok(None);
        };
        self.put(name.into(), key, committed);
        Ok(Some(key))
    }

    /// The key a new name gets; call [`WorkerNames::insert`] once it is queued.
    pub(crate) fn next_key(&self) -> i64 {
        self.next
    }

    /// Keeps a new name under the key [`WorkerNames::next_key`] gave.
    pub(crate) fn insert(&mut self, name: &str, key: i64, committed: i64) {
        debug_assert_eq!(key, self.next);
        self.next = key + 1;
        self.put(name.into(), key, committed);
    }

    /// Names in memory.
    pub(crate) fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    fn put(&mut self, name: Box<str>, key: i64, committed: i64) {
        self.young.insert(name, key);
        // Keys are handed out in order: those after `committed` are the uncommitted ones.
        let uncommitted = (self.next - 1).saturating_sub(committed).max(0);
        if self.young.len() >= self.half && (uncommitted as usize) < self.half {
            self.turn(committed);
        }
    }

    /// The old generation leaves memory (except names not yet committed) and the young one
    /// becomes the old.
    fn turn(&mut self, committed: i64) {
        let leaving = std::mem::replace(&mut self.old, std::mem::take(&mut self.young));
        for (name, key) in leaving {
            if key > committed {
                self.young.insert(name, key);
            } else {
                self.partial = true;
            }
        }
    }

    fn read(&mut self, name: &str) -> Result<Option<i64>, StoreError> {
        let what = "looking a worker name up";
        self.reader
            .prepare_cached("SELECT id FROM worker WHERE name = ?1")
            .and_then(|mut st| st.query_row([name], |row| row.get(0)).optional())
            .map_err(|source| StoreError::Read {
                path: self.path.clone(),
                what,
                source,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over an empty in-memory database: a lookup in the file would find nothing.
    fn names(bound: usize) -> WorkerNames {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch("CREATE TABLE worker (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
            .unwrap();
        WorkerNames::new(Vec::new(), false, bound, 1, db, Path::new(":memory:"))
    }

    fn add(w: &mut WorkerNames, name: &str, committed: i64) -> i64 {
        let key = w.next_key();
        w.insert(name, key, committed);
        key
    }

    #[test]
    fn memory_holds_at_most_the_bound() {
        let mut w = names(8);
        for i in 0..1000 {
            add(&mut w, &format!("w{i}"), i64::MAX);
            assert!(w.len() <= 8, "{} names after {i}", w.len());
        }
        assert!(w.partial);
    }

    #[test]
    fn a_name_in_use_stays_in_memory() {
        let mut w = names(8);
        let kept = add(&mut w, "kept", i64::MAX);
        for i in 0..100 {
            add(&mut w, &format!("w{i}"), i64::MAX);
            // Found in memory every time (the file is empty: it could not give it back).
            assert_eq!(w.find("kept", i64::MAX).unwrap(), Some(kept));
        }
    }

    #[test]
    fn loaded_names_fill_both_generations_most_recently_used_young() {
        let db = Connection::open_in_memory().unwrap();
        let loaded: Vec<(Box<str>, i64)> = (1..=10).map(|k| (format!("w{k}").into(), k)).collect();
        let mut w = WorkerNames::new(loaded, false, 8, 11, db, Path::new(":memory:"));
        assert_eq!(w.len(), 8);
        assert!(w.partial, "two names did not fit");
        assert!(w.young.contains_key("w1") && w.old.contains_key("w8"));
        assert_eq!(w.find("w1", i64::MAX).unwrap(), Some(1));
    }

    #[test]
    fn an_uncommitted_name_never_leaves_memory() {
        let mut w = names(4);
        let first = add(&mut w, "first", 0);
        for i in 0..50 {
            add(&mut w, &format!("w{i}"), 0);
        }
        // Nothing committed: everything is still here (the file could not give it back), and
        // the generations stopped turning once half the bound was uncommitted.
        assert_eq!(w.len(), 51);
        assert_eq!(w.find("first", 0).unwrap(), Some(first));
        // Once committed, the next turns take memory back to the bound.
        for i in 0..4 {
            add(&mut w, &format!("x{i}"), i64::MAX);
        }
        assert!(w.len() <= 4, "{}", w.len());
    }
}
