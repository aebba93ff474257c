//! The status endpoints every role serves, written once.
//!
//! Each role (the pool, the JDS, the translator and the SV1 farm proxy; the JDC through the pool
//! it embeds) answers `/metrics`, `/api/status` and `/healthz` from its own figures. What they
//! have in common lives here:
//!
//! - [`serve`]: the serving loop (a cap on connections served at once, bounded request heads,
//!   a request timeout, a connection age limit, a graceful stop) around a router the role
//!   supplies, which must answer at once from a snapshot of its figures;
//! - [`response`]: the answers every router gives (`404`, `405` with `Allow`, uncached text
//!   and JSON);
//! - [`page`]: the page a person opens at `/`, drawn from the same answers;
//! - [`families`]: the metric families every role names the same way, the connection edge's
//!   (`admission_*`) and the dependencies' (`dependency_up`, `dependency_failures`).
//!
//! docs/operations.md lists each role's endpoints and docs/metrics.md each figure.

// Every public item says what it is for, and nothing is public that no other crate can reach.
#![warn(missing_docs, unreachable_pub)]

pub mod families;
pub mod page;
pub mod response;
pub mod serve;

pub use families::{
    accept_queue_lines, admission_families, admission_json, counter, dependency_families, family,
    gauge, DependencyFigure, OPENMETRICS_CONTENT_TYPE,
};
pub use page::{html_page, RolePage};
pub use response::{json, not_found, refuse_method, reply, text};
pub use serve::{serve_with, ServeOptions, MAX_HEADER_BYTES};
