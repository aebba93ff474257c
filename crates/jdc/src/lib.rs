//! The Job Declarator Client (spec section 6.2), the farm side of job declaration.
//!
//! The farm's devices (SV2 devices, or SV1 ones behind a translator) connect to the JDC as to
//! a pool: it embeds the pool's engine and SV2 front end ([`pool::service`]), fed by the farm's
//! own node over Template Distribution and paying the coinbase to the pool's payout output, so
//! a new template or tip reaches the devices without crossing the WAN. Around it:
//!
//! - [`declarer`]: tokens from the pool's JDS and one `DeclareMiningJob` per template, with the
//!   transactions the JDS lacks (Full-Template mode);
//! - [`pool_channel`]: the extended channel to the pool on which declared jobs are set
//!   (`SetCustomMiningJob`) and the devices' shares that meet the pool's target are submitted;
//! - [`coinbase`]: the template's coinbase in the three shapes those need;
//! - [`core`]: what ties them together (declared templates, the pool, fallback and rejoin,
//!   blocks pushed late), sans-IO;
//! - [`shell`]: the tokio tasks that drive the core;
//! - [`fuzz_support`]: what the fuzz target in `crates/jdc/fuzz` runs, so that the committed
//!   corpus replays on stable (`tests/fuzz_corpus.rs`).
//!
//! The sans-IO parts take messages in and give messages out; the shell owns the sockets.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod coinbase;
pub mod core;
pub mod declarer;
pub mod fallback;
pub mod fuzz_support;
pub mod pool_channel;
pub mod shell;
