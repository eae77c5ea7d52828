//! A queue's proof-of-work setting, as the gateway reads it to issue and check puzzles (the
//! join script reads it again, and is the authority).

use super::{Result, Store};
use crate::challenge::{Challenge, DEFAULT_POW_DIFFICULTY};
use crate::ids::QueueId;
use crate::keys::QueueKeys;

/// What a queue asks of a join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChallengeSetting {
    pub challenge: Challenge,
    /// Leading zero bits (meaningful with [`Challenge::Pow`]).
    pub difficulty: u8,
}

impl Store {
    /// `q`'s challenge setting; `None` for a queue never configured (one `HMGET`).
    pub async fn challenge_setting(&self, q: &QueueId) -> Result<Option<ChallengeSetting>> {
        let k = QueueKeys::new(q);
        let (open, challenge, difficulty): (Option<String>, Option<String>, Option<u8>) =
            redis::cmd("HMGET")
                .arg(&k.meta)
                .arg("open")
                .arg("challenge")
                .arg("pow_difficulty")
                .query_async(&mut self.c())
                .await?;
        Ok(open.map(|_| ChallengeSetting {
            challenge: challenge.and_then(|c| c.parse().ok()).unwrap_or_default(),
            difficulty: difficulty.unwrap_or(DEFAULT_POW_DIFFICULTY),
        }))
    }
}
