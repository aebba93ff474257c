//! SV1 devices under the shell: socket reads cut into lines, and the [`Device`] methods.

use super::Sv1Device;
use crate::device::{CloseReason, Device, HashOutcome, Nanos, Observer};

/// A line a socket read cut in half, kept until its end arrives (and released then, so that an
/// idle connection holds no buffer).
#[derive(Default)]
pub struct PartialLine(Vec<u8>);

impl Sv1Device {
    /// Splits received bytes into lines and hands each complete one to the device. A line
    /// longer than `max_line` closes the connection.
    pub fn feed<O: Observer>(
        &mut self,
        partial: &mut PartialLine,
        data: &[u8],
        max_line: usize,
        now: Nanos,
        obs: &mut O,
    ) -> Result<(), CloseReason> {
        let partial = &mut partial.0;
        let mut rest = data;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            let piece = &rest[..i];
            rest = &rest[i + 1..];
            if partial.is_empty() {
                if piece.len() > max_line {
                    return Err(CloseReason::Protocol);
                }
                self.deliver(piece, now, obs);
            } else {
                partial.extend_from_slice(piece);
                if partial.len() > max_line {
                    return Err(CloseReason::Protocol);
                }
                self.deliver(partial, now, obs);
                *partial = Vec::new();
            }
            if self.close_requested().is_some() {
                return Ok(());
            }
        }
        if !rest.is_empty() {
            partial.extend_from_slice(rest);
            if partial.len() > max_line {
                return Err(CloseReason::Protocol);
            }
        }
        Ok(())
    }

    fn deliver<O: Observer>(&mut self, line: &[u8], now: Nanos, obs: &mut O) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.handle_line(line, now, obs);
    }
}

impl Device for Sv1Device {
    type Receive = PartialLine;

    fn id(&self) -> u64 {
        Sv1Device::id(self)
    }
    fn index(&self) -> u32 {
        Sv1Device::index(self)
    }
    fn worker_name(&self) -> String {
        self.shared.worker_name(self.index)
    }
    fn wants_connect(&self, now: Nanos) -> bool {
        Sv1Device::wants_connect(self, now)
    }
    fn next_deadline(&self) -> Option<Nanos> {
        Sv1Device::next_deadline(self)
    }
    fn on_connected(&mut self, now: Nanos) {
        Sv1Device::on_connected(self, now)
    }
    fn on_connect_failed(&mut self, now: Nanos) {
        Sv1Device::on_connect_failed(self, now)
    }
    fn on_closed<O: Observer>(&mut self, now: Nanos, reason: CloseReason, obs: &mut O) {
        Sv1Device::on_closed(self, now, reason, obs)
    }
    fn close_requested(&self) -> Option<CloseReason> {
        Sv1Device::close_requested(self)
    }
    fn is_ready(&self) -> bool {
        Sv1Device::is_ready(self)
    }
    fn can_hash(&self) -> bool {
        Sv1Device::can_hash(self)
    }
    fn on_timeout<O: Observer>(&mut self, now: Nanos, obs: &mut O) {
        Sv1Device::on_timeout(self, now, obs)
    }
    fn hash<O: Observer>(&mut self, now: Nanos, max_hashes: u64, obs: &mut O) -> HashOutcome {
        Sv1Device::hash(self, now, max_hashes, obs)
    }
    fn poll_transmit<O: Observer>(&mut self, out: &mut Vec<u8>, now: Nanos, obs: &mut O) -> usize {
        Sv1Device::poll_transmit(self, out, now, obs)
    }
    fn receive<O: Observer>(
        &mut self,
        rx: &mut PartialLine,
        data: &[u8],
        max_message: usize,
        now: Nanos,
        obs: &mut O,
    ) -> Result<(), CloseReason> {
        self.feed(rx, data, max_message, now, obs)
    }
}
