//! The JSON objects of RPC answers, as structs so that members come out in Core's order (a
//! `serde_json::Map` would sort them), and the value formats Core uses.

use primitives::bitcoin::{Transaction, TxIn, TxOut};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::script;

/// An amount in BTC written as Core writes it: a JSON number with exactly eight decimals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Btc(pub u64);

impl Serialize for Btc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = format!("{}.{:08}", self.0 / 100_000_000, self.0 % 100_000_000);
        RawValue::from_string(text)
            .expect("a decimal number is JSON")
            .serialize(s)
    }
}

/// `blockheaderToJSON`: what `getblockheader` returns and `getblock` starts with.
#[derive(Serialize)]
#[allow(non_snake_case)]
pub struct HeaderJson {
    pub hash: String,
    pub confirmations: i64,
    pub height: u32,
    pub version: i32,
    pub versionHex: String,
    pub merkleroot: String,
    pub time: u32,
    pub mediantime: u32,
    pub nonce: u32,
    pub bits: String,
    pub difficulty: f64,
    pub chainwork: String,
    pub nTx: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previousblockhash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nextblockhash: Option<String>,
}

/// `getblock` at verbosity 1 (`tx` as txids) or 2 (`tx` as objects).
#[derive(Serialize)]
pub struct BlockJson<T: Serialize> {
    #[serde(flatten)]
    pub header: HeaderJson,
    pub strippedsize: usize,
    pub size: usize,
    pub weight: u64,
    pub tx: Vec<T>,
}

#[derive(Serialize)]
pub struct ScriptSigJson {
    pub asm: String,
    pub hex: String,
}

#[derive(Serialize)]
#[serde(untagged)]
pub enum VinJson {
    Coinbase {
        coinbase: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        txinwitness: Option<Vec<String>>,
        sequence: u32,
    },
    Spend {
        txid: String,
        vout: u32,
        #[serde(rename = "scriptSig")]
        script_sig: ScriptSigJson,
        #[serde(skip_serializing_if = "Option::is_none")]
        txinwitness: Option<Vec<String>>,
        sequence: u32,
    },
}

#[derive(Serialize)]
pub struct ScriptPubKeyJson {
    pub asm: String,
    pub desc: String,
    pub hex: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

#[derive(Serialize)]
pub struct VoutJson {
    pub value: Btc,
    pub n: usize,
    #[serde(rename = "scriptPubKey")]
    pub script_pubkey: ScriptPubKeyJson,
}

/// `TxToUniv`: a decoded transaction.
#[derive(Serialize)]
pub struct TxJson {
    pub txid: String,
    pub hash: String,
    pub version: i32,
    pub size: usize,
    pub vsize: u64,
    pub weight: u64,
    pub locktime: u32,
    pub vin: Vec<VinJson>,
    pub vout: Vec<VoutJson>,
    /// Known for transactions in blocks (Core reads it from undo data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fee: Option<Btc>,
    /// Left out by `decoderawtransaction`, whose caller has the hex already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

impl TxJson {
    pub fn new(tx: &Transaction, fee: Option<u64>) -> TxJson {
        let weight = tx.weight().to_wu();
        TxJson {
            txid: tx.compute_txid().to_string(),
            hash: tx.compute_wtxid().to_string(),
            version: tx.version.0,
            size: tx.total_size(),
            vsize: weight.div_ceil(4),
            weight,
            locktime: tx.lock_time.to_consensus_u32(),
            vin: tx.input.iter().map(|i| vin(i, tx.is_coinbase())).collect(),
            vout: tx
                .output
                .iter()
                .enumerate()
                .map(|(n, o)| vout(n, o))
                .collect(),
            fee: if tx.is_coinbase() { None } else { fee.map(Btc) },
            hex: Some(primitives::bitcoin::consensus::encode::serialize_hex(tx)),
        }
    }

    /// `decoderawtransaction`'s shape: no fee, no hex.
    pub fn decoded(tx: &Transaction) -> TxJson {
        TxJson {
            hex: None,
            ..TxJson::new(tx, None)
        }
    }
}

fn vin(i: &TxIn, coinbase: bool) -> VinJson {
    let witness = (!i.witness.is_empty()).then(|| i.witness.iter().map(hex::encode).collect());
    let sig = i.script_sig.as_bytes();
    if coinbase {
        VinJson::Coinbase {
            coinbase: hex::encode(sig),
            txinwitness: witness,
            sequence: i.sequence.0,
        }
    } else {
        VinJson::Spend {
            txid: i.previous_output.txid.to_string(),
            vout: i.previous_output.vout,
            script_sig: ScriptSigJson {
                asm: script::asm(sig),
                hex: hex::encode(sig),
            },
            txinwitness: witness,
            sequence: i.sequence.0,
        }
    }
}

fn vout(n: usize, o: &TxOut) -> VoutJson {
    let spk = o.script_pubkey.as_bytes();
    VoutJson {
        value: Btc(o.value.to_sat()),
        n,
        script_pubkey: ScriptPubKeyJson {
            asm: script::asm(spk),
            desc: script::descriptor(spk),
            hex: hex::encode(spk),
            address: script::address(spk),
            kind: script::output_type(spk),
        },
    }
}

/// `getrawtransaction` at verbosity 1 and up.
#[derive(Serialize)]
pub struct RawTxJson {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_active_chain: Option<bool>,
    #[serde(flatten)]
    pub tx: TxJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockhash: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmations: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocktime: Option<u32>,
}

/// A mempool entry (`entryToJSON`), for `getrawmempool true` and `getmempoolentry`.
#[derive(Serialize)]
pub struct MempoolEntryJson {
    pub vsize: u64,
    pub weight: u64,
    pub time: u64,
    pub height: u32,
    pub descendantcount: u32,
    pub descendantsize: u64,
    pub ancestorcount: u32,
    pub ancestorsize: u64,
    pub wtxid: String,
    pub fees: MempoolFeesJson,
    pub depends: Vec<String>,
    pub spentby: Vec<String>,
    #[serde(rename = "bip125-replaceable")]
    pub bip125_replaceable: bool,
    pub unbroadcast: bool,
}

#[derive(Serialize)]
pub struct MempoolFeesJson {
    pub base: Btc,
    pub modified: Btc,
    pub ancestor: Btc,
    pub descendant: Btc,
}

/// One transaction of a `getblocktemplate` answer (BIP22/BIP145).
#[derive(Serialize)]
pub struct GbtTxJson {
    pub data: String,
    pub txid: String,
    pub hash: String,
    pub depends: [u32; 0],
    pub fee: u64,
    pub sigops: u64,
    pub weight: u64,
}

/// `getblocktemplate` (BIP22/23, BIP9, BIP145), members in Core's order.
#[derive(Serialize)]
pub struct GbtJson<'a> {
    pub capabilities: [&'static str; 1],
    pub version: i32,
    pub rules: [&'static str; 3],
    pub vbavailable: Empty,
    pub vbrequired: u32,
    pub previousblockhash: String,
    pub transactions: &'a RawValue,
    pub coinbaseaux: Empty,
    pub coinbasevalue: u64,
    pub longpollid: String,
    pub target: String,
    pub mintime: u32,
    pub mutable: [&'static str; 3],
    pub noncerange: &'static str,
    pub sigoplimit: u32,
    pub sizelimit: u32,
    pub weightlimit: u32,
    pub curtime: u32,
    pub bits: String,
    pub height: u32,
    pub default_witness_commitment: String,
}

/// `{}`.
#[derive(Serialize)]
pub struct Empty {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_have_eight_decimals() {
        assert_eq!(
            serde_json::to_string(&Btc(312_500_000)).unwrap(),
            "3.12500000"
        );
        assert_eq!(serde_json::to_string(&Btc(1000)).unwrap(), "0.00001000");
        assert_eq!(serde_json::to_string(&Btc(0)).unwrap(), "0.00000000");
        assert_eq!(
            serde_json::to_string(&Btc(21_000_000 * 100_000_000)).unwrap(),
            "21000000.00000000"
        );
    }
}
