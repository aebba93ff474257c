//! SV1 to the upstream: newline-delimited JSON over TCP, the SV1 proxy's transport. The
//! opening requests (configure, subscribe, authorize) are the uplink's, sent as the channel
//! is asked for, so connecting is only TCP.

use std::sync::Arc;
use std::time::Duration;

use events::{LinkCounter, Side};
use sv1::LineBuffer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use super::connect::UpstreamSpec;
use super::transport::{Link, Transport};
use super::ShellError;
use crate::sv1_upstream::Sv1Upstream;

/// Longest line taken from the upstream (a notify with a large coinbase and a full branch is
/// a few kilobytes).
pub const MAX_UPSTREAM_LINE: usize = 64 * 1024;

/// How long one write to the upstream may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// SV1 over TCP: the SV1 proxy's upstream.
pub struct Sv1Transport {
    reader: OwnedReadHalf,
    writer: OwnedWriteHalf,
    /// Read and not yet taken as lines (kept here so that `read` is cancellation safe).
    lines: LineBuffer,
    /// This connection's wire bytes (it is the client end of the link).
    net: Arc<LinkCounter>,
}

impl Transport for Sv1Transport {
    type Uplink = Sv1Upstream;
    type In = Vec<u8>;
    type Out = Vec<u8>;

    fn uplink() -> Sv1Upstream {
        Sv1Upstream::new()
    }

    async fn connect(
        spec: &UpstreamSpec,
        _hello: super::transport::Hello<'_>,
        net: &Arc<LinkCounter>,
    ) -> Result<Link<Self>, ShellError> {
        let (stream, local) = super::transport::dial(spec).await?;
        let (reader, writer) = stream.into_split();
        Ok(Link {
            conn: Sv1Transport {
                reader,
                writer,
                lines: LineBuffer::new(MAX_UPSTREAM_LINE),
                net: net.clone(),
            },
            local,
            fixed_version: false,
            extensions: Vec::new(),
        })
    }

    async fn read(&mut self) -> Result<Vec<u8>, ShellError> {
        loop {
            match self.lines.next_line() {
                Some(Ok(line)) => {
                    self.net.add_line(Side::Client, true, line, sv1::line_kind);
                    return Ok(line.to_vec());
                }
                Some(Err(e)) => return Err(ShellError::UpstreamLost(format!("a {e}"))),
                None => {}
            }
            let mut chunk = [0u8; 8192];
            let n = self
                .reader
                .read(&mut chunk)
                .await
                .map_err(|e| ShellError::UpstreamLost(e.to_string()))?;
            if n == 0 {
                return Err(ShellError::UpstreamLost("closed by the upstream".into()));
            }
            self.net.add_read(Side::Client, n);
            self.lines.feed(&chunk[..n]);
        }
    }

    async fn send(&mut self, m: Vec<u8>) -> Result<(), ShellError> {
        match tokio::time::timeout(WRITE_TIMEOUT, self.writer.write_all(&m)).await {
            Ok(Ok(())) => {
                self.net.add_written(Side::Client, m.len());
                self.net.add_lines(Side::Client, false, &m, sv1::line_kind);
                Ok(())
            }
            Ok(Err(e)) => Err(ShellError::UpstreamLost(e.to_string())),
            Err(_) => Err(ShellError::UpstreamLost("write timed out".into())),
        }
    }

    async fn close(mut self, linger: Duration) {
        let _ = self.writer.shutdown().await;
        sv2::transport::drain(&mut self.reader, linger).await;
    }

    /// Notifications (work, difficulty, extranonce) carry a method; share verdicts do not.
    fn fans_out(m: &Vec<u8>) -> bool {
        m.windows(8).any(|w| w == b"\"method\"")
    }
}
