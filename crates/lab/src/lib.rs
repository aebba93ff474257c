//! The lab (ARCHITECTURE.md, "lab"): what `stratumlab run` is made of.
//!
//! - [`results`]: the results.json shape (METRICS.md), as types.
//! - [`stats`]: distributions (HDR histograms) and confidence intervals per template or tip.
//! - [`metrics`]: every METRICS.md figure of one configuration, computed from its events.
//! - [`report`]: report.html (and CSV time series) from a results directory.

pub mod metrics;
pub mod report;
pub mod results;
pub mod stats;
