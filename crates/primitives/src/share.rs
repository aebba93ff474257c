//! Share checks: rebuild the header a miner hashed from a job and its submission, hash it, and
//! compare against the share target and the network target.
//!
//! Three forms, one per way a job reaches a miner:
//! - SV1 `mining.notify` + `mining.submit`: coinbase halves, two extranonces, merkle branch.
//! - SV2 standard channel: the pool already fixed the merkle root (header-only mining).
//! - SV2 extended channel: coinbase prefix/suffix, channel extranonce prefix + miner extranonce.

use crate::hash::{sha256d_header, sha256d_parts, Hash256};
use crate::header::Header;
use crate::merkle::merkle_root_from_branch;
use crate::pow::{CompactError, CompactTarget, Target};

/// BIP310/BIP320: the version a miner hashed is the job's version with the bits under the
/// negotiated mask replaced by the miner's.
#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
#[error("version bits {bits:08x} fall outside the negotiated mask {mask:08x}")]
pub struct VersionBitsError {
    /// SV1: the submitted `version_bits`; SV2: the bits that differ from the job's version.
    /// Some of them fall outside `mask`.
    pub bits: u32,
    /// The version-rolling mask negotiated for the connection.
    pub mask: u32,
}

/// SV1 form: `version_bits` as `mining.submit` sends them (only bits inside `mask` may be set).
#[inline]
pub fn rolled_version(
    job_version: u32,
    version_bits: u32,
    mask: u32,
) -> Result<u32, VersionBitsError> {
    if version_bits & !mask != 0 {
        return Err(VersionBitsError {
            bits: version_bits,
            mask,
        });
    }
    Ok((job_version & !mask) | (version_bits & mask))
}

/// SV2 form: the full version the miner submitted, which may differ from the job's only under
/// `mask`.
#[inline]
pub fn check_full_version(
    job_version: u32,
    version: u32,
    mask: u32,
) -> Result<u32, VersionBitsError> {
    let changed = job_version ^ version;
    if changed & !mask != 0 {
        return Err(VersionBitsError {
            bits: changed,
            mask,
        });
    }
    Ok(version)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, thiserror::Error)]
/// Why a share could not be checked at all (as opposed to failing its target).
pub enum ShareError {
    /// The miner changed version bits outside its negotiated mask.
    #[error(transparent)]
    VersionBits(#[from] VersionBitsError),
    /// The job's `nBits` do not decode to a target, so the network target is unknown.
    #[error("job's nBits: {0}")]
    Bits(#[from] CompactError),
}

/// The outcome of hashing one share.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ShareCheck {
    /// The header as the miner hashed it, rebuilt from job and submission.
    pub header: Header,
    /// The header's SHA-256d (block hash), internal byte order.
    pub hash: Hash256,
    /// Meets the share target the check was given: the share counts.
    pub meets_share_target: bool,
    /// Meets the job's `nBits`: this share is a block.
    pub meets_network_target: bool,
}

impl ShareCheck {
    /// Builds the header from the job's fields, `version` and `merkle_root` as the share
    /// fixes them and the miner's time and nonce, then hashes and compares.
    #[inline]
    fn of(
        job: &JobHeader,
        version: u32,
        merkle_root: Hash256,
        miner: &MinerChoice,
        share_target: &Target,
    ) -> Result<Self, ShareError> {
        let header = Header {
            version,
            prev_hash: job.prev_hash,
            merkle_root,
            time: miner.ntime,
            bits: job.bits,
            nonce: miner.nonce,
        };
        let network = Target::from_compact(header.bits)?;
        let hash = sha256d_header(&header.to_bytes());
        Ok(ShareCheck {
            header,
            hash,
            meets_share_target: share_target.is_met_by(&hash.0),
            meets_network_target: network.is_met_by(&hash.0),
        })
    }
}

/// The header fields a job fixes, whatever its form.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct JobHeader {
    /// The job's block version, before any rolling.
    pub version: u32,
    /// The previous block's hash, internal byte order.
    pub prev_hash: Hash256,
    /// The network target's `nBits`.
    pub bits: CompactTarget,
}

/// What the miner chose: time, nonce and (for version rolling) the version field.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MinerChoice {
    /// The header time the miner used, Unix seconds.
    pub ntime: u32,
    /// The header nonce the miner found.
    pub nonce: u32,
    /// SV1: the submitted `version_bits` (or `None` without version rolling). SV2: the full
    /// submitted version.
    pub version: Option<u32>,
    /// The version-rolling mask negotiated for the connection: only bits under it may differ
    /// from the job's version.
    pub version_mask: u32,
}

/// An SV1 share: `mining.notify` fields plus `mining.submit` fields.
#[derive(Clone, Copy, Debug)]
pub struct Sv1Share<'a> {
    /// The header fields from `mining.notify`.
    pub job: JobHeader,
    /// `mining.notify` coinb1: the coinbase before the extranonces.
    pub coinb1: &'a [u8],
    /// The connection's extranonce1, as the pool assigned it in `mining.subscribe`.
    pub extranonce1: &'a [u8],
    /// `mining.submit` extranonce2, as the miner chose it.
    pub extranonce2: &'a [u8],
    /// `mining.notify` coinb2: the coinbase after the extranonces.
    pub coinb2: &'a [u8],
    /// `mining.notify` merkle branch: the coinbase's siblings, bottom up.
    pub merkle_branch: &'a [Hash256],
    /// `mining.submit` ntime, nonce and version bits.
    pub miner: MinerChoice,
}

impl Sv1Share<'_> {
    /// Rebuilds the coinbase, merkle root and header, then hashes and compares.
    pub fn check(&self, share_target: &Target) -> Result<ShareCheck, ShareError> {
        let version = match self.miner.version {
            Some(bits) => rolled_version(self.job.version, bits, self.miner.version_mask)?,
            None => self.job.version,
        };
        let txid = sha256d_parts(&[self.coinb1, self.extranonce1, self.extranonce2, self.coinb2]);
        let merkle_root = merkle_root_from_branch(txid, self.merkle_branch);
        ShareCheck::of(&self.job, version, merkle_root, &self.miner, share_target)
    }
}

/// An SV2 standard-channel share: the job carries the merkle root.
#[derive(Clone, Copy, Debug)]
pub struct StandardShare {
    /// The header fields from the job and its `SetNewPrevHash`.
    pub job: JobHeader,
    /// The merkle root the job fixed, internal byte order.
    pub merkle_root: Hash256,
    /// The submission's ntime, nonce and full version.
    pub miner: MinerChoice,
}

impl StandardShare {
    /// Builds the header around the job's merkle root, then hashes and compares.
    pub fn check(&self, share_target: &Target) -> Result<ShareCheck, ShareError> {
        let version = sv2_version(&self.job, &self.miner)?;
        ShareCheck::of(
            &self.job,
            version,
            self.merkle_root,
            &self.miner,
            share_target,
        )
    }
}

/// An SV2 extended-channel share.
#[derive(Clone, Copy, Debug)]
pub struct ExtendedShare<'a> {
    /// The header fields from the job and its `SetNewPrevHash`.
    pub job: JobHeader,
    /// The job's `coinbase_tx_prefix`: the coinbase before the extranonce.
    pub coinbase_prefix: &'a [u8],
    /// The channel's `extranonce_prefix`, assigned by the pool.
    pub extranonce_prefix: &'a [u8],
    /// The extranonce the miner submitted, after the channel's prefix.
    pub extranonce: &'a [u8],
    /// The job's `coinbase_tx_suffix`: the coinbase after the extranonce.
    pub coinbase_suffix: &'a [u8],
    /// The job's `merkle_path`: the coinbase's siblings, bottom up.
    pub merkle_path: &'a [Hash256],
    /// The submission's ntime, nonce and full version.
    pub miner: MinerChoice,
}

impl ExtendedShare<'_> {
    /// Rebuilds the coinbase, merkle root and header, then hashes and compares.
    pub fn check(&self, share_target: &Target) -> Result<ShareCheck, ShareError> {
        let version = sv2_version(&self.job, &self.miner)?;
        let txid = sha256d_parts(&[
            self.coinbase_prefix,
            self.extranonce_prefix,
            self.extranonce,
            self.coinbase_suffix,
        ]);
        let merkle_root = merkle_root_from_branch(txid, self.merkle_path);
        ShareCheck::of(&self.job, version, merkle_root, &self.miner, share_target)
    }
}

fn sv2_version(job: &JobHeader, miner: &MinerChoice) -> Result<u32, VersionBitsError> {
    match miner.version {
        Some(v) => check_full_version(job.version, v, miner.version_mask),
        None => Ok(job.version),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bip310_version_rolling() {
        let mask = 0x1fff_e000;
        assert_eq!(
            rolled_version(0x2000_0000, 0x0000_2000, mask),
            Ok(0x2000_2000)
        );
        // Bits under the mask in the job version are replaced, not OR-ed.
        assert_eq!(
            rolled_version(0x2000_4000, 0x0000_2000, mask),
            Ok(0x2000_2000)
        );
        assert_eq!(
            rolled_version(0x2000_0000, 0x0000_1000, mask),
            Err(VersionBitsError {
                bits: 0x0000_1000,
                mask
            })
        );
        assert_eq!(rolled_version(0x2000_0000, 0, 0), Ok(0x2000_0000));
        assert!(rolled_version(0x2000_0000, 0x2000, 0).is_err());
        assert_eq!(
            check_full_version(0x2000_0000, 0x2000_e000, mask),
            Ok(0x2000_e000)
        );
        assert!(check_full_version(0x2000_0000, 0x2000_0001, mask).is_err());
    }
}
