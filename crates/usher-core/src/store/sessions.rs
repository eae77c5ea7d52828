//! Admitted places' sessions, as the booking service sees them through the dispatcher: is
//! the session active, touch it (a sliding session is extended), end it (release or consume).
//! With `arrival_seconds` set, the first of these calls on an active session is its arrival.

use redis::Value;

use super::decode::{array, status, u};
use super::reply::SessionStatus;
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Active until `expires_at_ms`.
    Active { expires_at_ms: u64 },
    /// Released or expired.
    Ended,
}

/// What ending a session did: the script decides atomically, so of any number of concurrent
/// calls for one session exactly one is told [`SessionEnd::EndedNow`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// This call ended a session that was active until `expires_at_ms`.
    EndedNow { expires_at_ms: u64 },
    /// The session had ended already (released, consumed or expired).
    AlreadyEnded,
}

impl Store {
    /// Whether `place`'s session is active at `now_ms`.
    pub async fn session(&self, q: &QueueId, place: PlaceId, now_ms: u64) -> Result<SessionState> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .session
            .key(&k.active)
            .key(&k.meta)
            .key(&k.unarrived)
            .key(&k.arrivals)
            .arg(place.0)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        session_state(v)
    }

    /// Touches `place`'s session: a sliding session is extended to `now_ms` + TTL, never past
    /// `cap_ms` (its token's `exp`); others keep their expiry.
    pub async fn touch_session(
        &self,
        q: &QueueId,
        place: PlaceId,
        now_ms: u64,
        cap_ms: u64,
    ) -> Result<SessionState> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .touch_session
            .key(&k.meta)
            .key(&k.active)
            .key(&k.unarrived)
            .key(&k.arrivals)
            .arg(place.0)
            .arg(now_ms)
            .arg(cap_ms)
            .invoke_async(&mut self.c())
            .await?;
        session_state(v)
    }

    /// Ends `place`'s session at once (idempotent), and says whether this call was the one that
    /// ended it.
    pub async fn end_session(
        &self,
        q: &QueueId,
        place: PlaceId,
        now_ms: u64,
    ) -> Result<SessionEnd> {
        self.end_session_as(q, place, now_ms, false).await
    }

    /// Ends `place`'s session as [`Store::end_session`] does, for a sale: when this call ends
    /// it, it counts as a sold basket of the queue's inventory until the booking service's
    /// next report (`src/inventory.rs`).
    pub async fn consume_session(
        &self,
        q: &QueueId,
        place: PlaceId,
        now_ms: u64,
    ) -> Result<SessionEnd> {
        self.end_session_as(q, place, now_ms, true).await
    }

    async fn end_session_as(
        &self,
        q: &QueueId,
        place: PlaceId,
        now_ms: u64,
        consumed: bool,
    ) -> Result<SessionEnd> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .end_session
            .key(&k.meta)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.ended)
            .key(&k.unarrived)
            .key(&k.arrivals)
            .key(&k.record)
            .arg(place.0)
            .arg(now_ms)
            .arg(if consumed { "1" } else { "" })
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match status(&a, SessionStatus::from_code) {
            Some(SessionStatus::Released) if a.len() >= 2 => Ok(SessionEnd::EndedNow {
                expires_at_ms: u(&a[1])?,
            }),
            Some(SessionStatus::Ended) => Ok(SessionEnd::AlreadyEnded),
            _ => Err(protocol(format!("end_session reply {a:?}"))),
        }
    }
}

/// Decodes a `session` or `touch_session` reply.
fn session_state(v: Value) -> Result<SessionState> {
    let a = array(v)?;
    match status(&a, SessionStatus::from_code) {
        Some(SessionStatus::Active) if a.len() >= 2 => Ok(SessionState::Active {
            expires_at_ms: u(&a[1])?,
        }),
        Some(SessionStatus::Ended) => Ok(SessionState::Ended),
        _ => Err(protocol(format!("session reply {a:?}"))),
    }
}
