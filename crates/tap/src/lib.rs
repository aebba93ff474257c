//! Link emulation and observation between two roles (docs/architecture.md, "tap").
//!
//! A tap is a TCP relay: clients connect to it, and it connects each to the upstream and relays
//! both ways while it
//!
//! - emulates the link: a one-way delay per direction, jitter that never reorders bytes, loss
//!   paid as the retransmission delay TCP would add, and a bandwidth cap shared by all
//!   connections ([`stream`], [`loss`], [`pipe`]);
//! - counts application bytes each way per connection (`LinkBytes` events) and measures the
//!   delay it actually applies (`LinkRtt`);
//! - reads Stratum V1 lines as they pass, without changing them, and reports jobs, submits and
//!   results ([`sv1_watch`]);
//! - with `sv2` set, terminates Stratum V2's Noise on both legs with its own keys, re-encrypts
//!   every frame unchanged under the same link emulation, and reports jobs, prev hashes,
//!   targets, shares and results ([`sv2_relay`], [`sv2_watch`]).
//!
//! "Up" is from the clients (devices) toward the upstream (pool), "down" the other way.
//!
//! The link model is sans-IO ([`Stream`], [`Pipe`], [`LossModel`], [`Sv1Watch`]): it takes
//! arrival times and byte counts and answers with release times, and is tested without
//! sockets. The shell ([`Tap`]) runs one tokio task per connection; release times are kept by
//! a dedicated timer thread ([`timer`]), because tokio's timer rounds to whole milliseconds,
//! and arrival times come from the kernel's receive stamps. Under CPU contention the tap's
//! threads can run at real-time priority ([`sched`]), as a kernel link emulator would.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use tap::{LinkConfig, Tap, TapConfig};
//!
//! let mut config = TapConfig::new("127.0.0.1:0".parse()?, "127.0.0.1:3333".parse()?);
//! config.link = LinkConfig::symmetric(Duration::from_micros(72_500));
//! let tap = Tap::bind(config).await?;
//! println!("tap listening on {}", tap.local_addr());
//! let summary = tap.run(tokio::time::sleep(Duration::from_secs(60))).await;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod config;
pub mod counter;
pub mod link;
pub mod loss;
pub mod net;
pub mod pipe;
mod relay;
pub mod sched;
pub mod server;
pub mod stats;
pub mod stream;
pub mod sv1_watch;
pub mod sv2_relay;
pub mod sv2_watch;
pub mod timer;
pub mod units;

pub use config::TapConfig;
pub use counter::ByteCounter;
pub use link::LinkConfig;
pub use loss::{LossModel, Outcome};
pub use pipe::Pipe;
pub use server::{Tap, TapError};
pub use stats::{Distribution, Summary, TapStats};
pub use stream::{stream_seed, Released, Stream};
pub use sv1_watch::{Protocol, Sv1Counts, Sv1Watch};
pub use sv2_relay::Sv2Terminate;
pub use sv2_watch::{Sv2Counts, Sv2Watch, WorkerShares};
pub use timer::{PreciseTimer, Sleep, TimerHandle, TimerStats};
pub use units::{Bandwidth, LossRate};
