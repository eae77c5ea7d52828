//! Identifiers that travel through URLs, Redis keys and tokens.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Longest accepted queue id, in bytes.
pub const MAX_QUEUE_ID_LEN: usize = 64;

/// A queue (one performance's line). 1–64 characters of `[A-Za-z0-9_-]`, so it is safe in
/// URLs, Redis key names, hash tags and ticket strings without escaping.
///
/// Shared text: a clone is a reference count, not a copy. A join clones its queue's id a
/// dozen times on its way (its batch, its reservation, its stream, its away mark), each an
/// allocation while the id was a `String` (BENCHMARKS.md, "Where the time goes",
/// allocations a join).
#[derive(
    Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(try_from = "String", into = "String")]
#[schema(value_type = String, pattern = "^[A-Za-z0-9_-]{1,64}$", example = "concert")]
pub struct QueueId(Arc<str>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("queue id must be 1 to {MAX_QUEUE_ID_LEN} characters long")]
    QueueIdLength,
    #[error("queue id may contain only letters, digits, '-' and '_'")]
    QueueIdCharset,
    #[error("place id must be a positive decimal number")]
    PlaceId,
}

impl QueueId {
    pub fn new(s: impl Into<String>) -> Result<Self, IdError> {
        let s = s.into();
        if s.is_empty() || s.len() > MAX_QUEUE_ID_LEN {
            return Err(IdError::QueueIdLength);
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(IdError::QueueIdCharset);
        }
        Ok(Self(Arc::from(s)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for QueueId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for QueueId {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<QueueId> for String {
    fn from(q: QueueId) -> String {
        q.0.to_string()
    }
}

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A place in one queue: its per-queue arrival sequence number (from `INCRBY`), which is also its
/// score in the waiting set. Places of a queue are never reused, even after the queue is closed
/// and reopened, so an old ticket can never name somebody else's place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PlaceId(pub u64);

impl PlaceId {
    /// The arrival sequence number: the place's score in the waiting set.
    pub fn seq(self) -> u64 {
        self.0
    }
}

impl FromStr for PlaceId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<u64>() {
            Ok(n) if n > 0 && s.bytes().all(|b| b.is_ascii_digit()) => Ok(Self(n)),
            _ => Err(IdError::PlaceId),
        }
    }
}

impl fmt::Display for PlaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_ids_are_validated() {
        assert!(QueueId::new("concert-2026_A").is_ok());
        assert_eq!(QueueId::new(""), Err(IdError::QueueIdLength));
        assert_eq!(QueueId::new("a".repeat(65)), Err(IdError::QueueIdLength));
        assert_eq!(QueueId::new("a b"), Err(IdError::QueueIdCharset));
        assert_eq!(QueueId::new("a{b}"), Err(IdError::QueueIdCharset));
        assert_eq!(QueueId::new("ü"), Err(IdError::QueueIdCharset));
    }

    #[test]
    fn place_ids_are_positive_decimals() {
        assert_eq!("42".parse::<PlaceId>(), Ok(PlaceId(42)));
        assert!("0".parse::<PlaceId>().is_err());
        assert!("+4".parse::<PlaceId>().is_err());
        assert!("-4".parse::<PlaceId>().is_err());
        assert!("x".parse::<PlaceId>().is_err());
    }
}

/// A gateway's identity (`USHER_SERVER_ID`): 1–128 characters of `[A-Za-z0-9._-]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server id must be 1 to 128 characters of letters, digits, '.', '-' and '_'")]
pub struct ServerIdError;

impl ServerId {
    pub fn new(s: impl Into<String>) -> Result<Self, ServerIdError> {
        let s = s.into();
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if ok {
            Ok(Self(s))
        } else {
            Err(ServerIdError)
        }
    }

    /// A fresh id unique to this process: `gw-<random>`.
    pub fn random() -> Self {
        use rand::Rng;
        let n: u64 = rand::thread_rng().gen();
        Self(format!("gw-{n:016x}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for ServerId {
    type Err = ServerIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
