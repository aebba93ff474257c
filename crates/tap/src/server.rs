//! The tap: accepts clients and relays each to the upstream.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use events::{now_ns, ConnectionClosed, ConnectionOpened, ShortStr};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::TapConfig;
use crate::net::{self, Reserve};
use crate::pipe::Pipe;
use crate::relay::{relay, Shared};
use crate::stats::{Summary, TapStats};
use crate::timer::PreciseTimer;

/// Descriptors the process needs besides two per connection: the listener, the events file,
/// the runtime's epoll and wake-up descriptors, the reserve, standard streams, and some slack.
const OTHER_DESCRIPTORS: u64 = 64;
/// How long connections get to close at shutdown before their tasks are dropped.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Why a tap could not start.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The configured `listen` address.
        addr: SocketAddr,
        /// What the bind returned.
        source: io::Error,
    },
    /// The release timer's thread could not be spawned.
    #[error("cannot start the timer thread: {0}")]
    Timer(io::Error),
}

/// A bound tap, ready to [`Tap::run`].
pub struct Tap {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    timer: PreciseTimer,
    max_connections: usize,
}

impl Tap {
    /// Binds the listening socket and starts the timer thread. Raises the open-file limit to
    /// its hard limit; the connection limit defaults to what the descriptors allow.
    pub async fn bind(config: TapConfig) -> Result<Tap, TapError> {
        let nofile = match net::raise_nofile_limit().map(|(_, after)| after) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read or raise the open-file limit; assuming 1024");
                1024
            }
        };
        let by_descriptors = (nofile.saturating_sub(OTHER_DESCRIPTORS) / 2).max(1);
        let max_connections = match config.max_connections {
            Some(m) => m.min(usize::try_from(by_descriptors).unwrap_or(usize::MAX)),
            None => usize::try_from(by_descriptors).unwrap_or(usize::MAX),
        };
        let listener = edge::listen(config.listen).map_err(|source| TapError::Bind {
            addr: config.listen,
            source,
        })?;
        let local_addr = listener.local_addr().map_err(|source| TapError::Bind {
            addr: config.listen,
            source,
        })?;
        if !net::enable_rx_timestamps(&listener) {
            tracing::debug!("no receive timestamps: arrival is when the tap reads");
        }
        let timer = PreciseTimer::start(config.realtime).map_err(TapError::Timer)?;
        let bw = config.link.bandwidth;
        let pipes =
            (!bw.is_unlimited()).then(|| [Mutex::new(Pipe::new(bw)), Mutex::new(Pipe::new(bw))]);
        let shared = Arc::new(Shared {
            link_name: ShortStr::new(&config.link_name),
            config,
            pipes,
            timer: timer.handle(),
            stats: Arc::new(TapStats::default()),
        });
        Ok(Tap {
            listener,
            local_addr,
            shared,
            timer,
            max_connections,
        })
    }

    /// The address clients connect to (the port actually bound).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connections held at once: the configured limit, or what the descriptor limit allows.
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// Live counters.
    pub fn stats(&self) -> Arc<TapStats> {
        Arc::clone(&self.shared.stats)
    }

    /// Relays until `shutdown` resolves, then closes every connection and returns the summary.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Summary {
        let started = Instant::now();
        let (cancel_tx, cancel_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut reserve = Reserve::new();
        let mut next_conn = 0u64;
        let shared = &self.shared;
        let stats = &shared.stats;
        let events = &shared.config.events;
        tracing::info!(
            listen = %self.local_addr,
            upstream = %shared.config.upstream,
            link = %shared.config.link_name,
            max_connections = self.max_connections,
            "tap relaying"
        );
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                _ = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => None,
                accepted = self.listener.accept() => match accepted {
                    Ok(pair) => Some(pair),
                    // Linux reports this before looking for a pending connection, so it comes
                    // back on every attempt until descriptors are freed.
                    Err(e) if net::is_out_of_descriptors(&e) => match reserve.accept(&self.listener).await {
                        Some((client, peer, true)) => Some((client, peer)),
                        Some((client, peer, false)) => {
                            drop(client);
                            reserve.refill();
                            let refused = stats.refused.fetch_add(1, Relaxed) + 1;
                            if refused.is_power_of_two() {
                                tracing::warn!(%peer, refused, "out of file descriptors: refusing");
                            }
                            None
                        }
                        None => None,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        None
                    }
                },
            };
            let Some((client, peer)) = accepted else {
                continue;
            };
            let conn = next_conn;
            next_conn += 1;
            let accepted_ns = now_ns();
            stats.accepted.fetch_add(1, Relaxed);
            let local = client.local_addr().unwrap_or(self.local_addr);
            events.emit(ConnectionOpened {
                conn,
                peer,
                local,
                label: ShortStr::new(""),
            });
            if stats.open.load(Relaxed) >= self.max_connections as u64 {
                let refused = stats.refused.fetch_add(1, Relaxed) + 1;
                if refused.is_power_of_two() {
                    tracing::warn!(conn, %peer, refused, max = self.max_connections, "connection limit reached: refusing");
                }
                net::set_reset_on_close(&client);
                events.emit(ConnectionClosed {
                    conn,
                    reason: ShortStr::new("refused"),
                });
                continue;
            }
            stats.open.fetch_add(1, Relaxed);
            tasks.spawn(relay(
                Arc::clone(shared),
                conn,
                client,
                accepted_ns,
                cancel_rx.clone(),
            ));
        }
        drop(self.listener);
        let _ = cancel_tx.send(true);
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
            while tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            tracing::warn!(
                left = tasks.len(),
                "connections did not close in time; dropping them"
            );
            tasks.shutdown().await;
        }
        stats.summary(&shared.config.link, started.elapsed(), self.timer.stats())
    }
}
