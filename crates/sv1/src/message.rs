//! Typed Stratum V1 messages read from an [`Envelope`].
//!
//! Miner-to-pool requests (`mining.subscribe`, `mining.authorize`, `mining.configure`,
//! `mining.submit`, ...) and pool-to-miner notifications (`mining.notify`,
//! `mining.set_difficulty`, ...). The submit path borrows from the line and decodes its hex
//! fields into fixed-size values, so a share costs no allocation.

use std::borrow::Cow;

use primitives::Hash256;

use crate::hex::{self, HexError};
use crate::json::{self, Envelope, JsonStr, Value};

/// Every method either side sends, by its wire name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method<'a> {
    // Miner to pool.
    /// `mining.subscribe`.
    Subscribe,
    /// `mining.authorize`, or its ckpool alias `mining.auth`.
    Authorize,
    /// `mining.configure` (BIP310).
    Configure,
    /// `mining.submit`.
    Submit,
    /// `mining.suggest_difficulty`.
    SuggestDifficulty,
    /// `mining.suggest_target`.
    SuggestTarget,
    /// `mining.extranonce.subscribe`: the miner accepts `mining.set_extranonce`.
    ExtranonceSubscribe,
    // Pool to miner.
    /// `mining.notify`.
    Notify,
    /// `mining.set_difficulty`.
    SetDifficulty,
    /// `mining.set_extranonce`.
    SetExtranonce,
    /// `mining.set_version_mask`.
    SetVersionMask,
    /// `client.reconnect`.
    Reconnect,
    /// `client.show_message`.
    ShowMessage,
    /// `client.get_version`.
    GetVersion,
    /// `mining.ping` (either direction in practice; answered "pong").
    Ping,
    /// Any other name (or one with escapes, as its raw text).
    Unknown(&'a str),
}

impl<'a> Method<'a> {
    /// The method with this wire name; [`Method::Unknown`] for names not listed.
    pub fn from_name(name: &'a str) -> Method<'a> {
        match name {
            "mining.subscribe" => Method::Subscribe,
            "mining.authorize" | "mining.auth" => Method::Authorize,
            "mining.configure" => Method::Configure,
            "mining.submit" => Method::Submit,
            "mining.suggest_difficulty" => Method::SuggestDifficulty,
            "mining.suggest_target" => Method::SuggestTarget,
            "mining.extranonce.subscribe" => Method::ExtranonceSubscribe,
            "mining.notify" => Method::Notify,
            "mining.set_difficulty" => Method::SetDifficulty,
            "mining.set_extranonce" => Method::SetExtranonce,
            "mining.set_version_mask" => Method::SetVersionMask,
            "client.reconnect" => Method::Reconnect,
            "client.show_message" => Method::ShowMessage,
            "client.get_version" => Method::GetVersion,
            "mining.ping" => Method::Ping,
            other => Method::Unknown(other),
        }
    }
}

/// A parameter that is missing, of the wrong type, or malformed (answered with code 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("parameter {index} ({name}): {problem}")]
pub struct ParamError {
    /// Position in `params`, 0-based.
    pub index: usize,
    /// The parameter's name, as in the method's signature.
    pub name: &'static str,
    /// What is wrong with it: "missing", "not a string", "not hex", ...
    pub problem: &'static str,
}

fn param<'a>(e: &Envelope<'a>, index: usize, name: &'static str) -> Result<Value<'a>, ParamError> {
    e.params.get(index).ok_or(ParamError {
        index,
        name,
        problem: "missing",
    })
}

fn str_param<'a>(
    e: &Envelope<'a>,
    index: usize,
    name: &'static str,
) -> Result<&'a str, ParamError> {
    match param(e, index, name)? {
        Value::Str(s) => s.as_str().ok_or(ParamError {
            index,
            name,
            problem: "escaped characters",
        }),
        _ => Err(ParamError {
            index,
            name,
            problem: "not a string",
        }),
    }
}

fn hex_u32(e: &Envelope<'_>, index: usize, name: &'static str) -> Result<u32, ParamError> {
    let s = str_param(e, index, name)?;
    hex::decode_u32(s).map_err(|err| ParamError {
        index,
        name,
        problem: match err {
            HexError::NotHex => "not hex",
            HexError::Length { .. } => "not 8 hex digits",
        },
    })
}

/// The largest extranonce2 a submit may carry, in bytes.
pub const MAX_EXTRANONCE2: usize = 32;

/// `mining.submit [worker, job_id, extranonce2, ntime, nonce, version_bits?]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submit<'a> {
    /// `params[0]`: the worker name as sent, escapes still in place.
    pub worker: JsonStr<'a>,
    /// `params[1]`: the job id from `mining.notify`.
    pub job_id: &'a str,
    extranonce2: [u8; MAX_EXTRANONCE2],
    extranonce2_len: u8,
    /// `params[3]`: the header time in Unix seconds, sent as 8 hex digits (big-endian).
    pub ntime: u32,
    /// `params[4]`: the header nonce, sent as 8 hex digits (big-endian).
    pub nonce: u32,
    /// BIP310 version bits, when the miner rolls the version.
    pub version_bits: Option<u32>,
}

impl<'a> Submit<'a> {
    /// Reads the parameters, decoding the hex ones; at most 6, and an extranonce2 of at most
    /// [`MAX_EXTRANONCE2`] bytes.
    pub fn parse(e: &Envelope<'a>) -> Result<Self, ParamError> {
        if e.params.len() > 6 {
            return Err(ParamError {
                index: 6,
                name: "params",
                problem: "more than 6",
            });
        }
        let worker = match param(e, 0, "worker")? {
            Value::Str(s) => s,
            _ => {
                return Err(ParamError {
                    index: 0,
                    name: "worker",
                    problem: "not a string",
                })
            }
        };
        let job_id = str_param(e, 1, "job_id")?;
        let en2 = str_param(e, 2, "extranonce2")?;
        if en2.len() % 2 != 0 || en2.len() / 2 > MAX_EXTRANONCE2 {
            return Err(ParamError {
                index: 2,
                name: "extranonce2",
                problem: "bad length",
            });
        }
        let mut extranonce2 = [0u8; MAX_EXTRANONCE2];
        hex::decode_into(en2, &mut extranonce2[..en2.len() / 2]).map_err(|_| ParamError {
            index: 2,
            name: "extranonce2",
            problem: "not hex",
        })?;
        let version_bits = match e.params.get(5) {
            None | Some(Value::Null) => None,
            Some(_) => Some(hex_u32(e, 5, "version_bits")?),
        };
        Ok(Submit {
            worker,
            job_id,
            extranonce2,
            extranonce2_len: (en2.len() / 2) as u8,
            ntime: hex_u32(e, 3, "ntime")?,
            nonce: hex_u32(e, 4, "nonce")?,
            version_bits,
        })
    }

    /// `params[2]`: the extranonce2 the miner chose, decoded from hex.
    pub fn extranonce2(&self) -> &[u8] {
        &self.extranonce2[..self.extranonce2_len as usize]
    }
}

/// `mining.subscribe [user_agent?, session_id?, ...]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscribe<'a> {
    /// `params[0]`: the miner's software and version; `None` when absent or `null`.
    pub user_agent: Option<Cow<'a, str>>,
    /// A previous session's id, for resuming its extranonce1.
    pub session: Option<&'a str>,
}

impl<'a> Subscribe<'a> {
    /// Reads the optional parameters; only a user agent that is not a string is an error.
    pub fn parse(e: &Envelope<'a>) -> Result<Self, ParamError> {
        let user_agent = match e.params.get(0) {
            None | Some(Value::Null) => None,
            Some(Value::Str(s)) => Some(s.to_cow()),
            Some(_) => {
                return Err(ParamError {
                    index: 0,
                    name: "user_agent",
                    problem: "not a string",
                })
            }
        };
        let session = match e.params.get(1) {
            Some(Value::Str(s)) => s.as_str(),
            _ => None,
        };
        Ok(Subscribe {
            user_agent,
            session,
        })
    }
}

/// `mining.authorize [user, password?]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authorize<'a> {
    /// `params[0]`: the user name, usually `account.worker`
    /// (see [`Authorize::account_and_worker`]).
    pub user: Cow<'a, str>,
    /// `params[1]`; `None` when absent or not a string. Pools mostly ignore it, apart from
    /// difficulty hints.
    pub password: Option<Cow<'a, str>>,
}

impl<'a> Authorize<'a> {
    /// Reads the user (required, a string) and the password.
    pub fn parse(e: &Envelope<'a>) -> Result<Self, ParamError> {
        let user = match param(e, 0, "user")? {
            Value::Str(s) => s.to_cow(),
            _ => {
                return Err(ParamError {
                    index: 0,
                    name: "user",
                    problem: "not a string",
                })
            }
        };
        let password = match e.params.get(1) {
            Some(Value::Str(s)) => Some(s.to_cow()),
            _ => None,
        };
        Ok(Authorize { user, password })
    }

    /// `user` split at its first `.` into account (or payout address) and worker name.
    pub fn account_and_worker(&self) -> (&str, Option<&str>) {
        match self.user.split_once('.') {
            Some((a, w)) => (a, Some(w)),
            None => (&self.user, None),
        }
    }

    /// A `d=` difficulty hint in the password (`d=0.5`, `x,d=1024`), as many pools accept.
    pub fn difficulty_hint(&self) -> Option<f64> {
        self.password
            .as_deref()?
            .split([',', ';', ' '])
            .find_map(|part| part.trim().strip_prefix("d=")?.parse().ok())
            .filter(|d: &f64| d.is_finite() && *d > 0.0)
    }
}

/// `mining.configure [[extension, ...], {extension.param: value, ...}]` (BIP310).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Configure {
    /// `params[0]`: the extensions the miner asks for, by name (`version-rolling`, ...).
    pub extensions: Vec<String>,
    /// `version-rolling.mask`.
    pub version_rolling_mask: Option<u32>,
    /// `version-rolling.min-bit-count`.
    pub version_rolling_min_bit_count: Option<u32>,
    /// `minimum-difficulty.value`.
    pub minimum_difficulty: Option<f64>,
}

impl Configure {
    /// Reads the extension list and the extension parameters named here; others are ignored.
    pub fn parse(e: &Envelope<'_>) -> Result<Self, ParamError> {
        let bad = |index, name, problem| ParamError {
            index,
            name,
            problem,
        };
        let extensions: Vec<String> = match param(e, 0, "extensions")? {
            Value::Array(raw) => serde_json::from_str(raw)
                .map_err(|_| bad(0, "extensions", "not a list of strings"))?,
            _ => return Err(bad(0, "extensions", "not a list")),
        };
        let mut c = Configure {
            extensions,
            ..Configure::default()
        };
        let params: serde_json::Map<String, serde_json::Value> = match e.params.get(1) {
            Some(Value::Object(raw)) => serde_json::from_str(raw)
                .map_err(|_| bad(1, "extension-params", "not an object"))?,
            None | Some(Value::Null) => Default::default(),
            Some(_) => return Err(bad(1, "extension-params", "not an object")),
        };
        if let Some(v) = params.get("version-rolling.mask") {
            let s = v
                .as_str()
                .ok_or(bad(1, "version-rolling.mask", "not a string"))?;
            // Miners send it with or without leading zeros.
            c.version_rolling_mask = Some(
                u32::from_str_radix(s, 16)
                    .map_err(|_| bad(1, "version-rolling.mask", "not hex"))?,
            );
        }
        if let Some(v) = params.get("version-rolling.min-bit-count") {
            c.version_rolling_min_bit_count = v.as_u64().map(|n| n.min(32) as u32);
        }
        if let Some(v) = params.get("minimum-difficulty.value") {
            c.minimum_difficulty = v.as_f64().filter(|d| d.is_finite() && *d > 0.0);
        }
        Ok(c)
    }
}

/// The first parameter as a positive number: `mining.suggest_difficulty [diff]`.
pub fn suggested_difficulty(e: &Envelope<'_>) -> Result<f64, ParamError> {
    param(e, 0, "difficulty")?
        .as_f64()
        .filter(|d| d.is_finite() && *d > 0.0)
        .ok_or(ParamError {
            index: 0,
            name: "difficulty",
            problem: "not a positive number",
        })
}

/// `mining.notify [job_id, prevhash, coinb1, coinb2, merkle_branch, version, nbits, ntime,
/// clean_jobs]`, as a miner reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notify<'a> {
    /// `params[0]`: the job id that submits name.
    pub job_id: &'a str,
    /// In internal byte order (the word swap undone).
    pub prev_hash: Hash256,
    /// `params[2]`, decoded: the coinbase before extranonce1 and extranonce2.
    pub coinb1: Vec<u8>,
    /// `params[3]`, decoded: the coinbase after the extranonces.
    pub coinb2: Vec<u8>,
    /// `params[4]`, decoded: the coinbase's merkle siblings, bottom up, in internal byte order.
    pub merkle_branch: Vec<Hash256>,
    /// `params[5]`: the block version, sent as 8 hex digits (big-endian).
    pub version: u32,
    /// `params[6]`: the network target's compact `nBits`.
    pub nbits: u32,
    /// `params[7]`: the job's header time in Unix seconds.
    pub ntime: u32,
    /// `params[8]`: earlier jobs are void; the miner should switch to this one at once.
    pub clean_jobs: bool,
}

impl<'a> Notify<'a> {
    /// Reads all nine parameters, decoding the hex ones.
    pub fn parse(e: &Envelope<'a>) -> Result<Self, ParamError> {
        let bad = |index, name, problem| ParamError {
            index,
            name,
            problem,
        };
        let mut prev = [0u8; 32];
        hex::decode_into(str_param(e, 1, "prevhash")?, &mut prev)
            .map_err(|_| bad(1, "prevhash", "not 64 hex digits"))?;
        let coinb1 =
            hex::decode(str_param(e, 2, "coinb1")?).map_err(|_| bad(2, "coinb1", "not hex"))?;
        let coinb2 =
            hex::decode(str_param(e, 3, "coinb2")?).map_err(|_| bad(3, "coinb2", "not hex"))?;
        let merkle_branch = match param(e, 4, "merkle_branch")? {
            Value::Array(raw) => {
                let items: Vec<&str> = serde_json::from_str(raw)
                    .map_err(|_| bad(4, "merkle_branch", "not a list of strings"))?;
                items
                    .iter()
                    .map(|s| {
                        Hash256::from_internal_hex(s)
                            .map_err(|_| bad(4, "merkle_branch", "not 64 hex digits"))
                    })
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(bad(4, "merkle_branch", "not a list")),
        };
        Ok(Notify {
            job_id: str_param(e, 0, "job_id")?,
            prev_hash: hex::prevhash_from_stratum(prev),
            coinb1,
            coinb2,
            merkle_branch,
            version: hex_u32(e, 5, "version")?,
            nbits: hex_u32(e, 6, "nbits")?,
            ntime: hex_u32(e, 7, "ntime")?,
            clean_jobs: param(e, 8, "clean_jobs")?.as_bool().ok_or(bad(
                8,
                "clean_jobs",
                "not a boolean",
            ))?,
        })
    }
}

/// Parses a line and names its method (`None` for responses).
pub fn parse_line(line: &[u8]) -> Result<(Envelope<'_>, Option<Method<'_>>), json::JsonError> {
    let e = json::parse(line)?;
    let m = e.method.map(|m| match m.as_str() {
        Some(name) => Method::from_name(name),
        None => Method::Unknown(m.raw()),
    });
    Ok((e, m))
}
