//! A `getblocktemplate` answer (BIP22, BIP23, BIP145, as Bitcoin Core writes it) turned into the
//! engine's [`Template`]. Every field the engine relies on is checked; a missing or malformed one
//! is an error naming it (`transactions[17].txid`), never a panic or a silently zero value.

use std::sync::Arc;

use primitives::bitcoin::Amount;
use primitives::coinbase::WITNESS_COMMITMENT_HEADER;
use primitives::hex;
use primitives::{CompactTarget, Hash256, Target};
use serde_json::{Map, Value};

use crate::template::{Template, TemplateTx};

/// Why an answer is not a usable template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GbtError {
    /// The result is not a JSON object (what it is instead).
    #[error("the result is not a JSON object but {0}")]
    NotAnObject(&'static str),
    /// A required field is missing (its name).
    #[error("missing field `{0}`")]
    Missing(String),
    /// A field's value is unusable.
    #[error("field `{field}`: {reason}")]
    Invalid {
        /// The field's name.
        field: String,
        /// What is wrong with its value.
        reason: String,
    },
}

/// Bitcoin's 21 million coins in satoshis (Core's `MAX_MONEY`): no coinbase pays more.
const MAX_MONEY: u64 = 21_000_000 * 100_000_000;

/// Reads a `getblocktemplate` result.
pub fn parse_block_template(result: &Value) -> Result<Template, GbtError> {
    let obj = result
        .as_object()
        .ok_or_else(|| GbtError::NotAnObject(json_kind(result)))?;

    let height = u32_field(obj, "height")?;
    let prev_hash = hash_field(obj, "previousblockhash", "previousblockhash")?;
    let version = version_field(obj)?;
    let bits = bits_field(obj)?;
    let curtime = u32_field(obj, "curtime")?;
    let mintime = u32_field(obj, "mintime")?;
    let coinbase_value = u64_field(obj, "coinbasevalue", "coinbasevalue")?;
    if coinbase_value > MAX_MONEY {
        return Err(invalid(
            "coinbasevalue",
            format!("{coinbase_value} sats is more than 21 million BTC"),
        ));
    }
    let witness_commitment = witness_commitment_field(obj)?;
    let transactions = transactions_field(obj)?;
    let longpoll_id = match obj.get("longpollid") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(wrong_type("longpollid", "a string", v)),
    };

    Ok(Template {
        height,
        prev_hash,
        version,
        bits,
        curtime,
        mintime,
        median_time_past: Some(mintime.saturating_sub(1)),
        coinbase_value: Amount::from_sat(coinbase_value),
        witness_commitment,
        transactions,
        longpoll_id,
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn invalid(field: impl Into<String>, reason: impl Into<String>) -> GbtError {
    GbtError::Invalid {
        field: field.into(),
        reason: reason.into(),
    }
}

fn wrong_type(field: impl Into<String>, want: &str, got: &Value) -> GbtError {
    invalid(field, format!("expected {want}, got {}", json_kind(got)))
}

fn required<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
    field: &str,
) -> Result<&'a Value, GbtError> {
    match obj.get(key) {
        None | Some(Value::Null) => Err(GbtError::Missing(field.to_owned())),
        Some(v) => Ok(v),
    }
}

fn u64_field(obj: &Map<String, Value>, key: &str, field: &str) -> Result<u64, GbtError> {
    let v = required(obj, key, field)?;
    v.as_u64()
        .ok_or_else(|| wrong_type(field, "a non-negative integer", v))
}

fn u32_field(obj: &Map<String, Value>, key: &str) -> Result<u32, GbtError> {
    let n = u64_field(obj, key, key)?;
    u32::try_from(n).map_err(|_| invalid(key, format!("{n} does not fit in 32 bits")))
}

fn str_field<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a str, GbtError> {
    let v = required(obj, key, field)?;
    v.as_str().ok_or_else(|| wrong_type(field, "a string", v))
}

/// A hash in the reversed hex RPC shows.
fn hash_field(obj: &Map<String, Value>, key: &str, field: &str) -> Result<Hash256, GbtError> {
    let s = str_field(obj, key, field)?;
    Hash256::from_display_hex(s).map_err(|e| invalid(field, format!("{e} (in {s:?})")))
}

/// Core prints the version as a signed 32-bit number; the header field is its bit pattern.
fn version_field(obj: &Map<String, Value>) -> Result<u32, GbtError> {
    let v = required(obj, "version", "version")?;
    let n = v
        .as_i64()
        .ok_or_else(|| wrong_type("version", "an integer", v))?;
    if let Ok(signed) = i32::try_from(n) {
        Ok(signed as u32)
    } else {
        u32::try_from(n).map_err(|_| invalid("version", format!("{n} does not fit in 32 bits")))
    }
}

fn bits_field(obj: &Map<String, Value>) -> Result<CompactTarget, GbtError> {
    let s = str_field(obj, "bits", "bits")?;
    if s.len() != 8 {
        return Err(invalid("bits", format!("expected 8 hex digits, got {s:?}")));
    }
    let n = u32::from_str_radix(s, 16).map_err(|_| invalid("bits", format!("not hex: {s:?}")))?;
    let bits = CompactTarget::from_consensus(n);
    match Target::from_compact(bits) {
        Ok(t) if !t.is_zero() => Ok(bits),
        Ok(_) => Err(invalid("bits", format!("{s} is a zero target"))),
        Err(e) => Err(invalid("bits", e.to_string())),
    }
}

/// `default_witness_commitment`: the commitment output's script, `6a24aa21a9ed` and 32 bytes.
fn witness_commitment_field(obj: &Map<String, Value>) -> Result<Option<Hash256>, GbtError> {
    const FIELD: &str = "default_witness_commitment";
    let s = match obj.get(FIELD) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s,
        Some(v) => return Err(wrong_type(FIELD, "a string", v)),
    };
    let script = hex::decode(s).map_err(|e| invalid(FIELD, e.to_string()))?;
    let header = WITNESS_COMMITMENT_HEADER.len();
    if script.len() != header + 32 || script[..header] != WITNESS_COMMITMENT_HEADER {
        return Err(invalid(
            FIELD,
            format!(
                "expected the script 6a24aa21a9ed followed by 32 bytes, got {} bytes starting {}",
                script.len(),
                hex::encode(&script[..script.len().min(header)])
            ),
        ));
    }
    let mut c = [0u8; 32];
    c.copy_from_slice(&script[header..]);
    Ok(Some(Hash256(c)))
}

fn transactions_field(obj: &Map<String, Value>) -> Result<Arc<[TemplateTx]>, GbtError> {
    let v = required(obj, "transactions", "transactions")?;
    let list = v
        .as_array()
        .ok_or_else(|| wrong_type("transactions", "an array", v))?;
    let mut txs = Vec::with_capacity(list.len());
    for (i, entry) in list.iter().enumerate() {
        let at = |key: &str| format!("transactions[{i}].{key}");
        let e = entry
            .as_object()
            .ok_or_else(|| wrong_type(format!("transactions[{i}]"), "an object", entry))?;
        let data_field = at("data");
        let data_hex = str_field(e, "data", &data_field)?;
        let data = hex::decode(data_hex).map_err(|err| invalid(&data_field, err.to_string()))?;
        if data.is_empty() {
            return Err(invalid(data_field, "empty"));
        }
        let txid = hash_field(e, "txid", &at("txid"))?;
        let fee_field = at("fee");
        let fee = u64_field(e, "fee", &fee_field)?;
        if fee > MAX_MONEY {
            return Err(invalid(
                fee_field,
                format!("{fee} sats is more than 21 million BTC"),
            ));
        }
        let weight_field = at("weight");
        let weight = u64_field(e, "weight", &weight_field)?;
        let weight = u32::try_from(weight)
            .map_err(|_| invalid(weight_field, format!("{weight} does not fit in 32 bits")))?;
        txs.push(TemplateTx {
            data,
            txid,
            fee: Amount::from_sat(fee),
            weight,
        });
    }
    Ok(txs.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "capabilities": ["proposal"],
            "version": 536870912,
            "rules": ["csv", "!segwit", "taproot"],
            "previousblockhash": "000000000000000000021f4b1d4b1b5c6b2b1e5d8d9f1a2b3c4d5e6f7a8b9c0d",
            "transactions": [
                {"data": "0200000001", "txid": "11".repeat(32), "hash": "22".repeat(32),
                 "depends": [], "fee": 1234, "sigops": 1, "weight": 561},
            ],
            "coinbaseaux": {},
            "coinbasevalue": 312501234u64,
            "longpollid": "000000000000000000021f4b1d4b1b5c6b2b1e5d8d9f1a2b3c4d5e6f7a8b9c0d7",
            "target": "00000000ffff0000000000000000000000000000000000000000000000000000",
            "mintime": 1750000001,
            "curtime": 1750000600,
            "bits": "1d00ffff",
            "height": 900001,
            "default_witness_commitment": format!("6a24aa21a9ed{}", "ab".repeat(32)),
        })
    }

    #[test]
    fn reads_cores_shape() {
        let t = parse_block_template(&sample()).unwrap();
        assert_eq!(t.height, 900_001);
        assert_eq!(
            t.prev_hash.to_string(),
            "000000000000000000021f4b1d4b1b5c6b2b1e5d8d9f1a2b3c4d5e6f7a8b9c0d"
        );
        assert_eq!(t.prev_hash.0[31], 0, "internal order: display reversed");
        assert_eq!(t.version, 0x2000_0000);
        assert_eq!(t.bits, CompactTarget::from_consensus(0x1d00ffff));
        assert_eq!((t.mintime, t.curtime), (1_750_000_001, 1_750_000_600));
        assert_eq!(t.coinbase_value.to_sat(), 312_501_234);
        assert_eq!(t.witness_commitment, Some(Hash256([0xab; 32])));
        assert_eq!(t.transactions.len(), 1);
        let tx = &t.transactions[0];
        assert_eq!(tx.data, [2, 0, 0, 0, 1]);
        assert_eq!(tx.txid, Hash256([0x11; 32]));
        assert_eq!((tx.fee.to_sat(), tx.weight), (1234, 561));
        assert!(t.longpoll_id.unwrap().ends_with("9c0d7"));
    }

    #[test]
    fn negative_versions_keep_their_bit_pattern() {
        let mut v = sample();
        v["version"] = json!(-536870912);
        assert_eq!(parse_block_template(&v).unwrap().version, 0xe000_0000);
        v["version"] = json!(0xe000_0000u64);
        assert_eq!(parse_block_template(&v).unwrap().version, 0xe000_0000);
        v["version"] = json!(1u64 << 33);
        assert!(parse_block_template(&v).is_err());
    }

    #[test]
    fn optional_fields_may_be_absent() {
        let mut v = sample();
        let o = v.as_object_mut().unwrap();
        o.remove("default_witness_commitment");
        o.remove("longpollid");
        let t = parse_block_template(&v).unwrap();
        assert_eq!(t.witness_commitment, None);
        assert_eq!(t.longpoll_id, None);
    }

    #[test]
    fn each_bad_field_is_named() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("height", Value::Null, "missing field `height`"),
            (
                "height",
                json!("900001"),
                "field `height`: expected a non-negative integer, got a string",
            ),
            (
                "height",
                json!(1u64 << 32),
                "field `height`: 4294967296 does not fit in 32 bits",
            ),
            (
                "previousblockhash",
                json!("00"),
                "field `previousblockhash`",
            ),
            (
                "bits",
                json!("1d00fff"),
                "field `bits`: expected 8 hex digits",
            ),
            ("bits", json!("1d00fffg"), "field `bits`: not hex"),
            (
                "bits",
                json!("00000000"),
                "field `bits`: 00000000 is a zero target",
            ),
            ("bits", json!("1d80ffff"), "field `bits`"),
            ("curtime", json!(-1), "field `curtime`"),
            ("coinbasevalue", json!(1.5), "field `coinbasevalue`"),
            (
                "coinbasevalue",
                json!(MAX_MONEY + 1),
                "more than 21 million",
            ),
            (
                "default_witness_commitment",
                json!("6a24aa21a9ed00"),
                "field `default_witness_commitment`: expected the script",
            ),
            (
                "default_witness_commitment",
                json!(format!("6a24aa21a9ee{}", "00".repeat(32))),
                "starting 6a24aa21a9ee",
            ),
            (
                "transactions",
                json!({}),
                "field `transactions`: expected an array, got an object",
            ),
            ("longpollid", json!(5), "field `longpollid`"),
        ];
        for (field, value, want) in cases {
            let mut v = sample();
            v[field] = value;
            let e = parse_block_template(&v).unwrap_err().to_string();
            assert!(e.contains(want), "{field}: {e:?} does not contain {want:?}");
        }
        let mut v = sample();
        v.as_object_mut().unwrap().remove("mintime");
        assert_eq!(
            parse_block_template(&v).unwrap_err(),
            GbtError::Missing("mintime".into())
        );
    }

    #[test]
    fn transaction_fields_are_named_with_their_index() {
        let tx = sample()["transactions"][0].clone();
        let cases: Vec<(&str, Value, &str)> = vec![
            ("data", Value::Null, "missing field `transactions[1].data`"),
            ("data", json!("zz"), "field `transactions[1].data`: not hex"),
            ("data", json!(""), "field `transactions[1].data`: empty"),
            ("txid", json!("11"), "field `transactions[1].txid`"),
            ("fee", json!(-5), "field `transactions[1].fee`"),
            (
                "weight",
                Value::Null,
                "missing field `transactions[1].weight`",
            ),
        ];
        for (key, value, want) in cases {
            let mut v = sample();
            let mut bad = tx.clone();
            bad[key] = value;
            v["transactions"] = json!([tx.clone(), bad]);
            let e = parse_block_template(&v).unwrap_err().to_string();
            assert!(e.contains(want), "{key}: {e:?} does not contain {want:?}");
        }
        let mut v = sample();
        v["transactions"] = json!([tx, "0200"]);
        assert!(parse_block_template(&v)
            .unwrap_err()
            .to_string()
            .contains("field `transactions[1]`: expected an object"));
        assert_eq!(
            parse_block_template(&json!([])).unwrap_err(),
            GbtError::NotAnObject("an array")
        );
    }
}
