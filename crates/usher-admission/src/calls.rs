//! The online session calls: check, touch, consume and release a token's session at the
//! dispatcher, for the configured queue or a named one, with or without the browser's proof.

use crate::session::Call;
use crate::{Admission, Audience, Consumption, Error, Proof, SessionStatus};

impl Admission {
    /// Online: where the token's session stands (`GET /api/session?queue=`), for the queue of
    /// [`Builder::audiences`] (of several, the token's own when it is one of them).
    ///
    /// [`Builder::audiences`]: crate::Builder::audiences
    pub async fn check(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, None, None).await
    }

    /// [`Admission::check`] for a token that must admit to `queue`.
    pub async fn check_for(&self, token: &str, queue: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, Some(queue), None)
            .await
    }

    /// Online: keeps a sliding session alive, up to its cap (`POST /api/session/touch`); a
    /// fixed session is only checked.
    pub async fn touch(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, None, None).await
    }

    /// [`Admission::touch`] for a token that must admit to `queue`.
    pub async fn touch_for(&self, token: &str, queue: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, Some(queue), None)
            .await
    }

    /// Online: ends the session and says whether this call ended it
    /// (`POST /api/session/consume`). Book only on [`Consumption::Consumed`]: of any number of
    /// concurrent consumes with one token exactly one gets it, so one admission books once.
    /// The slot frees at once either way.
    pub async fn consume(&self, token: &str) -> Result<Consumption, Error> {
        consumption(self.session_call(Call::Consume, token, None, None).await?)
    }

    /// [`Admission::consume`] for a token that must admit to `queue`.
    pub async fn consume_for(&self, token: &str, queue: &str) -> Result<Consumption, Error> {
        consumption(
            self.session_call(Call::Consume, token, Some(queue), None)
                .await?,
        )
    }

    /// Ends the token's session (`DELETE /api/session`): the slot frees at once and the
    /// token is refused from then on. Idempotent: [`SessionStatus::Ended`], or
    /// [`SessionStatus::Invalid`] for a token the dispatcher does not accept. It does not say
    /// whether this call ended the session: to book once, [`Admission::consume`].
    pub async fn release(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Release, token, None, None).await
    }

    /// [`Admission::release`] for a token that must admit to `queue`.
    pub async fn release_for(&self, token: &str, queue: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Release, token, Some(queue), None)
            .await
    }

    /// [`Admission::check_for`] for a token bound to the browser's key (`cnf.jkt`), with the
    /// browser's `proof` for the request it sent: the dispatcher checks it and takes it once
    /// (a second call needs the browser's next proof). [`SessionStatus::ProofRefused`] when
    /// it is not good. A token without `cnf` is answered as by [`Admission::check_for`].
    pub async fn check_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, Some(queue), Some(&proof))
            .await
    }

    /// [`Admission::touch_for`] with the browser's proof (see [`Admission::check_bound`]).
    pub async fn touch_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, Some(queue), Some(&proof))
            .await
    }

    /// [`Admission::consume_for`] with the browser's proof (see [`Admission::check_bound`]):
    /// book only on [`Consumption::Consumed`]; a copied bound token alone gets
    /// [`Consumption::ProofRefused`] and its session stays as it was.
    pub async fn consume_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<Consumption, Error> {
        consumption(
            self.session_call(Call::Consume, token, Some(queue), Some(&proof))
                .await?,
        )
    }

    /// [`Admission::release`] with the browser's proof (see [`Admission::check_bound`]).
    pub async fn release_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Release, token, Some(queue), Some(&proof))
            .await
    }

    /// A session call, asking about `queue` or the configured one, with the browser's proof
    /// of its key when there is one.
    async fn session_call(
        &self,
        call: Call,
        token: &str,
        queue: Option<&str>,
        proof: Option<&Proof<'_>>,
    ) -> Result<SessionStatus, Error> {
        let queue = match (queue, &self.inner.audience) {
            (_, Audience::LoadOnly) => return Err(Error::NoAudience),
            // A queue the request names that is not one of ours: refused unasked.
            (Some(q), a) if !a.takes(q) => return Ok(SessionStatus::OtherQueue),
            (Some(q), _) => Some(q.to_owned()),
            // Asked without a queue, the dispatcher answers for a token of any queue.
            (None, Audience::Any) => return Err(Error::QueueRequired),
            (None, Audience::Queues(qs)) => {
                // The token's own queue when it is one of ours (the dispatcher checks the
                // signature); otherwise the first, which the dispatcher answers with 403.
                let aud = unverified_aud(token);
                qs.iter()
                    .find(|q| aud.as_deref() == Some(q.as_str()))
                    .or(qs.first())
                    .cloned()
            }
        };
        // >>> door
        if let Some(answer) = self.door_session(call, token, queue.as_deref()).await {
            return answer;
        }
        // <<< door
        self.inner
            .sessions
            .call(call, token, queue.as_deref(), proof)
            .await
    }
}

fn consumption(s: SessionStatus) -> Result<Consumption, Error> {
    Ok(match s {
        SessionStatus::Active(a) => Consumption::Consumed(a),
        SessionStatus::Ended => Consumption::Ended,
        SessionStatus::Invalid => Consumption::Invalid,
        SessionStatus::OtherQueue => Consumption::OtherQueue,
        SessionStatus::ProofRefused(reason) => Consumption::ProofRefused(reason),
    })
}

/// The `aud` a token claims, unverified: only to choose which of several configured queues
/// to ask the dispatcher about (it verifies the token itself).
fn unverified_aud(token: &str) -> Option<String> {
    jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
        .ok()
        .and_then(|d| d.claims["aud"].as_str().map(str::to_owned))
}
