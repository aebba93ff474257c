//! SV1 devices under the shell: socket reads cut into lines, and the [`Device`] methods.

use std::ops::ControlFlow;

use sv1::LineBuffer;

use super::Sv1Device;
use crate::device::{CloseReason, Device, HashOutcome, Observer, Timestamp};

impl Sv1Device {
    /// Splits received bytes into lines and hands each complete one to the device. `lines` is
    /// made at the first read (with `max_line`) and holds a line a read cut in half until its
    /// end arrives (no allocation otherwise, so an idle connection holds no buffer). A line
    /// longer than `max_line` closes the connection.
    pub fn feed<O: Observer>(
        &mut self,
        lines: &mut Option<LineBuffer>,
        data: &[u8],
        max_line: usize,
        now: Timestamp,
        obs: &mut O,
    ) -> Result<(), CloseReason> {
        let lines = lines.get_or_insert_with(|| LineBuffer::new(max_line));
        let framed = lines.split(data, |line| {
            self.handle_line(line, now, obs);
            match self.close_requested() {
                Some(_) => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            }
        });
        match framed {
            Ok(_) => Ok(()),
            Err(_) => Err(CloseReason::Protocol),
        }
    }
}

impl Device for Sv1Device {
    type Receive = Option<LineBuffer>;

    fn id(&self) -> u64 {
        Sv1Device::id(self)
    }
    fn index(&self) -> u32 {
        Sv1Device::index(self)
    }
    fn worker_name(&self) -> String {
        self.shared.worker_name(self.index)
    }
    fn wants_connect(&self, now: Timestamp) -> bool {
        Sv1Device::wants_connect(self, now)
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        Sv1Device::poll_timeout(self)
    }
    fn handle_connected(&mut self, now: Timestamp) {
        Sv1Device::handle_connected(self, now)
    }
    fn handle_connect_failed(&mut self, now: Timestamp) {
        Sv1Device::handle_connect_failed(self, now)
    }
    fn handle_closed<O: Observer>(&mut self, now: Timestamp, reason: CloseReason, obs: &mut O) {
        Sv1Device::handle_closed(self, now, reason, obs)
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
    fn handle_timeout<O: Observer>(&mut self, now: Timestamp, obs: &mut O) {
        Sv1Device::handle_timeout(self, now, obs)
    }
    fn hash<O: Observer>(&mut self, now: Timestamp, max_hashes: u64, obs: &mut O) -> HashOutcome {
        Sv1Device::hash(self, now, max_hashes, obs)
    }
    fn poll_transmit<O: Observer>(
        &mut self,
        out: &mut Vec<u8>,
        now: Timestamp,
        obs: &mut O,
    ) -> usize {
        Sv1Device::poll_transmit(self, out, now, obs)
    }
    fn receive<O: Observer>(
        &mut self,
        rx: &mut Option<LineBuffer>,
        data: &[u8],
        max_message: usize,
        now: Timestamp,
        obs: &mut O,
    ) -> Result<(), CloseReason> {
        self.feed(rx, data, max_message, now, obs)
    }
}
