//! `GET /api/queues/{queue}/draw`: a scheduled sale's public draw record, for anyone to check
//! the order (docs/policies.md, "Scheduled sale and the draw").
//!
//! `{"queue","status","opens_at","commitment","seed","entrants","absent_entrants","beacon","voided"}`:
//! `status` (`pending`, `done` or `void`), the commitment from the moment the sale is
//! scheduled, the seed and the entrant hashes once the draw ran (`entrants`: those whose
//! browsers were there when the draw began, in drawn order; `absent_entrants`: those whose
//! browsers had gone away, drawn after all of them, in drawn order), the public randomness
//! beacon mixed in (`{"drand_round","randomness"}`, or `null` when the sale names none), and
//! a draw voided by a Redis data loss (`{"reason","commitment"}`, or `null`: see
//! `usher_core::store::PreQueueFate`). A
//! drawn record never changes, and 100,000 entrants make 6.6 MB of JSON, so each gateway
//! renders it once and serves the same bytes to every request (the commitment, read on every
//! request, tells a new sale's record from the last one).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use usher_core::draw::{EntrantHash, VoidReason};
use usher_core::ids::QueueId;
use usher_core::store::{DrawPhase, Schedule, Store};
use usher_core::time::rfc3339_ms;
use usher_http::ApiError;

use crate::errors::redis_unavailable;

/// Drawn records kept rendered: at most this many queues (then the cache starts over).
const CACHED_DRAWS: usize = 64;

/// Rendered records of finished draws, by queue, each with its commitment.
#[derive(Default)]
pub(crate) struct Draws(Mutex<HashMap<QueueId, (String, Bytes)>>);

impl Draws {
    fn get(&self, q: &QueueId, commitment: &str) -> Option<Bytes> {
        let m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        m.get(q)
            .filter(|(c, _)| c == commitment)
            .map(|(_, b)| b.clone())
    }

    fn put(&self, q: QueueId, commitment: String, body: Bytes) {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() >= CACHED_DRAWS && !m.contains_key(&q) {
            m.clear();
        }
        m.insert(q, (commitment, body));
    }
}

/// `GET /api/queues/{queue}/draw` answer: a scheduled sale's public record.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct DrawRecord<'a> {
    queue: &'a QueueId,
    /// `pending` (before the draw), `done` (after it) or `void` (voided by a Redis data loss,
    /// and none held since).
    status: DrawPhase,
    /// RFC 3339.
    opens_at: String,
    /// SHA-256 of the seed (hex), published before anyone could join the pre-queue; `null`
    /// when the draw is void and none is held.
    commitment: Option<&'a str>,
    /// The seed (hex); `null` until the draw.
    seed: Option<&'a str>,
    /// The hashes (hex) of the entrants whose browsers were there when the draw began, in
    /// drawn order; `null` until the draw.
    entrants: Option<Vec<String>>,
    /// The hashes (hex) of the entrants whose browsers had gone away by then, in drawn order
    /// (placed after every entrant of `entrants`); `null` until the draw.
    absent_entrants: Option<Vec<String>>,
    /// `null` unless the sale names a drand round.
    beacon: Option<BeaconRecord<'a>>,
    /// `null` unless a draw published earlier was voided by a Redis data loss; it stays
    /// beside a new draw's record.
    voided: Option<VoidedRecord<'a>>,
}

/// A draw voided by a Redis data loss.
#[derive(Serialize, utoipa::ToSchema)]
struct VoidedRecord<'a> {
    reason: VoidReason,
    /// The voided commitment (hex); `null` when no gateway had read it.
    commitment: Option<&'a str>,
}

/// The drand round a sale names, and its randomness once recorded.
#[derive(Serialize, utoipa::ToSchema)]
struct BeaconRecord<'a> {
    drand_round: u64,
    /// The round's randomness (hex), `null` until an operator records it.
    randomness: Option<&'a str>,
}

/// The answer to `GET /api/queues/{q}/draw` (`routes` serves it): the record from `store`,
/// a finished one rendered once into `draws`.
pub(crate) async fn record(store: &Store, draws: &Draws, q: QueueId) -> Result<Response, ApiError> {
    let Some(s) = store.schedule_of(&q).await.map_err(redis_unavailable)? else {
        return Err(ApiError::not_found(format!(
            "queue {q} does not exist or has no scheduled sale"
        )));
    };
    let commitment = match (&s.commitment, s.phase) {
        (Some(c), DrawPhase::Done) => c,
        // Pending, or void: not final, so never cached.
        _ => {
            let body = render(&q, &s, None);
            return Ok(([(header::CACHE_CONTROL, "no-cache")], json(body)).into_response());
        }
    };
    let body = match draws.get(&q, commitment) {
        Some(b) => b,
        None => {
            let (present, absent) = store.drawn_groups(&q).await.map_err(redis_unavailable)?;
            let hex = |g: Vec<EntrantHash>| g.iter().map(|h| h.to_hex()).collect();
            let b = render(&q, &s, Some((hex(present), hex(absent))));
            draws.put(q, commitment.clone(), b.clone());
            b
        }
    };
    Ok(([(header::CACHE_CONTROL, "public, max-age=60")], json(body)).into_response())
}

fn render(q: &QueueId, s: &Schedule, entrants: Option<(Vec<String>, Vec<String>)>) -> Bytes {
    let (entrants, absent_entrants) = entrants.unzip();
    let record = DrawRecord {
        queue: q,
        status: s.phase,
        opens_at: rfc3339_ms(s.opens_at_ms),
        commitment: s.commitment.as_deref(),
        seed: s.seed.as_deref(),
        entrants,
        absent_entrants,
        beacon: s.beacon.as_ref().map(|b| BeaconRecord {
            drand_round: b.drand_round,
            randomness: b.randomness.as_deref(),
        }),
        voided: s.voided.as_ref().map(|v| VoidedRecord {
            reason: v.reason,
            commitment: v.commitment.as_deref(),
        }),
    };
    Bytes::from(serde_json::to_vec(&record).unwrap_or_default())
}

fn json(body: Bytes) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], body)
}
