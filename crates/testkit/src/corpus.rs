//! A crate's committed fuzz corpus, as its stable tests use it: every input goes through the
//! same function the fuzz target calls (so a fixed crash stays fixed and CI needs no nightly),
//! and the seed inputs a corpus started from are written by an ignored test.

use std::fmt::Display;
use std::path::{Path, PathBuf};

/// The committed corpus of `target` in the crate whose code names it: [`Corpus::of`] with that
/// crate's manifest directory (`env!` expands where the macro is used).
#[macro_export]
macro_rules! corpus {
    ($target:expr) => {
        $crate::Corpus::of(env!("CARGO_MANIFEST_DIR"), $target)
    };
}

/// One `#[test]` per line `name: "target", min, run;`, replaying the calling crate's committed
/// corpus of `target` through `run` ([`Corpus::replay`], at least `min` inputs).
#[macro_export]
macro_rules! replay_corpora {
    ($($name:ident: $target:literal, $min:literal, $run:expr;)+) => {
        $(
            #[test]
            fn $name() {
                $crate::corpus!($target).replay($min, $run);
            }
        )+
    };
}

/// The committed corpus of one fuzz target: `<crate>/fuzz/corpus/<target>`.
#[derive(Clone, Debug)]
pub struct Corpus {
    dir: PathBuf,
}

impl Corpus {
    /// The corpus of `target` in the crate at `manifest_dir` (pass
    /// `env!("CARGO_MANIFEST_DIR")`).
    pub fn of(manifest_dir: &str, target: &str) -> Corpus {
        Corpus {
            dir: Path::new(manifest_dir).join("fuzz/corpus").join(target),
        }
    }

    /// The corpus's files in name order; hidden files are not inputs.
    ///
    /// # Panics
    ///
    /// If the directory cannot be read: the corpus is committed, so that is a broken checkout.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .unwrap_or_else(|e| panic!("the committed corpus {}: {e}", self.dir.display()))
            .map(|e| e.expect("a corpus entry").path())
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        files.sort();
        files
    }

    /// Runs every input through `run`, after checking the corpus holds at least `min` of them.
    /// Each file's path is printed before it runs, so a panic names its input.
    pub fn replay(&self, min: usize, run: impl Fn(&[u8])) {
        let files = self.files();
        assert!(
            files.len() >= min,
            "{} has {} files, fewer than {min}",
            self.dir.display(),
            files.len()
        );
        for f in &files {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            eprintln!("{}", f.display());
            run(&data);
        }
    }

    /// Writes each seed under its name (by convention `seed-…`, so that the fuzzer's own
    /// finds, named by their hash, stay apart), creating the directory if need be.
    pub fn write_seeds<N: Display>(&self, seeds: impl IntoIterator<Item = (N, Vec<u8>)>) {
        std::fs::create_dir_all(&self.dir)
            .unwrap_or_else(|e| panic!("{}: {e}", self.dir.display()));
        for (name, data) in seeds {
            let path = self.dir.join(name.to_string());
            std::fs::write(&path, data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_written_are_replayed_in_name_order_and_hidden_files_are_not() {
        let root = tempdir();
        let corpus = Corpus::of(root.to_str().unwrap(), "t");
        corpus.write_seeds([("seed-b", b"2".to_vec()), ("seed-a", b"1".to_vec())]);
        std::fs::write(root.join("fuzz/corpus/t/.gitkeep"), b"x").unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        corpus.replay(2, |d| seen.borrow_mut().push(d.to_vec()));
        assert_eq!(seen.into_inner(), [b"1".to_vec(), b"2".to_vec()]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    #[should_panic(expected = "fewer than 3")]
    fn a_corpus_smaller_than_its_floor_fails() {
        let root = tempdir();
        let corpus = Corpus::of(root.to_str().unwrap(), "t");
        corpus.write_seeds([("seed-a", Vec::new())]);
        corpus.replay(3, |_| {});
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "corpus-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }
}
