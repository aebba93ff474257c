//! The JSON and text bodies of `/api/status`, `/api/workers` and `/healthz`, and the workers
//! query. Times on the caller's clock mean nothing to a reader, so the answers give ages in
//! seconds instead (`for_s`, `last_share_age_s`, ...).

use serde_json::{json, Map, Value};

use super::HttpOptions;
use crate::stats::{
    Attached, Dependency, NodeStatus, NotServing, PageStart, Serving, StatusSnapshot, WorkersPage,
};
use crate::Timestamp;

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn age_s(now: Timestamp, then: Timestamp) -> f64 {
    seconds(now.millis_since(then))
}

fn node(node: NodeStatus, now: Timestamp) -> Value {
    json!({
        "state": node.state(),
        "for_s": node.since().map(|since| age_s(now, since)),
    })
}

/// `/api/status`'s `dependencies`: each dependency's state, since when, failures, and the
/// store's error while it fails.
fn dependencies(s: &StatusSnapshot, store_error: Option<&str>, attached: &[Attached]) -> Value {
    let mut deps = Map::new();
    deps.insert(
        s.template_source.as_str().to_owned(),
        json!({
            "up": matches!(s.node, NodeStatus::Ok { .. }),
            "state": s.node.state(),
            "for_s": s.node.since().map(|since| age_s(s.now, since)),
            "failures": s.node_failures,
        }),
    );
    if s.backup_node.is_some() {
        if let Some(Value::Object(tp)) = deps.get_mut(s.template_source.as_str()) {
            tp.insert(
                "templates_with_transactions".into(),
                s.templates_with_transactions.into(),
            );
        }
    }
    if let Some((node, failures)) = s.backup_node {
        deps.insert(
            Dependency::Node.as_str().to_owned(),
            json!({
                "up": matches!(node, NodeStatus::Ok { .. }),
                "state": node.state(),
                "for_s": node.since().map(|since| age_s(s.now, since)),
                "failures": failures,
            }),
        );
    }
    if let Some(st) = s.store {
        deps.insert(
            Dependency::Store.as_str().to_owned(),
            json!({
                "up": st.failing_since.is_none(),
                "state": if st.failing_since.is_some() { "failing" } else { "ok" },
                "for_s": st.failing_since.map(|since| age_s(s.now, since)),
                "failures": st.failures,
                "error": store_error,
            }),
        );
    }
    if let (Some(zmq), Some(Value::Object(node))) = (s.zmq, deps.get_mut(Dependency::Node.as_str()))
    {
        // New tips come by ZMQ while it is connected, by long polling while it is not.
        node.insert("zmq".into(), if zmq { "connected" } else { "down" }.into());
    }
    for a in attached {
        deps.insert(
            a.dependency.as_str().to_owned(),
            json!({
                "up": a.up,
                "state": if a.up { "ok" } else { "failing" },
                "for_s": age_s(s.now, a.since),
                "failures": a.failures,
                "error": a.error,
            }),
        );
    }
    Value::Object(deps)
}

/// `/api/status`. `store_error`: the store's error while it cannot write.
pub(super) fn status(
    s: &StatusSnapshot,
    store_error: Option<&str>,
    attached: &[Attached],
) -> Value {
    let by_reason: Map<String, Value> = s
        .rejected
        .iter()
        .map(|(reason, n)| (reason.as_str().to_owned(), n.into()))
        .collect();
    let not_serving = match s.serving {
        Serving::Yes => None,
        Serving::No(why) => Some(why.as_str()),
    };
    json!({
        "uptime_s": seconds(s.uptime_ms),
        "serving": s.serving.is_serving(),
        "not_serving_reason": not_serving,
        "node": node(s.node, s.now),
        "hashrate_1m": s.hashrate_1m,
        "hashrate_10m": s.hashrate_10m,
        "shares_per_second": s.shares_per_second,
        "workers": s.workers,
        "workers_listed": s.workers_listed,
        "connections": s.connections,
        "shares": {
            "accepted": s.accepted,
            "rejected": s.rejected.total(),
            "rejected_by_reason": by_reason,
        },
        "work": { "accepted": s.accepted_work },
        "blocks": {
            "found": s.blocks.submitted,
            "submitted": s.blocks.submitted,
            "pending": s.blocks.pending(),
            "accepted": s.blocks.accepted,
            "orphaned": s.blocks.orphaned,
            "rejected": s.blocks.rejected,
            "declared": s.blocks.declared,
        },
        "jobs": { "created": s.jobs.created, "clean": s.jobs.clean },
        "vardiff_changes": s.vardiff_changes,
        "store": s.store.map(|st| json!({
            "commits": st.commits,
            "records": st.records,
            "queue_len": st.queue_len,
            "batch_window_ms": st.batch_window_ms,
            "last_commit_us": st.last_commit_us,
            "failures": st.failures,
            "failing_for_s": st.failing_since.map(|since| age_s(s.now, since)),
            "error": store_error,
        })),
        "dependencies": dependencies(s, store_error, attached),
        "work_source": s.work_source.as_str(),
        // The allocator's live and kept bytes (docs/operations.md, "Memory"); null where jemalloc
        // is not the allocator.
        "memory": crate::memory::heap_recent().map(|h| json!({
            "heap_in_use_bytes": h.in_use,
            "heap_free_bytes": h.free,
        })),
    })
}

/// `/api/workers`.
pub(super) fn workers(page: &WorkersPage, limit: usize, now: Timestamp) -> Value {
    let list: Vec<Value> = page
        .workers
        .iter()
        .map(|w| {
            json!({
                "name": &*w.name,
                "connections": w.connections,
                "accepted": w.accepted,
                "accepted_work": w.accepted_work,
                "rejected": w.rejected,
                "hashrate_1m": w.hashrate_1m,
                "hashrate_10m": w.hashrate_10m,
                "last_share_age_s": w.last_share.map(|t| age_s(now, t)),
                "listed_for_s": age_s(now, w.first_seen),
            })
        })
        .collect();
    json!({
        "total": page.total,
        "offset": page.offset,
        "limit": limit,
        "workers": list,
        "next_offset": page.next_offset(),
        "next_after": page.next_after(),
    })
}

/// `/healthz`: the body for 200, or for 503 with the reason (and the store's error when it is
/// the store that fails).
pub(super) fn health(
    s: &StatusSnapshot,
    store_error: Option<&str>,
    attached: &[Attached],
) -> Result<String, String> {
    match s.serving {
        // Serving, but a block waiting for its answer (or for a way out), or an attached
        // dependency that fails (the JDC mining on without its pool), is worth a line.
        Serving::Yes => {
            let mut body = String::from("ok\n");
            let pending = s.blocks.pending();
            if pending > 0 {
                body += &format!("blocks pending: {pending} (found, not yet answered for)\n");
            }
            for a in attached.iter().filter(|a| !a.up) {
                body += &format!(
                    "{} failing for {:.1} s: {}\n",
                    a.dependency.as_str(),
                    age_s(s.now, a.since),
                    a.error.as_deref().unwrap_or("unknown")
                );
            }
            Ok(body)
        }
        Serving::No(NotServing::Store) => {
            let since = s
                .store
                .and_then(|st| st.failing_since)
                .map(|since| format!(" for {:.1} s", age_s(s.now, since)))
                .unwrap_or_default();
            Err(format!(
                "not serving: store ({}{since})\n",
                store_error.unwrap_or("cannot write")
            ))
        }
        Serving::No(why) => {
            let node = match s.node.since() {
                Some(since) => format!("node {} for {:.1} s", s.node.state(), age_s(s.now, since)),
                None => format!("node {}", s.node.state()),
            };
            Err(format!("not serving: {} ({node})\n", why.as_str()))
        }
    }
}

pub(super) fn error(message: &str) -> Value {
    json!({ "error": message })
}

/// `/api/workers`' query: `offset` or `after`, and `limit`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WorkersQuery {
    offset: Option<usize>,
    after: Option<String>,
    pub(super) limit: usize,
}

/// The longest piece of a bad query quoted back in the error.
const QUOTE_MAX: usize = 64;

fn quote(s: &str) -> String {
    let cut: String = s.chars().take(QUOTE_MAX).collect();
    if cut.len() < s.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

impl WorkersQuery {
    pub(super) fn parse(query: Option<&str>, options: &HttpOptions) -> Result<Self, String> {
        let mut offset = None;
        let mut after = None;
        let mut limit = None;
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let number = |what: &str| {
                value.parse::<usize>().map_err(|_| {
                    format!(
                        "{what} must be a whole number of 0 or more, not {}",
                        quote(&value)
                    )
                })
            };
            let slot_taken = match &*key {
                "offset" => offset.replace(number("offset")?).is_some(),
                "limit" => limit.replace(number("limit")?).is_some(),
                "after" => after.replace(value.to_string()).is_some(),
                other => {
                    return Err(format!(
                        "unknown parameter {} (expected offset, limit, after)",
                        quote(other)
                    ))
                }
            };
            if slot_taken {
                return Err(format!("parameter {key} given twice"));
            }
        }
        if offset.is_some() && after.is_some() {
            return Err("give offset or after, not both".into());
        }
        Ok(WorkersQuery {
            offset,
            after,
            limit: limit.unwrap_or(options.default_page).min(options.max_page),
        })
    }

    pub(super) fn start(&self) -> PageStart<'_> {
        match &self.after {
            Some(name) => PageStart::After(name),
            None => PageStart::Offset(self.offset.unwrap_or(0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(q: &str) -> Result<WorkersQuery, String> {
        WorkersQuery::parse(Some(q), &HttpOptions::default())
    }

    #[test]
    fn workers_queries() {
        let q = WorkersQuery::parse(None, &HttpOptions::default()).unwrap();
        assert_eq!((q.start(), q.limit), (PageStart::Offset(0), 100));
        let q = parse("offset=20&limit=5").unwrap();
        assert_eq!((q.start(), q.limit), (PageStart::Offset(20), 5));
        let q = parse("limit=1000000").unwrap();
        assert_eq!(q.limit, 1000, "capped");
        let q = parse("after=rig%201.a%2Bb&limit=0").unwrap();
        assert_eq!((q.start(), q.limit), (PageStart::After("rig 1.a+b"), 0));
        let q = parse("").unwrap();
        assert_eq!(q.start(), PageStart::Offset(0));

        for (bad, says) in [
            ("offset=-1", "offset must be a whole number"),
            ("limit=abc", "limit must be a whole number"),
            ("limit=1.5", "limit must be"),
            ("offset=99999999999999999999999", "offset must be"),
            ("offset=1&offset=2", "given twice"),
            ("page=2", "unknown parameter \"page\""),
            ("offset=1&after=x", "not both"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let long = format!("limit={}", "x".repeat(500));
        let e = parse(&long).unwrap_err();
        assert!(e.len() < 200, "{e}");
    }
}
