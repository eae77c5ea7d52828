//! A binding queue's checks (`bind: "browser_key"`): the request's proof of possession, the
//! key the place joined with, and the proof's one use. Used by the stream (join and resume),
//! `GET /api/queues/{queue}/status` and `DELETE /api/queues/{queue}/tickets/{ticket}` (a copied
//! ticket can neither resume, read the token, nor make its owner leave).
//!
//! The order keeps Redis out of a flood of bad proofs: the cached setting, then the proof's
//! signature, route and time ([`usher_core::proof::check`]: no Redis), then the place's key (one
//! script call, `Store::ticket_key`), and last the `jti` (one `SET NX`), so only a proof by the right key is spent.
//! A place over for good spends none: its answer (`410`, the close reason) is the same however
//! often it is asked, so replaying the proof gains nothing, and such requests write nothing.
//!
//! This check is a Redis call of its own, before the place's script: the scripts check the
//! key again in their own call ([`asker`]), so a data loss, a restore or a stale setting in
//! between never lets a copied ticket act on the place.
//!
//! Each spent `jti` stays in Redis for 130 s, so what a place may spend is bounded twice: per
//! client address on the routes that name a ticket outside the stream (`--ip-poll-rate`,
//! before any of this), and per place here ([`PLACE_PROOFS`](crate::limits::PLACE_PROOFS), after the key check, so only
//! the key's holder draws from its place's bucket): many addresses sharing one place and its
//! key spend no more than one.

use usher_core::binding::{ProofRefusal, Thumbprint};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{Asker, StoreError, TicketKey};
use usher_core::time::now_ms;

use crate::client::IpKey;
use crate::metrics::{self, Refusal};
use crate::shared::Gateway;

/// Why a request to a binding queue goes no further.
#[derive(Debug)]
pub(crate) enum Unproven {
    /// No good proof: the browser is told why.
    Refused(ProofRefusal),
    /// A good proof, but its place spent `limits::PLACE_PROOFS` already: try again this much later.
    Throttled(std::time::Duration),
    /// Redis did not answer.
    Store(StoreError),
}

impl From<StoreError> for Unproven {
    fn from(e: StoreError) -> Self {
        Unproven::Store(e)
    }
}

/// The request a proof must name (`htm`, `htu`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Route<'a> {
    /// `GET /api/queues/{queue}/stream`
    Stream,
    /// `GET /api/queues/{queue}/status`
    Status,
    /// `DELETE /api/queues/{queue}/tickets/{ticket}`
    Leave(&'a str),
}

impl Route<'_> {
    fn method(self) -> &'static str {
        match self {
            Route::Stream | Route::Status => "GET",
            Route::Leave(_) => "DELETE",
        }
    }

    fn path(self, q: &QueueId) -> String {
        match self {
            Route::Stream => format!("/api/queues/{q}/stream"),
            Route::Status => format!("/api/queues/{q}/status"),
            Route::Leave(ticket) => format!("/api/queues/{q}/tickets/{ticket}"),
        }
    }
}

/// What a request to a binding queue proved.
#[derive(Debug, Clone)]
pub(crate) struct Proven {
    /// The key the proof was made with: a join's place is bound to it.
    pub(crate) key: Thumbprint,
    /// The ticket's place's own key, as Redis (`bound`) or a stream held here knows it:
    /// `None` for a join, and for a place over for good that no stream here holds.
    pub(crate) place_key: Option<Thumbprint>,
}

/// What a request naming a ticket proved, for the place's own scripts: they check the key
/// again in the same call as what they do (`usher_core::store::Asker`), since a data loss, a
/// restore or a stale setting may fall between [`prove`] and them. `None` (nothing proven) is
/// refused there on a binding queue.
pub(crate) fn asker(proven: Option<&Proven>) -> Asker<'_> {
    Asker::Ticket {
        proven: proven.map(|p| &p.key),
        known: proven.and_then(|p| p.place_key.as_ref()),
    }
}

/// Checks a request to `q` (for `place`, when it names one) against the queue's `bind`
/// setting: `Ok(None)` when the queue binds nothing (or its setting is unknown here and the
/// request brings no proof: the place's scripts, told nothing was proven, and the caller's
/// own checks answer that), `Ok(Some(proven))` when `proof` is a fresh, unspent proof by the place's key
/// (for a join: by any key, which the place will be bound to). The proof is spent.
///
/// A place held here with a key is bound whatever Redis says: after a data loss (the queue's
/// setting, the place and its key gone until the gateways put them back) its proof is checked
/// against the key of the stream held here, so a copied ticket can neither resume the place
/// nor take it from its browser.
pub(crate) async fn prove(
    gw: &Gateway,
    q: &QueueId,
    place: Option<PlaceId>,
    proof: Option<&str>,
    route: Route<'_>,
    client: Option<IpKey>,
) -> Result<Option<Proven>, Unproven> {
    let setting = gw.challenges().setting(gw.store(), q).await?;
    if setting.as_ref().is_some_and(|s| !s.bind.binds()) {
        return Ok(None);
    }
    let held = place.and_then(|p| gw.hub().held_key(q, p));
    // The setting unknown here (not configured, or configured again within the second the
    // cache keeps `None`) and no stream here holding the place: nothing is refused on a guess,
    // but a request naming a ticket with a proof goes on, so that what it proves reaches the
    // place's scripts, which check the key against the queue as it is now ([`asker`]).
    if setting.is_none() && held.is_none() && (place.is_none() || proof.is_none()) {
        return Ok(None);
    }
    let refused = |r: ProofRefusal| {
        metrics::refused(Refusal::Proof);
        tracing::debug!(queue = %q, reason = ?r, "request refused: no good proof of the browser key");
        Unproven::Refused(r)
    };
    let proof = proof.ok_or_else(|| refused(ProofRefusal::Missing))?;
    let checked =
        usher_core::proof::check(proof, route.method(), &route.path(q), None, now_ms() / 1000)
            .map_err(refused)?;
    let mut place_key = None;
    if let Some(place) = place {
        let known = match gw.store().ticket_key(q, place).await? {
            TicketKey::Bound(key) => Some(key),
            // Redis has no key for the place (lost with a data loss), the stream held here
            // has: the place is bound to that one.
            TicketKey::Unbound | TicketKey::Over if held.is_some() => held,
            // A live place without a key (it joined before the queue bound, or was put back
            // without it) cannot be proven.
            TicketKey::Unbound => return Err(refused(ProofRefusal::WrongKey)),
            // Over for good (its key may be pruned), or lost with its key and held nowhere
            // here: nothing of it can be had with the ticket (`lua/resume.lua` does not put a
            // lost place back without its key), and its own answer (`session_ended`, the
            // close reason, gone) is what the browser must hear.
            TicketKey::Over => None,
        };
        let Some(key) = known else {
            // Nothing of the place can be had with its ticket, and its answer is harmless to
            // repeat: no `jti` is spent.
            return Ok(Some(Proven {
                key: checked.key,
                place_key: None,
            }));
        };
        if key != checked.key {
            return Err(refused(ProofRefusal::WrongKey));
        }
        place_key = Some(key);
        // A stream resume spends a proof like a status poll: it draws from the address's
        // poll bucket too (status polls and leaves drew theirs before anything else).
        if let Some(ip) = client {
            if let Err(wait) = gw.ip_limits().poll(ip) {
                metrics::refused(Refusal::IpPolls);
                return Err(Unproven::Throttled(wait));
            }
        }
        if let Err(wait) = gw.place_proofs().take((q.clone(), place)) {
            metrics::refused(Refusal::PlaceProofs);
            return Err(Unproven::Throttled(wait));
        }
    }
    if !gw
        .store()
        .spend_proof(q, &checked.key, &checked.jti)
        .await?
    {
        // A replay writes nothing: it must not use up the place's share either (a copied
        // URL carries a spent proof).
        if let Some(place) = place {
            gw.place_proofs().give_back(&(q.clone(), place));
        }
        return Err(refused(ProofRefusal::Replayed));
    }
    Ok(Some(Proven {
        key: checked.key,
        place_key,
    }))
}
