//! Mining math without I/O: the units (compact bits, target, difficulty, work, hash rate), the
//! coinbase and its extranonce split, merkle branches, the block header, and share checks in
//! the Stratum V1 and Stratum V2 forms.
//!
//! Byte order convention: hashes are kept in internal order (as SHA-256d outputs them and as
//! headers contain them); `Display` prints them reversed, as RPC and explorers do.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod coinbase;
pub mod compact_size;
pub mod fuzz_input;
pub mod hash;
pub mod header;
pub mod hex;
pub mod merkle;
pub mod pow;
pub mod share;
pub mod time;

pub use coinbase::{CoinbaseInfo, CoinbaseParts, CoinbaseSpec, Payout};
pub use hash::{sha256d, CoinbaseMidstate, Hash256, HeaderMidstate, PrefixMidstate};
pub use header::Header;
pub use merkle::{coinbase_merkle_branch, merkle_root, merkle_root_from_branch, merkle_step};
pub use pow::{CompactTarget, Difficulty, HashRate, Target, Work, U256};
pub use share::{ExtendedShare, JobHeader, MinerChoice, ShareCheck, StandardShare, Sv1Share};
pub use time::Timestamp;

/// Re-exported so that every crate uses the one `bitcoin` version the workspace pins.
pub use bitcoin;
