//! Door tokens at the booking service (a queue's `on_outage: "open"`; see the crate docs): the
//! session calls answer them here, offline, because the door opened when usher's Redis, and
//! maybe its dispatcher, could not be reached.

use crate::session::Call;
use crate::{ActiveSession, Admission, Error, SessionStatus, VerifyError};

impl Admission {
    /// A door token's session call, answered here without the dispatcher (`None`: not a door
    /// token). The door opened because usher's Redis was unreachable, and the dispatcher may
    /// be too: the token is judged offline, like [`Admission::verify_for`] (signature, queue,
    /// window). Good: `Active` until its `exp` for a check, a touch and a consume (nothing is
    /// recorded: a door token is a bearer pass for its window), `Ended` for a release.
    /// Otherwise `Invalid`, `OtherQueue` or `Ended` (outside its window), or
    /// [`Error::Unexpected`] `503` when the keys cannot be fetched.
    pub(crate) async fn door_session(
        &self,
        call: Call,
        token: &str,
        queue: Option<&str>,
    ) -> Option<Result<SessionStatus, Error>> {
        let peek = jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token).ok()?;
        peek.claims.get("door")?;
        let verified = match queue {
            Some(q) => self.verify_for(token, q).await,
            None => self.verify(token).await,
        };
        Some(Ok(match verified {
            Ok(c) if c.is_door() => match call {
                Call::Release => SessionStatus::Ended,
                Call::Check | Call::Touch | Call::Consume => SessionStatus::Active(ActiveSession {
                    queue: c.aud,
                    session: c.jti,
                    expires_at: time::OffsetDateTime::from_unix_timestamp(c.exp as i64)
                        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
                }),
            },
            Ok(_) => SessionStatus::Invalid,
            Err(VerifyError::Audience) => SessionStatus::OtherQueue,
            Err(VerifyError::Expired | VerifyError::NotYetValid) => SessionStatus::Ended,
            // The keys could not be fetched: the token cannot be judged (a `503` to answer).
            Err(e) if e.is_unavailable() => {
                return Some(Err(Error::Unexpected {
                    status: http::StatusCode::SERVICE_UNAVAILABLE,
                }))
            }
            Err(_) => SessionStatus::Invalid,
        }))
    }
}
