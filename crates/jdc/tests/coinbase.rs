//! The three shapes of a template's coinbase describe one transaction.

use std::sync::Arc;

use jdc::coinbase::build;
use pool::template::TdpTemplate;
use primitives::bitcoin::absolute::LockTime;
use primitives::bitcoin::consensus::{deserialize, serialize, Decodable};
use primitives::bitcoin::hashes::Hash;
use primitives::bitcoin::transaction::Version;
use primitives::bitcoin::{
    Amount, OutPoint, ScriptBuf, Sequence, Transaction, TxIn, TxOut, Witness,
};

fn commitment_output() -> TxOut {
    let mut script = vec![0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed];
    script.extend_from_slice(&[0x5c; 32]);
    TxOut {
        value: Amount::ZERO,
        script_pubkey: ScriptBuf::from_bytes(script),
    }
}

fn template(with_witness: bool) -> TdpTemplate {
    let outputs: Vec<TxOut> = if with_witness {
        vec![commitment_output()]
    } else {
        Vec::new()
    };
    let mut bytes = Vec::new();
    for o in &outputs {
        bytes.extend_from_slice(&serialize(o));
    }
    TdpTemplate {
        template_id: 7,
        coinbase_tx_version: 2,
        // BIP34 push of height 900001.
        coinbase_prefix: vec![0x03, 0xa1, 0xbb, 0x0d],
        coinbase_tx_input_sequence: 0xffff_fffe,
        coinbase_tx_value_remaining: 312_512_345,
        coinbase_tx_outputs_count: outputs.len() as u32,
        coinbase_tx_outputs: bytes,
        coinbase_tx_locktime: 900_000,
        merkle_path: Arc::from(Vec::new()),
    }
}

fn pool_script() -> ScriptBuf {
    ScriptBuf::from_bytes([&[0x00, 0x14][..], &[0x11; 20]].concat())
}

#[test]
fn every_view_of_the_coinbase_has_the_txid_the_devices_mine() {
    for with_witness in [true, false] {
        let tdp = template(with_witness);
        let tag = b"/farm/";
        let extranonce: Vec<u8> = (1..=12).collect();
        let (custom, declared) = build(&tdp, tag, extranonce.len(), &pool_script()).unwrap();

        // What the downstream devices hash: the embedded engine's job.
        let mined = tdp.coinbase(tag, extranonce.len(), &pool_script()).unwrap();
        let mined_txid = mined.txid(&extranonce).unwrap();
        assert_eq!(
            declared.legacy(&extranonce),
            mined.serialize(&extranonce).unwrap()
        );

        // What the JDS rebuilds: the declared parts around the extranonce, a full transaction.
        let full = [&declared.prefix[..], &extranonce, &declared.suffix[..]].concat();
        let tx: Transaction = deserialize(&full).expect("declared coinbase decodes");
        assert_eq!(tx.compute_txid().to_byte_array(), mined_txid.0);
        assert_eq!(tx.input[0].witness.len(), usize::from(with_witness));
        assert_eq!(tx.output[0].script_pubkey, pool_script());
        assert_eq!(tx.output[0].value, Amount::from_sat(312_512_345));

        // What the pool rebuilds from SetCustomMiningJob, independently.
        let outputs = Vec::<TxOut>::consensus_decode(&mut custom.outputs.as_slice()).unwrap();
        assert_eq!(outputs, custom.outputs_list);
        let pool_side = Transaction {
            version: Version::non_standard(custom.tx_version as i32),
            lock_time: LockTime::from_consensus(custom.locktime),
            input: vec![TxIn {
                previous_output: OutPoint::null(),
                script_sig: ScriptBuf::from_bytes(
                    [&custom.script_prefix[..], &extranonce].concat(),
                ),
                sequence: Sequence(custom.sequence),
                witness: Witness::new(),
            }],
            output: outputs,
        };
        assert_eq!(pool_side.compute_txid().to_byte_array(), mined_txid.0);
    }
}

#[test]
fn an_extranonce_past_a_direct_push_is_refused() {
    assert!(build(&template(true), b"", 76, &pool_script()).is_err());
}
