//! The connection edge's flags, the same names, defaults and meanings on every role that
//! listens (`pool`, `jdc`, `translator`, `proxy`, `jds`), declared once here and flattened into
//! each role's flags; in a config file they are top-level keys like the role's own
//! (docs/operations.md "The connection edge").

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use edge::{Admission, Rate};
use serde::{Deserialize, Serialize};

use crate::config::Dur;

/// The edge flags. Every one is optional: what is not given comes from the config file, then
/// from the role's defaults (which are [`Admission::default`] unless the role says otherwise).
#[derive(Args, Serialize, Deserialize, Default, Clone, Debug)]
pub struct EdgeArgs {
    /// Most connections at once [default: 15000; the farm proxies: 10000].
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// Most connections at once from one source address [default: 1000]. A farm whose devices
    /// all reach the role through one address (NAT) raises it to its device count.
    #[arg(long, value_name = "N")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_ip: Option<usize>,
    /// New connections per second from one source address [default: 500].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_rate: Option<f64>,
    /// Connections one source address may open at once before --connect-rate applies
    /// [default: 1000, the per-address cap: a farm reconnects all at once after a restart].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_burst: Option<f64>,
    /// Messages per second one connection may send [default: 1000: an aggregating proxy speaks
    /// for many devices].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_rate: Option<f64>,
    /// Messages one connection may send at once before --message-rate applies [default: 5000].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_burst: Option<f64>,
    /// Longest SV1 line accepted, in bytes; a longer one is answered with an error and closed
    /// [default: 8192].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_line: Option<usize>,
    /// A connection must finish its handshake (SV1: subscribe and authorize; SV2: Noise and
    /// SetupConnection) within this long; 0 waits forever [default: 30s].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handshake_timeout: Option<Dur>,
    /// A connection that sends nothing for this long is closed; 0 never [default: 10m].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Dur>,
    /// A connection whose replies and work do not drain for this long (the peer stopped
    /// reading) is closed and its buffers freed [default: 10s].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_timeout: Option<Dur>,
    /// This many rejected shares in a row (stale ones excepted) ban the source address; 0 never
    /// bans [default: 200].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid_share_ban_after: Option<u32>,
    /// How long a ban lasts [default: 10m].
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ban_duration: Option<Dur>,
}

impl EdgeArgs {
    /// The limits: what was given over `defaults`, checked.
    pub fn admission(&self, defaults: Admission) -> Result<Admission> {
        let d = defaults;
        let max_connections = self.max_connections.unwrap_or(d.max_connections);
        let per_ip = self
            .max_connections_per_ip
            .unwrap_or(d.max_connections_per_ip);
        let rate = |name: &str, per_second: Option<f64>, burst: Option<f64>, d: Rate| {
            let (per_second, burst) =
                (per_second.unwrap_or(d.per_second), burst.unwrap_or(d.burst));
            if !(per_second > 0.0 && per_second.is_finite()) {
                bail!("--{name}-rate must be a positive number, not {per_second}");
            }
            if !(burst >= 1.0 && burst.is_finite()) {
                bail!("--{name}-burst must be at least 1, not {burst}");
            }
            Ok(Rate { per_second, burst })
        };
        let max_line = self.max_line.unwrap_or(d.max_line);
        if max_line < 512 {
            // A subscribe with a long user agent already needs a few hundred.
            bail!("--max-line must be at least 512 bytes, not {max_line}");
        }
        if max_connections == 0 {
            bail!("--max-connections must be at least 1");
        }
        if per_ip == 0 {
            bail!("--max-connections-per-ip must be at least 1");
        }
        // "0 disables", as every duration on the command line; the edge has no "never".
        let never = Duration::from_secs(100 * 365 * 86_400);
        let or_never = |given: Option<Dur>, d: Duration| match given {
            Some(g) if g.is_zero() => never,
            Some(g) => g.0,
            None => d,
        };
        let write_timeout = self.write_timeout.map_or(d.write_timeout, |w| w.0);
        if write_timeout.is_zero() {
            bail!("--write-timeout must be more than 0: a peer that stops reading must not hold its place forever");
        }
        let mut connect_rate = rate(
            "connect",
            self.connect_rate,
            self.connect_burst,
            d.connect_rate,
        )?;
        if self.connect_burst.is_none() {
            // The default burst follows a raised per-address cap: a farm behind one address
            // that may hold N connections may also reconnect N at once.
            connect_rate.burst = connect_rate.burst.max(per_ip as f64);
        }
        Ok(Admission {
            max_connections,
            max_connections_per_ip: per_ip,
            connect_rate,
            message_rate: rate(
                "message",
                self.message_rate,
                self.message_burst,
                d.message_rate,
            )?,
            max_line,
            handshake_timeout: or_never(self.handshake_timeout, d.handshake_timeout),
            idle_timeout: or_never(self.idle_timeout, d.idle_timeout),
            write_timeout,
            invalid_share_ban_after: match self.invalid_share_ban_after {
                Some(0) => u32::MAX,
                Some(n) => n,
                None => d.invalid_share_ban_after,
            },
            ban_duration: self.ban_duration.map_or(d.ban_duration, |b| b.0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_edges() {
        let a = EdgeArgs::default().admission(Admission::default()).unwrap();
        assert_eq!(a, Admission::default());
        assert!(
            a.connect_rate.burst <= a.max_connections_per_ip as f64,
            "the burst is no larger than the per-address cap"
        );
        assert!(a.max_connections_per_ip < a.max_connections);
    }

    #[test]
    fn a_raised_per_address_cap_raises_the_default_burst_only() {
        let a = EdgeArgs {
            max_connections_per_ip: Some(5_000),
            ..EdgeArgs::default()
        };
        assert_eq!(
            a.admission(Admission::default())
                .unwrap()
                .connect_rate
                .burst,
            5_000.0
        );
        let b = EdgeArgs {
            max_connections_per_ip: Some(5_000),
            connect_burst: Some(10.0),
            ..EdgeArgs::default()
        };
        assert_eq!(
            b.admission(Admission::default())
                .unwrap()
                .connect_rate
                .burst,
            10.0
        );
    }

    #[test]
    fn bad_values_are_refused_with_the_flags_name() {
        let cases: [(EdgeArgs, &str); 5] = [
            (
                EdgeArgs {
                    max_connections_per_ip: Some(0),
                    ..Default::default()
                },
                "--max-connections-per-ip",
            ),
            (
                EdgeArgs {
                    connect_rate: Some(0.0),
                    ..Default::default()
                },
                "--connect-rate",
            ),
            (
                EdgeArgs {
                    message_burst: Some(0.5),
                    ..Default::default()
                },
                "--message-burst",
            ),
            (
                EdgeArgs {
                    write_timeout: Some(Dur::ZERO),
                    ..Default::default()
                },
                "--write-timeout",
            ),
            (
                EdgeArgs {
                    max_line: Some(10),
                    ..Default::default()
                },
                "--max-line",
            ),
        ];
        for (args, flag) in cases {
            let e = args
                .admission(Admission::default())
                .unwrap_err()
                .to_string();
            assert!(e.contains(flag), "{e}");
        }
    }

    #[test]
    fn zero_timeouts_mean_never() {
        let a = EdgeArgs {
            idle_timeout: Some(Dur::ZERO),
            handshake_timeout: Some(Dur::ZERO),
            ..Default::default()
        }
        .admission(Admission::default())
        .unwrap();
        assert!(a.idle_timeout > Duration::from_secs(86_400 * 365));
        assert!(a.handshake_timeout > Duration::from_secs(86_400 * 365));
    }
}
