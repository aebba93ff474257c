//! Job ids as each protocol spells them.

use std::fmt;

use crate::short_str::ShortStr;

/// A job id: SV2's are `u32`s, SV1's are strings the pool chooses (often hex counters).
///
/// SV1 ids are kept as text even when they look numeric: every SV1 role emits the string it saw
/// on the wire, so the pool's and the device's events compare equal without either guessing how
/// the other would parse it. Text longer than [`ShortStr::CAPACITY`] bytes is truncated; SV1 pools
/// use far shorter ids.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobId {
    /// An SV2 job id (a `u32` on the wire).
    Num(u64),
    /// An SV1 job id, the string as it appeared on the wire.
    Text(ShortStr),
}

impl JobId {
    /// An SV1 job id as it appeared in `mining.notify` / `mining.submit`.
    pub fn text(s: &str) -> Self {
        JobId::Text(ShortStr::new(s))
    }

    /// The number, for a [`JobId::Num`].
    pub fn as_num(&self) -> Option<u64> {
        match self {
            JobId::Num(n) => Some(*n),
            JobId::Text(_) => None,
        }
    }

    /// The text, for a [`JobId::Text`].
    pub fn as_text(&self) -> Option<&str> {
        match self {
            JobId::Num(_) => None,
            JobId::Text(t) => Some(t.as_str()),
        }
    }
}

impl Default for JobId {
    fn default() -> Self {
        JobId::Num(0)
    }
}

impl From<u32> for JobId {
    fn from(n: u32) -> Self {
        JobId::Num(n.into())
    }
}

impl From<u64> for JobId {
    fn from(n: u64) -> Self {
        JobId::Num(n)
    }
}

impl From<&str> for JobId {
    fn from(s: &str) -> Self {
        JobId::text(s)
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobId::Num(n) => fmt::Display::fmt(n, f),
            JobId::Text(t) => f.write_str(t),
        }
    }
}

impl fmt::Debug for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobId::Num(n) => write!(f, "JobId({n})"),
            JobId::Text(t) => write!(f, "JobId({t:?})"),
        }
    }
}

/// A number for SV2 ids and a string for SV1 ids, so that a dump shows which protocol it came from.
impl serde::Serialize for JobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            JobId::Num(n) => s.serialize_u64(*n),
            JobId::Text(t) => s.serialize_str(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_text_is_not_a_number() {
        assert_ne!(JobId::text("12"), JobId::from(12u32));
        assert_eq!(JobId::text("1a").as_text(), Some("1a"));
        assert_eq!(JobId::from(7u32).as_num(), Some(7));
        assert_eq!(JobId::text("1a").to_string(), "1a");
    }
}
