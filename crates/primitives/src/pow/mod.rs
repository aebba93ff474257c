//! Proof-of-work units: the 256-bit integer they are built on ([`U256`]), compact bits and the
//! target they expand to ([`CompactTarget`], [`Target`]), difficulty ([`Difficulty`]), work
//! (expected hashes, [`Work`]) and hash rate ([`HashRate`]).
//!
//! Each unit keeps its representation private to this module: a target is not a difficulty
//! and neither is a number, and the compiler says so. How they turn into each other is in
//! `convert.rs` alone.

mod convert;
mod difficulty;
mod target;
mod u256;
mod work;

pub use difficulty::{Difficulty, DifficultyError};
pub use target::{CompactError, CompactTarget, Target};
pub use u256::U256;
pub use work::{HashRate, Work};
