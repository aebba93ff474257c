//! The pool-side node's mempool as the sessions see it, kept over JSON-RPC.
//!
//! `getrawmempool true` lists the mempool with each entry's wtxid; the transactions themselves
//! come from `getrawtransaction` by txid, fetched once each. A refresh runs on an interval
//! ([`NodeMempool::refresh`]) and once more when a declaration names wtxids the view lacks
//! ([`NodeMempool::ensure`]), so that the client is only asked for transactions the node has
//! really not seen.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use pool::node::{NodeClient, NodeError};
use primitives::bitcoin::{consensus, Transaction};
use primitives::Hash256;
use serde_json::{json, Value};

use crate::mempool::wtxid;

/// Transactions fetched per refresh at most: a first refresh on a big mempool is spread over a
/// few intervals rather than holding the node's RPC for seconds.
const MAX_FETCH_PER_REFRESH: usize = 5000;

#[derive(Default)]
struct View {
    /// wtxid -> txid, as last listed.
    listed: HashMap<Hash256, Hash256>,
    /// Fetched transactions by wtxid.
    txs: HashMap<Hash256, Arc<Transaction>>,
}

/// The pool-side node's mempool by wtxid, refreshed over JSON-RPC (see the module documentation).
pub struct NodeMempool {
    node: NodeClient,
    view: RwLock<View>,
    /// Serializes refreshes (interval and on demand).
    refreshing: tokio::sync::Mutex<()>,
}

impl NodeMempool {
    /// An empty view over `node`; nothing is fetched before [`NodeMempool::refresh`].
    pub fn new(node: NodeClient) -> NodeMempool {
        NodeMempool {
            node,
            view: RwLock::new(View::default()),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    /// The node's RPC client (also used for `submitblock`).
    pub fn node(&self) -> &NodeClient {
        &self.node
    }

    /// The transactions known now, for a session to read (hold it only while not awaiting).
    pub fn read(&self) -> MempoolGuard<'_> {
        MempoolGuard(self.view.read().unwrap_or_else(|p| p.into_inner()))
    }

    /// Transactions fetched so far.
    pub fn len(&self) -> usize {
        self.read().0.txs.len()
    }

    /// Whether no transaction has been fetched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lists the mempool again, drops what left it and fetches what is new.
    pub async fn refresh(&self) -> Result<(), NodeError> {
        self.refresh_wanting(&[]).await
    }

    /// Makes sure every wtxid of `wanted` the node has is in the view: a refresh first if the
    /// view does not list some of them, then a fetch of those listed but not fetched yet.
    pub async fn ensure(&self, wanted: &[Hash256]) -> Result<(), NodeError> {
        let lacking: Vec<Hash256> = {
            let v = self.view.read().unwrap_or_else(|p| p.into_inner());
            wanted
                .iter()
                .filter(|w| !v.txs.contains_key(w))
                .copied()
                .collect()
        };
        if lacking.is_empty() {
            return Ok(());
        }
        self.refresh_wanting(&lacking).await
    }

    async fn refresh_wanting(&self, first: &[Hash256]) -> Result<(), NodeError> {
        let _one = self.refreshing.lock().await;
        let listing = self.node.call("getrawmempool", json!([true])).await?;
        let listed = parse_listing(&listing, self.node.url())?;
        let to_fetch: Vec<(Hash256, Hash256)> = {
            let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
            v.txs.retain(|w, _| listed.contains_key(w));
            v.listed = listed;
            let wanted: HashSet<&Hash256> = first.iter().collect();
            let mut to_fetch: Vec<(Hash256, Hash256)> = first
                .iter()
                .filter(|w| !v.txs.contains_key(w))
                .filter_map(|w| v.listed.get(w).map(|t| (*w, *t)))
                .collect();
            to_fetch.extend(
                v.listed
                    .iter()
                    .filter(|(w, _)| !v.txs.contains_key(w) && !wanted.contains(w))
                    .map(|(w, t)| (*w, *t))
                    .take(MAX_FETCH_PER_REFRESH.saturating_sub(to_fetch.len())),
            );
            to_fetch
        };
        // Several requests in flight: one at a time, a 3000-transaction mempool took seconds to
        // load (a round trip each), and the first declarations waited for it.
        use futures_util::StreamExt;
        let mut fetched = futures_util::stream::iter(to_fetch)
            .map(|(w, txid)| async move { (w, txid, self.fetch(&txid).await) })
            .buffer_unordered(FETCHES_IN_FLIGHT);
        while let Some((w, txid, fetched)) = fetched.next().await {
            match fetched {
                Ok(tx) if wtxid(&tx) == w => {
                    let mut v = self.view.write().unwrap_or_else(|p| p.into_inner());
                    v.txs.insert(w, Arc::new(tx));
                }
                Ok(_) => {
                    tracing::warn!(%txid, "jds: node's transaction does not hash to its listed wtxid")
                }
                // Mined or evicted since the listing: the next refresh forgets it.
                Err(NodeError::Rpc { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn fetch(&self, txid: &Hash256) -> Result<Transaction, NodeError> {
        let hex = self
            .node
            .call("getrawtransaction", json!([txid.to_string()]))
            .await?;
        let bad = |reason: String| NodeError::BadReply {
            method: "getrawtransaction",
            url: self.node.url().to_owned(),
            reason,
        };
        let hex = hex
            .as_str()
            .ok_or_else(|| bad(format!("expected hex, got {hex}")))?;
        let raw = primitives::hex::decode(hex).map_err(|e| bad(format!("{e:?}")))?;
        consensus::deserialize(&raw).map_err(|e| bad(e.to_string()))
    }
}

/// `getrawtransaction` requests in flight at once.
const FETCHES_IN_FLIGHT: usize = 16;

/// `getrawmempool true`: `{txid: {"wtxid": ..., ...}, ...}`, both in display order.
fn parse_listing(v: &Value, url: &str) -> Result<HashMap<Hash256, Hash256>, NodeError> {
    let bad = |reason: String| NodeError::BadReply {
        method: "getrawmempool",
        url: url.to_owned(),
        reason,
    };
    let entries = v
        .as_object()
        .ok_or_else(|| bad("expected an object of entries".into()))?;
    let mut listed = HashMap::with_capacity(entries.len());
    for (txid, entry) in entries {
        let txid = Hash256::from_display_hex(txid).map_err(|_| bad(format!("txid {txid}")))?;
        let w = entry
            .get("wtxid")
            .and_then(Value::as_str)
            .and_then(|s| Hash256::from_display_hex(s).ok())
            .ok_or_else(|| bad(format!("entry {txid} has no wtxid")))?;
        listed.insert(w, txid);
    }
    Ok(listed)
}

/// A read view of the fetched transactions, as the sessions' [`crate::Mempool`].
pub struct MempoolGuard<'a>(RwLockReadGuard<'a, View>);

impl crate::Mempool for MempoolGuard<'_> {
    fn get(&self, wtxid: &Hash256) -> Option<Arc<Transaction>> {
        self.0.txs.get(wtxid).cloned()
    }
}
