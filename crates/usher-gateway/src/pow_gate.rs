//! The proof-of-work challenge at the gateway (docs/security.md, "Proof of work"): issuing
//! signed puzzles, and checking a join's solution before Redis is asked anything.
//!
//! Every check that needs no Redis happens here: the MAC, the queue, the expiry and the hash
//! ([`usher_pow::check_solution`]). Only a solution that passes them reaches the
//! join script, which spends it (one solution, one place) and checks the queue's current
//! difficulty. The queue's setting is cached for [`SETTING_TTL`], so a flood of joins for a
//! proof-of-work queue costs one `HMGET` a second, not one per join.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use usher_core::challenge::{Challenge, ChallengeEvent, Proof, Refusal, DEFAULT_POW_DIFFICULTY};
use usher_core::ids::QueueId;
use usher_core::store::{ChallengeSetting, Store, StoreError};
use usher_core::time::{now_ms, rfc3339_ms};
use usher_pow::{check_solution, ChallengeSecret, Puzzle};

/// How long a queue's challenge setting is used before it is read again: an operator's change
/// reaches every gateway within this (the join script applies it at once).
const SETTING_TTL: Duration = Duration::from_secs(1);
/// Most queues whose setting is cached (only configured queues are; past this the cache is
/// emptied and refilled).
const MAX_CACHED: usize = 10_000;

/// What a join needs to bring, and what to answer it.
pub(crate) enum Gate {
    /// Join, with this proof (spent by the join script) when the queue asks one.
    Pass(Option<Proof>),
    /// Refused before Redis was asked: answer `event: challenge` with this fresh puzzle.
    Refuse(ChallengeEvent),
}

/// Issues and checks puzzles.
pub(crate) struct Challenges {
    secret: ChallengeSecret,
    /// The secret shared through Redis, when none is configured: written back at every
    /// heartbeat, so gateways started after a Redis loss read the same one.
    shared: Option<String>,
    ttl_ms: u64,
    settings: Mutex<HashMap<QueueId, (Instant, Option<ChallengeSetting>)>>,
}

impl Challenges {
    pub(crate) fn new(secret: ChallengeSecret, shared: Option<String>, ttl: Duration) -> Self {
        Self {
            secret,
            shared,
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            settings: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<QueueId, (Instant, Option<ChallengeSetting>)>> {
        self.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The secret to write back to Redis, when it was generated rather than configured.
    pub(crate) fn shared_secret(&self) -> Option<&str> {
        self.shared.as_deref()
    }

    /// `q`'s setting, cached for [`SETTING_TTL`]; `None` for an unknown queue (cached too: a
    /// flood of joins to made-up queue names costs one read per name per period, not one per
    /// join).
    pub(crate) async fn setting(
        &self,
        store: &Store,
        q: &QueueId,
    ) -> Result<Option<ChallengeSetting>, StoreError> {
        if let Some((at, s)) = self.lock().get(q) {
            if at.elapsed() < SETTING_TTL {
                return Ok(s.clone());
            }
        }
        let s = store.challenge_setting(q).await?;
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(q.clone(), (Instant::now(), s.clone()));
        Ok(s)
    }

    /// `proof`'s issue-to-join time: from its puzzle's issue (its expiry less this
    /// gateway's puzzle lifetime) to now, the join, in ms (for the fairness record). Not the
    /// solve time alone: it also counts whatever the browser did before joining.
    pub(crate) fn issue_to_join_ms(&self, proof: &Proof) -> u64 {
        now_ms().saturating_sub(proof.expires_ms.saturating_sub(self.ttl_ms))
    }

    /// Drops `q`'s cached setting (the join script said it changed).
    pub(crate) fn forget(&self, q: &QueueId) {
        self.lock().remove(q);
    }

    /// A fresh puzzle for `q` at `difficulty`; `reason` says why a join was refused.
    pub(crate) fn issue(
        &self,
        q: &QueueId,
        difficulty: u8,
        reason: Option<Refusal>,
    ) -> ChallengeEvent {
        let p = Puzzle::new(q.clone(), difficulty, now_ms().saturating_add(self.ttl_ms));
        ChallengeEvent {
            queue: q.clone(),
            puzzle: p.sign(&self.secret),
            difficulty,
            expires_at: rfc3339_ms(p.expires_ms),
            reason,
        }
    }

    /// What a join for `q` with `solution` (the `pow` query parameter) needs, given the
    /// queue's setting (`None`: unknown queue, left to the join script to answer).
    pub(crate) fn gate(
        &self,
        q: &QueueId,
        setting: Option<&ChallengeSetting>,
        solution: Option<&str>,
    ) -> Gate {
        let Some(s) = setting.filter(|s| s.challenge == Challenge::Pow) else {
            return Gate::Pass(None);
        };
        let checked = match solution.filter(|s| !s.is_empty()) {
            None => Err(Refusal::Missing),
            Some(sol) => check_solution(&self.secret, q, sol, now_ms()),
        };
        match checked {
            Ok(proof) => Gate::Pass(Some(proof)),
            Err(reason) => Gate::Refuse(self.issue(q, s.difficulty, Some(reason))),
        }
    }

    /// The puzzle for a join the join script refused (`reason`), at the queue's current
    /// difficulty: read again unless the solution was merely spent (then the cached setting
    /// agreed with the script; a replayed solution must not cost a read of Redis each time).
    pub(crate) async fn refused(
        &self,
        store: &Store,
        q: &QueueId,
        reason: Refusal,
    ) -> Result<ChallengeEvent, StoreError> {
        if reason != Refusal::Spent {
            self.forget(q);
        }
        let difficulty = self
            .setting(store, q)
            .await?
            .map_or(DEFAULT_POW_DIFFICULTY, |s| s.difficulty);
        Ok(self.issue(q, difficulty, Some(reason)))
    }
}
