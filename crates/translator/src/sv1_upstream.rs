//! The SV1 proxy's upstream, sans-IO: one Stratum V1 connection to a pool, carrying every
//! device's shares. It plays the part the extended channel plays for the translator
//! ([`crate::Uplink`]): the pool's `extranonce1` is the prefix, its `extranonce2_size` the
//! bytes the devices split, `mining.set_difficulty` the target and `mining.notify` the work.
//!
//! The opening is the customary one of mining firmware: `mining.configure` (version rolling
//! with the proxy's mask), `mining.subscribe`, `mining.extranonce.subscribe`, then
//! `mining.authorize`; the channel is open once subscribe and authorize succeeded.
//!
//! SV1 has no sequence numbers: each submission's JSON-RPC id is mapped to the translator's
//! sequence number, and its verdict reported under it. SV1 error codes are reported as the
//! SV2 code of the same reason, so that one vocabulary reaches the accounting.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use events::Reason;
use primitives::{CompactTarget, Difficulty, Target};
use sv1::{write, Method, Notify, Value};

use crate::shares::LocalShare;
use crate::uplink::Uplink;
use crate::upstream::{ChannelRequest, ExtendedJob, PrevHash, UpstreamError, UpstreamEvent, Work};

/// SV1 job ids remembered for submissions; a share on an older job is stale anyway.
const MAX_JOBS: usize = 32;
/// Submissions awaiting a reply at most (the translator's in-flight window bounds it too).
const MAX_PENDING: usize = 8_192;
/// The longest extranonce1 taken from a pool.
const MAX_EXTRANONCE1: usize = 16;

/// What a reply answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pending {
    Configure,
    Subscribe,
    ExtranonceSubscribe,
    Authorize,
    Submit(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Opening { subscribed: bool, authorized: bool },
    Open,
    Closed,
}

/// The upstream as one SV1 connection (the aggregating SV1 proxy): subscribe, authorize,
/// `mining.notify` as work, devices' shares as `mining.submit`.
#[derive(Debug)]
pub struct Sv1Upstream {
    state: State,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    worker: String,
    /// The version-rolling mask asked for, then the one granted (0: none).
    mask: u32,
    extranonce_prefix: Arc<[u8]>,
    extranonce_size: usize,
    /// The target of the jobs to come (`mining.set_difficulty` applies from the next job).
    target: Target,
    next_target: Option<Target>,
    /// SV1 job ids by the number the translator knows them by, newest last.
    jobs: VecDeque<(u32, Box<str>)>,
    next_job: u32,
    prev: Option<PrevHash>,
    epochs: u64,
    /// The latest job sent between the subscribe and the authorize answers.
    held: Option<Work>,
}

impl Default for Sv1Upstream {
    fn default() -> Self {
        Self::new()
    }
}

impl Sv1Upstream {
    /// A connection not yet subscribed.
    pub fn new() -> Self {
        Sv1Upstream {
            state: State::Idle,
            next_id: 1,
            pending: HashMap::new(),
            worker: String::new(),
            mask: 0x1fff_e000,
            extranonce_prefix: Arc::from(&[][..]),
            extranonce_size: 0,
            target: Difficulty::ONE.to_target(),
            next_target: None,
            jobs: VecDeque::new(),
            next_job: 1,
            prev: None,
            epochs: 0,
            held: None,
        }
    }

    /// The version-rolling mask to ask the pool for (0: do not ask).
    pub fn with_version_mask(mut self, mask: u32) -> Self {
        self.mask = mask;
        self
    }

    fn request(&mut self, what: Pending, method: &str, params: &[&str], out: &mut Vec<u8>) {
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, what);
        write::request(out, id, method, params);
    }

    fn on_reply(
        &mut self,
        id: Option<&str>,
        result: Option<Value<'_>>,
        error: Option<Value<'_>>,
    ) -> Result<UpstreamEvent, UpstreamError> {
        let id = id
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or(UpstreamError::Unexpected("a reply without a numeric id"))?;
        let what = self
            .pending
            .remove(&id)
            .ok_or(UpstreamError::Unrequested("reply"))?;
        let failed = error.is_some_and(|e| !e.is_null());
        match what {
            Pending::Configure => {
                self.mask = match result {
                    Some(Value::Object(raw)) if !failed => granted_mask(raw) & self.mask,
                    _ => 0,
                };
                Ok(UpstreamEvent::Ignored("mining.configure result"))
            }
            Pending::ExtranonceSubscribe => {
                Ok(UpstreamEvent::Ignored("mining.extranonce.subscribe result"))
            }
            Pending::Subscribe => {
                let parsed = match result {
                    Some(Value::Array(raw)) if !failed => subscribe_result(raw),
                    _ => None,
                };
                let Some((en1, size)) = parsed else {
                    self.state = State::Closed;
                    return Ok(UpstreamEvent::OpenFailed("mining.subscribe refused".into()));
                };
                self.extranonce_prefix = en1.into();
                self.extranonce_size = size;
                self.opening(true, false)
            }
            Pending::Authorize => {
                if failed || result.and_then(|r| r.as_bool()) != Some(true) {
                    self.state = State::Closed;
                    return Ok(UpstreamEvent::OpenFailed("mining.authorize refused".into()));
                }
                self.opening(false, true)
            }
            Pending::Submit(sequence_number) => {
                if !failed && result.and_then(|r| r.as_bool()) == Some(true) {
                    Ok(UpstreamEvent::SharesAccepted {
                        last_sequence_number: sequence_number,
                        count: 1,
                        shares_sum: 0,
                    })
                } else {
                    Ok(UpstreamEvent::ShareRejected {
                        sequence_number,
                        // An SV1 error as the SV2 code of the same reason.
                        error_code: Reason::from_sv1_code(error.and_then(sv1::error_code))
                            .sv2_code()
                            .into(),
                    })
                }
            }
        }
    }

    /// Subscribe or authorize succeeded; open once both did.
    fn opening(&mut self, sub: bool, auth: bool) -> Result<UpstreamEvent, UpstreamError> {
        let State::Opening {
            subscribed,
            authorized,
        } = self.state
        else {
            return Err(UpstreamError::Unrequested("subscribe or authorize result"));
        };
        let (subscribed, authorized) = (subscribed || sub, authorized || auth);
        if subscribed && authorized {
            self.state = State::Open;
            return Ok(UpstreamEvent::Opened);
        }
        self.state = State::Opening {
            subscribed,
            authorized,
        };
        Ok(UpstreamEvent::Ignored("opening"))
    }

    fn on_notify(&mut self, n: Notify<'_>) -> Result<UpstreamEvent, UpstreamError> {
        let hold = match self.state {
            State::Open => false,
            // Some pools send the first job right after the subscribe answer.
            State::Opening {
                subscribed: true, ..
            } => true,
            _ => return Err(UpstreamError::Unexpected("mining.notify before subscribe")),
        };
        let new_block = self.prev.is_none_or(|p| p.prev_hash != n.prev_hash);
        let clean = n.clean_jobs || new_block;
        if clean {
            self.epochs += 1;
        }
        let prev = PrevHash {
            prev_hash: n.prev_hash,
            min_ntime: n.ntime,
            nbits: CompactTarget::from_consensus(n.nbits),
            epoch: self.epochs,
        };
        self.prev = Some(prev);
        if let Some(t) = self.next_target.take() {
            self.target = t;
        }
        let job_id = self.next_job;
        self.next_job = self.next_job.wrapping_add(1);
        if self.jobs.len() == MAX_JOBS {
            self.jobs.pop_front();
        }
        self.jobs.push_back((job_id, n.job_id.into()));
        let job = ExtendedJob {
            job_id,
            version: n.version,
            version_rolling_allowed: self.mask != 0,
            merkle_path: n.merkle_branch,
            coinbase_prefix: n.coinb1,
            coinbase_suffix: n.coinb2,
            extranonce_prefix: self.extranonce_prefix.clone(),
        };
        let work = Work {
            job: Arc::new(job),
            prev,
            ntime: n.ntime,
            target: self.target,
            // Held work is the first the devices see of this connection: all earlier is void.
            clean: clean || hold,
        };
        if hold {
            self.held = Some(work);
            return Ok(UpstreamEvent::Ignored(
                "mining.notify held until authorized",
            ));
        }
        Ok(UpstreamEvent::Work(work))
    }
}

impl Uplink for Sv1Upstream {
    type Out = Vec<u8>;
    type In = Vec<u8>;

    fn open(&mut self, request: &ChannelRequest, out: &mut Vec<Vec<u8>>) {
        self.worker = request.user_identity.clone();
        self.state = State::Opening {
            subscribed: false,
            authorized: false,
        };
        self.pending.clear();
        self.prev = None;
        self.jobs.clear();
        self.held = None;
        let mut lines = Vec::new();
        if self.mask != 0 {
            let mut mask = Vec::new();
            sv1::hex::encode_u32_into(self.mask, &mut mask);
            let mask = String::from_utf8(mask).expect("hex is ASCII");
            let id = self.next_id;
            self.next_id += 1;
            self.pending.insert(id, Pending::Configure);
            lines.extend_from_slice(
                format!(
                    "{{\"id\":{id},\"method\":\"mining.configure\",\"params\":[[\"version-rolling\",\"subscribe-extranonce\"],{{\"version-rolling.mask\":\"{mask}\",\"version-rolling.min-bit-count\":2}}]}}\n"
                )
                .as_bytes(),
            );
        }
        let agent = concat!("stratumlab-proxy/", env!("CARGO_PKG_VERSION"));
        self.request(Pending::Subscribe, "mining.subscribe", &[agent], &mut lines);
        self.request(
            Pending::ExtranonceSubscribe,
            "mining.extranonce.subscribe",
            &[],
            &mut lines,
        );
        let worker = self.worker.clone();
        self.request(
            Pending::Authorize,
            "mining.authorize",
            &[&worker, "x"],
            &mut lines,
        );
        out.push(lines);
    }

    fn handle_message(&mut self, line: Vec<u8>) -> Result<UpstreamEvent, UpstreamError> {
        let (env, method) =
            sv1::parse_line(&line).map_err(|_| UpstreamError::Unexpected("malformed line"))?;
        let Some(method) = method else {
            return self.on_reply(env.id(), env.result, env.error);
        };
        match method {
            Method::Notify => {
                let n = Notify::parse(&env)
                    .map_err(|_| UpstreamError::Unexpected("malformed mining.notify"))?;
                self.on_notify(n)
            }
            Method::SetDifficulty => {
                let d = env
                    .params
                    .get(0)
                    .and_then(|v| v.as_f64())
                    .and_then(|d| Difficulty::new(d).ok())
                    .ok_or(UpstreamError::Unexpected("malformed mining.set_difficulty"))?;
                let t = d.to_target();
                if self.prev.is_none() {
                    // Before the first job: it applies to that job.
                    self.target = t;
                } else {
                    self.next_target = Some(t);
                }
                Ok(UpstreamEvent::TargetChanged(t))
            }
            Method::SetExtranonce => {
                let en1 = env
                    .params
                    .get(0)
                    .and_then(|v| v.as_str())
                    .and_then(|s| primitives::hex::decode(s).ok())
                    .filter(|b| b.len() <= MAX_EXTRANONCE1);
                let size = env.params.get(1).and_then(|v| v.as_u64());
                let (Some(en1), Some(size)) = (en1, size) else {
                    return Err(UpstreamError::Unexpected("malformed mining.set_extranonce"));
                };
                if size as usize != self.extranonce_size {
                    // The devices' split is built on the size: a new one needs a new
                    // connection.
                    self.state = State::Closed;
                    return Ok(UpstreamEvent::Closed(
                        "the pool changed extranonce2_size".into(),
                    ));
                }
                self.extranonce_prefix = en1.into();
                Ok(UpstreamEvent::ExtranoncePrefixChanged)
            }
            Method::SetVersionMask => {
                if let Some(m) = env
                    .params
                    .get(0)
                    .and_then(|v| v.as_str())
                    .and_then(|s| sv1::hex::decode_u32(s).ok())
                {
                    self.mask &= m;
                }
                Ok(UpstreamEvent::Ignored("mining.set_version_mask"))
            }
            Method::Reconnect => {
                self.state = State::Closed;
                Ok(UpstreamEvent::Closed("client.reconnect".into()))
            }
            _ => Ok(UpstreamEvent::Ignored(
                "an SV1 method a proxy does not act on",
            )),
        }
    }

    fn submit(&mut self, sequence_number: u32, share: &LocalShare, _: Option<&str>) -> Vec<u8> {
        let job = share.job.upstream.job_id;
        // A job that has left the window is submitted under an id the pool cannot know:
        // it answers "job not found", which is the truth of it.
        let sv1_id = self
            .jobs
            .iter()
            .rev()
            .find(|(j, _)| *j == job)
            .map_or("expired", |(_, s)| &**s)
            .to_owned();
        if self.pending.len() >= MAX_PENDING {
            // Replies that never came; the translator has long counted them unanswered.
            self.pending.retain(|_, p| !matches!(p, Pending::Submit(_)));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.insert(id, Pending::Submit(sequence_number));
        let bits = (self.mask != 0).then_some(share.version & self.mask);
        let mut line = Vec::with_capacity(160);
        write::submit(
            &mut line,
            id,
            &self.worker,
            &sv1_id,
            share.extranonce(),
            share.ntime,
            share.nonce,
            bits,
        );
        line
    }

    fn announce_rate(&mut self, _rate: f32, _max_target: Target) -> Option<Vec<u8>> {
        // SV1 has no way to tell a pool the hash rate behind a connection.
        None
    }

    fn is_open(&self) -> bool {
        self.state == State::Open
    }

    fn channel_id(&self) -> Option<u32> {
        None
    }

    fn extranonce_prefix(&self) -> &Arc<[u8]> {
        &self.extranonce_prefix
    }

    fn extranonce_size(&self) -> usize {
        self.extranonce_size
    }

    fn target(&self) -> Target {
        self.next_target.unwrap_or(self.target)
    }

    /// The mask the pool granted (what was asked for until it answered; 0 if it refused).
    fn version_mask(&self) -> u32 {
        self.mask
    }

    fn take_held_work(&mut self) -> Option<Work> {
        self.held.take()
    }
}

/// `[[subscriptions...], "extranonce1", extranonce2_size]`.
fn subscribe_result(raw: &str) -> Option<(Vec<u8>, usize)> {
    // The subscriptions come first and may hold anything; extranonce1 and the size are the
    // last two elements.
    let inner = raw.trim().strip_prefix('[')?.strip_suffix(']')?;
    let (rest, size) = inner.rsplit_once(',')?;
    let (_, en1) = rest.rsplit_once(',')?;
    let size: usize = size.trim().parse().ok()?;
    let en1 = en1.trim().strip_prefix('"')?.strip_suffix('"')?;
    let en1 = primitives::hex::decode(en1).ok()?;
    (en1.len() <= MAX_EXTRANONCE1 && (1..=16).contains(&size)).then_some((en1, size))
}

/// The mask in a `mining.configure` result, if version rolling was granted.
fn granted_mask(raw: &str) -> u32 {
    if !raw.contains("\"version-rolling\":true") && !raw.contains("\"version-rolling\": true") {
        return 0;
    }
    let key = "\"version-rolling.mask\"";
    raw.find(key)
        .and_then(|i| {
            let rest = raw[i + key.len()..].trim_start().strip_prefix(':')?;
            let rest = rest.trim_start().strip_prefix('"')?;
            sv1::hex::decode_u32(&rest[..rest.find('"')?]).ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DeviceId, Timestamp, Translator, TranslatorConfig};

    fn request() -> ChannelRequest {
        ChannelRequest {
            user_identity: "farm".into(),
            nominal_hash_rate: 0.0,
            max_target: Target::MAX,
            min_extranonce_size: 4,
        }
    }

    /// The opening lines, as (id, method) pairs.
    fn opening(up: &mut Sv1Upstream) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        up.open(&request(), &mut out);
        assert_eq!(out.len(), 1, "one write for the whole opening");
        out[0]
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (env, _) = sv1::parse_line(l).unwrap();
                (
                    env.id().unwrap().parse().unwrap(),
                    env.method_str().unwrap().to_owned(),
                )
            })
            .collect()
    }

    /// The pool's answer to request `id`.
    fn reply(id: u64, result: &str) -> String {
        format!(r#"{{"id":{id},"result":{result},"error":null}}"#)
    }

    fn feed(up: &mut Sv1Upstream, line: &str) -> Result<UpstreamEvent, UpstreamError> {
        up.handle_message(line.as_bytes().to_vec())
    }

    const NOTIFY: &str = r#"{"id":null,"method":"mining.notify","params":["j1","4d16b6f85af6e2198f44ae2a5a7c26d7b6a4a2ac8ba6a6000000000000000000","01000000010000","ffffffff01",["aa00000000000000000000000000000000000000000000000000000000000000"],"20000000","1d00ffff","6553f100",false]}"#;

    fn open(up: &mut Sv1Upstream) {
        let ids = opening(up);
        let methods: Vec<&str> = ids.iter().map(|(_, m)| m.as_str()).collect();
        assert_eq!(
            methods,
            [
                "mining.configure",
                "mining.subscribe",
                "mining.extranonce.subscribe",
                "mining.authorize"
            ]
        );
        feed(
            up,
            &reply(
                ids[0].0,
                r#"{"version-rolling":true,"version-rolling.mask":"1fffe000"}"#,
            ),
        )
        .unwrap();
        assert_eq!(
            feed(
                up,
                &reply(ids[1].0, r#"[[["mining.notify","s"]],"0a0b0c0d",8]"#)
            )
            .unwrap(),
            UpstreamEvent::Ignored("opening")
        );
        feed(up, &reply(ids[2].0, "true")).unwrap();
        assert_eq!(
            feed(up, &reply(ids[3].0, "true")).unwrap(),
            UpstreamEvent::Opened
        );
    }

    #[test]
    fn the_opening_gives_the_prefix_size_mask_and_then_work() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        assert!(up.is_open());
        assert_eq!(&up.extranonce_prefix()[..], [0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(up.extranonce_size(), 8);
        assert_eq!(up.version_mask(), 0x1fff_e000);
        // A difficulty before the first job applies to it.
        feed(
            &mut up,
            r#"{"id":null,"method":"mining.set_difficulty","params":[0.5]}"#,
        )
        .unwrap();
        let half = Difficulty::new(0.5).unwrap().to_target();
        let UpstreamEvent::Work(w) = feed(&mut up, NOTIFY).unwrap() else {
            panic!("no work")
        };
        assert!(w.clean, "the first job starts a block");
        assert_eq!(w.target, half);
        assert_eq!(w.job.coinbase_prefix, [1, 0, 0, 0, 1, 0, 0]);
        assert_eq!(&w.job.extranonce_prefix[..], [0x0a, 0x0b, 0x0c, 0x0d]);
        assert_eq!(w.prev.nbits, CompactTarget::from_consensus(0x1d00_ffff));
        // Later, a difficulty applies from the next job; the same prev hash is not clean.
        feed(
            &mut up,
            r#"{"id":null,"method":"mining.set_difficulty","params":[2]}"#,
        )
        .unwrap();
        let two = Difficulty::new(2.0).unwrap().to_target();
        assert_eq!(
            up.target(),
            two,
            "shares are forwarded against the coming target"
        );
        let UpstreamEvent::Work(w2) = feed(&mut up, &NOTIFY.replace("\"j1\"", "\"j2\"")).unwrap()
        else {
            panic!("no work")
        };
        assert!(!w2.clean);
        assert_eq!(w2.prev.epoch, w.prev.epoch);
        assert_eq!(w2.target, two);
        assert_ne!(w2.job.job_id, w.job.job_id);
    }

    #[test]
    fn a_job_sent_before_the_authorize_answer_is_held_until_open() {
        let mut up = Sv1Upstream::new().with_version_mask(0);
        let ids = opening(&mut up);
        feed(
            &mut up,
            &reply(ids[0].0, r#"[[["mining.notify","s"]],"0a0b0c0d",8]"#),
        )
        .unwrap();
        assert_eq!(
            feed(&mut up, NOTIFY).unwrap(),
            UpstreamEvent::Ignored("mining.notify held until authorized")
        );
        assert!(!up.is_open());
        feed(&mut up, &reply(ids[1].0, "true")).unwrap();
        assert_eq!(
            feed(&mut up, &reply(ids[2].0, "true")).unwrap(),
            UpstreamEvent::Opened
        );
        let held = up.take_held_work().expect("the held job");
        assert!(held.clean);
        assert_eq!(&held.job.extranonce_prefix[..], [0x0a, 0x0b, 0x0c, 0x0d]);
        assert!(up.take_held_work().is_none(), "handed over once");
    }

    /// The SV1 proxy's core after it wrote its opening; the opening's request ids, in order.
    fn proxy_opening() -> (Translator<Sv1Upstream>, Vec<u64>) {
        let mut t = Translator::with_uplink(
            TranslatorConfig::default(),
            Sv1Upstream::new(),
            Timestamp::from_millis(0),
        );
        t.open_channel(Timestamp::from_millis(0));
        let lines: Vec<u8> = std::iter::from_fn(|| t.poll_transmit()).flatten().collect();
        let ids: Vec<u64> = lines
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| sv1::parse_line(l).unwrap().0.id().unwrap().parse().unwrap())
            .collect();
        (t, ids)
    }

    /// A device that asks to roll every version bit; what the proxy wrote it.
    fn configure_all_bits(t: &mut Translator<Sv1Upstream>) -> (DeviceId, String) {
        let d = t.device_connected(Timestamp::from_millis(0));
        t.device_line(
            d,
            br#"{"id":1,"method":"mining.configure","params":[["version-rolling"],{"version-rolling.mask":"ffffffff"}]}"#,
            Timestamp::from_millis(0),
        );
        let out = String::from_utf8(t.device_mut(d).unwrap().take_output()).unwrap();
        (d, out)
    }

    #[test]
    fn devices_roll_no_more_version_bits_than_the_pool_granted() {
        let (mut t, ids) = proxy_opening();
        for (id, result) in [
            (
                ids[0],
                r#"{"version-rolling":true,"version-rolling.mask":"00ffe000"}"#,
            ),
            (ids[1], r#"[[["mining.notify","s"]],"0a0b0c0d",8]"#),
            (ids[2], "true"),
            (ids[3], "true"),
        ] {
            t.upstream_message(reply(id, result).into_bytes(), Timestamp::from_millis(0));
        }
        assert!(t.upstream().is_open());
        let (_, out) = configure_all_bits(&mut t);
        assert!(out.contains("\"00ffe000\""), "{out}");
    }

    #[test]
    fn devices_granted_more_than_the_pool_later_grants_are_narrowed_and_told() {
        // Found by the fuzz target translator_session: a device that configured before the
        // pool answered the proxy's own `mining.configure` kept the mask the proxy had asked
        // for, and rolled bits the pool then refused: its shares were refused as version bits
        // (jobs of a pool that grants none), or accepted and submitted with only the granted
        // bits, a version other than the one the device hashed. Now it is narrowed and told.
        let (mut t, ids) = proxy_opening();
        let (d, out) = configure_all_bits(&mut t);
        assert!(out.contains("\"1fffe000\""), "{out}");
        t.upstream_message(
            reply(
                ids[0],
                r#"{"version-rolling":true,"version-rolling.mask":"00ffe000"}"#,
            )
            .into_bytes(),
            Timestamp::from_millis(1),
        );
        let out = String::from_utf8(t.device_mut(d).unwrap().take_output()).unwrap();
        assert_eq!(
            out,
            "{\"id\":null,\"method\":\"mining.set_version_mask\",\"params\":[\"00ffe000\"]}\n"
        );
        // A pool that then grants none: the device rolls nothing.
        t.upstream_message(
            br#"{"id":null,"method":"mining.set_version_mask","params":["00000000"]}"#.to_vec(),
            Timestamp::from_millis(2),
        );
        let out = String::from_utf8(t.device_mut(d).unwrap().take_output()).unwrap();
        assert!(out.contains("[\"00000000\"]"), "{out}");
        // Narrowed once: nothing more to tell.
        t.upstream_message(
            br#"{"id":null,"method":"mining.set_version_mask","params":["00000000"]}"#.to_vec(),
            Timestamp::from_millis(3),
        );
        assert!(t.device_mut(d).unwrap().take_output().is_empty());
    }

    #[test]
    fn refusals_and_bad_lines_are_reported() {
        let mut up = Sv1Upstream::new().with_version_mask(0);
        let ids = opening(&mut up);
        assert_eq!(ids[0].1, "mining.subscribe", "no configure without a mask");
        let refused = format!(
            r#"{{"id":{},"result":false,"error":[24,"no",null]}}"#,
            ids[2].0
        );
        assert!(matches!(
            feed(&mut up, &refused).unwrap(),
            UpstreamEvent::OpenFailed(_)
        ));
        assert!(!up.is_open());
        assert!(feed(&mut up, "not json").is_err());
        assert!(feed(&mut up, r#"{"id":99,"result":true,"error":null}"#).is_err());
        assert!(feed(&mut up, NOTIFY).is_err(), "work before the opening");
    }

    #[test]
    fn verdicts_map_to_sequence_numbers_and_sv2_reasons() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        // Submissions are numbered by the proxy; replies come back by JSON-RPC id.
        let mut pending: Vec<u64> = Vec::new();
        for seq in [7u32, 8, 9] {
            let id = up.next_id;
            up.next_id += 1;
            up.pending.insert(id, Pending::Submit(seq));
            pending.push(id);
        }
        let ok = format!(r#"{{"id":{},"result":true,"error":null}}"#, pending[1]);
        assert_eq!(
            feed(&mut up, &ok).unwrap(),
            UpstreamEvent::SharesAccepted {
                last_sequence_number: 8,
                count: 1,
                shares_sum: 0
            }
        );
        for (id, code, want) in [
            (pending[0], 23, "difficulty-too-low"),
            (pending[2], 21, "stale-share"),
        ] {
            let line = format!(r#"{{"id":{id},"result":null,"error":[{code},"x",null]}}"#);
            let UpstreamEvent::ShareRejected { error_code, .. } = feed(&mut up, &line).unwrap()
            else {
                panic!("not a rejection")
            };
            assert_eq!(error_code, want);
        }
    }

    #[test]
    fn a_new_extranonce_keeps_its_size_or_ends_the_connection() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        let same = r#"{"id":null,"method":"mining.set_extranonce","params":["01020304",8]}"#;
        assert_eq!(
            feed(&mut up, same).unwrap(),
            UpstreamEvent::ExtranoncePrefixChanged
        );
        assert_eq!(&up.extranonce_prefix()[..], [1, 2, 3, 4]);
        let other = r#"{"id":null,"method":"mining.set_extranonce","params":["01020304",6]}"#;
        assert!(matches!(
            feed(&mut up, other).unwrap(),
            UpstreamEvent::Closed(_)
        ));
    }

    fn work(up: &mut Sv1Upstream, job: &str, prev: &str, clean: bool) -> Work {
        let line = NOTIFY
            .replace("\"j1\"", &format!("\"{job}\""))
            .replace("4d16b6f8", prev)
            .replace("false]", &format!("{clean}]"));
        match feed(up, &line) {
            Ok(UpstreamEvent::Work(w)) => w,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn a_new_prev_hash_or_clean_jobs_starts_an_epoch() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        let first = work(&mut up, "a", "4d16b6f8", false);
        assert!(first.clean);
        // clean_jobs on the same block: every earlier job is void all the same.
        let cleaned = work(&mut up, "b", "4d16b6f8", true);
        assert!(cleaned.clean);
        assert_eq!(cleaned.prev.epoch, first.prev.epoch + 1);
        assert_eq!(cleaned.prev.prev_hash, first.prev.prev_hash);
        // A new prev hash without clean_jobs (a pool that forgot it) is a new block anyway.
        let block = work(&mut up, "c", "00000001", false);
        assert!(block.clean);
        assert_eq!(block.prev.epoch, cleaned.prev.epoch + 1);
        assert_ne!(block.prev.prev_hash, first.prev.prev_hash);
        // An update on the same block keeps the epoch.
        let update = work(&mut up, "d", "00000001", false);
        assert!(!update.clean);
        assert_eq!(update.prev.epoch, block.prev.epoch);
        let ids = [first, cleaned, block, update].map(|w| w.job.job_id);
        assert!(
            ids.windows(2).all(|p| p[0] != p[1]),
            "local ids are distinct: {ids:?}"
        );
    }

    #[test]
    fn malformed_notifications_are_errors_and_unknown_ones_ignored() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        for bad in [
            // Eight params.
            NOTIFY.replace(",false]", "]"),
            // A prev hash that is not hex.
            NOTIFY.replace("4d16b6f8", "zz16b6f8"),
            r#"{"id":null,"method":"mining.set_difficulty","params":["high"]}"#.into(),
            r#"{"id":null,"method":"mining.set_difficulty","params":[-1]}"#.into(),
            r#"{"id":null,"method":"mining.set_difficulty","params":[]}"#.into(),
            r#"{"id":null,"method":"mining.set_extranonce","params":["xyz",8]}"#.into(),
            r#"{"id":null,"method":"mining.set_extranonce","params":["0102"]}"#.into(),
            r#"{"id":"seven","result":true,"error":null}"#.into(),
            "{\"id\":1,".into(),
        ] {
            assert!(feed(&mut up, &bad).is_err(), "{bad}");
        }
        assert!(up.is_open(), "a bad line does not end the session");
        for ignored in [
            r#"{"id":null,"method":"client.show_message","params":["hello"]}"#,
            r#"{"id":null,"method":"mining.something_new","params":[1]}"#,
        ] {
            assert!(
                matches!(feed(&mut up, ignored), Ok(UpstreamEvent::Ignored(_))),
                "{ignored}"
            );
        }
        // The pool narrows the version mask.
        feed(
            &mut up,
            r#"{"id":null,"method":"mining.set_version_mask","params":["00ffe000"]}"#,
        )
        .unwrap();
        assert_eq!(up.version_mask(), 0x00ff_e000);
        // client.reconnect: the shell reconnects.
        assert!(matches!(
            feed(
                &mut up,
                r#"{"id":null,"method":"client.reconnect","params":[]}"#
            ),
            Ok(UpstreamEvent::Closed(_))
        ));
        assert!(!up.is_open());
    }

    #[test]
    fn rejections_carry_the_reason_of_their_sv1_code() {
        let mut up = Sv1Upstream::new();
        open(&mut up);
        for (code, want) in [
            ("[21,\"Job not found\",null]", "stale-share"),
            ("[22,\"Duplicate share\",null]", "duplicate-share"),
            ("[23,\"Low difficulty share\",null]", "difficulty-too-low"),
            ("[24,\"Unauthorized worker\",null]", "unauthorized"),
            ("[20,\"Other/Unknown\",null]", "other"),
            // Pools that answer false with no error.
            ("null", "other"),
        ] {
            let id = up.next_id;
            up.next_id += 1;
            up.pending.insert(id, Pending::Submit(id as u32 * 10));
            let result = if code == "null" { "false" } else { "null" };
            let line = format!(r#"{{"id":{id},"result":{result},"error":{code}}}"#);
            assert_eq!(
                feed(&mut up, &line).unwrap(),
                UpstreamEvent::ShareRejected {
                    sequence_number: id as u32 * 10,
                    error_code: want.into()
                },
                "{line}"
            );
        }
    }
}
