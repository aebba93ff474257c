//! JSON forms of the primitives types: hashes in display (RPC) hex, targets in big-endian hex.

use std::fmt::Display;

use primitives::Hash256;
use serde::Serializer;

/// Serializes any `Display` value as a string, without allocating in the serializer's path.
pub(crate) struct Hex<T>(pub T);

impl<T: Display> serde::Serialize for Hex<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

pub(crate) fn hash<S: Serializer>(h: &Hash256, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(h)
}

pub(crate) fn opt_hash<S: Serializer>(h: &Option<Hash256>, s: S) -> Result<S::Ok, S::Error> {
    match h {
        Some(h) => s.collect_str(h),
        None => s.serialize_none(),
    }
}
