//! The tokio shell around [`Session`]: admission control, the Noise NX handshake under the
//! pool's authority certificate, one task per connection driving the session from the miner's
//! frames, the engine's new work and a periodic tick, and the store's durability before any
//! acknowledgement.
//!
//! Socket bytes are counted from the handshake and frame sizes (payload plus Noise header and
//! MACs) and reported as `LinkBytes` with link "sv2".

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ::sv2::keys::AuthorityKeys;
use ::sv2::messages::Mining;
use ::sv2::{Limits, Message, NoiseConn, TransportError};
use events::{ConnectionClosed, ConnectionOpened, ShortStr};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

use crate::engine::Engine;
use crate::front::{stopped, Front};
use crate::store::ACK_WAIT_LIMIT;
use crate::sv2::session::{Session, Sv2Config};
use crate::Timestamp;
use edge::{BanReason, Gate, MessageBudget, Slot};

/// How often every connection checks its timeouts and lets vardiff step a quiet miner down.
const TICK: Duration = Duration::from_secs(5);

/// The next instant on a grid of `period` that every connection of this process shares. Their
/// ticks then fall due in the same millisecond and the runtime wakes once for all of them,
/// rather than once per connection at a phase of its own: 500 connections on a 5 s tick were
/// 100 wake-ups a second, a third as many as the shares of a 300/s load.
fn on_the_grid(period: Duration) -> tokio::time::Instant {
    static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(tokio::time::Instant::now);
    next_on_grid(origin, tokio::time::Instant::now(), period)
}

/// The first instant after `now` that is a whole number of `period`s after `origin`.
fn next_on_grid(
    origin: tokio::time::Instant,
    now: tokio::time::Instant,
    period: Duration,
) -> tokio::time::Instant {
    let period_ns = period.as_nanos().max(1);
    let into = now.saturating_duration_since(origin).as_nanos() % period_ns;
    now + Duration::from_nanos((period_ns - into) as u64)
}

/// Largest frame a miner may send: the largest miner message is an `OpenExtendedMiningChannel`
/// or `SetupConnection` with strings of at most 255 bytes each.
const MAX_FRAME_BYTES: usize = 8 * 1024;

/// Everything the SV2 connection tasks share.
pub struct Sv2Server {
    /// The share-accounting engine.
    pub engine: Arc<Engine>,
    /// The Mining Protocol settings.
    pub config: Arc<Sv2Config>,
    /// Admission, the sessions' clock and the frame bytes from and to miners (handshakes
    /// included; link "sv2").
    pub(crate) front: Front,
    keys: AuthorityKeys,
    cert_validity: Duration,
}

impl Sv2Server {
    /// A server with no connections yet; its clock starts now. `keys` sign each connection's
    /// Noise certificate, valid for `cert_validity`.
    pub fn new(
        engine: Arc<Engine>,
        config: Sv2Config,
        gate: Arc<Gate>,
        keys: AuthorityKeys,
        cert_validity: Duration,
    ) -> Arc<Sv2Server> {
        Arc::new(Sv2Server {
            engine,
            config: Arc::new(config),
            front: Front::new(gate, "sv2"),
            keys,
            cert_validity,
        })
    }

    /// Milliseconds since the server was made (the sessions' clock).
    pub fn now(&self) -> Timestamp {
        self.front.now()
    }

    /// Frame bytes read from and written to miners so far.
    pub fn net_bytes(&self) -> (u64, u64) {
        self.front.net.totals()
    }

    /// Accepts miners until `shutdown` turns true, then closes every connection.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let listener = self.front.gate.listeners().watch("sv2", listener);
        let stop = shutdown.clone();
        let mut tasks = JoinSet::new();
        let mut report = tokio::time::interval(TICK);
        report.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopped(&mut shutdown) => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                _ = report.tick() => self.front.net.report(&self.engine.events),
                accepted = listener.accept() => {
                    let Some((stream, peer, slot)) = self.front.admit(accepted).await else {
                        continue;
                    };
                    tasks.spawn(self.clone().connection(stream, peer, slot, stop.clone()));
                }
            }
        }
        // Connections see the same shutdown and end on their own.
        let drain = async { while tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(Duration::from_secs(5), drain)
            .await
            .is_err()
        {
            tasks.abort_all();
        }
        self.front.net.report(&self.engine.events);
    }

    async fn connection(
        self: Arc<Self>,
        stream: TcpStream,
        peer: SocketAddr,
        slot: Slot,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let local = stream.local_addr().unwrap_or(peer);
        let limits = Limits {
            handshake_timeout: self.front.admission().handshake_timeout,
            max_frame_bytes: MAX_FRAME_BYTES,
            write_timeout: self.front.admission().write_timeout,
        };
        let conn = match NoiseConn::accept_with_keys(stream, &self.keys, self.cert_validity, limits)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%peer, error = %e, "sv2 handshake failed");
                self.front
                    .gate
                    .strike(peer.ip(), self.now(), BanReason::HandshakeFailures);
                slot.close("handshake failed");
                return;
            }
        };
        let mut conn = conn;
        // Bytes, the handshake's included, and messages by type.
        conn.count_into(self.front.net.clone(), ::sv2::Side::Server);
        let mut session = Session::new(self.engine.clone(), self.config.clone());
        session.set_origin(peer.ip());
        let id = session.conn();
        if self.engine.events.is_enabled() {
            self.engine.events.emit(ConnectionOpened {
                conn: id,
                peer,
                local,
                label: ShortStr::new(""),
            });
        }
        tracing::debug!(conn = id, %peer, "sv2 miner connected");
        let why = self.drive(&mut session, conn, &mut shutdown).await;
        let now = self.now();
        if session.rejected_in_a_row() >= self.front.admission().invalid_share_ban_after {
            self.front
                .gate
                .ban(peer.ip(), now, BanReason::InvalidShares);
        }
        match why {
            "protocol" => {
                self.front
                    .gate
                    .strike(peer.ip(), now, BanReason::MalformedMessages);
            }
            // No channel opened in time; a "timeout" after one is a write that did not drain.
            "timeout" if session.channel_count() == 0 => {
                self.front
                    .gate
                    .strike(peer.ip(), now, BanReason::HandshakeFailures);
            }
            _ => {}
        }
        session.closed(now);
        slot.close(why);
        if self.engine.events.is_enabled() {
            self.engine.events.emit(ConnectionClosed {
                conn: id,
                reason: ShortStr::new(why),
            });
        }
        tracing::debug!(conn = id, why, "sv2 miner disconnected");
    }

    /// Runs the session until the connection ends; returns why.
    async fn drive(
        &self,
        session: &mut Session,
        mut conn: NoiseConn,
        shutdown: &mut watch::Receiver<bool>,
    ) -> &'static str {
        let mut work = self.engine.subscribe();
        work.mark_unchanged();
        let mut tick = tokio::time::interval_at(on_the_grid(TICK), TICK);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let started = self.now();
        let mut last_activity = started;
        let mut budget = MessageBudget::new(self.front.admission().message_rate, started);
        let mut payload = Vec::new();
        // One future for the whole connection: made afresh in every pass it would put itself
        // on the shutdown signal's list of waiters and take itself off again for every frame.
        let stop = stopped(shutdown);
        tokio::pin!(stop);
        // One timer for the "a channel opened in time" and idle deadlines, set to the earlier
        // one still ahead and moved on only when it fires (activity is not a timer update per
        // frame), so each fires on time rather than at the next tick.
        let (handshake_ms, idle_ms) = (
            self.front.admission().handshake_timeout.as_millis() as u64,
            self.front.admission().idle_timeout.as_millis() as u64,
        );
        let deadline = tokio::time::sleep(Duration::from_millis(handshake_ms.min(idle_ms)));
        tokio::pin!(deadline);
        loop {
            let mut ending: Option<&'static str> = None;
            tokio::select! {
                biased;
                _ = &mut stop => return "shutdown",
                frame = conn.read_frame() => match frame {
                    Ok(mut frame) => {
                        let now = self.now();
                        last_activity = now;
                        if !budget.take(self.front.admission().message_rate, now) {
                            return "rate";
                        }
                        // A share is timed from its frame to its verdict, as the SV1 front
                        // end times one from its line.
                        let judging = Instant::now();
                        match Message::decode_frame(frame.extension(), frame.msg_type(), &mut frame.payload) {
                            Ok(Some(m)) => {
                                let share = matches!(
                                    m,
                                    Message::Mining(
                                        Mining::SubmitSharesStandard(_)
                                            | Mining::SubmitSharesExtended(_)
                                    )
                                );
                                session.handle_message(m, now);
                                if share {
                                    self.engine
                                        .stats
                                        .share_processing(judging.elapsed().as_nanos() as u64);
                                }
                            }
                            // An extension the pool does not know: ignored, as the spec says.
                            Ok(None) => {}
                            Err(e) => {
                                tracing::debug!(conn = session.conn(), error = %e, "sv2: undecodable message");
                                return "protocol";
                            }
                        }
                        session.flush();
                        // A connection that closed its last channel is held to the time a new
                        // one has to open one.
                        if session.channel_count() == 0 && now.millis_since(started) >= handshake_ms {
                            ending = Some("timeout");
                        }
                        if session.rejected_in_a_row() >= self.front.admission().invalid_share_ban_after {
                            // Banned for it once closed (`connection`), as on the SV1 port.
                            ending = Some("invalid shares");
                        }
                    }
                    Err(e) => return e.reason(),
                },
                changed = work.changed() => {
                    if changed.is_err() {
                        return "shutdown";
                    }
                    let g = work.borrow_and_update().clone();
                    session.handle_generation(g.as_ref(), self.now());
                }
                _ = tick.tick() => session.handle_tick(self.now()),
                _ = &mut deadline => {
                    let now = self.now();
                    let opening = session.channel_count() == 0;
                    if opening && now.millis_since(started) >= handshake_ms {
                        ending = Some("timeout");
                    } else if now.millis_since(last_activity) >= idle_ms {
                        ending = Some("idle");
                    } else {
                        let mut due = last_activity.plus_millis(idle_ms);
                        if opening {
                            due = due.min(started.plus_millis(handshake_ms));
                        }
                        let wait = Duration::from_millis(due.millis_since(now).max(1));
                        deadline.as_mut().reset(tokio::time::Instant::now() + wait);
                    }
                }
            }
            // Acknowledgements wait until the store has the shares.
            if let Some(t) = session.take_pending_ticket() {
                if let Some(store) = &self.engine.store {
                    if let Err(e) = store.wait_durable_within(t, ACK_WAIT_LIMIT).await {
                        // Never acknowledge what the store could not make durable: the miner
                        // is told so, and mines on.
                        tracing::error!(conn = session.conn(), error = %e, "store failed: shares in flight answered unconfirmed");
                        session.refuse_unconfirmed();
                    }
                }
            }
            while let Some(m) = session.poll_transmit() {
                if let Err(e) = self.send(&mut conn, &m, &mut payload).await {
                    return e.reason();
                }
            }
            if let Some(c) = session.wants_close() {
                let why = c.reason();
                conn.close(Duration::from_millis(200)).await;
                return why;
            }
            if let Some(why) = ending {
                return why;
            }
        }
    }

    async fn send(
        &self,
        conn: &mut NoiseConn,
        m: &Message,
        payload: &mut Vec<u8>,
    ) -> Result<(), TransportError> {
        payload.clear();
        let msg_type = m.encode(payload)?;
        conn.send_payload(msg_type, m.extension_type(), payload)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_opened_apart_tick_together() {
        let origin = tokio::time::Instant::now();
        let ms = Duration::from_millis;
        let at = |t: Duration| next_on_grid(origin, origin + t, TICK);
        // Opened at 1.2 s and at 4.9 s: both tick at 5 s, then every 5 s.
        assert_eq!(at(ms(1_200)), origin + TICK);
        assert_eq!(at(ms(4_900)), origin + TICK);
        // On a grid point or just after it: the next one.
        assert_eq!(at(TICK), origin + 2 * TICK);
        assert_eq!(at(TICK + ms(1)), origin + 2 * TICK);
        assert_eq!(at(ms(17_500)), origin + 4 * TICK);
        // The process's own grid: a tick within one period.
        let now = tokio::time::Instant::now();
        let next = on_the_grid(TICK);
        assert!(next > now && next <= now + TICK + ms(1));
    }
}
