//! The farm proxy's own socket bytes (docs/metrics.md `roles.<name>.net_*_bytes`: /proc cannot give
//! them per process): the device side and the upstream connection in use, as `LinkBytes` on
//! the `sv1` and `upstream` links, with the links' directions (up: toward the pool).

use std::sync::Arc;

use events::{EventSink, LinkCounter};

#[derive(Debug)]
pub(crate) struct Net {
    /// Every device connection: what devices send goes up.
    pub devices: Arc<LinkCounter>,
    /// Every upstream connection in turn: what the proxy sends goes up.
    pub upstream: Arc<LinkCounter>,
}

impl Net {
    pub(crate) fn new() -> Arc<Net> {
        Arc::new(Net {
            devices: LinkCounter::new("sv1"),
            upstream: LinkCounter::new("upstream"),
        })
    }

    /// Emits what was counted since the last report.
    pub(crate) fn report(&self, events: &EventSink) {
        self.devices.report(events);
        self.upstream.report(events);
    }
}
