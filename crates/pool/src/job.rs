//! A job: one template with one coinbase payout, ready to hand to miners and to check their
//! shares against. Protocol-neutral: the SV1 front end sends it as `mining.notify`, the SV2 one
//! as an extended job; both check shares with [`Job::share_hash`]. A farm's declared job (SV2
//! `SetCustomMiningJob`) is a job too, of [`Origin::Declared`]: its shares are judged the same
//! way, only its staleness and its blocks differ.

use std::sync::{Arc, OnceLock};

use events::Fingerprint;
use primitives::bitcoin::consensus::Encodable;
use primitives::coinbase::CoinbaseError;
use primitives::{
    compact_size, CoinbaseMidstate, CoinbaseParts, CompactTarget, Hash256, Header, Target,
};

use crate::template::Template;
use crate::tips::Tips;
use crate::Timestamp;

/// Whose transactions a job carries.
#[derive(Clone, Debug)]
pub enum Origin {
    /// A template of the pool's own node: the pool can assemble and submit its blocks.
    Template,
    /// A farm's declared job: the pool has its header fields, coinbase and merkle path but not
    /// its transactions, so the farm's Job Declarator Client and the pool's Job Declarator
    /// Server propagate its blocks. Stale once the pool's tip has moved on from the block it
    /// builds on; a block the pool has not seen yet is not stale (the farm's node may be ahead).
    Declared {
        /// The id in the Job Declarator's token it was accepted under.
        token_id: u64,
        /// The pool's view of chain tips, to tell whether the job's previous block is stale.
        tips: Arc<Tips>,
    },
}

/// The share a miner found: everything a job leaves open.
#[derive(Clone, Copy, Debug)]
pub struct Solution<'a> {
    /// The connection's part of the extranonce (SV1 extranonce1, SV2 extranonce prefix).
    pub extranonce_prefix: &'a [u8],
    /// The miner's part (SV1 extranonce2, SV2 extranonce).
    pub extranonce: &'a [u8],
    /// The full header version, after any version rolling.
    pub version: u32,
    /// The header's time (Unix seconds).
    pub ntime: u32,
    /// The header's nonce.
    pub nonce: u32,
}

/// Work for miners: a template and a coinbase paying one payout script, split where the
/// extranonce goes (or a farm's declared job: see [`Origin`]).
#[derive(Debug)]
pub struct Job {
    /// Unique for the pool's lifetime; SV1 sends it as lowercase hex.
    pub id: u64,
    /// The template generation it was built from (see [`crate::jobs::Generation`]).
    pub generation: u64,
    /// Increments with every new previous-block hash: a job of an older epoch is stale.
    pub epoch: u64,
    /// The template it was built from.
    pub template: Arc<Template>,
    /// The header version, before any rolling.
    pub version: u32,
    /// The previous block's hash.
    pub prev_hash: Hash256,
    /// The network target, compact (`nBits`).
    pub bits: CompactTarget,
    /// The network target: a share meeting it is a block.
    pub network_target: Target,
    /// The header time the job suggests, and the earliest a share may use.
    pub ntime: u32,
    /// The earliest header time a share may use.
    pub min_ntime: u32,
    /// The coinbase before and after the extranonce.
    pub coinbase: CoinbaseParts,
    coinbase_midstate: CoinbaseMidstate,
    /// The merkle branch the coinbase txid climbs to the root.
    pub merkle_branch: Arc<[Hash256]>,
    /// The template's fingerprint, as events name it.
    pub fingerprint: Fingerprint,
    /// Miners must drop earlier jobs: it follows a new previous-block hash.
    pub clean: bool,
    /// When it was built.
    pub created: Timestamp,
    /// Whose transactions it carries.
    pub origin: Origin,
    /// The SV1 `mining.notify` line under the job's own id, written once (see
    /// [`crate::sv1::notify`]).
    pub(crate) sv1_notify: OnceLock<Arc<[u8]>>,
}

impl Job {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u64,
        generation: u64,
        epoch: u64,
        template: Arc<Template>,
        coinbase: CoinbaseParts,
        merkle_branch: Arc<[Hash256]>,
        fingerprint: Fingerprint,
        clean: bool,
        created: Timestamp,
    ) -> Result<Job, CoinbaseError> {
        let network_target = Target::from_compact(template.bits)
            .map_err(|e| CoinbaseError::Decode(format!("template nBits: {e}")))?;
        Ok(Job {
            id,
            generation,
            epoch,
            version: template.version,
            prev_hash: template.prev_hash,
            bits: template.bits,
            network_target,
            ntime: template.curtime.max(template.mintime),
            min_ntime: template.mintime,
            coinbase_midstate: CoinbaseMidstate::new(
                &coinbase.prefix,
                coinbase.extranonce_len,
                &coinbase.suffix,
            ),
            coinbase,
            merkle_branch,
            fingerprint,
            clean,
            created,
            origin: Origin::Template,
            template,
            sv1_notify: OnceLock::new(),
        })
    }

    /// A declared job: `template` holds its header fields (no transactions), `coinbase` the
    /// coinbase as declared, split around the channel's extranonce.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn declared(
        id: u64,
        template: Arc<Template>,
        coinbase: CoinbaseParts,
        merkle_branch: Arc<[Hash256]>,
        fingerprint: Fingerprint,
        created: Timestamp,
        token_id: u64,
        tips: Arc<Tips>,
    ) -> Result<Job, CoinbaseError> {
        let mut job = Job::new(
            id,
            0,
            0,
            template,
            coinbase,
            merkle_branch,
            fingerprint,
            false,
            created,
        )?;
        job.origin = Origin::Declared { token_id, tips };
        Ok(job)
    }

    /// Whether it is a farm's declared job (see [`Origin::Declared`]).
    pub fn is_declared(&self) -> bool {
        matches!(self.origin, Origin::Declared { .. })
    }

    /// Whether shares on it are stale when the pool's tip epoch is `epoch`: a template's job
    /// once the tip moved past its epoch, a declared job once the pool moved on from its
    /// previous block.
    #[inline]
    pub fn is_stale(&self, epoch: u64) -> bool {
        match &self.origin {
            Origin::Template => self.epoch < epoch,
            Origin::Declared { tips, .. } => tips.superseded(&self.prev_hash),
        }
    }

    /// A declared job's share whose block is the pool's tip now: the tip moved because of it.
    pub fn made_the_tip(&self, hash: &Hash256) -> bool {
        match &self.origin {
            Origin::Template => false,
            Origin::Declared { tips, .. } => tips.current() == Some(*hash),
        }
    }

    /// The header a solution makes, and its hash. The coinbase's fixed first blocks are hashed
    /// once per job, so a share costs the floor less one compression, and the blocks after the
    /// extranonce's have their message schedules worked out once per job; the coinbase's txid,
    /// the merkle branch and the header are then hashed in one go (see
    /// [`CoinbaseMidstate::share_header_hash`]).
    #[inline]
    pub fn share_hash(&self, s: &Solution<'_>) -> ([u8; 80], Hash256) {
        let mut header = [0u8; 80];
        header[0..4].copy_from_slice(&s.version.to_le_bytes());
        header[4..36].copy_from_slice(&self.prev_hash.0);
        header[68..72].copy_from_slice(&s.ntime.to_le_bytes());
        header[72..76].copy_from_slice(&self.bits.to_consensus().to_le_bytes());
        header[76..80].copy_from_slice(&s.nonce.to_le_bytes());
        // Writes the merkle root into header[36..68].
        let hash = self.coinbase_midstate.share_header_hash(
            [s.extranonce_prefix, s.extranonce],
            &self.merkle_branch,
            &mut header,
        );
        (header, hash)
    }

    /// The full block for a solution whose header is `header`: header, transaction count,
    /// coinbase (with its witness when the block commits to witnesses), template transactions.
    /// For a declared job, whose transactions the pool does not have, header and coinbase alone
    /// (what the pool can keep of the block).
    pub fn block(&self, s: &Solution<'_>, header: &[u8; 80]) -> Result<Vec<u8>, CoinbaseError> {
        let mut extranonce = Vec::with_capacity(s.extranonce_prefix.len() + s.extranonce.len());
        extranonce.extend_from_slice(s.extranonce_prefix);
        extranonce.extend_from_slice(s.extranonce);
        let coinbase = self.coinbase.transaction(&extranonce)?;
        if self.is_declared() {
            return Ok(Self::declared_block_record(header, &coinbase));
        }
        let txs = &self.template.transactions;
        let size = 80 + 9 + 300 + txs.iter().map(|t| t.data.len()).sum::<usize>();
        let mut block = Vec::with_capacity(size);
        block.extend_from_slice(header);
        compact_size::write(&mut block, txs.len() as u64 + 1);
        coinbase
            .consensus_encode(&mut block)
            .map_err(|e| CoinbaseError::Decode(e.to_string()))?;
        for t in txs.iter() {
            block.extend_from_slice(&t.data);
        }
        Ok(block)
    }

    /// What the pool keeps of a block on a declared job: the header then the coinbase (with its
    /// witness), not a block (the transactions are the farm's).
    fn declared_block_record(
        header: &[u8; 80],
        coinbase: &primitives::bitcoin::Transaction,
    ) -> Vec<u8> {
        let mut record = header.to_vec();
        coinbase
            .consensus_encode(&mut record)
            .expect("writing to a Vec does not fail");
        record
    }

    /// The header of a solution, as a value.
    pub fn header(&self, header: &[u8; 80]) -> Header {
        Header::from_bytes(header)
    }
}
