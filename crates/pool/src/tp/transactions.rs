//! The transactions of the provider's latest templates, kept as they arrive: what turns a
//! block found on one of them (header and coinbase) into a whole block a node takes with
//! `submitblock`, and what answers a second request for the same template at once.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use sv2::messages::template_distribution::RequestTransactionDataSuccess;

/// Templates whose transactions are kept (a template's may be megabytes).
pub const KEPT: usize = 8;

/// One template's transactions, with the connection its id belongs to: a provider's template
/// ids are per connection, and one that restarted numbers them from 1 again.
struct Entry {
    connection: u64,
    data: Arc<RequestTransactionDataSuccess>,
}

/// The transactions of the provider's latest templates (`RequestTransactionData` answers), so
/// that a block found on one can be built whole.
#[derive(Default)]
pub struct KeptTransactions {
    /// Oldest first.
    entries: Mutex<VecDeque<Entry>>,
}

impl KeptTransactions {
    /// Keeps the provider's answer for one of `connection`'s templates, dropping the oldest
    /// beyond [`KEPT`]; returns it as kept.
    pub fn keep(
        &self,
        connection: u64,
        data: RequestTransactionDataSuccess,
    ) -> Arc<RequestTransactionDataSuccess> {
        let data = Arc::new(data);
        let mut entries = self.lock();
        entries.retain(|e| !(e.connection == connection && e.data.template_id == data.template_id));
        if entries.len() >= KEPT {
            entries.pop_front();
        }
        entries.push_back(Entry {
            connection,
            data: data.clone(),
        });
        data
    }

    /// The answer kept for template `template_id` of `connection`.
    pub fn handle_connection(
        &self,
        connection: u64,
        template_id: u64,
    ) -> Option<Arc<RequestTransactionDataSuccess>> {
        self.lock()
            .iter()
            .rev()
            .find(|e| e.connection == connection && e.data.template_id == template_id)
            .map(|e| e.data.clone())
    }

    /// Every answer kept for a template numbered `template_id`, newest first, whichever
    /// connection it came on: a block found on a connection that has since died still names
    /// its template by that number (and the caller checks which one its header commits to).
    pub fn numbered(&self, template_id: u64) -> Vec<Arc<RequestTransactionDataSuccess>> {
        self.lock()
            .iter()
            .rev()
            .filter(|e| e.data.template_id == template_id)
            .map(|e| e.data.clone())
            .collect()
    }

    /// How many templates' transactions are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none are kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(template_id: u64, tx: u8) -> RequestTransactionDataSuccess {
        RequestTransactionDataSuccess {
            template_id,
            excess_data: Vec::new(),
            transaction_list: vec![vec![tx]],
        }
    }

    #[test]
    fn ids_are_told_apart_by_connection_and_the_oldest_go_first() {
        let kept = KeptTransactions::default();
        kept.keep(1, answer(1, 0xa));
        kept.keep(2, answer(1, 0xb));
        assert_eq!(
            kept.handle_connection(1, 1).unwrap().transaction_list,
            [[0xa]]
        );
        assert_eq!(
            kept.handle_connection(2, 1).unwrap().transaction_list,
            [[0xb]]
        );
        assert!(kept.handle_connection(3, 1).is_none());
        let numbered: Vec<_> = kept
            .numbered(1)
            .iter()
            .map(|d| d.transaction_list[0][0])
            .collect();
        assert_eq!(numbered, [0xb, 0xa]);
        // The same template answered twice is kept once.
        kept.keep(2, answer(1, 0xc));
        assert_eq!(kept.len(), 2);
        for id in 2..=KEPT as u64 + 1 {
            kept.keep(2, answer(id, 0));
        }
        assert_eq!(kept.len(), KEPT);
        assert!(
            kept.handle_connection(1, 1).is_none(),
            "the oldest was dropped"
        );
    }
}
