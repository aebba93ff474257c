//! What the tap's integration tests share: a tap running in its own task until stopped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tap::{Summary, Tap, TapConfig};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The longest any step of a test waits: past it, the test fails instead of hanging.
pub const LIMIT: Duration = Duration::from_secs(30);

/// Makes `cfg`'s tap write its events to a file in a fresh temporary folder (removed when the
/// folder is dropped); gives the folder, the file and the sink to finish before they are read.
pub fn log_events(cfg: &mut TapConfig) -> (tempfile::TempDir, PathBuf, events::EventSink) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tap.ev");
    cfg.events = events::EventSink::create(&path, "tap", "").unwrap();
    (dir, path, cfg.events.clone())
}

/// A running tap, stopped by `stop`.
pub struct Running {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    done: JoinHandle<Summary>,
}

impl Running {
    pub async fn start(config: TapConfig) -> Running {
        let tap = Tap::bind(config).await.expect("bind");
        let addr = tap.local_addr();
        let (stop, stopped) = oneshot::channel::<()>();
        let done = tokio::spawn(tap.run(async {
            let _ = stopped.await;
        }));
        Running { addr, stop, done }
    }

    pub async fn stop(self) -> Summary {
        let _ = self.stop.send(());
        tokio::time::timeout(LIMIT, self.done)
            .await
            .expect("the tap stops")
            .expect("the tap task")
    }
}
