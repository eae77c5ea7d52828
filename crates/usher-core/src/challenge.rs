//! The proof-of-work challenge a queue may ask of every join (`challenge: "pow"`), in the
//! words the store and the browser contract share: the setting and its difficulty, why a join
//! was refused, a checked solution ready to be spent, and the `challenge` event.
//!
//! The puzzles themselves (their text, MAC, check and solver) are `usher-pow`'s: the store
//! only spends a [`Proof`] a gateway has checked. A solution is good for one place: the join
//! script spends its id (see `keys.rs`, `spent`).

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ids::QueueId;

/// Fewest leading zero bits a queue may ask.
pub const MIN_POW_DIFFICULTY: u8 = 1;
/// Most leading zero bits a queue may ask: 2^32 hashes is over an hour on a phone.
pub const MAX_POW_DIFFICULTY: u8 = 32;
/// The difficulty of a queue that sets `challenge: "pow"` without one: 2^19 ≈ 524,000 hashes
/// on average, about 1.5 s for the page's solver on a mid-range phone (the middle of the
/// 1–3 s a person waits without noticing much; BENCHMARKS.md, "Proof of work").
pub const DEFAULT_POW_DIFFICULTY: u8 = 19;
/// What a queue asks of a join before it takes a place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Challenge {
    /// Nothing: every join takes a place.
    #[default]
    None,
    /// A solved proof-of-work puzzle, one per place.
    Pow,
}

impl Challenge {
    /// The name stored in the queue's `meta` and used in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Challenge::None => "none",
            Challenge::Pow => "pow",
        }
    }
}

impl FromStr for Challenge {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "none" => Ok(Challenge::None),
            "pow" => Ok(Challenge::Pow),
            _ => Err(()),
        }
    }
}

/// A difficulty outside [`MIN_POW_DIFFICULTY`]..=[`MAX_POW_DIFFICULTY`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("pow_difficulty must be between {MIN_POW_DIFFICULTY} and {MAX_POW_DIFFICULTY} (leading zero bits of SHA-256)")]
pub struct BadDifficulty;

/// Checks a queue's difficulty setting.
pub fn check_difficulty(d: u8) -> Result<(), BadDifficulty> {
    (MIN_POW_DIFFICULTY..=MAX_POW_DIFFICULTY)
        .contains(&d)
        .then_some(())
        .ok_or(BadDifficulty)
}

/// Why a join was not given a place, told to the browser with a fresh puzzle
/// (`event: challenge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = ChallengeReason)]
pub enum Refusal {
    /// The join carried no solution.
    Missing,
    /// The puzzle is older than the gateway's puzzle lifetime.
    Expired,
    /// Malformed, forged, for another queue, a hash short of the difficulty, or a puzzle
    /// easier than the queue asks now.
    Invalid,
    /// The solution already took a place.
    Spent,
}

/// A checked solution, ready to be spent by the join script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The puzzle's id: the spent-set member.
    pub id: String,
    /// The puzzle's difficulty: the script refuses one below the queue's current setting.
    pub difficulty: u8,
    /// When the puzzle expires (ms); the spent-set keeps the id a while past it.
    pub expires_ms: u64,
}

/// `GET /api/queues/{queue}/challenge` answer, and the payload of `event: challenge` (with
/// `reason`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChallengeEvent {
    pub queue: QueueId,
    /// The puzzle to solve: send `?pow=<puzzle>.<nonce>` with the next join.
    pub puzzle: String,
    /// Leading zero bits SHA-256(`<puzzle>.<nonce>`) must have.
    pub difficulty: u8,
    /// RFC 3339: the puzzle is refused from then on.
    pub expires_at: String,
    /// Why the join was refused (only in `event: challenge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Refusal>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings() {
        assert_eq!(check_difficulty(0), Err(BadDifficulty));
        assert_eq!(check_difficulty(33), Err(BadDifficulty));
        assert_eq!(check_difficulty(1), Ok(()));
        assert_eq!(check_difficulty(32), Ok(()));
        assert_eq!("pow".parse(), Ok(Challenge::Pow));
        assert_eq!("POW".parse::<Challenge>(), Err(()));
    }
}
