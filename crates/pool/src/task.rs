//! A task owned by the handle that started it: the template feeds run as one.

use std::future::Future;

use tokio::task::JoinHandle;

/// A spawned task, aborted when this is dropped.
pub(crate) struct OwnedTask(Option<JoinHandle<()>>);

impl OwnedTask {
    /// Spawns `task` on the current tokio runtime.
    pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> OwnedTask {
        OwnedTask(Some(tokio::spawn(task)))
    }

    /// Waits for the task to end; a panic in it is passed on.
    pub(crate) async fn stopped(mut self) {
        if let Some(task) = self.0.take() {
            if let Err(e) = task.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}
