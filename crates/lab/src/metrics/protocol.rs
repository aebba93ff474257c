//! What the protocols themselves cost on each link (docs/metrics.md, "Protocol cost"): messages
//! by type as the roles that framed them counted them (`LinkMessages`), their wire bytes against
//! their payload, and the Noise handshakes.
//!
//! Messages count in the measured window, like the links' bytes. Handshakes happen when devices
//! connect, in the warm-up: their bytes per handshake are taken over the whole run.

use std::collections::BTreeMap;

use events::{Direction, EventKind};

use super::input::{RoleKind, Window};
use crate::results::{Distribution, MessageFigures, UpDown};
use crate::stats::{summarize, Samples};

use super::merge::tally;
use events::HANDSHAKE;

tally! {
    /// Raw counts, mergeable across trials.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct ProtocolTally {
        /// (link, `up`/`down`, message) -> [count, wire bytes, payload bytes], in the measured window.
        pub messages: BTreeMap<(String, &'static str, String), [u64; 3]>,
        /// (link, `up`/`down`) -> [handshakes, bytes], over the whole run.
        pub handshakes: BTreeMap<(String, &'static str), [u64; 2]>,
        /// The pool site's handshake times, one cluster each.
        pub handshake_time: Samples,
    }
}

impl ProtocolTally {
    /// Adds one event of the role `role` (its name in the run), of kind `kind`: taps relay
    /// other roles' bytes and are left out.
    pub(crate) fn on_event(
        &mut self,
        w: &Window,
        role: &str,
        kind: RoleKind,
        ts: u64,
        e: &EventKind,
    ) {
        if kind == RoleKind::Tap {
            return;
        }
        let m = match e {
            EventKind::LinkMessages(m) => m,
            // The server's view of each handshake: one sample per connection, from the end
            // that accepts every farm's (a client's view would add a round trip).
            // Not the pool's own handshake with its Template Provider, where it is the
            // initiator.
            EventKind::LinkHandshake(h) if kind == RoleKind::Pool && h.link.as_str() != "tp" => {
                let n = self.handshake_time.len() as u32;
                self.handshake_time.push(n, h.duration_ns);
                return;
            }
            _ => return,
        };
        let link = counted_at(role, m.link.as_str());
        if m.message.as_str() == HANDSHAKE {
            let h = self
                .handshakes
                .entry((link, direction(m.direction)))
                .or_default();
            h[0] += m.count;
            h[1] += m.bytes;
            return;
        }
        if !w.measured(ts) {
            return;
        }
        let c = self
            .messages
            .entry((link, direction(m.direction), m.message.as_str().to_owned()))
            .or_default();
        c[0] += m.count;
        c[1] += m.bytes;
        c[2] += m.payload_bytes;
    }

    /// `protocol.handshake_ms`.
    pub fn handshake_ms(&self) -> Distribution {
        summarize(
            &self.handshake_time,
            "no Noise handshake at a pool-site role of ours (SV1, or a third-party pool)",
        )
    }

    /// `protocol.messages`: link, then `up`/`down`, then message.
    pub fn messages(&self) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, MessageFigures>>> {
        let mut out: BTreeMap<String, BTreeMap<String, BTreeMap<String, MessageFigures>>> =
            BTreeMap::new();
        for ((link, dir, msg), &[count, bytes, payload]) in &self.messages {
            out.entry(link.clone())
                .or_default()
                .entry((*dir).to_owned())
                .or_default()
                .insert(
                    msg.clone(),
                    MessageFigures {
                        count,
                        bytes,
                        mean_bytes: bytes as f64 / count.max(1) as f64,
                        payload_bytes: payload,
                    },
                );
        }
        out
    }

    /// `protocol.overhead_pct`: per link, the share of its messages' wire bytes that is not
    /// their payload (framing, encryption, line ends), both directions.
    pub fn overhead_pct(&self) -> BTreeMap<String, f64> {
        let mut sums: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for ((link, _, _), &[_, bytes, payload]) in &self.messages {
            let s = sums.entry(link).or_default();
            s.0 += bytes;
            s.1 += payload;
        }
        sums.into_iter()
            .filter(|(_, (bytes, _))| *bytes > 0)
            .map(|(link, (bytes, payload))| {
                let overhead = bytes.saturating_sub(payload) as f64;
                (link.to_owned(), overhead / bytes as f64 * 100.0)
            })
            .collect()
    }

    /// `protocol.handshake_bytes`: per link, the mean bytes of one Noise handshake each way.
    pub fn handshake_bytes(&self) -> BTreeMap<String, UpDown> {
        let mut out: BTreeMap<String, UpDown> = BTreeMap::new();
        for ((link, dir), &[n, bytes]) in &self.handshakes {
            let mean = bytes as f64 / n.max(1) as f64;
            let e = out.entry(link.clone()).or_default();
            if *dir == "up" {
                e.up = mean;
            } else {
                e.down = mean;
            }
        }
        out
    }
}

/// The key a role's counts go under: the role (its name without the configuration and the
/// chunk number: `C.translator0` is `translator`) and the link as the role names it. Several
/// roles name their sides alike (a JDC's device side and the pool's are both `sv2`), and the
/// two ends of one link each count it: the role tells them apart.
pub fn counted_at(role: &str, link: &str) -> String {
    let role = role.rsplit_once('.').map_or(role, |(_, r)| r);
    let role = role.trim_end_matches(|c: char| c.is_ascii_digit());
    format!("{role}.{link}")
}

fn direction(d: Direction) -> &'static str {
    match d {
        Direction::Up => "up",
        Direction::Down => "down",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use events::{LinkMessages, ShortStr};

    fn msg(
        link: &str,
        direction: Direction,
        name: &str,
        count: u64,
        bytes: u64,
        payload: u64,
    ) -> EventKind {
        EventKind::LinkMessages(LinkMessages {
            link: ShortStr::new(link),
            direction,
            message: ShortStr::new(name),
            count,
            bytes,
            payload_bytes: payload,
        })
    }

    #[test]
    fn messages_overhead_and_handshakes_are_what_the_roles_counted() {
        let s = 1_000_000_000;
        let w = Window {
            start_ns: 0,
            warmup_end_ns: 10 * s,
            drain_start_ns: 100 * s,
            end_ns: 105 * s,
        };
        let mut t = ProtocolTally::default();
        // Handshakes at connect, in the warm-up: counted all the same.
        t.on_event(
            &w,
            "C.pool",
            RoleKind::Pool,
            s,
            &msg("sv2", Direction::Up, HANDSHAKE, 2, 128, 0),
        );
        t.on_event(
            &w,
            "C.pool",
            RoleKind::Pool,
            s,
            &msg("sv2", Direction::Down, HANDSHAKE, 2, 468, 0),
        );
        // A share before the window: not counted; two in it.
        t.on_event(
            &w,
            "C.pool",
            RoleKind::Pool,
            5 * s,
            &msg("sv2", Direction::Up, "SubmitSharesStandard", 1, 60, 38),
        );
        t.on_event(
            &w,
            "C.pool",
            RoleKind::Pool,
            20 * s,
            &msg("sv2", Direction::Up, "SubmitSharesStandard", 2, 120, 76),
        );
        t.on_event(
            &w,
            "C.pool",
            RoleKind::Pool,
            30 * s,
            &msg("sv2", Direction::Down, "NewMiningJob", 1, 70, 48),
        );
        // A tap's relay of the same link: never.
        t.on_event(
            &w,
            "C.tap0",
            RoleKind::Tap,
            30 * s,
            &msg("sv2", Direction::Down, "NewMiningJob", 9, 9, 9),
        );
        let m = t.messages();
        let share = &m["pool.sv2"]["up"]["SubmitSharesStandard"];
        assert_eq!(
            (share.count, share.bytes, share.payload_bytes),
            (2, 120, 76)
        );
        assert_eq!(share.mean_bytes, 60.0);
        assert_eq!(m["pool.sv2"]["down"]["NewMiningJob"].count, 1);
        let o = t.overhead_pct()["pool.sv2"];
        assert!((o - (190.0 - 124.0) / 190.0 * 100.0).abs() < 1e-9, "{o}");
        let h = t.handshake_bytes()["pool.sv2"];
        assert_eq!((h.up, h.down), (64.0, 234.0));
        // Handshake times: the pool's, not a farm role's.
        for (kind, ms) in [
            (RoleKind::Pool, 3),
            (RoleKind::Pool, 5),
            (RoleKind::Proxy, 500),
        ] {
            let e = EventKind::LinkHandshake(events::LinkHandshake {
                link: ShortStr::new("sv2"),
                duration_ns: ms * 1_000_000,
                up_bytes: 64,
                down_bytes: 234,
            });
            t.on_event(&w, "C.pool", kind, s, &e);
        }
        let d = t.handshake_ms();
        assert_eq!(counted_at("A.jdc12", "sv2"), "jdc.sv2");
        assert_eq!(counted_at("pool", "sv1"), "pool.sv1");
        assert_eq!((d.n, d.max), (2, Some(5.0)));
    }
}
