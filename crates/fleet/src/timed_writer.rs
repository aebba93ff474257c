//! The test pools' way to hold replies back: one task per connection owns the write half and
//! writes what it is handed in order, each piece at its due time. A piece due now is written
//! without touching the timer, whose tick would otherwise delay it too.

use std::ops::Deref;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where a connection's writes go, and the task writing them (it ends when the sender is
/// dropped or a write fails).
pub(crate) fn spawn<B>(
    mut wr: OwnedWriteHalf,
) -> (mpsc::UnboundedSender<(Instant, B)>, JoinHandle<()>)
where
    B: Deref + Send + 'static,
    B::Target: AsRef<[u8]>,
{
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, B)>();
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = rx.recv().await {
            if at > Instant::now() {
                tokio::time::sleep_until(at).await;
            }
            if wr.write_all((*bytes).as_ref()).await.is_err() {
                break;
            }
        }
    });
    (tx, writer)
}
