//! SHA-256d and the 32-byte hashes it produces.
//!
//! Hashing goes through the `sha2` crate, which uses the CPU's SHA extensions where present.
//! Header hashing calls its block compression function directly so that the constant padding
//! blocks are laid out once and the first header block can be cached as a midstate.

use std::fmt;
use std::str::FromStr;

use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

use crate::hex::{self, HexError};

/// SHA-256's initial state.
pub(crate) const IV: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// A double-SHA-256 result (block hash, txid, merkle node) in internal byte order: the order the
/// hash function outputs and headers contain. Explorers and RPC display it reversed.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Hash256(pub [u8; 32]);

impl Hash256 {
    /// All zeros: the null previous hash, and the coinbase's wtxid in the witness merkle tree.
    pub const ZERO: Hash256 = Hash256([0; 32]);

    /// The bytes in internal order.
    pub const fn to_byte_array(self) -> [u8; 32] {
        self.0
    }

    /// The bytes in internal order, borrowed.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parses the reversed hex that RPC and explorers show.
    pub fn from_display_hex(s: &str) -> Result<Self, HexError> {
        let mut h = Self::from_internal_hex(s)?;
        h.0.reverse();
        Ok(h)
    }

    /// Parses hex in internal byte order (as raw bytes appear in a serialization).
    pub fn from_internal_hex(s: &str) -> Result<Self, HexError> {
        let mut b = [0u8; 32];
        hex::decode_into(s, &mut b)?;
        Ok(Hash256(b))
    }

    /// Hex in internal byte order (as the bytes appear in a serialization); `Display` gives the
    /// reversed form.
    pub fn to_internal_hex(&self) -> String {
        hex::encode(&self.0)
    }
}

/// Display order (reversed), as RPC prints block hashes and txids.
impl fmt::Display for Hash256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0.iter().rev() {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hash256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash256({self})")
    }
}

impl FromStr for Hash256 {
    type Err = HexError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_display_hex(s)
    }
}

macro_rules! bitcoin_hash_conversions {
    ($($t:ty),*) => {$(
        impl From<Hash256> for $t {
            fn from(h: Hash256) -> Self {
                use bitcoin::hashes::Hash as _;
                <$t>::from_byte_array(h.0)
            }
        }
        impl From<$t> for Hash256 {
            fn from(h: $t) -> Self {
                use bitcoin::hashes::Hash as _;
                Hash256(h.to_byte_array())
            }
        }
    )*};
}
bitcoin_hash_conversions!(
    bitcoin::BlockHash,
    bitcoin::Txid,
    bitcoin::Wtxid,
    bitcoin::TxMerkleNode,
    bitcoin::WitnessMerkleNode
);

/// SHA-256d of a byte string.
pub fn sha256d(data: &[u8]) -> Hash256 {
    let first = Sha256::digest(data);
    Hash256(Sha256::digest(first).into())
}

/// SHA-256d of the concatenation of several byte strings, without concatenating them.
pub fn sha256d_parts(parts: &[&[u8]]) -> Hash256 {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    Hash256(Sha256::digest(h.finalize()).into())
}

#[inline]
pub(crate) fn compress(state: &mut [u32; 8], block: &[u8; 64]) {
    sha2::compress256(state, std::slice::from_ref(GenericArray::from_slice(block)));
}

#[inline]
fn state_to_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, w) in state.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// The second SHA-256 of SHA-256d: one compression of a 32-byte digest plus constant padding.
#[inline]
pub(crate) fn second_hash(first: &[u32; 8]) -> Hash256 {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(&state_to_bytes(first));
    block[32] = 0x80;
    block[62] = 0x01; // bit length 256 = 0x0100, big-endian in the last 8 bytes
    let mut st = IV;
    compress(&mut st, &block);
    Hash256(state_to_bytes(&st))
}

/// SHA-256d of a 64-byte message (a merkle step): 3 compressions.
#[inline]
pub(crate) fn sha256d_64(msg: &[u8; 64]) -> Hash256 {
    const PAD: [u8; 64] = {
        let mut p = [0u8; 64];
        p[0] = 0x80;
        p[62] = 0x02; // 512 bits
        p
    };
    let mut st = IV;
    compress(&mut st, msg);
    compress(&mut st, &PAD);
    second_hash(&st)
}

/// SHA-256d of an 80-byte header: 3 compressions.
#[inline]
pub fn sha256d_header(header: &[u8; 80]) -> Hash256 {
    HeaderMidstate::new(header[..64].try_into().expect("64 bytes"))
        .finish(header[64..].try_into().expect("16 bytes"))
}

/// SHA-256 state after a header's first 64 bytes (version, previous hash and 28 bytes of merkle
/// root): a header that varies only in its last 16 bytes (merkle tail, time, bits, nonce) then
/// costs 2 compressions.
#[derive(Clone, Copy, Debug)]
pub struct HeaderMidstate([u32; 8]);

impl HeaderMidstate {
    /// Compresses the header's first 64 bytes.
    pub fn new(first64: &[u8; 64]) -> Self {
        let mut st = IV;
        compress(&mut st, first64);
        HeaderMidstate(st)
    }

    /// Finishes SHA-256d given the header's last 16 bytes.
    #[inline]
    pub fn finish(&self, tail: &[u8; 16]) -> Hash256 {
        let mut block = [0u8; 64];
        block[..16].copy_from_slice(tail);
        block[16] = 0x80;
        block[62] = 0x02;
        block[63] = 0x80; // 640 bits = 0x0280
        let mut st = self.0;
        compress(&mut st, &block);
        second_hash(&st)
    }
}

/// Runs `$compress` on each block of SHA-256 over a [`PrefixMidstate`]'s prefix followed by
/// `$parts` that the midstate has not compressed yet, the padding and length blocks included. A
/// macro rather than a function taking a closure: the SHA-extension path's compressions stay
/// inline in its `#[target_feature]` function, whatever the compiler's version.
macro_rules! each_block {
    ($mid:expr, $parts:expr, |$block:ident| $compress:expr) => {{
        let mid: &PrefixMidstate = $mid;
        let mut buf = mid.tail;
        let mut fill = mid.tail_len as usize;
        let mut total = mid.blocks * 64 + fill as u64;
        for part in $parts {
            let mut part: &[u8] = part;
            total += part.len() as u64;
            while !part.is_empty() {
                let n = (64 - fill).min(part.len());
                buf[fill..fill + n].copy_from_slice(&part[..n]);
                fill += n;
                part = &part[n..];
                if fill == 64 {
                    let $block = &buf;
                    $compress;
                    fill = 0;
                }
            }
        }
        buf[fill] = 0x80;
        buf[fill + 1..].fill(0);
        if fill >= 56 {
            let $block = &buf;
            $compress;
            buf = [0u8; 64];
        }
        buf[56..].copy_from_slice(&(total * 8).to_be_bytes());
        let $block = &buf;
        $compress;
    }};
}

/// SHA-256 state after the whole 64-byte blocks of a message's fixed start, plus the bytes left
/// over. A coinbase's first part (SV1 `coinb1`, SV2 prefix) is the same for every share of a job,
/// so a pool hashes its whole blocks once per job instead of once per share.
#[derive(Clone, Copy, Debug)]
pub struct PrefixMidstate {
    state: [u32; 8],
    blocks: u64,
    tail: [u8; 64],
    tail_len: u8,
}

impl PrefixMidstate {
    /// Compresses `prefix`'s whole 64-byte blocks and keeps the rest for later.
    pub fn new(prefix: &[u8]) -> Self {
        let mut state = IV;
        let mut chunks = prefix.chunks_exact(64);
        let mut blocks = 0;
        for block in &mut chunks {
            compress(&mut state, block.try_into().expect("64 bytes"));
            blocks += 1;
        }
        let rest = chunks.remainder();
        let mut tail = [0u8; 64];
        tail[..rest.len()].copy_from_slice(rest);
        PrefixMidstate {
            state,
            blocks,
            tail,
            tail_len: rest.len() as u8,
        }
    }

    /// SHA-256d of the prefix followed by `parts`, without allocating.
    #[inline]
    pub fn sha256d_with(&self, parts: &[&[u8]]) -> Hash256 {
        let mut state = self.state;
        each_block!(self, parts, |block| compress(&mut state, block));
        second_hash(&state)
    }
}

impl PrefixMidstate {
    /// SHA-256d of a share's block header, whose merkle root this coinbase makes: the coinbase
    /// is the prefix followed by `parts`, its txid is folded through `branch` (the coinbase's
    /// merkle branch) into the root, and the root is written into `header[36..68]`; the rest of
    /// `header` (version, previous hash, time, bits, nonce) is the caller's.
    ///
    /// The same as [`merkle_root_from_branch`](crate::merkle_root_from_branch) of
    /// [`sha256d_with`](Self::sha256d_with), then [`sha256d_header`]; with the CPU's SHA
    /// extensions the hash state stays in registers from the coinbase's first variable block to
    /// the header's hash (no round trips through bytes between the hashes), and constant blocks
    /// use a precomputed message schedule.
    #[inline]
    pub fn share_header_hash(
        &self,
        parts: &[&[u8]],
        branch: &[Hash256],
        header: &mut [u8; 80],
    ) -> Hash256 {
        #[cfg(target_arch = "x86_64")]
        if ni::available() {
            // SAFETY: the CPU has the SHA extensions, SSSE3 and SSE4.1 (checked just above).
            return unsafe { ni::share_header_hash(self, parts, branch, header) };
        }
        self.share_header_hash_portable(parts, branch, header)
    }

    /// [`share_header_hash`](Self::share_header_hash) through the `sha2` crate alone.
    pub fn share_header_hash_portable(
        &self,
        parts: &[&[u8]],
        branch: &[Hash256],
        header: &mut [u8; 80],
    ) -> Hash256 {
        let root = crate::merkle::merkle_root_from_branch(self.sha256d_with(parts), branch);
        header[36..68].copy_from_slice(&root.0);
        sha256d_header(header)
    }
}

/// A coinbase whose only varying bytes are one gap (the extranonce: the pool's prefix and the
/// miner's part) between a fixed prefix and a fixed suffix, as in every share of a job: the
/// prefix's whole blocks are hashed once ([`PrefixMidstate`]) and, with the CPU's SHA
/// extensions, so is everything after the block that holds the gap. The gap's block is laid out
/// once with the gap left blank, and a share's gap is put into it in registers, so a share's
/// coinbase costs one compression with a message schedule plus one precomputed-schedule
/// compression per block after it, and no byte copying.
#[derive(Clone, Debug)]
pub struct CoinbaseMidstate {
    prefix: PrefixMidstate,
    suffix: Box<[u8]>,
    gap_len: usize,
    #[cfg(target_arch = "x86_64")]
    fixed: Option<Box<ni::FixedTail>>,
}

impl CoinbaseMidstate {
    /// The coinbase `prefix`, `gap_len` bytes that vary, `suffix`.
    pub fn new(prefix: &[u8], gap_len: usize, suffix: &[u8]) -> Self {
        let mid = PrefixMidstate::new(prefix);
        CoinbaseMidstate {
            #[cfg(target_arch = "x86_64")]
            fixed: ni::FixedTail::new(&mid, gap_len, suffix).map(Box::new),
            prefix: mid,
            suffix: suffix.into(),
            gap_len,
        }
    }

    /// [`PrefixMidstate::share_header_hash`] of the coinbase whose gap is `gap[0]` followed by
    /// `gap[1]` (the extranonce prefix and the extranonce). Gaps of another length than the one
    /// laid out are hashed too, the slower way.
    #[inline]
    pub fn share_header_hash(
        &self,
        gap: [&[u8]; 2],
        branch: &[Hash256],
        header: &mut [u8; 80],
    ) -> Hash256 {
        #[cfg(target_arch = "x86_64")]
        if let Some(fixed) = &self.fixed {
            if gap[0].len() + gap[1].len() == self.gap_len && ni::available() {
                // SAFETY: the CPU has the SHA extensions, SSSE3 and SSE4.1 (checked just above).
                return unsafe {
                    ni::share_header_hash_fixed(&self.prefix, fixed, gap, branch, header)
                };
            }
        }
        self.prefix
            .share_header_hash(&[gap[0], gap[1], &self.suffix], branch, header)
    }
}

/// SHA-256 with the x86 SHA extensions (`sha256rnds2`, `sha256msg1`, `sha256msg2`), for the
/// share path: the state is kept as the instructions want it (two vectors, ABEF and CDGH), and a
/// digest becomes the next message's words with two shuffles instead of a trip through bytes.
#[cfg(target_arch = "x86_64")]
mod ni {
    use std::arch::x86_64::*;

    use super::{Hash256, PrefixMidstate, IV};

    /// Whether this CPU can run this module.
    #[inline]
    pub(super) fn available() -> bool {
        std::is_x86_feature_detected!("sha")
            && std::is_x86_feature_detected!("sse4.1")
            && std::is_x86_feature_detected!("ssse3")
    }

    #[repr(align(16))]
    #[derive(Clone)]
    struct Words([u32; 64]);

    impl std::fmt::Debug for Words {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Words(..)")
        }
    }

    const K: Words = Words([
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ]);

    /// The message schedule of a constant block plus the round constants: W[t] + K[t].
    const fn schedule_plus_k(block: [u32; 16]) -> Words {
        let mut w = [0u32; 64];
        let mut t = 0;
        while t < 64 {
            w[t] = if t < 16 {
                block[t]
            } else {
                let s0 = w[t - 15].rotate_right(7) ^ w[t - 15].rotate_right(18) ^ (w[t - 15] >> 3);
                let s1 = w[t - 2].rotate_right(17) ^ w[t - 2].rotate_right(19) ^ (w[t - 2] >> 10);
                w[t - 16]
                    .wrapping_add(s0)
                    .wrapping_add(w[t - 7])
                    .wrapping_add(s1)
            };
            t += 1;
        }
        let mut t = 0;
        while t < 64 {
            w[t] = w[t].wrapping_add(K.0[t]);
            t += 1;
        }
        Words(w)
    }

    /// The second block of SHA-256 over a 64-byte message (a merkle step): padding alone.
    const PAD_64: Words =
        schedule_plus_k([0x8000_0000, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 512]);

    /// SHA-256 state: lanes (low to high) F, E, B, A and H, G, D, C.
    #[derive(Clone, Copy)]
    struct State {
        abef: __m128i,
        cdgh: __m128i,
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn load_state(s: &[u32; 8]) -> State {
        // SAFETY: `s` is 32 readable bytes; unaligned loads.
        let (abcd, efgh) = unsafe {
            (
                _mm_loadu_si128(s.as_ptr().cast()),
                _mm_loadu_si128(s.as_ptr().add(4).cast()),
            )
        };
        let badc = _mm_shuffle_epi32(abcd, 0xb1);
        let hgfe = _mm_shuffle_epi32(efgh, 0x1b);
        State {
            abef: _mm_alignr_epi8(badc, hgfe, 8),
            cdgh: _mm_blend_epi16(hgfe, badc, 0xf0),
        }
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn iv() -> State {
        State {
            abef: _mm_set_epi32(IV[0] as i32, IV[1] as i32, IV[4] as i32, IV[5] as i32),
            cdgh: _mm_set_epi32(IV[2] as i32, IV[3] as i32, IV[6] as i32, IV[7] as i32),
        }
    }

    /// The state's words in order, A B C D and E F G H: the digest, as the message words of a
    /// hash over it.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn words(s: State) -> (__m128i, __m128i) {
        (
            _mm_shuffle_epi32(_mm_unpackhi_epi64(s.abef, s.cdgh), 0xb1),
            _mm_shuffle_epi32(_mm_unpacklo_epi64(s.abef, s.cdgh), 0xb1),
        )
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn byte_swap() -> __m128i {
        _mm_set_epi64x(0x0c0d_0e0f_0809_0a0b, 0x0405_0607_0001_0203)
    }

    /// Four big-endian message words from 16 bytes.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn load_be(b: &[u8; 16]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; an unaligned load.
        _mm_shuffle_epi8(unsafe { _mm_loadu_si128(b.as_ptr().cast()) }, byte_swap())
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn store_be(w: __m128i, out: &mut [u8; 16]) {
        // SAFETY: `out` is 16 writable bytes; an unaligned store.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm_shuffle_epi8(w, byte_swap())) }
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn load_block(b: &[u8; 64]) -> [__m128i; 4] {
        let q = |i: usize| -> &[u8; 16] { b[i * 16..i * 16 + 16].try_into().expect("16") };
        // SAFETY: same target features as this function.
        unsafe { [load_be(q(0)), load_be(q(1)), load_be(q(2)), load_be(q(3))] }
    }

    /// Four rounds: `wk` is W[t..t+4] + K[t..t+4].
    macro_rules! rounds {
        ($abef:ident, $cdgh:ident, $wk:expr) => {{
            let wk = $wk;
            $cdgh = _mm_sha256rnds2_epu32($cdgh, $abef, wk);
            $abef = _mm_sha256rnds2_epu32($abef, $cdgh, _mm_shuffle_epi32(wk, 0x0e));
        }};
    }

    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn k(i: usize) -> __m128i {
        // SAFETY: i < 16, so the 16 bytes at 4 * i are within the table.
        unsafe { _mm_load_si128(K.0.as_ptr().add(4 * i).cast()) }
    }

    /// One compression of the block whose message words are `m`.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn compress(s: State, m: [__m128i; 4]) -> State {
        let [mut w0, mut w1, mut w2, mut w3] = m;
        let (mut abef, mut cdgh) = (s.abef, s.cdgh);
        // W[t..t+4] from the four groups before it, into the oldest one's place.
        macro_rules! next {
            ($a:ident, $b:ident, $c:ident, $d:ident) => {
                $a = _mm_sha256msg2_epu32(
                    _mm_add_epi32(_mm_sha256msg1_epu32($a, $b), _mm_alignr_epi8($d, $c, 4)),
                    $d,
                );
            };
        }
        // SAFETY (every `k`): same target features as this function.
        unsafe {
            rounds!(abef, cdgh, _mm_add_epi32(w0, k(0)));
            rounds!(abef, cdgh, _mm_add_epi32(w1, k(1)));
            rounds!(abef, cdgh, _mm_add_epi32(w2, k(2)));
            rounds!(abef, cdgh, _mm_add_epi32(w3, k(3)));
            let mut i = 4;
            while i < 16 {
                next!(w0, w1, w2, w3);
                rounds!(abef, cdgh, _mm_add_epi32(w0, k(i)));
                next!(w1, w2, w3, w0);
                rounds!(abef, cdgh, _mm_add_epi32(w1, k(i + 1)));
                next!(w2, w3, w0, w1);
                rounds!(abef, cdgh, _mm_add_epi32(w2, k(i + 2)));
                next!(w3, w0, w1, w2);
                rounds!(abef, cdgh, _mm_add_epi32(w3, k(i + 3)));
                i += 4;
            }
        }
        State {
            abef: _mm_add_epi32(abef, s.abef),
            cdgh: _mm_add_epi32(cdgh, s.cdgh),
        }
    }

    /// One compression of a constant block, from its precomputed W + K.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn compress_wk(s: State, wk: &Words) -> State {
        let (mut abef, mut cdgh) = (s.abef, s.cdgh);
        let mut i = 0;
        while i < 16 {
            // SAFETY: i < 16, so the 16 bytes at 4 * i are within the (aligned) table.
            rounds!(abef, cdgh, unsafe {
                _mm_load_si128(wk.0.as_ptr().add(4 * i).cast())
            });
            i += 1;
        }
        State {
            abef: _mm_add_epi32(abef, s.abef),
            cdgh: _mm_add_epi32(cdgh, s.cdgh),
        }
    }

    /// The second SHA-256 of SHA-256d, over the 32-byte digest `first`.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn second(first: State) -> State {
        let (abcd, efgh) = unsafe { words(first) };
        let pad0 = _mm_set_epi32(0, 0, 0, 0x8000_0000u32 as i32);
        let pad1 = _mm_set_epi32(256, 0, 0, 0);
        // SAFETY: same target features as this function.
        unsafe { compress(iv(), [abcd, efgh, pad0, pad1]) }
    }

    /// SHA-256d of the prefix followed by `parts`: the state after the first hash.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn first_hash(mid: &PrefixMidstate, parts: &[&[u8]]) -> State {
        // SAFETY (every call below): same target features as this function.
        let mut state = unsafe { load_state(&mid.state) };
        each_block!(mid, parts, |block| {
            state = unsafe { compress(state, load_block(block)) }
        });
        state
    }

    /// See [`PrefixMidstate::share_header_hash`].
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn share_header_hash(
        mid: &PrefixMidstate,
        parts: &[&[u8]],
        branch: &[Hash256],
        header: &mut [u8; 80],
    ) -> Hash256 {
        // SAFETY: same target features as this function.
        unsafe { header_hash(second(first_hash(mid, parts)), branch, header) }
    }

    /// The block of a [`super::CoinbaseMidstate`] that holds the gap, laid out with the gap
    /// blank, and the blocks after it, which are the same for every share.
    #[derive(Clone, Debug)]
    pub(super) struct FixedTail {
        /// The gap's block as message words (big-endian), the gap's bytes 0.
        block: [Lane; 4],
        /// Per 4 words: where each byte comes from in the gap (`_mm_shuffle_epi8` indices;
        /// 0x80: not from the gap).
        masks: [Lane; 4],
        /// W + K of each block after the gap's.
        rest: Box<[Words]>,
    }

    #[repr(align(16))]
    #[derive(Clone, Copy, Debug)]
    struct Lane([u8; 16]);

    impl FixedTail {
        /// None when the gap does not fit in one block after the prefix's last whole one, or is
        /// longer than 16 bytes.
        pub(crate) fn new(
            mid: &PrefixMidstate,
            gap_len: usize,
            suffix: &[u8],
        ) -> Option<FixedTail> {
            let at = mid.tail_len as usize;
            if gap_len > 16 || at + gap_len > 64 {
                return None;
            }
            // What follows the prefix's whole blocks, padded: the tail, the blank gap, the
            // suffix, 0x80, zeros, the length in bits.
            let total = mid.blocks * 64 + (at + gap_len + suffix.len()) as u64;
            let mut rest = Vec::with_capacity(at + gap_len + suffix.len() + 72);
            rest.extend_from_slice(&mid.tail[..at]);
            rest.resize(at + gap_len, 0);
            rest.extend_from_slice(suffix);
            rest.push(0x80);
            while rest.len() % 64 != 56 {
                rest.push(0);
            }
            rest.extend_from_slice(&(total * 8).to_be_bytes());
            let mut block = [Lane([0; 16]); 4];
            let mut masks = [Lane([0x80; 16]); 4];
            for j in 0..4 {
                for q in 0..16 {
                    // Byte q of these four big-endian words is byte `pos` of the block.
                    let pos = 16 * j + (q / 4) * 4 + 3 - q % 4;
                    block[j].0[q] = rest[pos];
                    if (at..at + gap_len).contains(&pos) {
                        masks[j].0[q] = (pos - at) as u8;
                    }
                }
            }
            let rest = rest[64..]
                .chunks_exact(64)
                .map(|b| {
                    schedule_plus_k(std::array::from_fn(|w| {
                        u32::from_be_bytes(b[4 * w..4 * w + 4].try_into().expect("4"))
                    }))
                })
                .collect();
            Some(FixedTail { block, masks, rest })
        }
    }

    /// Up to 8 bytes, little-endian.
    #[inline]
    fn le_u64(b: &[u8]) -> u64 {
        match b.len() {
            4 => u64::from(u32::from_le_bytes(b.try_into().expect("4"))),
            8 => u64::from_le_bytes(b.try_into().expect("8")),
            _ => b
                .iter()
                .enumerate()
                .fold(0, |v, (i, &x)| v | u64::from(x) << (8 * i)),
        }
    }

    /// See [`super::CoinbaseMidstate::share_header_hash`]: `gap` is as long as the gap `fixed`
    /// was laid out for (at most 16 bytes).
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn share_header_hash_fixed(
        mid: &PrefixMidstate,
        fixed: &FixedTail,
        gap: [&[u8]; 2],
        branch: &[Hash256],
        header: &mut [u8; 80],
    ) -> Hash256 {
        // The gap's 16 bytes (at most) as one vector, built in registers.
        let v = {
            let (a, b) = (gap[0], gap[1]);
            let mut lo: u128 = 0;
            for (at, part) in [(0, a), (a.len(), b)] {
                if part.is_empty() {
                    continue; // and `at` may be 16
                }
                let (p0, p1) = part.split_at(part.len().min(8));
                lo |= u128::from(le_u64(p0)) << (8 * at);
                if !p1.is_empty() {
                    lo |= u128::from(le_u64(p1)) << (8 * (at + 8));
                }
            }
            lo
        };
        // SAFETY (every call below): same target features as this function; the lanes are
        // 16 aligned bytes.
        unsafe {
            let gap = _mm_set_epi64x((v >> 64) as i64, v as i64);
            let block = [
                gap_lane(fixed, 0, gap),
                gap_lane(fixed, 1, gap),
                gap_lane(fixed, 2, gap),
                gap_lane(fixed, 3, gap),
            ];
            let mut state = compress(load_state(&mid.state), block);
            for wk in fixed.rest.iter() {
                state = compress_wk(state, wk);
            }
            header_hash(second(state), branch, header)
        }
    }

    /// Message words 4j..4j+4 of the gap's block, with the gap's bytes from `gap`.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn gap_lane(fixed: &FixedTail, j: usize, gap: __m128i) -> __m128i {
        // SAFETY: the lanes are 16 aligned bytes.
        let (block, mask) = unsafe {
            (
                _mm_load_si128(fixed.block[j].0.as_ptr().cast()),
                _mm_load_si128(fixed.masks[j].0.as_ptr().cast()),
            )
        };
        _mm_or_si128(block, _mm_shuffle_epi8(gap, mask))
    }

    /// The header whose merkle root the coinbase's txid `node` makes through `branch` (written
    /// into `header[36..68]`), and its hash.
    #[inline]
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    unsafe fn header_hash(mut node: State, branch: &[Hash256], header: &mut [u8; 80]) -> Hash256 {
        let q = |b: &[u8; 80], i: usize| -> [u8; 16] { b[i..i + 16].try_into().expect("16") };
        // SAFETY (every call below): same target features as this function.
        unsafe {
            // The header's fixed words, read before the root is written next to them.
            let h0 = load_be(&q(header, 0));
            let h1 = load_be(&q(header, 16));
            let h2 = load_be(&q(header, 20)); // its last word: bytes 32..36 of the previous hash
            let tail = load_be(&q(header, 64)); // root's last word (replaced), time, bits, nonce

            // Up the branch: SHA-256d(node || sibling) per level.
            for sibling in branch {
                let (a, e) = words(node);
                let s = &sibling.0;
                let m2 = load_be(s[..16].try_into().expect("16"));
                let m3 = load_be(s[16..].try_into().expect("16"));
                let st = compress(iv(), [a, e, m2, m3]);
                node = second(compress_wk(st, &PAD_64));
            }

            // The header: version, previous hash and root words 0..6, then root word 7, time,
            // bits, nonce and padding (640 bits).
            let (r0, r1) = words(node);
            let mut root = [0u8; 32];
            let (lo, hi) = root.split_at_mut(16);
            store_be(r0, lo.try_into().expect("16"));
            store_be(r1, hi.try_into().expect("16"));
            header[36..68].copy_from_slice(&root);
            let m2 = _mm_alignr_epi8(r0, h2, 12);
            let m3 = _mm_alignr_epi8(r1, r0, 12);
            let st = compress(iv(), [h0, h1, m2, m3]);
            let t0 = _mm_blend_epi16(tail, _mm_srli_si128(r1, 12), 0x03);
            let pad0 = _mm_set_epi32(0, 0, 0, 0x8000_0000u32 as i32);
            let pad1 = _mm_set_epi32(640, 0, 0, 0);
            let st = second(compress(st, [t0, pad0, _mm_setzero_si128(), pad1]));
            let (d0, d1) = words(st);
            let mut out = [0u8; 32];
            let (lo, hi) = out.split_at_mut(16);
            store_be(d0, lo.try_into().expect("16"));
            store_be(d1, hi.try_into().expect("16"));
            Hash256(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256d_known_answer() {
        // SHA-256d("hello") as used in many Bitcoin test suites.
        assert_eq!(
            sha256d(b"hello").to_internal_hex(),
            "9595c9df90075148eb06860365df33584b75bff782a510c6cd4883a419833d50"
        );
        assert_eq!(sha256d_parts(&[b"he", b"", b"llo"]), sha256d(b"hello"));
    }

    #[test]
    fn compression_paths_agree_with_the_streaming_hash() {
        let msg: [u8; 64] = std::array::from_fn(|i| (i as u8).wrapping_mul(7));
        assert_eq!(sha256d_64(&msg), sha256d(&msg));
        let header: [u8; 80] = std::array::from_fn(|i| (i as u8).wrapping_mul(13));
        assert_eq!(sha256d_header(&header), sha256d(&header));
    }

    #[test]
    fn prefix_midstate_agrees_with_the_streaming_hash_at_every_split() {
        let msg: Vec<u8> = (0..300u32).map(|i| (i * 31 % 251) as u8).collect();
        for total in [0usize, 1, 55, 56, 63, 64, 65, 119, 120, 128, 200, 300] {
            for split in [0, 1, total / 3, total / 2, total.saturating_sub(1), total] {
                let split = split.min(total);
                let mid = PrefixMidstate::new(&msg[..split]);
                let (a, b) = msg[split..total].split_at((total - split) / 2);
                assert_eq!(
                    mid.sha256d_with(&[a, b]),
                    sha256d(&msg[..total]),
                    "total {total} split {split}"
                );
            }
        }
    }

    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// A random merkle branch of fewer than `max_len` levels, and a random header.
    fn branch_and_header(next: &mut impl FnMut() -> u64, max_len: u64) -> (Vec<Hash256>, [u8; 80]) {
        let branch = (0..next() % max_len)
            .map(|_| Hash256(std::array::from_fn(|_| next() as u8)))
            .collect();
        (branch, std::array::from_fn(|_| next() as u8))
    }

    /// `header` with the merkle root `coinbase` makes through `branch`, and its hash: the long
    /// way round.
    fn expected_share(
        coinbase: &[u8],
        branch: &[Hash256],
        header: [u8; 80],
    ) -> ([u8; 80], Hash256) {
        let mut h = header;
        let root = crate::merkle::merkle_root_from_branch(sha256d(coinbase), branch);
        h[36..68].copy_from_slice(&root.0);
        (h, sha256d(&h))
    }

    #[test]
    fn share_header_hash_agrees_with_the_separate_hashes() {
        let msg: Vec<u8> = (0..400u32).map(|i| (i * 89 % 253) as u8).collect();
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for prefix_len in [0usize, 5, 41, 63, 64, 80, 100, 128, 150] {
            for en_len in [0usize, 4, 8, 12, 32] {
                for suffix_len in [0usize, 30, 87, 120] {
                    let (branch, header) = branch_and_header(&mut next, 14);
                    let branch_len = branch.len();
                    let prefix = &msg[..prefix_len];
                    let en = &msg[200..200 + en_len];
                    let (en1, en2) = en.split_at(en_len / 2);
                    let suffix = &msg[250..250 + suffix_len];
                    let mid = PrefixMidstate::new(prefix);
                    let parts: [&[u8]; 3] = [en1, en2, suffix];

                    let (expect_header, expect) =
                        expected_share(&[prefix, en, suffix].concat(), &branch, header);

                    let mut got_header = header;
                    let got = mid.share_header_hash(&parts, &branch, &mut got_header);
                    let what = format!("{prefix_len}/{en_len}/{suffix_len}/{branch_len}");
                    assert_eq!(got, expect, "{what}");
                    assert_eq!(got_header, expect_header, "{what}");

                    let mut portable_header = header;
                    let portable =
                        mid.share_header_hash_portable(&parts, &branch, &mut portable_header);
                    assert_eq!(portable, expect, "{what}");
                    assert_eq!(portable_header, expect_header, "{what}");
                }
            }
        }
    }

    #[test]
    fn a_coinbase_midstate_hashes_every_gap_as_the_whole_coinbase_would() {
        let msg: Vec<u8> = (0..400u32).map(|i| (i * 97 % 251) as u8).collect();
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        let mut laid_out = 0;
        // Gaps anywhere in their block (straddling 16-byte lanes, ending the block, in the
        // block after a whole prefix), too long to lay out, messages ending in the gap's block
        // or blocks later, and splits of the gap between its two parts.
        for prefix_len in [0usize, 5, 41, 50, 56, 60, 63, 64, 70, 100, 150] {
            for gap_len in [0usize, 1, 4, 8, 12, 16, 17] {
                for suffix_len in [0usize, 3, 30, 87, 120, 200] {
                    let (branch, header) = branch_and_header(&mut next, 4);
                    let prefix = &msg[..prefix_len];
                    let suffix = &msg[190..190 + suffix_len];
                    let cb = CoinbaseMidstate::new(prefix, gap_len, suffix);
                    #[cfg(target_arch = "x86_64")]
                    {
                        laid_out += usize::from(cb.fixed.is_some());
                        assert_eq!(
                            cb.fixed.is_some(),
                            gap_len <= 16 && prefix_len % 64 + gap_len <= 64,
                            "{prefix_len}/{gap_len}"
                        );
                    }
                    for split in [0, gap_len / 2, gap_len] {
                        let gap: Vec<u8> = (0..gap_len).map(|_| next() as u8).collect();
                        let (g0, g1) = gap.split_at(split);
                        let (expect_header, expect) =
                            expected_share(&[prefix, &gap, suffix].concat(), &branch, header);
                        let mut got_header = header;
                        let got = cb.share_header_hash([g0, g1], &branch, &mut got_header);
                        let what = format!("{prefix_len}/{gap_len}/{suffix_len}/{split}");
                        assert_eq!(got, expect, "{what}");
                        assert_eq!(got_header, expect_header, "{what}");
                    }
                    // A gap of another length than laid out: the whole coinbase all the same.
                    let other: Vec<u8> = (0..gap_len + 3).map(|_| next() as u8).collect();
                    let (expect_header, expect) =
                        expected_share(&[prefix, &other, suffix].concat(), &branch, header);
                    let mut got_header = header;
                    let got = cb.share_header_hash([&other, &[]], &branch, &mut got_header);
                    assert_eq!((got, got_header), (expect, expect_header));
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        assert!(laid_out > 300, "{laid_out} laid out");
        let _ = laid_out;
    }

    #[test]
    fn display_is_reversed_internal_order() {
        let h = Hash256::from_display_hex(
            "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f",
        )
        .unwrap();
        assert_eq!(h.0[31], 0x00);
        assert_eq!(h.0[0], 0x6f);
        assert_eq!(
            h.to_string(),
            "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"
        );
        assert_eq!(Hash256::from_internal_hex(&h.to_internal_hex()).unwrap(), h);
        assert!(Hash256::from_display_hex("00").is_err());
        assert!(Hash256::from_display_hex(&"g".repeat(64)).is_err());
        let b: bitcoin::BlockHash = h.into();
        assert_eq!(b.to_string(), h.to_string());
    }
}
