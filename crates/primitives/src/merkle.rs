//! Transaction merkle trees as Bitcoin builds them (an odd node is paired with itself).

use crate::hash::{sha256d_64, Hash256};

/// One level of the tree: SHA-256d of two concatenated nodes.
#[inline]
pub fn merkle_step(left: &Hash256, right: &Hash256) -> Hash256 {
    let mut buf = [0u8; 64];
    buf[..32].copy_from_slice(&left.0);
    buf[32..].copy_from_slice(&right.0);
    sha256d_64(&buf)
}

/// The merkle root of a full list of leaves (the zero hash for none).
pub fn merkle_root(leaves: &[Hash256]) -> Hash256 {
    match leaves.len() {
        0 => return Hash256::ZERO,
        1 => return leaves[0],
        _ => {}
    }
    let mut level: Vec<Hash256> = leaves.to_vec();
    while level.len() > 1 {
        level = pair_up(&level);
    }
    level[0]
}

fn pair_up(level: &[Hash256]) -> Vec<Hash256> {
    level
        .chunks(2)
        .map(|c| merkle_step(&c[0], c.get(1).unwrap_or(&c[0])))
        .collect()
}

/// The merkle branch of the coinbase (position 0) given the txids of the block's other
/// transactions in block order: the siblings met on the way from the coinbase to the root. This is
/// what `mining.notify` and SV2 jobs carry as `merkle_branch` / `merkle_path`.
pub fn coinbase_merkle_branch(txids: &[Hash256]) -> Vec<Hash256> {
    let mut branch = Vec::new();
    // The level below without its first node (the coinbase side, unknown until a share arrives).
    let mut rest: Vec<Hash256> = txids.to_vec();
    while !rest.is_empty() {
        branch.push(rest[0]);
        // Nodes 2, 3, ... of the level (indices 1.. of `rest`) pair among themselves.
        rest = if rest.len() > 1 {
            pair_up(&rest[1..])
        } else {
            Vec::new()
        };
    }
    branch
}

/// The merkle root reached from the coinbase's txid through its branch.
#[inline]
pub fn merkle_root_from_branch(coinbase_txid: Hash256, branch: &[Hash256]) -> Hash256 {
    branch
        .iter()
        .fold(coinbase_txid, |acc, sib| merkle_step(&acc, sib))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::sha256d;

    fn leaves(n: usize) -> Vec<Hash256> {
        (0..n).map(|i| sha256d(&(i as u64).to_le_bytes())).collect()
    }

    #[test]
    fn branch_reproduces_full_root_for_every_size() {
        for n in 1..40 {
            let all = leaves(n);
            let branch = coinbase_merkle_branch(&all[1..]);
            let expect_depth = if n == 1 {
                0
            } else {
                (n as f64).log2().ceil() as usize
            };
            assert_eq!(branch.len(), expect_depth, "n={n}");
            assert_eq!(
                merkle_root_from_branch(all[0], &branch),
                merkle_root(&all),
                "n={n}"
            );
        }
    }

    #[test]
    fn odd_levels_pair_with_themselves() {
        let l = leaves(3);
        let left = merkle_step(&l[0], &l[1]);
        let right = merkle_step(&l[2], &l[2]);
        assert_eq!(merkle_root(&l), merkle_step(&left, &right));
        assert_eq!(merkle_root(&[]), Hash256::ZERO);
        assert_eq!(merkle_root(&l[..1]), l[0]);
    }
}
