pub mod bench;
pub mod edge;
pub mod events;
pub mod fleet;
pub mod jdc;
pub mod jds;
pub mod keys;
pub mod node;
pub mod pool;
pub mod report;
pub mod run;
pub mod simnet;
pub mod tap;
pub mod translator;

/// The multi-threaded runtime a role's shell runs on: `threads` workers, or one per core.
pub fn runtime(threads: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    anyhow::Context::context(builder.enable_all().build(), "tokio runtime")
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).ok();
    let sigterm = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm => {}
    }
}

/// Resolves on Ctrl-C, SIGTERM, or after `duration` (zero: never).
pub async fn shutdown_signal(duration: std::time::Duration) {
    let timer = async {
        if duration.is_zero() {
            std::future::pending::<()>().await
        } else {
            tokio::time::sleep(duration).await
        }
    };
    tokio::select! {
        _ = signal() => {}
        _ = timer => {}
    }
}
