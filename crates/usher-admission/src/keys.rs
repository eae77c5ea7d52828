//! The dispatcher's public keys (its JWKS), as a booking service keeps them.
//!
//! The JWKS is fetched on first use and again whenever a token names a `kid` the cached set
//! lacks, so a key rotation needs no restart here. Rules:
//!
//! * A token whose `kid` is cached never waits: the cache is read without waiting for any
//!   fetch in progress.
//! * One fetch at a time (single flight): requests with unknown kids wait for the fetch under
//!   way, and every fetch that *started* after a request arrived answers it too, so a burst of
//!   new tokens costs one fetch, not one each (a burst of one made-up kid costs exactly one).
//! * A kid still unknown after such a fetch is refused, and refused again without a fetch for
//!   [`NEGATIVE_TTL`] (a few seconds): tokens with made-up kids cannot make the service hammer
//!   the dispatcher, and a kid published a moment later is accepted within seconds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::DecodingKey;

/// How long a kid found unknown after a fetch is refused without fetching again.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(3);

/// At most this many unknown kids are remembered; past it, expired ones are forgotten first
/// and, if that is not enough, all of them.
const NEGATIVE_MAX: usize = 10_000;

/// Why no key could be found for a `kid`.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// No published key has this `kid` (after a fetch, or within [`NEGATIVE_TTL`] of one).
    #[error("token signed by an unknown key")]
    Unknown,
    /// The JWKS could not be fetched (unreachable, timed out, not a JWKS).
    #[error("cannot fetch the dispatcher's keys: {0}")]
    Unavailable(#[source] reqwest::Error),
    /// The published key cannot be used to verify.
    #[error("unusable key: {0}")]
    Unusable(#[source] jsonwebtoken::errors::Error),
}

/// The JWKS cache (see the module docs).
pub(crate) struct Keys {
    pub(crate) url: String,
    http: reqwest::Client,
    /// The last fetched set. Never locked across an `.await`.
    cached: RwLock<Arc<JwkSet>>,
    /// Kids found unknown, and when.
    unknown: Mutex<HashMap<String, Instant>>,
    /// Single flight: held while fetching; holds when the last fetch started.
    fetching: tokio::sync::Mutex<Option<Instant>>,
}

impl Keys {
    pub(crate) fn new(url: String, http: reqwest::Client) -> Self {
        Self {
            url,
            http,
            cached: RwLock::new(Arc::new(JwkSet { keys: Vec::new() })),
            unknown: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(None),
        }
    }

    /// The decoding key for `kid`.
    pub(crate) async fn key(&self, kid: &str) -> Result<DecodingKey, KeyError> {
        let arrived = Instant::now();
        if let Some(key) = self.cached(kid) {
            return key;
        }
        if self.recently_unknown(kid, arrived) {
            return Err(KeyError::Unknown);
        }
        let mut last_start = self.fetching.lock().await;
        // The fetch this request waited for may have brought the key, or found it unknown
        // (then it is refused like any kid in the negative cache).
        if let Some(key) = self.cached(kid) {
            return key;
        }
        if self.recently_unknown(kid, Instant::now()) {
            return Err(KeyError::Unknown);
        }
        // A fetch that started after this request arrived has already answered it.
        // (Only a fetch that succeeded counts: after a failure, the next waiter tries again.)
        if !last_start.is_some_and(|t| t >= arrived) {
            let started = Instant::now();
            let set = self.fetch().await.map_err(|e| {
                tracing::warn!(error = %e, url = %self.url, "cannot fetch the JWKS");
                KeyError::Unavailable(e)
            })?;
            *self.cached.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(set);
            *last_start = Some(started);
        }
        let found = self.cached(kid);
        if found.is_none() {
            // Remembered before the single flight is released, so every request for this kid
            // that waited behind the fetch is answered by it instead of fetching again.
            self.remember_unknown(kid);
        }
        drop(last_start);
        found.unwrap_or(Err(KeyError::Unknown))
    }

    fn cached(&self, kid: &str) -> Option<Result<DecodingKey, KeyError>> {
        let set = self
            .cached
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        set.find(kid)
            .map(|jwk| DecodingKey::from_jwk(jwk).map_err(KeyError::Unusable))
    }

    fn recently_unknown(&self, kid: &str, now: Instant) -> bool {
        let unknown = self.unknown.lock().unwrap_or_else(PoisonError::into_inner);
        unknown
            .get(kid)
            .is_some_and(|t| now.saturating_duration_since(*t) < NEGATIVE_TTL)
    }

    fn remember_unknown(&self, kid: &str) {
        let mut unknown = self.unknown.lock().unwrap_or_else(PoisonError::into_inner);
        if unknown.len() >= NEGATIVE_MAX {
            unknown.retain(|_, t| t.elapsed() < NEGATIVE_TTL);
            if unknown.len() >= NEGATIVE_MAX {
                unknown.clear();
            }
        }
        unknown.insert(kid.to_owned(), Instant::now());
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

    async fn start(kids: &[&'static str]) -> anyhow::Result<(Jwks, Arc<Keys>)> {
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
        Ok((j, Arc::new(Keys::new(url, reqwest::Client::new()))))
    }

    fn publish(j: &Jwks, kid: &'static str) {
        j.kids
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(kid);
    }

    #[tokio::test]
    async fn unknown_kids_are_fetched_once_then_refused_for_a_few_seconds() -> anyhow::Result<()> {
        let (j, keys) = start(&["a"]).await?;
        assert!(keys.key("a").await.is_ok());
        assert!(keys.key("a").await.is_ok());
        assert_eq!(j.fetches.load(Ordering::SeqCst), 1, "a known kid is cached");

        let err = keys.key("z").await.err();
        assert!(matches!(err, Some(KeyError::Unknown)));
        assert_eq!(
            j.fetches.load(Ordering::SeqCst),
            2,
            "an unknown kid fetches"
        );
        publish(&j, "z");
        assert!(
            keys.key("z").await.is_err(),
            "refused again without a fetch"
        );
        assert_eq!(j.fetches.load(Ordering::SeqCst), 2);

        // A new kid is not held back by another kid's negative entry.
        publish(&j, "b");
        assert!(keys.key("b").await.is_ok());
        assert_eq!(j.fetches.load(Ordering::SeqCst), 3);
        // That fetch brought "z" too.
        assert!(keys.key("z").await.is_ok());

        publish(&j, "y");
        keys.remember_unknown("y");
        tokio::time::sleep(NEGATIVE_TTL + Duration::from_millis(200)).await;
        assert!(keys.key("y").await.is_ok(), "the negative entry expired");
        assert_eq!(j.fetches.load(Ordering::SeqCst), 4);
        Ok(())
    }

    #[tokio::test]
    async fn a_fetch_under_way_blocks_no_known_kid_and_serves_every_waiter() -> anyhow::Result<()> {
        let (j, keys) = start(&["a"]).await?;
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
