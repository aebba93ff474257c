//! The method table, in the manner of Core's `RPCHelpMan` (names, argument types, which are
//! required, help text), and the argument handling Core does before a method runs: named
//! arguments to positions, the argument count, the argument types, and the reading of numbers,
//! booleans and hashes with Core's error codes and messages. No I/O.

use std::fmt::Write as _;

use primitives::Hash256;
use serde_json::Value;

use super::jsonrpc::*;

// ---- The method table -------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Ty {
    Str,
    StrHex,
    Num,
    Bool,
    Obj,
    /// A number or a string (Core does not type-check amounts up front).
    Amount,
}

impl Ty {
    /// The JSON type Core checks an argument against before the method runs.
    fn expected(self) -> Option<&'static str> {
        match self {
            Ty::Str | Ty::StrHex => Some("string"),
            Ty::Num => Some("number"),
            Ty::Bool => Some("bool"),
            Ty::Obj => Some("object"),
            Ty::Amount => None,
        }
    }

    fn help_name(self) -> &'static str {
        match self {
            Ty::Str | Ty::StrHex => "string",
            Ty::Num => "numeric",
            Ty::Bool => "boolean",
            Ty::Obj => "json object",
            Ty::Amount => "numeric or string",
        }
    }
}

pub(super) struct Arg {
    name: &'static str,
    ty: Ty,
    /// `None`: required. `Some(text)`: optional, with Core's description of the default.
    default: Option<&'static str>,
    /// Core skips the up-front type check for arguments that accept more than one type
    /// (verbosity as a number or a boolean).
    skip_type_check: bool,
    doc: &'static str,
}

const fn req(name: &'static str, ty: Ty, doc: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default: None,
        skip_type_check: false,
        doc,
    }
}

const fn opt(name: &'static str, ty: Ty, default: &'static str, doc: &'static str) -> Arg {
    Arg {
        name,
        ty,
        default: Some(default),
        skip_type_check: false,
        doc,
    }
}

const fn verbosity(default: &'static str, doc: &'static str) -> Arg {
    Arg {
        name: "verbosity",
        ty: Ty::Num,
        default: Some(default),
        skip_type_check: true,
        doc,
    }
}

pub(super) struct Spec {
    pub(super) name: &'static str,
    pub(super) category: &'static str,
    args: &'static [Arg],
    doc: &'static str,
}

pub(super) const SPECS: &[Spec] = &[
    // == Blockchain ==
    Spec {
        name: "getbestblockhash",
        category: "Blockchain",
        args: &[],
        doc: "Returns the hash of the best (tip) block in the most-work fully-validated chain.",
    },
    Spec {
        name: "getblock",
        category: "Blockchain",
        args: &[
            req("blockhash", Ty::StrHex, "The block hash"),
            verbosity(
                "1",
                "0 for hex-encoded data, 1 for a JSON object, 2 for JSON object with \
                 transaction data",
            ),
        ],
        doc: "Returns a block: hex-encoded (verbosity 0), an object with its txids (1) or with \
              decoded transactions (2 and 3; simnet has no prevouts to add at 3).",
    },
    Spec {
        name: "getblockchaininfo",
        category: "Blockchain",
        args: &[],
        doc: "Returns an object containing various state info regarding blockchain processing.",
    },
    Spec {
        name: "getblockcount",
        category: "Blockchain",
        args: &[],
        doc: "Returns the height of the most-work fully-validated chain.",
    },
    Spec {
        name: "getblockhash",
        category: "Blockchain",
        args: &[req("height", Ty::Num, "The height index")],
        doc: "Returns hash of block in best-block-chain at height provided.",
    },
    Spec {
        name: "getblockheader",
        category: "Blockchain",
        args: &[
            req("blockhash", Ty::StrHex, "The block hash"),
            opt(
                "verbose",
                Ty::Bool,
                "true",
                "true for a json object, false for the hex-encoded data",
            ),
        ],
        doc: "If verbose is false, returns a string that is serialized, hex-encoded data for \
              blockheader 'hash'. If verbose is true, returns an Object with information about \
              blockheader 'hash'.",
    },
    Spec {
        name: "getdifficulty",
        category: "Blockchain",
        args: &[],
        doc: "Returns the proof-of-work difficulty as a multiple of the minimum difficulty.",
    },
    Spec {
        name: "getmempoolentry",
        category: "Blockchain",
        args: &[req(
            "txid",
            Ty::StrHex,
            "The transaction id (must be in mempool)",
        )],
        doc: "Returns mempool data for given transaction",
    },
    Spec {
        name: "getmempoolinfo",
        category: "Blockchain",
        args: &[],
        doc: "Returns details on the active state of the TX memory pool.",
    },
    Spec {
        name: "getrawmempool",
        category: "Blockchain",
        args: &[
            opt(
                "verbose",
                Ty::Bool,
                "false",
                "True for a json object, false for array of transaction ids",
            ),
            opt(
                "mempool_sequence",
                Ty::Bool,
                "false",
                "If verbose=false, returns a json object with transaction list and mempool \
                 sequence number attached.",
            ),
        ],
        doc: "Returns all transaction ids in memory pool as a json array of string transaction \
              ids.",
    },
    Spec {
        name: "preciousblock",
        category: "Blockchain",
        args: &[req(
            "blockhash",
            Ty::StrHex,
            "the hash of the block to mark as precious",
        )],
        doc: "Treats a block as if it were received before others with the same work. (simnet \
              keeps the first-seen block at equal work: the call checks the block exists and \
              changes nothing.)",
    },
    // == Control ==
    Spec {
        name: "getrpcinfo",
        category: "Control",
        args: &[],
        doc: "Returns details of the RPC server.",
    },
    Spec {
        name: "help",
        category: "Control",
        args: &[opt(
            "command",
            Ty::Str,
            "all commands",
            "The command to get help on",
        )],
        doc: "List all commands, or get help for a specified command.",
    },
    Spec {
        name: "uptime",
        category: "Control",
        args: &[],
        doc: "Returns the total uptime of the server.",
    },
    // == Generating ==
    Spec {
        name: "generatetoaddress",
        category: "Generating",
        args: &[
            req("nblocks", Ty::Num, "How many blocks are generated."),
            req(
                "address",
                Ty::Str,
                "The address to send the newly generated bitcoin to.",
            ),
            opt(
                "maxtries",
                Ty::Num,
                "1000000",
                "How many iterations to try.",
            ),
        ],
        doc: "Mine to a specified address and return the block hashes.",
    },
    // == Mining ==
    Spec {
        name: "getblocktemplate",
        category: "Mining",
        args: &[opt(
            "template_request",
            Ty::Obj,
            "{}",
            "Format of the template",
        )],
        doc: "If the request parameters include a 'mode' key, that is used to explicitly select \
              between the default 'template' request or a 'proposal'.\n\
              It returns data needed to construct a block to work on.\n\
              For full specification, see BIPs 22, 23, 9, and 145.",
    },
    Spec {
        name: "getmininginfo",
        category: "Mining",
        args: &[],
        doc: "Returns a json object containing mining-related information.",
    },
    Spec {
        name: "getnetworkhashps",
        category: "Mining",
        args: &[
            opt(
                "nblocks",
                Ty::Num,
                "120",
                "The number of previous blocks to calculate estimate from, or -1 for blocks \
                 since last difficulty change.",
            ),
            opt(
                "height",
                Ty::Num,
                "-1",
                "To estimate at the time of the given height.",
            ),
        ],
        doc: "Returns the estimated network hashes per second based on the last n blocks.",
    },
    Spec {
        name: "submitblock",
        category: "Mining",
        args: &[
            req(
                "hexdata",
                Ty::StrHex,
                "the hex-encoded block data to submit",
            ),
            opt(
                "dummy",
                Ty::Str,
                "ignored",
                "dummy value, for compatibility with BIP22. This value is ignored.",
            ),
        ],
        doc: "Attempts to submit new block to network.",
    },
    // == Network ==
    Spec {
        name: "getconnectioncount",
        category: "Network",
        args: &[],
        doc: "Returns the number of connections to other nodes.",
    },
    Spec {
        name: "getnetworkinfo",
        category: "Network",
        args: &[],
        doc: "Returns an object containing various state info regarding P2P networking.",
    },
    Spec {
        name: "getpeerinfo",
        category: "Network",
        args: &[],
        doc: "Returns data about each connected network peer as a json array of objects (the \
              simulated network's outbound peers).",
    },
    Spec {
        name: "ping",
        category: "Network",
        args: &[],
        doc: "Requests that a ping be sent to all other nodes, to measure ping time.",
    },
    // == Rawtransactions ==
    Spec {
        name: "decoderawtransaction",
        category: "Rawtransactions",
        args: &[
            req("hexstring", Ty::StrHex, "The transaction hex string"),
            opt(
                "iswitness",
                Ty::Bool,
                "depends on heuristic tests",
                "Whether the transaction hex is a serialized witness transaction.",
            ),
        ],
        doc: "Return a JSON object representing the serialized, hex-encoded transaction.",
    },
    Spec {
        name: "getrawtransaction",
        category: "Rawtransactions",
        args: &[
            req("txid", Ty::StrHex, "The transaction id"),
            verbosity(
                "0",
                "0 for hex-encoded data, 1 for a JSON object, and 2 for JSON object with fee",
            ),
            opt(
                "blockhash",
                Ty::StrHex,
                "omitted",
                "The block in which to look for the transaction",
            ),
        ],
        doc: "Return the raw transaction data (any transaction in the mempool or in a block \
              simnet holds).",
    },
    Spec {
        name: "sendrawtransaction",
        category: "Rawtransactions",
        args: &[
            req(
                "hexstring",
                Ty::StrHex,
                "The hex string of the raw transaction",
            ),
            opt(
                "maxfeerate",
                Ty::Amount,
                "\"0.10\"",
                "Reject transactions whose fee rate is higher than the specified value.",
            ),
            opt(
                "maxburnamount",
                Ty::Amount,
                "\"0.00\"",
                "Reject transactions with provably unspendable outputs above this value.",
            ),
        ],
        doc: "Submit a raw transaction to local node and network. (simnet's mempool only holds \
              its simulated transactions: others are missing their inputs.)",
    },
    // == Util ==
    Spec {
        name: "estimatesmartfee",
        category: "Util",
        args: &[
            req(
                "conf_target",
                Ty::Num,
                "Confirmation target in blocks (1 - 1008)",
            ),
            opt(
                "estimate_mode",
                Ty::Str,
                "\"economical\"",
                "The fee estimate mode: \"unset\", \"economical\" or \"conservative\".",
            ),
        ],
        doc: "Estimates the fee per kilobyte needed for a transaction to begin confirmation \
              within conf_target blocks (simnet reads it off its mempool: the fee rate at the \
              depth conf_target blocks would take).",
    },
    Spec {
        name: "validateaddress",
        category: "Util",
        args: &[req("address", Ty::Str, "The bitcoin address to validate")],
        doc: "Return information about the given bitcoin address.",
    },
    // == Zmq ==
    Spec {
        name: "getzmqnotifications",
        category: "Zmq",
        args: &[],
        doc: "Returns information about the active ZeroMQ notifications.",
    },
];

impl Spec {
    /// The argument names, in order (the fuzz support writes positional calls as named ones).
    pub(super) fn arg_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.args.iter().map(|a| a.name)
    }
}

pub(super) fn spec(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}

/// Core's help text for one method: usage line, description, arguments.
pub(super) fn help_text(s: &Spec) -> String {
    let mut out = String::from(s.name);
    let mut optional_open = false;
    for a in s.args {
        let shown = if matches!(a.ty, Ty::Str | Ty::StrHex) {
            format!("\"{}\"", a.name)
        } else {
            a.name.to_owned()
        };
        match (a.default, optional_open) {
            (None, _) => write!(out, " {shown}").unwrap(),
            (Some(_), false) => {
                write!(out, " ( {shown}").unwrap();
                optional_open = true;
            }
            (Some(_), true) => write!(out, " {shown}").unwrap(),
        }
    }
    if optional_open {
        out.push_str(" )");
    }
    write!(out, "\n\n{}\n", s.doc).unwrap();
    if !s.args.is_empty() {
        out.push_str("\nArguments:\n");
        for (i, a) in s.args.iter().enumerate() {
            let status = match a.default {
                None => "required".to_owned(),
                Some(d) => format!("optional, default={d}"),
            };
            writeln!(
                out,
                "{}. {}    ({}, {}) {}",
                i + 1,
                a.name,
                a.ty.help_name(),
                status,
                a.doc
            )
            .unwrap();
        }
    }
    out
}

pub(super) fn help_all() -> String {
    let mut out = String::new();
    let mut category = "";
    for s in SPECS {
        if s.category != category {
            if !category.is_empty() {
                out.push('\n');
            }
            writeln!(out, "== {} ==", s.category).unwrap();
            category = s.category;
        }
        out.push_str(help_text(s).lines().next().unwrap_or(s.name));
        out.push('\n');
    }
    out.pop();
    out
}

// ---- Argument handling, as Core does it before a method runs ----------------------------

/// Positional arguments after named ones were placed; missing ones read as null.
#[derive(Debug)]
pub(crate) struct Args(pub(super) Vec<Value>);

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(super) fn wrong_type(v: &Value, expected: &str) -> RpcError {
    RpcError::new(
        RPC_MISC_ERROR,
        format!(
            "JSON value of type {} is not of expected type {expected}",
            type_name(v)
        ),
    )
}

impl Args {
    pub(super) fn get(&self, i: usize) -> Option<&Value> {
        self.0.get(i).filter(|v| !v.is_null())
    }

    /// An integer argument the way UniValue's `getInt` reads it: a JSON number that is an
    /// integer in range, else "JSON integer out of range".
    pub(super) fn int<T: TryFrom<i64>>(&self, i: usize) -> Result<Option<T>, RpcError> {
        let Some(v) = self.get(i) else {
            return Ok(None);
        };
        let Value::Number(n) = v else {
            return Err(wrong_type(v, "number"));
        };
        n.as_i64()
            .and_then(|x| T::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| RpcError::new(RPC_MISC_ERROR, "JSON integer out of range"))
    }

    pub(super) fn str(&self, i: usize) -> Result<Option<&str>, RpcError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(wrong_type(v, "string")),
        }
    }

    pub(super) fn bool(&self, i: usize) -> Result<Option<bool>, RpcError> {
        match self.get(i) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(wrong_type(v, "bool")),
        }
    }

    /// Core's `ParseVerbosity`: a number, or a boolean for 0/1.
    pub(super) fn verbosity(&self, i: usize, default: i32) -> Result<i32, RpcError> {
        match self.get(i) {
            Some(Value::Bool(b)) => Ok(*b as i32),
            _ => Ok(self.int::<i32>(i)?.unwrap_or(default)),
        }
    }

    /// A required argument (checked present by the argument count and type checks).
    pub(super) fn req_str(&self, i: usize) -> Result<&str, RpcError> {
        self.str(i)?
            .ok_or_else(|| wrong_type(&Value::Null, "string"))
    }
}

/// Core's `ParseHashV`: 64 hex digits, in display order.
pub(super) fn parse_hash(s: &str, name: &str) -> Result<Hash256, RpcError> {
    if s.len() != 64 {
        return Err(RpcError::new(
            RPC_INVALID_PARAMETER,
            format!("{name} must be of length 64 (not {}, for '{s}')", s.len()),
        ));
    }
    Hash256::from_display_hex(s).map_err(|_| {
        RpcError::new(
            RPC_INVALID_PARAMETER,
            format!("{name} must be hexadecimal string (not '{s}')"),
        )
    })
}

/// Named arguments to positions (Core's `transformNamedArguments`), then the count and type
/// checks of `RPCHelpMan::HandleRequest`.
pub(super) fn prepare(s: &Spec, params: Params) -> Result<Args, RpcError> {
    let mut args = match params {
        Params::Positional(v) => v,
        Params::Named(mut named) => {
            // Extra positional arguments may ride along in "args".
            let mut positional = match named.remove("args") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(a)) => a,
                Some(v) => return Err(wrong_type(&v, "array")),
            };
            if let Some(unknown) = named
                .keys()
                .find(|k| !s.args.iter().any(|a| a.name == k.as_str()))
            {
                return Err(RpcError::new(
                    RPC_INVALID_PARAMETER,
                    format!("Unknown named parameter {unknown}"),
                ));
            }
            for (i, a) in s.args.iter().enumerate() {
                if let Some(v) = named.remove(a.name) {
                    if i < positional.len() {
                        return Err(RpcError::new(
                            RPC_INVALID_PARAMETER,
                            format!("Parameter {} specified twice both as positional and named argument.", a.name),
                        ));
                    }
                    positional.resize(i, Value::Null);
                    positional.push(v);
                }
            }
            positional
        }
    };
    let required = s
        .args
        .iter()
        .rposition(|a| a.default.is_none())
        .map_or(0, |i| i + 1);
    if args.len() < required || args.len() > s.args.len() {
        // Core answers a wrong count with the method's help text.
        return Err(RpcError::new(RPC_MISC_ERROR, help_text(s)));
    }
    let mut mismatches = Vec::new();
    for (i, (a, v)) in s.args.iter().zip(&args).enumerate() {
        if a.skip_type_check || (a.default.is_some() && v.is_null()) {
            continue;
        }
        if let Some(expected) = a.ty.expected() {
            if type_name(v) != expected {
                mismatches.push((
                    format!("Position {} ({})", i + 1, a.name),
                    format!(
                        "JSON value of type {} is not of expected type {expected}",
                        type_name(v)
                    ),
                ));
            }
        }
    }
    if !mismatches.is_empty() {
        // Core prints the mismatches as a JSON object indented by four spaces.
        let body: Vec<String> = mismatches
            .iter()
            .map(|(k, m)| {
                format!(
                    "    {}: {}",
                    Value::from(k.as_str()),
                    Value::from(m.as_str())
                )
            })
            .collect();
        return Err(RpcError::new(
            RPC_TYPE_ERROR,
            format!("Wrong type passed:\n{{\n{}\n}}", body.join(",\n")),
        ));
    }
    args.resize(s.args.len(), Value::Null);
    Ok(Args(args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(s: &str, params: Value) -> Result<Args, RpcError> {
        let p = match params {
            Value::Object(m) => Params::Named(m),
            Value::Array(a) => Params::Positional(a),
            _ => unreachable!(),
        };
        prepare(spec(s).unwrap(), p)
    }

    #[test]
    fn named_arguments_land_in_place() {
        let a = args("getblock", json!({"verbosity": 0, "blockhash": "ab"})).unwrap();
        assert_eq!(a.0, [json!("ab"), json!(0)]);
        let a = args(
            "getblocktemplate",
            json!({"template_request": {"rules": ["segwit"]}}),
        )
        .unwrap();
        assert_eq!(a.0[0]["rules"][0], "segwit");
        let a = args("submitblock", json!({"hexdata": "00"})).unwrap();
        assert_eq!(a.0, [json!("00"), Value::Null]);
        let e = args("getblock", json!({"blockhash": "ab", "verbose": 1})).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (-8, "Unknown named parameter verbose")
        );
        let e = args("getblock", json!({"args": ["ab"], "blockhash": "cd"})).unwrap_err();
        assert_eq!(e.code, -8);
        let a = args("getblock", json!({"args": ["ab"], "verbosity": 2})).unwrap();
        assert_eq!(a.0, [json!("ab"), json!(2)]);
    }

    #[test]
    fn counts_and_types_are_checked_like_core() {
        let e = args("getblockhash", json!([])).unwrap_err();
        assert_eq!(e.code, -1);
        assert!(
            e.message.starts_with("getblockhash height\n"),
            "{}",
            e.message
        );
        let e = args("getblockcount", json!([1])).unwrap_err();
        assert_eq!(e.code, -1);
        let e = args("getblockhash", json!(["1"])).unwrap_err();
        assert_eq!(e.code, -3);
        assert_eq!(
            e.message,
            "Wrong type passed:\n{\n    \"Position 1 (height)\": \"JSON value of type string is not of expected type number\"\n}"
        );
        // Optional arguments may be null; verbosity takes numbers and booleans.
        assert!(args("getblockheader", json!(["ab", null])).is_ok());
        assert!(args("getblock", json!(["ab", true])).is_ok());
        let e = args("getblockheader", json!([1, 1])).unwrap_err();
        assert_eq!(e.message.matches("Position").count(), 2);
        // getInt: integers only, in range.
        let a = args("getblockhash", json!([1.5])).unwrap();
        assert_eq!(
            a.int::<i32>(0).unwrap_err().message,
            "JSON integer out of range"
        );
        let a = args("getblockhash", json!([1u64 << 40])).unwrap();
        assert_eq!(a.int::<i32>(0).unwrap_err().code, -1);
    }

    #[test]
    fn hashes_are_parsed_with_cores_messages() {
        assert_eq!(
            parse_hash("abc", "blockhash").unwrap_err().message,
            "blockhash must be of length 64 (not 3, for 'abc')"
        );
        let bad = "z".repeat(64);
        assert_eq!(
            parse_hash(&bad, "blockhash").unwrap_err().message,
            format!("blockhash must be hexadecimal string (not '{bad}')")
        );
    }

    #[test]
    fn help_lists_every_method() {
        let all = help_all();
        for s in SPECS {
            assert!(all.contains(s.name));
        }
        assert!(help_text(spec("getblock").unwrap())
            .starts_with("getblock \"blockhash\" ( verbosity )\n"));
    }
}
