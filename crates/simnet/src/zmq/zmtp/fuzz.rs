//! The ZMTP reader under arbitrary bytes, shared by the cargo-fuzz target `zmtp_reader`
//! (crates/simnet/fuzz) and the stable test that replays its corpus (tests/fuzz_corpus.rs).
//!
//! The input is a byte stream a subscriber might send, optionally behind a well-formed greeting
//! and READY (so that mutations start past the handshake, which random bytes rarely pass), cut
//! into reads at points the input chooses. [`reader`] feeds it to a [`Decoder`] and checks:
//!
//! - no panic, whatever the bytes and however they are cut;
//! - **split invariance**: the events and the verdict (`Ok`, or the first error) are the same
//!   whether the stream arrives whole, in the input's reads, or a byte at a time; after an
//!   error the decoder is fed no more (as `peer::read_loop` closes the connection);
//! - **bounded buffering**: after every read the decoder holds less than one greeting while
//!   greeting, else less than one frame header and the largest body it buffers
//!   ([`MAX_COMMAND`]); a frame too long to mean anything is skipped, not held;
//! - **the event grammar** a PUB socket acts on: `Greeting` first and once, `Ready` once and
//!   only right after it, subscriptions, cancels and pings only once ready; a ping context of
//!   at most 16 bytes; `is_ready` exactly when `Ready` was emitted;
//! - **what it accepts re-encodes**: every subscription, cancel and ping it read, written back
//!   as the frames a libzmq subscriber sends (a ZMTP 3.0 message when short enough, and a
//!   ZMTP 3.1 command) behind a fresh handshake, reads back as the same events;
//! - our own frames are well-formed: our greeting passes the greeting check, our READY reads as
//!   a READY (and is refused only for its socket type, PUB, which cannot subscribe to a PUB),
//!   a PONG for each ping reads back as a command we ignore.

use super::*;

/// Input flag bits (the first byte).
mod flag {
    /// Put a well-formed greeting before the stream.
    pub(super) const GREETING: u8 = 0x01;
    /// And a well-formed READY (`Socket-Type: SUB`) after it.
    pub(super) const READY: u8 = 0x02;
    /// The handshake announces ZMTP 3.0 rather than 3.1.
    pub(super) const V30: u8 = 0x04;
    /// The READY says XSUB.
    pub(super) const XSUB: u8 = 0x08;
}

/// Most read lengths an input gives; they are used in turn, over again.
const MAX_CUTS: usize = 16;

/// A subscriber's greeting and READY, as libzmq writes them.
pub fn sub_handshake(v30: bool, xsub: bool) -> Vec<u8> {
    let mut out = encode_greeting().to_vec();
    if v30 {
        out[11] = 0;
    }
    let socket_type: &[u8] = if xsub { b"XSUB" } else { b"SUB" };
    let mut body = Vec::new();
    push_name(&mut body, b"READY");
    push_name(&mut body, b"Socket-Type");
    body.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    body.extend_from_slice(socket_type);
    push_name(&mut body, b"Identity");
    body.extend_from_slice(&0u32.to_be_bytes());
    push_frame(&mut out, FLAG_COMMAND, &body);
    out
}

/// A command frame named `name` carrying `data`.
pub fn command_frame(name: &[u8], data: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(1 + name.len() + data.len());
    push_name(&mut body, name);
    body.extend_from_slice(data);
    let mut out = Vec::with_capacity(body.len() + 9);
    push_frame(&mut out, FLAG_COMMAND, &body);
    out
}

/// Writes a fuzz input: the flag byte, the read lengths, then the stream.
pub fn input(flags: u8, cuts: &[u8], stream: &[u8]) -> Vec<u8> {
    assert!(cuts.len() <= MAX_CUTS);
    let mut out = vec![flags, cuts.len() as u8];
    out.extend_from_slice(cuts);
    out.extend_from_slice(stream);
    out
}

/// What feeding a stream came to.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    events: Vec<Event>,
    result: Result<(), ZmtpError>,
    ready: bool,
}

/// Feeds `stream` in reads of the lengths `cuts` gives (in turn; 0 reads as 1), checking the
/// buffer bound after every read; stops at the first error.
fn feed_in_reads(stream: &[u8], mut cuts: impl FnMut() -> usize) -> Outcome {
    let mut d = Decoder::new();
    let mut events = Vec::new();
    let mut rest = stream;
    let mut result = Ok(());
    while !rest.is_empty() {
        let n = cuts().clamp(1, rest.len());
        let (read, after) = rest.split_at(n);
        rest = after;
        result = d.feed(read, &mut events);
        if result.is_err() {
            break;
        }
        check_buffered(&d);
    }
    Outcome {
        events,
        result,
        ready: d.is_ready(),
    }
}

/// Less than one greeting, or one frame header and the largest body buffered.
fn check_buffered(d: &Decoder) {
    let bound = match d.stage {
        Stage::Greeting => GREETING_LEN,
        Stage::Handshake | Stage::Traffic => 9 + MAX_COMMAND as usize,
    };
    assert!(
        d.buf.len() < bound,
        "{} bytes buffered at {:?}",
        d.buf.len(),
        d.stage
    );
    if d.skip > 0 {
        assert!(d.buf.is_empty(), "bytes buffered while skipping a frame");
    }
}

/// The event grammar of a PUB socket's peer.
fn check_grammar(o: &Outcome) {
    let mut ready = false;
    for (i, e) in o.events.iter().enumerate() {
        match e {
            Event::Greeting => assert_eq!(i, 0, "a greeting after other events"),
            Event::Ready => {
                assert_eq!(i, 1, "READY not right after the greeting");
                ready = true;
            }
            Event::Subscribe(_) | Event::Cancel(_) => assert!(ready, "{e:?} before READY"),
            Event::Ping(c) => {
                assert!(ready, "PING before READY");
                assert!(
                    c.len() <= MAX_PING_CONTEXT,
                    "ping context of {} bytes",
                    c.len()
                );
            }
        }
    }
    assert_eq!(o.ready, ready, "is_ready disagrees with the events");
}

/// Traffic events written back as a subscriber's frames, in the form `command` picks.
fn reencode(events: &[Event], command: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for e in events {
        match e {
            Event::Subscribe(topic) | Event::Cancel(topic) => {
                let subscribe = matches!(e, Event::Subscribe(_));
                // The message form takes a kind byte before the topic, within the length we
                // interpret; longer topics only travel as commands.
                if command || topic.len() + 1 > MAX_SUBSCRIPTION as usize {
                    let name: &[u8] = if subscribe { b"SUBSCRIBE" } else { b"CANCEL" };
                    out.extend_from_slice(&command_frame(name, topic));
                } else {
                    let mut body = vec![u8::from(subscribe)];
                    body.extend_from_slice(topic);
                    out.extend_from_slice(&encode_message(&[&body]));
                }
            }
            Event::Ping(context) => {
                let mut data = vec![0, 10];
                data.extend_from_slice(context);
                out.extend_from_slice(&command_frame(b"PING", &data));
            }
            Event::Greeting | Event::Ready => {}
        }
    }
    out
}

/// Our own frames read back as they should.
fn check_our_frames(events: &[Event]) {
    let mut out = Vec::new();
    assert_eq!(check_greeting_prefix(&encode_greeting()), Ok(()));
    let mut d = Decoder::new();
    let mut ready = encode_greeting().to_vec();
    ready.extend_from_slice(&encode_ready());
    assert_eq!(
        d.feed(&ready, &mut out),
        Err(ZmtpError::IncompatibleSocketType("PUB".into()))
    );
    assert_eq!(out, [Event::Greeting]);
    let mut d = Decoder::new();
    out.clear();
    d.feed(&sub_handshake(false, false), &mut out).unwrap();
    for e in events {
        if let Event::Ping(context) = e {
            d.feed(&encode_pong(context), &mut out).unwrap();
        }
    }
    assert_eq!(out, [Event::Greeting, Event::Ready], "a PONG made an event");
}

/// One input: see the module documentation. Never panics unless an invariant breaks.
pub fn reader(data: &[u8]) {
    let (&flags, rest) = data.split_first().unwrap_or((&0, &[]));
    let (&ncuts, rest) = rest.split_first().unwrap_or((&0, &[]));
    let ncuts = usize::from(ncuts).min(MAX_CUTS).min(rest.len());
    let (cuts, payload) = rest.split_at(ncuts);

    let mut stream = Vec::with_capacity(payload.len() + 128);
    if flags & flag::GREETING != 0 {
        let handshake = sub_handshake(flags & flag::V30 != 0, flags & flag::XSUB != 0);
        if flags & flag::READY != 0 {
            stream.extend_from_slice(&handshake);
        } else {
            stream.extend_from_slice(&handshake[..GREETING_LEN]);
        }
    }
    stream.extend_from_slice(payload);

    let whole = feed_in_reads(&stream, || usize::MAX);
    check_grammar(&whole);
    let mut i = 0;
    let split = feed_in_reads(&stream, || {
        let n = cuts
            .get(i % cuts.len().max(1))
            .map_or(1, |&c| usize::from(c));
        i += 1;
        n
    });
    assert_eq!(split, whole, "reads cut at {cuts:?} read differently");
    // Byte at a time (kept to short streams: it costs a call per byte).
    if stream.len() <= 4096 {
        let bytes = feed_in_reads(&stream, || 1);
        assert_eq!(bytes, whole, "a byte at a time read differently");
    }

    // What it accepted, written back in both forms, reads back the same.
    let traffic: Vec<Event> = whole
        .events
        .iter()
        .filter(|e| !matches!(e, Event::Greeting | Event::Ready))
        .cloned()
        .collect();
    for command in [false, true] {
        let mut again = sub_handshake(flags & flag::V30 != 0, false);
        again.extend_from_slice(&reencode(&traffic, command));
        let back = feed_in_reads(&again, || usize::MAX);
        assert_eq!(back.result, Ok(()), "re-encoded traffic refused");
        assert_eq!(&back.events[..2], [Event::Greeting, Event::Ready]);
        assert_eq!(
            back.events[2..],
            traffic[..],
            "re-encoded traffic read back otherwise"
        );
    }
    check_our_frames(&traffic);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_subscriptions_and_pings_hold_the_invariants() {
        let mut stream = encode_message(&[b"\x01hashblock"]);
        stream.extend_from_slice(&command_frame(b"SUBSCRIBE", b"raw"));
        stream.extend_from_slice(&command_frame(b"PING", b"\x00\x0aabc"));
        stream.extend_from_slice(&encode_message(&[b"\x00hashblock", b"more"]));
        reader(&input(flag::GREETING | flag::READY, &[1, 7, 64], &stream));
        reader(&input(
            flag::GREETING | flag::READY | flag::V30 | flag::XSUB,
            &[],
            &stream,
        ));
        // The same stream without the handshake: refused at its first byte.
        reader(&input(0, &[3], &stream));
        // A long topic only travels as a command.
        let long = command_frame(b"SUBSCRIBE", &[b'h'; 300]);
        reader(&input(flag::GREETING | flag::READY, &[200], &long));
    }

    #[test]
    fn huge_frames_are_skipped_however_they_arrive() {
        let mut stream = vec![FLAG_LONG];
        stream.extend_from_slice(&(1u64 << 40).to_be_bytes());
        stream.extend_from_slice(&[1; 1000]);
        reader(&input(flag::GREETING | flag::READY, &[5, 3, 250], &stream));
    }

    #[test]
    fn garbage_and_short_inputs_hold_the_invariants() {
        for data in [
            &b""[..],
            b"\x00",
            b"\x01\x00",
            b"\x03\x02\x01\x01\x04\xff",
            b"\x01\x00\x04\x05\x04PING",
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            reader(data);
        }
    }
}
