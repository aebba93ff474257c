//! The lab (docs/architecture.md, "lab"): what `stratumlab run` is made of.
//!
//! - [`results`]: the results.json shape (docs/metrics.md), as types.
//! - [`stats`]: distributions (HDR histograms) and confidence intervals per template or tip.
//! - [`metrics`]: every docs/metrics.md figure of one configuration, computed from its events.
//! - [`report`]: report.html (and CSV time series) from a results directory.
//! - [`scenario`]: what a run compares and on what network; everything derived from it.
//! - [`orchestrate`]: one trial as processes (simnet, pools, taps, fleets), stopped in order.
//! - [`process`], [`usage`], [`stop`]: a role process, its /proc figures, the lab's signals.
//! - [`third_party`]: the reference roles a configuration may run (pool_sv2 for D-ref).
//! - [`external`]: someone else's pool or farm proxy run as a configuration.
//! - [`live`]: live Prometheus metrics while a run goes on.
//! - [`estimates`]: the roles' hash-rate estimates, read while a trial runs.
//! - [`run`]: a whole run: trials, measurement, results.json, CSVs, report, summary.
//! - [`bench`]: one role at a fixed offered load against other software (`stratumlab bench`).
//! - [`virtual_time`]: the stale model checked by the sans-IO cores on a virtual clock.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod bench;
pub mod estimates;
pub mod external;
pub mod live;
pub mod metrics;
pub mod orchestrate;
pub mod process;
pub mod report;
pub mod results;
pub mod run;
pub mod scenario;
pub mod stats;
pub mod stop;
pub mod sweep;
pub mod third_party;
pub mod usage;
pub mod virtual_time;
