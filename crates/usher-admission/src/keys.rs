//! The dispatcher's public keys (its JWKS), as a booking service keeps them.
//!
//! The JWKS is fetched on first use, again whenever a token names a `kid` the cached set
//! lacks (a key rotation needs no restart here), and again once the cached set is older than
//! `max_age` (a key removed from the set stops being accepted within `max_age`). Rules:
//!
//! * **One fetch at a time** (single flight): requests that need a fetch wait for the one under
//!   way, and a fetch that started after a request arrived answers it too, so a burst of new
//!   tokens costs one fetch.
//! * **At most one fetch per `min_gap`, whatever the `kid`**: a request with an unknown kid
//!   within `min_gap` of the last fetch waits for the next one, due `min_gap` after it (and
//!   shared by every request waiting then), so tokens with random kids cannot keep a fetch
//!   running back to back (a per-kid memory could: every kid is new), and a token of a key
//!   published a moment ago is accepted after at most `min_gap`, never refused for it.
//!   (`session_trust::random_unknown_kids_cost_at_most_one_jwks_fetch_per_gap`)
//! * **A token whose `kid` is in a fresh set never waits**: the cache is read without waiting
//!   for any fetch in progress. Once the set is older than `max_age`, the next request waits
//!   for a fetch (one per `max_age`), and while the keys cannot be fetched every token is
//!   refused as unjudgeable ([`KeyError::Stale`]): fail closed.
//!   (`session_trust::a_key_removed_from_the_jwks_is_refused_after_max_age`)

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::DecodingKey;

/// The default least time between two JWKS fetches ([`crate::Builder::jwks_refresh`]).
pub const DEFAULT_JWKS_MIN_GAP: Duration = Duration::from_secs(3);
/// The default longest time a fetched JWKS is trusted ([`crate::Builder::jwks_refresh`]).
pub const DEFAULT_JWKS_MAX_AGE: Duration = Duration::from_secs(300);

/// Why no key could be found for a `kid`.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No published key has this `kid` (after a fetch that started once the request arrived).
    #[error("token signed by an unknown key")]
    Unknown,
    /// The JWKS could not be fetched (unreachable, timed out, not a JWKS).
    #[error("cannot fetch the dispatcher's keys: {0}")]
    Unavailable(#[source] reqwest::Error),
    /// The cached JWKS is older than its maximum age (or was never fetched) and the fetch this
    /// request waited for failed: its keys are no longer trusted.
    #[error("the dispatcher's keys are out of date and cannot be fetched yet")]
    Stale,
    /// The published key cannot be used to verify.
    #[error("unusable key: {0}")]
    Unusable(#[source] jsonwebtoken::errors::Error),
}

/// How often the key set is fetched: at most once per `min_gap`, and at least once per
/// `max_age` while tokens are verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Refresh {
    pub(crate) min_gap: Duration,
    pub(crate) max_age: Duration,
}

impl Default for Refresh {
    fn default() -> Self {
        Self {
            min_gap: DEFAULT_JWKS_MIN_GAP,
            max_age: DEFAULT_JWKS_MAX_AGE,
        }
    }
}

/// A fetched key set and when its fetch started.
struct Fetched {
    set: Arc<JwkSet>,
    at: Instant,
}

/// The JWKS cache (see the module docs).
pub(crate) struct Keys {
    pub(crate) url: String,
    http: reqwest::Client,
    refresh: Refresh,
    /// The last fetched set (none before the first fetch). Never locked across an `.await`.
    cached: RwLock<Option<Fetched>>,
    /// Single flight: held while fetching; holds when the last fetch, failed or not, started.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl Keys {
    pub(crate) fn new(url: String, http: reqwest::Client, refresh: Refresh) -> Self {
        Self {
            url,
            http,
            refresh,
            cached: RwLock::new(None),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    /// The decoding key for `kid`.
    pub(crate) async fn key(&self, kid: &str) -> Result<DecodingKey, KeyError> {
        let arrived = Instant::now();
        if let Some((true, Some(key))) = self.cached(kid, arrived) {
            return key;
        }
        let mut last_start = self.fetching.lock().await;
        let now = Instant::now();
        let found = self.cached(kid, now);
        if let Some((true, Some(key))) = found {
            return key;
        }
        let fresh = matches!(found, Some((true, _)));
        // A fetch that started after this request arrived has answered it (a failed one
        // too: this request does not start another).
        if last_start.is_some_and(|t| t >= arrived) {
            return Err(if fresh {
                KeyError::Unknown
            } else {
                KeyError::Stale
            });
        }
        // The next fetch is due `min_gap` after the last one. Waiting here, holding the single
        // flight, makes every request that arrives meanwhile wait behind this one and be
        // answered by the same fetch.
        if let Some(due) = last_start.map(|t| t + self.refresh.min_gap) {
            if due > now {
                tokio::time::sleep_until(due.into()).await;
            }
        }
        let now = Instant::now();
        *last_start = Some(now);
        let set = self.fetch().await.map_err(|e| {
            tracing::warn!(error = %e, url = %self.url, "cannot fetch the JWKS");
            KeyError::Unavailable(e)
        })?;
        let key = set
            .find(kid)
            .map(|jwk| DecodingKey::from_jwk(jwk).map_err(KeyError::Unusable));
        *self.cached.write().unwrap_or_else(PoisonError::into_inner) = Some(Fetched {
            set: Arc::new(set),
            at: now,
        });
        drop(last_start);
        key.unwrap_or(Err(KeyError::Unknown))
    }

    /// `(fresh, key)` from the cached set at `now`: `None` before the first fetch.
    #[allow(clippy::type_complexity)]
    fn cached(
        &self,
        kid: &str,
        now: Instant,
    ) -> Option<(bool, Option<Result<DecodingKey, KeyError>>)> {
        let cached = self.cached.read().unwrap_or_else(PoisonError::into_inner);
        let c = cached.as_ref()?;
        let fresh = now.saturating_duration_since(c.at) < self.refresh.max_age;
        let key = c
            .set
            .find(kid)
            .map(|jwk| DecodingKey::from_jwk(jwk).map_err(KeyError::Unusable));
        Some((fresh, key))
    }

    async fn fetch(&self) -> Result<JwkSet, reqwest::Error> {
        self.http
            .get(&self.url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use axum::extract::State;
    use axum::routing::get;
    use axum::{Json, Router};
    use serde_json::{json, Value};

    use super::*;

    /// A JWKS endpoint on a real socket that counts its fetches, serves what the test puts in
    /// `kids`, and answers only while the test does not hold `gate` for writing.
    #[derive(Clone, Default)]
    struct Jwks {
        fetches: Arc<AtomicUsize>,
        kids: Arc<Mutex<Vec<&'static str>>>,
        gate: Arc<tokio::sync::RwLock<()>>,
    }

    async fn serve_jwks(State(j): State<Jwks>) -> Json<Value> {
        j.fetches.fetch_add(1, Ordering::SeqCst);
        let _open = j.gate.read().await;
        let kids = j
            .kids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // Any 32 bytes make an Ed25519 JWK a verifier can load.
        let keys: Vec<Value> = kids
            .iter()
            .map(|kid| {
                json!({"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": kid,
                              "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"})
            })
            .collect();
        Json(json!({ "keys": keys }))
    }

    async fn start(kids: &[&'static str], refresh: Refresh) -> anyhow::Result<(Jwks, Arc<Keys>)> {
        let j = Jwks::default();
        j.kids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(kids);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/jwks", listener.local_addr()?);
        let app = Router::new()
            .route("/jwks", get(serve_jwks))
            .with_state(j.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let keys = Keys::new(url, reqwest::Client::new(), refresh);
        Ok((j, Arc::new(keys)))
    }

    fn publish(j: &Jwks, kid: &'static str) {
        j.kids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(kid);
    }

    #[tokio::test]
    async fn unknown_kids_fetch_at_most_once_per_gap_whatever_the_kid() -> anyhow::Result<()> {
        let gap = Duration::from_millis(300);
        let refresh = Refresh {
            min_gap: gap,
            max_age: Duration::from_secs(60),
        };
        // Before the first fetch: the gaps below count from it, not from a moment after it
        // (measured from after it, three gaps once read 899.6 ms).
        let began = Instant::now();
        let (j, keys) = start(&["a"], refresh).await?;
        let fetches = || j.fetches.load(Ordering::SeqCst);
        assert!(keys.key("a").await.is_ok());
        assert!(keys.key("a").await.is_ok());
        assert_eq!(fetches(), 1, "a known kid is cached");

        // One after the other, each unknown kid waits for the next fetch, a gap after the
        // last: one fetch per gap, not one per kid.
        for kid in ["z", "y", "x"] {
            assert!(matches!(keys.key(kid).await, Err(KeyError::Unknown)));
        }
        assert_eq!(fetches(), 4);
        assert!(began.elapsed() >= gap * 3, "{:?}", began.elapsed());

        // At once, 20 different kids share one fetch.
        let burst: Vec<_> = (0..20)
            .map(|i| {
                let keys = keys.clone();
                tokio::spawn(async move { keys.key(&format!("r{i}")).await.is_err() })
            })
            .collect();
        for b in burst {
            assert!(b.await?);
        }
        assert_eq!(fetches(), 5, "one fetch for 20 kids at once");

        // A kid published now is accepted, after at most a gap: never refused for the gap.
        publish(&j, "z");
        assert!(keys.key("z").await.is_ok());
        assert_eq!(fetches(), 6);
        Ok(())
    }

    #[tokio::test]
    async fn a_removed_kid_is_refused_once_the_set_is_older_than_max_age() -> anyhow::Result<()> {
        let refresh = Refresh {
            min_gap: Duration::from_millis(50),
            max_age: Duration::from_millis(400),
        };
        let (j, keys) = start(&["a"], refresh).await?;
        // Measured before the fetch starts: the set is fresh until max_age after it.
        let removed = Instant::now();
        assert!(keys.key("a").await.is_ok());
        j.kids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        let deadline = removed + Duration::from_secs(5);
        let refused = loop {
            match keys.key("a").await {
                Ok(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                other => break other,
            }
        };
        assert!(matches!(refused, Err(KeyError::Unknown)));
        assert!(
            removed.elapsed() >= Duration::from_millis(400),
            "refused before max_age"
        );
        // Refused within max_age (plus one poll and the fetch).
        assert!(removed.elapsed() < Duration::from_millis(400 + 300));
        assert_eq!(j.fetches.load(Ordering::SeqCst), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_fetch_under_way_blocks_no_known_kid_and_serves_every_waiter() -> anyhow::Result<()> {
        // No gap: this test is about the single flight.
        let refresh = Refresh {
            min_gap: Duration::ZERO,
            max_age: Duration::from_secs(60),
        };
        let (j, keys) = start(&["a"], refresh).await?;
        assert!(keys.key("a").await.is_ok());
        publish(&j, "new");
        let gate = j.gate.write().await;
        let first = tokio::spawn({
            let keys = keys.clone();
            async move { keys.key("new").await.is_ok() }
        });
        while j.fetches.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let waiters: Vec<_> = (0..10)
            .map(|_| {
                let keys = keys.clone();
                tokio::spawn(async move { keys.key("new").await.is_ok() })
            })
            .collect();
        // Let the waiters reach the single flight (on this one-thread runtime they run now).
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The fetch for "new" is stuck; "a" is answered anyway (a hang fails here).
        let known = tokio::time::timeout(Duration::from_secs(10), keys.key("a")).await;
        assert!(known.is_ok_and(|k| k.is_ok()));
        drop(gate);
        assert!(first.await?);
        for w in waiters {
            assert!(
                w.await?,
                "a waiter got the key from the fetch it waited for"
            );
        }
        assert_eq!(
            j.fetches.load(Ordering::SeqCst),
            2,
            "one fetch for the burst"
        );
        Ok(())
    }
}
