//! A JWKS endpoint on a real socket in front of the dispatcher's, for tests of a booking
//! service's key cache (`usher-admission`): it counts the fetches it takes, and can be told to
//! misbehave the two ways a key set's host does — never answer, or answer an empty set.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::stack::{Server, Stack};

/// The relay's state, shared with its handler. Serves `GET /jwks` on the [`Server`] that
/// [`JwksRelay::start`] returns.
#[derive(Clone)]
pub struct JwksRelay {
    fetches: Arc<AtomicUsize>,
    /// While set, a fetch is taken and never answered (a black hole).
    pub hang: Arc<AtomicBool>,
    /// While set, a fetch is answered with an empty key set (every key removed).
    pub empty: Arc<AtomicBool>,
    upstream: String,
    http: reqwest::Client,
}

impl JwksRelay {
    /// Starts the relay in front of `stack`'s dispatcher.
    pub async fn start(stack: &Stack) -> anyhow::Result<(Self, Server)> {
        async fn serve(State(r): State<JwksRelay>) -> Result<Json<Value>, StatusCode> {
            r.fetches.fetch_add(1, Ordering::SeqCst);
            if r.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if r.empty.load(Ordering::SeqCst) {
                return Ok(Json(json!({"keys": []})));
            }
            match r.http.get(&r.upstream).send().await {
                Ok(resp) => resp
                    .json()
                    .await
                    .map(Json)
                    .map_err(|_| StatusCode::BAD_GATEWAY),
                Err(_) => Err(StatusCode::BAD_GATEWAY),
            }
        }
        let relay = Self {
            fetches: Arc::default(),
            hang: Arc::default(),
            empty: Arc::default(),
            upstream: format!("{}/.well-known/jwks.json", stack.dispatcher.url()),
            http: reqwest::Client::new(),
        };
        let app = Router::new()
            .route("/jwks", get(serve))
            .with_state(relay.clone());
        let server = Server::spawn(|l, rx| async move {
            axum::serve(l, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
        })
        .await?;
        Ok((relay, server))
    }

    /// How many fetches the relay has taken.
    pub fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}
