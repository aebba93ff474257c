//! SV1 devices under the shell: socket reads cut into lines, and the [`Device`] methods.

use std::ops::ControlFlow;

use sv1::LineBuffer;

use super::Sv1Device;
use crate::device::{CloseReason, Device, Observer, Timestamp};

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

    crate::device::delegate_to_inherent!(Sv1Device);

    fn worker_name(&self) -> String {
        self.shared.worker_name(self.index)
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
