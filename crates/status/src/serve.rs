//! The serving loop: one task per connection, at most [`ServeOptions::max_connections`] served
//! at once (further clients wait in the listen backlog), request heads bounded
//! ([`MAX_HEADER_BYTES`]) and due within [`ServeOptions::request_timeout`] (which also closes
//! idle kept-alive connections), request bodies never read, and every connection closed at
//! [`ServeOptions::max_connection_age`] whatever it is doing.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The most bytes a request line and its headers may take (431 beyond).
pub const MAX_HEADER_BYTES: usize = 8192;
/// How long open connections get to finish once the server stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What bounds the serving loop.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time allowed for a request's head to arrive, and for an idle kept-alive connection.
    pub request_timeout: Duration,
    /// A connection is closed after this long, whatever it is doing (a client that stops
    /// reading a large answer holds its slot no longer).
    pub max_connection_age: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_connections: 64,
            request_timeout: Duration::from_secs(10),
            max_connection_age: Duration::from_secs(300),
        }
    }
}

/// Serves `router` on `listener` until `shutdown` completes, then lets open requests finish
/// (for a few seconds at most) and returns. The router is called on the connection's task and
/// must answer at once: it computes the response from the role's figures, it waits for
/// nothing.
pub async fn serve_with<R>(
    listener: TcpListener,
    options: &ServeOptions,
    router: R,
    shutdown: impl Future,
) -> io::Result<()>
where
    R: Fn(&Request<Incoming>) -> Response<Full<Bytes>> + Send + Sync + 'static,
{
    let router = Arc::new(router);
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.request_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let local = listener.local_addr()?;
    tracing::info!(%local, "HTTP status endpoints listening");

    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, or a connection reset before accept: keep serving
                    // the connections we have and try again shortly.
                    tracing::warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let route = router.clone();
        let svc = service_fn(move |req| {
            let response = route(&req);
            async move { Ok::<_, Infallible>(response) }
        });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(stream), svc));
        let age = options.max_connection_age;
        tokio::spawn(async move {
            let _slot = slot;
            match tokio::time::timeout(age, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTP connection closed"),
                Err(_) => tracing::debug!(%peer, "HTTP connection closed at its age limit"),
            }
        });
    }

    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP connections still open at shutdown were dropped");
    }
    tracing::info!(%local, "HTTP status endpoints stopped");
    Ok(())
}
