//! What the Template Provider tests share: a node with the endpoint on 127.0.0.1:0, and a
//! Template Distribution client built from the same SV2 reference crates (the Noise initiator
//! checking the authority key, the reference message types), doing what a pool does with
//! templates: build the coinbase and the header, grind, submit.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use binary_sv2::{B064KOwned, GetSize, Serialize};
use common_messages_sv2::{
    Protocol, SetupConnectionError, SetupConnectionOwned, SetupConnectionSuccess,
    MESSAGE_TYPE_SETUP_CONNECTION, MESSAGE_TYPE_SETUP_CONNECTION_ERROR,
    MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS,
};
use events::EventSink;
use noise_sv2::Initiator;
use primitives::bitcoin::consensus::{serialize, Decodable};
use primitives::bitcoin::{
    absolute::LockTime, transaction::Version, Amount, OutPoint, ScriptBuf, Sequence, Transaction,
    TxIn, TxOut, Witness,
};
use primitives::coinbase::witness_commitment;
use primitives::{
    coinbase_merkle_branch, merkle_root_from_branch, CompactTarget, Hash256, Header, Target,
};
use simnet::tdp::{serve, Frame, Limits, NoiseConn, TdpConfig, TdpKeys, TransportError};
use simnet::{Network, Node, SimnetConfig};
use template_distribution_sv2::{
    CoinbaseOutputConstraints, NewTemplate, NewTemplateOwned, RequestTransactionData,
    RequestTransactionDataError, RequestTransactionDataSuccess, SetNewPrevHash,
    SetNewPrevHashOwned, SubmitSolutionOwned, MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS,
    MESSAGE_TYPE_NEW_TEMPLATE, MESSAGE_TYPE_REQUEST_TRANSACTION_DATA,
    MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR, MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS,
    MESSAGE_TYPE_SET_NEW_PREV_HASH, MESSAGE_TYPE_SUBMIT_SOLUTION,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long any single expected message may take.
pub const WAIT: Duration = Duration::from_secs(10);

#[path = "../common/mod.rs"]
mod common;

/// A quiet network: easy target, a modest mempool, no arrivals and no network blocks unless
/// a test makes them, so every message a client sees is one the test caused.
pub fn quiet_config(seed: u64) -> SimnetConfig {
    let mut c = common::submit_config(seed);
    c.mempool.arrival_rate = 0.0;
    c
}

pub struct Server {
    pub node: Node,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    pub serve: JoinHandle<std::io::Result<()>>,
    clock: JoinHandle<()>,
}

impl Server {
    pub async fn start(net: SimnetConfig, tdp: TdpConfig) -> Server {
        let node = Node::new(Network::new(net).unwrap(), "pool", EventSink::disabled());
        let clock = tokio::spawn({
            let node = node.clone();
            async move { node.run_clock(std::future::pending()).await }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = tokio::spawn(serve(node.clone(), listener, tdp, async move {
            let _ = stopped.await;
        }));
        Server {
            node,
            addr,
            stop: Some(stop),
            serve,
            clock,
        }
    }

    /// A server on `quiet_config(seed)` and default endpoint settings, with a reference client
    /// connected to it.
    pub async fn with_client(seed: u64) -> (Server, Client) {
        let server = Server::start(quiet_config(seed), TdpConfig::default()).await;
        let c = Client::connect_reference(server.addr).await;
        (server, c)
    }

    /// Stops the endpoint and checks it ended cleanly (no panic, no error).
    pub async fn stop(mut self) {
        assert!(!self.serve.is_finished(), "the endpoint stopped on its own");
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(WAIT, &mut self.serve)
            .await
            .expect("serve returns after shutdown")
            .expect("serve did not panic")
            .expect("serve returned Ok");
        self.clock.abort();
    }
}

/// A Template Distribution client.
pub struct Client {
    pub conn: NoiseConn,
}

impl Client {
    /// Connects and runs the Noise handshake, checking the certificate against `authority`.
    pub async fn connect(addr: SocketAddr, authority: [u8; 32]) -> Result<Client, TransportError> {
        let stream = TcpStream::connect(addr).await?;
        let initiator = Initiator::from_raw_k(authority).expect("valid key");
        let conn = NoiseConn::connect(stream, initiator, Limits::default()).await?;
        Ok(Client { conn })
    }

    pub async fn connect_reference(addr: SocketAddr) -> Client {
        Client::connect(addr, TdpKeys::reference().public_bytes())
            .await
            .expect("handshake with the reference authority key")
    }

    pub async fn send<T: Serialize + GetSize>(&mut self, msg_type: u8, m: T) {
        self.conn.send(msg_type, m).await.expect("send");
    }

    pub async fn recv(&mut self) -> Frame {
        tokio::time::timeout(WAIT, self.conn.read_frame())
            .await
            .expect("a message in time")
            .expect("a frame")
    }

    /// The server closes the connection (end of stream or reset) within `WAIT`, possibly after
    /// some frames, which are returned.
    pub async fn expect_close(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            match tokio::time::timeout(WAIT, self.conn.read_frame()).await {
                Err(_) => panic!("the server kept the connection open"),
                Ok(Ok(f)) => frames.push(f),
                Ok(Err(TransportError::Closed | TransportError::Io(_))) => return frames,
                Ok(Err(e)) => panic!("unexpected error instead of a close: {e}"),
            }
        }
    }

    pub async fn setup_with(&mut self, protocol: Protocol, min: u16, max: u16, flags: u32) {
        self.send(
            MESSAGE_TYPE_SETUP_CONNECTION,
            SetupConnectionOwned {
                protocol,
                min_version: min,
                max_version: max,
                flags,
                endpoint_host: "127.0.0.1".try_into().unwrap(),
                endpoint_port: 8442,
                vendor: "stratumlab-test".try_into().unwrap(),
                hardware_version: "".try_into().unwrap(),
                firmware: "".try_into().unwrap(),
                device_id: "".try_into().unwrap(),
            },
        )
        .await;
    }

    /// SetupConnection for Template Distribution version 2, expecting Success.
    pub async fn setup(&mut self) -> SetupConnectionSuccess {
        self.setup_with(Protocol::TemplateDistributionProtocol, 2, 2, 0)
            .await;
        let mut f = self.recv().await;
        assert_eq!(f.msg_type(), MESSAGE_TYPE_SETUP_CONNECTION_SUCCESS);
        binary_sv2::from_bytes::<SetupConnectionSuccess>(&mut f.payload).unwrap()
    }

    /// Expects SetupConnection.Error and returns its code and flags.
    pub async fn setup_error(&mut self) -> (String, u32) {
        let mut f = self.recv().await;
        assert_eq!(f.msg_type(), MESSAGE_TYPE_SETUP_CONNECTION_ERROR);
        let e: SetupConnectionError = binary_sv2::from_bytes(&mut f.payload).unwrap();
        (
            String::from_utf8(e.error_code.as_bytes().to_vec()).unwrap(),
            e.flags,
        )
    }

    pub async fn constraints(&mut self, size: u32, sigops: u16) {
        self.send(
            MESSAGE_TYPE_COINBASE_OUTPUT_CONSTRAINTS,
            CoinbaseOutputConstraints {
                coinbase_output_max_additional_size: size,
                coinbase_output_max_additional_sigops: sigops,
            },
        )
        .await;
    }

    /// The next frame, which must be of `msg_type` (the message called `name`).
    async fn recv_type(&mut self, msg_type: u8, name: &str) -> Frame {
        let f = self.recv().await;
        assert_eq!(f.msg_type(), msg_type, "expected {name}");
        f
    }

    pub async fn new_template(&mut self) -> NewTemplateOwned {
        let mut f = self
            .recv_type(MESSAGE_TYPE_NEW_TEMPLATE, "NewTemplate")
            .await;
        binary_sv2::from_bytes::<NewTemplate>(&mut f.payload)
            .unwrap()
            .into_owned()
    }

    pub async fn set_new_prev_hash(&mut self) -> SetNewPrevHashOwned {
        let mut f = self
            .recv_type(MESSAGE_TYPE_SET_NEW_PREV_HASH, "SetNewPrevHash")
            .await;
        binary_sv2::from_bytes::<SetNewPrevHash>(&mut f.payload)
            .unwrap()
            .into_owned()
    }

    /// A future NewTemplate and the SetNewPrevHash naming it, as sent on a new tip.
    pub async fn future_pair(&mut self) -> (NewTemplateOwned, SetNewPrevHashOwned) {
        let t = self.new_template().await;
        assert!(t.future_template, "a new tip's template is a future one");
        let p = self.set_new_prev_hash().await;
        assert_eq!(p.template_id, t.template_id);
        (t, p)
    }

    /// Setup and constraints; returns the first template and its prev hash.
    pub async fn start(&mut self, size: u32) -> (NewTemplateOwned, SetNewPrevHashOwned) {
        self.setup().await;
        self.constraints(size, 4).await;
        self.future_pair().await
    }

    /// RequestTransactionData: the raw transactions and excess data, or the error code.
    pub async fn transaction_data(&mut self, id: u64) -> Result<(Vec<Vec<u8>>, Vec<u8>), String> {
        self.send(
            MESSAGE_TYPE_REQUEST_TRANSACTION_DATA,
            RequestTransactionData { template_id: id },
        )
        .await;
        let mut f = self.recv().await;
        match f.msg_type() {
            MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_SUCCESS => {
                let m: RequestTransactionDataSuccess =
                    binary_sv2::from_bytes(&mut f.payload).unwrap();
                assert_eq!(m.template_id, id);
                Ok((
                    m.transaction_list
                        .iter()
                        .map(|t| t.as_bytes().to_vec())
                        .collect(),
                    m.excess_data.as_bytes().to_vec(),
                ))
            }
            MESSAGE_TYPE_REQUEST_TRANSACTION_DATA_ERROR => {
                let m: RequestTransactionDataError =
                    binary_sv2::from_bytes(&mut f.payload).unwrap();
                assert_eq!(m.template_id, id);
                Err(String::from_utf8(m.error_code.as_bytes().to_vec()).unwrap())
            }
            other => panic!("unexpected message type {other:#x}"),
        }
    }

    pub async fn submit(&mut self, s: &Solved) {
        self.send(
            MESSAGE_TYPE_SUBMIT_SOLUTION,
            SubmitSolutionOwned {
                template_id: s.template_id,
                version: s.header.version,
                header_timestamp: s.header.time,
                header_nonce: s.header.nonce,
                coinbase_tx: B064KOwned::new(s.coinbase.clone()).unwrap(),
            },
        )
        .await;
    }
}

/// The pool's payout output in test coinbases: P2WPKH to a fixed key hash.
pub fn payout_script() -> ScriptBuf {
    let mut s = vec![0x00, 0x14];
    s.extend_from_slice(&[0x42; 20]);
    ScriptBuf::from_bytes(s)
}

/// The coinbase a pool builds from a NewTemplate: the template's prefix, then its own tag and
/// extranonce in the scriptSig; its payout first, then the template's outputs; the witness
/// reserved value as the only witness item.
pub fn coinbase(t: &NewTemplateOwned, extranonce: &[u8]) -> Transaction {
    let mut script_sig = t.coinbase_prefix.as_bytes().to_vec();
    let tag = b"/stratumlab-tdp-test/";
    script_sig.push(tag.len() as u8);
    script_sig.extend_from_slice(tag);
    script_sig.push(extranonce.len() as u8);
    script_sig.extend_from_slice(extranonce);
    let mut outputs = vec![TxOut {
        value: Amount::from_sat(t.coinbase_tx_value_remaining),
        script_pubkey: payout_script(),
    }];
    let mut rest = t.coinbase_tx_outputs.as_bytes();
    for _ in 0..t.coinbase_tx_outputs_count {
        outputs.push(TxOut::consensus_decode(&mut rest).expect("template outputs decode"));
    }
    assert!(
        rest.is_empty(),
        "coinbase_tx_outputs has no count prefix and no trailing bytes"
    );
    Transaction {
        version: Version::non_standard(t.coinbase_tx_version as i32),
        lock_time: LockTime::from_consensus(t.coinbase_tx_locktime),
        input: vec![TxIn {
            previous_output: OutPoint::null(),
            script_sig: ScriptBuf::from_bytes(script_sig),
            sequence: Sequence(t.coinbase_tx_input_sequence),
            witness: Witness::from_slice(&[[0u8; 32]]),
        }],
        output: outputs,
    }
}

/// A block solution found on a template.
pub struct Solved {
    pub template_id: u64,
    pub header: Header,
    pub coinbase: Vec<u8>,
}

impl Solved {
    pub fn hash(&self) -> Hash256 {
        self.header.block_hash()
    }
}

/// Builds the header over the coinbase through the template's merkle path and grinds the nonce
/// until the hash meets the SetNewPrevHash target.
pub fn solve(t: &NewTemplateOwned, p: &SetNewPrevHashOwned, extranonce: &[u8]) -> Solved {
    let cb = coinbase(t, extranonce);
    let path: Vec<Hash256> = t
        .merkle_path
        .iter()
        .map(|h| Hash256(h.to_array()))
        .collect();
    let merkle_root = merkle_root_from_branch(cb.compute_txid().into(), &path);
    let target = Target::from_le_bytes(&p.target.to_array());
    let mut header = Header {
        version: t.version,
        prev_hash: Hash256(p.prev_hash.to_array()),
        merkle_root,
        time: p.header_timestamp,
        bits: CompactTarget::from_consensus(p.n_bits),
        nonce: 0,
    };
    while !target.is_met_by(&header.block_hash().0) {
        header.nonce = header
            .nonce
            .checked_add(1)
            .expect("a nonce within 2^32 at 2^-20");
    }
    Solved {
        template_id: t.template_id,
        header,
        coinbase: serialize(&cb),
    }
}

/// Checks transaction data against the template it is for: the txids give the template's
/// merkle path, and the wtxids with the excess data (the witness reserved value) give the
/// commitment in its coinbase output.
pub fn check_transaction_data(t: &NewTemplateOwned, txs: &[Vec<u8>], excess: &[u8]) {
    let decoded: Vec<Transaction> = txs
        .iter()
        .map(|raw| primitives::bitcoin::consensus::deserialize(raw).expect("a transaction"))
        .collect();
    let txids: Vec<Hash256> = decoded.iter().map(|t| t.compute_txid().into()).collect();
    let path: Vec<Hash256> = t
        .merkle_path
        .iter()
        .map(|h| Hash256(h.to_array()))
        .collect();
    assert_eq!(
        coinbase_merkle_branch(&txids),
        path,
        "merkle path over the txids"
    );
    let wtxids: Vec<Hash256> = decoded.iter().map(|t| t.compute_wtxid().into()).collect();
    let reserved: [u8; 32] = excess.try_into().expect("32 bytes of excess data");
    let commitment = witness_commitment(&wtxids, &reserved);
    let outputs = t.coinbase_tx_outputs.as_bytes();
    assert!(
        outputs.ends_with(&commitment.0),
        "the commitment output commits to these transactions"
    );
}
