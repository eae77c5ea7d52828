//! Safe concurrent edits of a queue's settings: their version (`ETag`, `If-Match`) and the
//! changes that need `"confirm": true`.
//!
//! * Every write of a queue's settings adds 1 to its version (`settings_version`). `GET` and
//!   `PUT` answer it as a strong `ETag` (`"3"`). A `PUT` with `If-Match` writes only while the
//!   settings are still at that version, else `412`: two operators editing at once cannot
//!   overwrite each other unseen. The check and the write are one Lua script in usher-core
//!   ([`usher_core::store::Store::put_queue_if`]); the check here only refuses a request that
//!   is stale already; a `PUT` that also changes its schedule or closes the queue claims the
//!   version first, atomically ([`claim`]), so a concurrent editor changes none of it. A `PUT`
//!   without `If-Match` writes whatever the version, as before versions existed.
//! * A few changes hurt people who are waiting, so an operator must say they mean it: without
//!   `"confirm": true` they answer `409` naming the reason (see [`unconfirmed`]).

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use usher_core::ids::QueueId;
use usher_core::store::{QueueConfig, Store, VersionedWrite};
use usher_http::ApiError;

use crate::state::redis_down;

/// Below this `grace_seconds`, a browser whose phone suspended its tab for a few seconds
/// loses its place: setting it needs `"confirm": true`.
pub(crate) const CONFIRM_GRACE_BELOW: u64 = 10;

/// What an `If-Match` header asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IfMatch {
    /// `*`: the queue must exist, at any version.
    Any,
    /// One version (`"3"`).
    Version(u64),
    /// An entity tag this server never gave, or a weak one (`W/"3"`: `If-Match` compares
    /// strongly, RFC 9110 §13.1.1): it matches nothing.
    Unknown,
}

/// The `If-Match` header of a request, if any. Several tags (`"1", "2"`) match if any does.
pub(crate) fn if_match(headers: &HeaderMap) -> Result<Option<Vec<IfMatch>>, ApiError> {
    let Some(v) = headers.get(header::IF_MATCH) else {
        return Ok(None);
    };
    let text = v
        .to_str()
        .map_err(|_| ApiError::bad_request("If-Match must be ASCII entity tags"))?;
    let tags = text
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if t == "*" {
                return IfMatch::Any;
            }
            t.strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .and_then(|t| t.parse().ok())
                .map_or(IfMatch::Unknown, IfMatch::Version)
        })
        .collect();
    Ok(Some(tags))
}

/// The version a `PUT` may write at (`None`: any), or `412` when the request is stale
/// already: its version is not the queue's, or the queue does not exist.
pub(crate) fn expected_version(
    asked: Option<Vec<IfMatch>>,
    existing: Option<&QueueConfig>,
) -> Result<Option<u64>, ApiError> {
    let Some(tags) = asked else {
        return Ok(None);
    };
    let Some(cfg) = existing else {
        return Err(stale(0));
    };
    let now_at = cfg.settings_version;
    if tags.contains(&IfMatch::Any) {
        // `*` asks only that the queue exists (it does): any version is written.
        return Ok(None);
    }
    if tags.contains(&IfMatch::Version(now_at)) {
        Ok(Some(now_at))
    } else {
        Err(stale(now_at))
    }
}

/// Claims version `v` for a `PUT` that changes more than the settings (its schedule, a
/// close), before it changes them: the version moves to `v + 1` at once, so a concurrent
/// editor of `v` is refused before touching anything. Returns the version the settings' write
/// must then find (it raises it once more, so anyone who read the settings in between holds
/// a stale version).
pub(crate) async fn claim(store: &Store, q: &QueueId, v: u64) -> Result<u64, ApiError> {
    match store
        .claim_settings_version(q, v)
        .await
        .map_err(redis_down)?
    {
        VersionedWrite::Written(now) => Ok(now),
        VersionedWrite::Stale(now) => Err(stale(now)),
    }
}

/// `412`: the settings changed since the editor read them.
pub(crate) fn stale(now_at: u64) -> ApiError {
    ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        format!(
            "the queue's settings changed since you read them (they are at version {now_at}, \
             ETag \"{now_at}\"): read them again, then send your change with the new If-Match"
        ),
    )
}

/// The `ETag` header of a queue's settings.
pub(crate) fn etag(cfg: &QueueConfig) -> [(header::HeaderName, HeaderValue); 1] {
    let tag = format!("\"{}\"", cfg.settings_version);
    // Digits in quotes: always a valid header value.
    let value = HeaderValue::from_str(&tag).unwrap_or(HeaderValue::from_static("\"0\""));
    [(header::ETAG, value)]
}

/// `409` when the change from `before` to `after` needs `"confirm": true`, naming why.
/// Exactly these do:
/// * `grace_seconds` set below [`CONFIRM_GRACE_BELOW`] (a change, or a new queue's): a brief
///   disconnect (a phone suspending its tab) then costs a place;
/// * `max_entrants` lowered below the entrants the pre-queue holds now: nobody loses a place,
///   but every later join is refused until the pre-queue is that small;
/// * an `opens_at` that discards a draw (`discards_draw`, see `sale::discards_draw`).
pub(crate) async fn unconfirmed(
    store: &Store,
    q: &QueueId,
    before: Option<&QueueConfig>,
    after: &QueueConfig,
    discards_draw: bool,
) -> Result<(), ApiError> {
    let conflict = |reason: String| {
        Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("{reason}; send the change again with \"confirm\": true if you mean it"),
        ))
    };
    let grace_before = before.map(|b| b.grace_seconds);
    if after.grace_seconds < CONFIRM_GRACE_BELOW && grace_before != Some(after.grace_seconds) {
        return conflict(format!(
            "grace_seconds {} is below {CONFIRM_GRACE_BELOW}: a browser whose connection drops \
             for longer (a phone suspending the tab) loses its place",
            after.grace_seconds
        ));
    }
    let cap_before = before.and_then(|b| b.max_entrants);
    if let Some(cap) = after.max_entrants.filter(|&c| Some(c) != cap_before) {
        let entrants = store.pre_queue_len(q).await.map_err(redis_down)?;
        if cap < entrants {
            return conflict(format!(
                "max_entrants {cap} is below the {entrants} entrants in the pre-queue: every \
                 join is refused (pre_queue_full) until the sale opens"
            ));
        }
    }
    if discards_draw {
        return conflict(
            "this opens_at change discards the draw that ran: its public record, and the map \
             from its entrants' pre-queue tickets to their places in line (a browser resuming \
             with one loses its place)"
                .to_owned(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(v: &str) -> Result<Option<Vec<IfMatch>>, ApiError> {
        let mut h = HeaderMap::new();
        h.insert(
            header::IF_MATCH,
            v.parse().map_err(|_| ApiError::bad_request("bad"))?,
        );
        if_match(&h)
    }

    #[test]
    fn if_match_compares_strongly_and_star_takes_any_version() -> Result<(), ApiError> {
        assert_eq!(
            asked(r#""3", W/"4", "x", *"#)?,
            Some(vec![
                IfMatch::Version(3),
                IfMatch::Unknown,
                IfMatch::Unknown,
                IfMatch::Any
            ])
        );
        let cfg = QueueConfig {
            settings_version: 4,
            ..QueueConfig::default()
        };
        assert_eq!(expected_version(asked(r#""4""#)?, Some(&cfg))?, Some(4));
        assert!(
            expected_version(asked(r#"W/"4""#)?, Some(&cfg)).is_err(),
            "a weak tag never matches"
        );
        assert_eq!(expected_version(asked("*")?, Some(&cfg))?, None);
        assert!(expected_version(asked("*")?, None).is_err());
        Ok(())
    }
}
