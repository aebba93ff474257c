//! The JSON objects of RPC answers, as structs so that members come out in Core's order (a
//! `serde_json::Map` would sort them), and the value formats Core uses.

use primitives::bitcoin::{Transaction, TxIn, TxOut};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;

use super::script;

/// An amount in BTC written as Core writes it: a JSON number with exactly eight decimals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Btc(pub u64);

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
pub(crate) struct HeaderJson {
    /// Block hash, hex in display (reversed) order.
    pub hash: String,
    /// Main-chain blocks from this one to the tip, this one included; -1 off the main chain.
    pub confirmations: i64,
    /// Height in the chain.
    pub height: u32,
    /// Header `nVersion`, as a signed number.
    pub version: i32,
    /// Header `nVersion`, as 8 hex digits.
    pub versionHex: String,
    /// Merkle root, hex in display order.
    pub merkleroot: String,
    /// Header time, Unix seconds.
    pub time: u32,
    /// Median time past: the median of the last 11 blocks' times, this one included.
    pub mediantime: u32,
    /// Header `nNonce`.
    pub nonce: u32,
    /// Header `nBits`, as 8 hex digits.
    pub bits: String,
    /// Difficulty of the block's target, relative to difficulty 1.
    pub difficulty: f64,
    /// Expected number of hashes to produce the chain up to this block, 64 hex digits.
    pub chainwork: String,
    /// Number of transactions, coinbase included.
    pub nTx: usize,
    /// The parent's hash; absent for a block with no parent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previousblockhash: Option<String>,
    /// The next main-chain block's hash; absent at the tip or off the main chain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nextblockhash: Option<String>,
}

/// `getblock` at verbosity 1 (`tx` as txids) or 2 (`tx` as objects).
#[derive(Serialize)]
pub(crate) struct BlockJson<T: Serialize> {
    /// The header members, flattened in.
    #[serde(flatten)]
    pub header: HeaderJson,
    /// Serialized size without witness data, bytes.
    pub strippedsize: usize,
    /// Serialized size with witness data, bytes.
    pub size: usize,
    /// Weight (BIP141).
    pub weight: u64,
    /// The transactions: txids, or decoded objects at verbosity 2.
    pub tx: Vec<T>,
}

/// A spending input's `scriptSig`.
#[derive(Serialize)]
pub(crate) struct ScriptSigJson {
    /// Disassembly.
    pub asm: String,
    /// Raw script, hex.
    pub hex: String,
}

/// One `vin` entry.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum VinJson {
    /// The coinbase input.
    Coinbase {
        /// The coinbase scriptSig, hex.
        coinbase: String,
        /// Witness stack items, hex; absent when empty.
        #[serde(skip_serializing_if = "Option::is_none")]
        txinwitness: Option<Vec<String>>,
        /// `nSequence`.
        sequence: u32,
    },
    /// An input spending an outpoint.
    Spend {
        /// Txid of the output spent.
        txid: String,
        /// Index of the output spent.
        vout: u32,
        /// The scriptSig.
        #[serde(rename = "scriptSig")]
        script_sig: ScriptSigJson,
        /// Witness stack items, hex; absent when empty.
        #[serde(skip_serializing_if = "Option::is_none")]
        txinwitness: Option<Vec<String>>,
        /// `nSequence`.
        sequence: u32,
    },
}

/// An output's `scriptPubKey`.
#[derive(Serialize)]
pub(crate) struct ScriptPubKeyJson {
    /// Disassembly.
    pub asm: String,
    /// Output descriptor inferred from the script, with checksum.
    pub desc: String,
    /// Raw script, hex.
    pub hex: String,
    /// The address it pays, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Output type (`type`): `witness_v0_keyhash`, `nulldata`, ...
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// One `vout` entry.
#[derive(Serialize)]
pub(crate) struct VoutJson {
    /// Value in BTC.
    pub value: Btc,
    /// Index in the transaction.
    pub n: usize,
    /// The output script (`scriptPubKey`).
    #[serde(rename = "scriptPubKey")]
    pub script_pubkey: ScriptPubKeyJson,
}

/// `TxToUniv`: a decoded transaction.
#[derive(Serialize)]
pub(crate) struct TxJson {
    /// Transaction id.
    pub txid: String,
    /// Witness transaction id (the txid when there is no witness).
    pub hash: String,
    /// `nVersion`.
    pub version: i32,
    /// Serialized size with witness data, bytes.
    pub size: usize,
    /// Virtual size: weight / 4, rounded up.
    pub vsize: u64,
    /// Weight (BIP141).
    pub weight: u64,
    /// `nLockTime`.
    pub locktime: u32,
    /// Inputs.
    pub vin: Vec<VinJson>,
    /// Outputs.
    pub vout: Vec<VoutJson>,
    /// Known for transactions in blocks (Core reads it from undo data).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fee: Option<Btc>,
    /// Left out by `decoderawtransaction`, whose caller has the hex already.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hex: Option<String>,
}

impl TxJson {
    pub(crate) fn new(tx: &Transaction, fee: Option<u64>) -> TxJson {
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
    pub(crate) fn decoded(tx: &Transaction) -> TxJson {
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
pub(crate) struct RawTxJson {
    /// Whether the block passed as `blockhash` is on the main chain; present only when one was
    /// passed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_active_chain: Option<bool>,
    /// The decoded transaction, flattened in.
    #[serde(flatten)]
    pub tx: TxJson,
    /// Hash of the block holding it; absent for a mempool transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockhash: Option<String>,
    /// Confirmations of that block; absent for a mempool transaction.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmations: Option<i64>,
    /// That block's time, Unix seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<u32>,
    /// That block's time again, Unix seconds (Core sends both).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocktime: Option<u32>,
}

/// A mempool entry (`entryToJSON`), for `getrawmempool true` and `getmempoolentry`.
#[derive(Serialize)]
pub(crate) struct MempoolEntryJson {
    /// Virtual size, vbytes.
    pub vsize: u64,
    /// Weight (BIP141).
    pub weight: u64,
    /// When it entered the mempool, Unix seconds.
    pub time: u64,
    /// Tip height when it entered.
    pub height: u32,
    /// Mempool descendants, itself included.
    pub descendantcount: u32,
    /// Virtual size of those descendants, vbytes.
    pub descendantsize: u64,
    /// Mempool ancestors, itself included.
    pub ancestorcount: u32,
    /// Virtual size of those ancestors, vbytes.
    pub ancestorsize: u64,
    /// Witness transaction id.
    pub wtxid: String,
    /// Fees, in BTC.
    pub fees: MempoolFeesJson,
    /// Txids of unconfirmed parents it spends.
    pub depends: Vec<String>,
    /// Txids of mempool transactions spending it.
    pub spentby: Vec<String>,
    /// Whether it signals BIP125 replaceability (an input sequence below `0xfffffffe`).
    #[serde(rename = "bip125-replaceable")]
    pub bip125_replaceable: bool,
    /// Whether it still awaits its first relay to a peer.
    pub unbroadcast: bool,
}

/// The `fees` of a mempool entry, in BTC.
#[derive(Serialize)]
pub(crate) struct MempoolFeesJson {
    /// Fee it pays.
    pub base: Btc,
    /// Fee with `prioritisetransaction`'s delta added, as block assembly sees it.
    pub modified: Btc,
    /// Modified fees of it and its mempool ancestors.
    pub ancestor: Btc,
    /// Modified fees of it and its mempool descendants.
    pub descendant: Btc,
}

/// One transaction of a `getblocktemplate` answer (BIP22/BIP145).
#[derive(Serialize)]
pub(crate) struct GbtTxJson {
    /// Serialized transaction with witness, hex.
    pub data: String,
    /// Transaction id.
    pub txid: String,
    /// Witness transaction id.
    pub hash: String,
    /// 1-based indexes of earlier template transactions it spends (never any here).
    pub depends: [u32; 0],
    /// Fee in sats.
    pub fee: u64,
    /// Signature operations, as cost (BIP141: legacy ones count four).
    pub sigops: u64,
    /// Weight (BIP141).
    pub weight: u64,
}

/// `getblocktemplate` (BIP22/23, BIP9, BIP145), members in Core's order.
#[derive(Serialize)]
pub(crate) struct GbtJson<'a> {
    /// What the server supports: `proposal`.
    pub capabilities: [&'static str; 1],
    /// Block `nVersion` to use.
    pub version: i32,
    /// Rules the block must follow: `csv`, `!segwit` (the client must understand segwit), `taproot`.
    pub rules: [&'static str; 3],
    /// Version-bits deployments the client may signal: none.
    pub vbavailable: Empty,
    /// Version bits the server requires: none.
    pub vbrequired: u32,
    /// Hash of the tip to build on, hex in display order.
    pub previousblockhash: String,
    /// The transactions, already serialized as JSON ([`GbtTxJson`] objects).
    pub transactions: &'a RawValue,
    /// Data for the coinbase scriptSig: none.
    pub coinbaseaux: Empty,
    /// Most the coinbase may pay out: subsidy plus fees, in sats.
    pub coinbasevalue: u64,
    /// Id to pass back to wait for the next template (long polling).
    pub longpollid: String,
    /// Target the block hash must meet, 64 hex digits.
    pub target: String,
    /// Earliest header time accepted: median time past + 1.
    pub mintime: u32,
    /// What the client may change: `time`, `transactions`, `prevblock`.
    pub mutable: [&'static str; 3],
    /// Range of `nNonce`, hex: `00000000ffffffff`.
    pub noncerange: &'static str,
    /// Block signature operation cost limit.
    pub sigoplimit: u32,
    /// Block size limit, bytes.
    pub sizelimit: u32,
    /// Block weight limit (BIP141).
    pub weightlimit: u32,
    /// Current time to put in the header, Unix seconds.
    pub curtime: u32,
    /// Header `nBits`, as 8 hex digits.
    pub bits: String,
    /// Height of the block to build.
    pub height: u32,
    /// The `scriptPubKey` of the coinbase output committing to the witnesses, hex.
    pub default_witness_commitment: String,
}

/// `{}`.
#[derive(Serialize)]
pub(crate) struct Empty {}

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
