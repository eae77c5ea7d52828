//! A demo booking service: the other side of usher.
//!
//! `POST /api/bookings` with `Authorization: Bearer <entry token>` and a JSON body naming the
//! `queue` books a (pretend) seat — but only when the token verifies against the dispatcher's
//! JWKS (`alg: EdDSA`, by `kid`) with `aud` = that queue and is not expired. It uses a stock JWT
//! library (`jsonwebtoken`), as a real booking service in any language would; it holds no key
//! that could mint tokens. [`keys`] keeps the JWKS: refetched when a token names an unknown
//! `kid`, so key rotation needs no restart.
//!
//! A token verified offline is only "a genuine usher token within its cap": before booking it
//! asks the dispatcher whether the session is still active (`GET /api/session`, `403` when it
//! has ended), and after booking it releases the session (`DELETE /api/session`), so the same
//! token cannot book twice and the slot frees at once.

pub mod keys;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use usher_http::ApiError;
use usher_runtime::LogFormat;

pub use keys::Keys;

/// usher demo booking service — accepts bookings only with a valid entry token.
///
/// Verifies `Authorization: Bearer <entry token>` against the dispatcher's JWKS, with `aud`
/// equal to the `queue` named in the request body.
#[derive(Debug, Clone, Parser)]
#[command(name = "usher-booking-demo", version, about, long_about)]
pub struct Config {
    /// Address the HTTP server listens on.
    #[arg(long, env = "USHER_LISTEN", default_value = "0.0.0.0:8082")]
    pub listen: SocketAddr,

    /// Where the dispatcher publishes its public keys. Fetched on the first booking and again
    /// whenever a token names a key id not seen yet (one fetch at a time; a key id still
    /// unknown after a fetch is refused without fetching again for a few seconds).
    #[arg(
        long,
        env = "USHER_JWKS_URL",
        default_value = "http://127.0.0.1:8081/.well-known/jwks.json"
    )]
    pub jwks_url: String,

    /// The dispatcher's base URL, for the session API: before a booking the service asks
    /// whether the entry token's session is still active (`GET /api/session`), and after it
    /// releases the session (`DELETE /api/session`).
    #[arg(
        long,
        env = "USHER_DISPATCHER_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub dispatcher_url: String,

    /// Deadlines and the connection cap for slow or idle clients.
    #[command(flatten)]
    pub serve: usher_http::ServeLimits,

    /// Log format: `text` or `json`. Filter with `RUST_LOG` (default `info`).
    #[arg(long, env = "USHER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
    #[error("http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Entry-token claims as the booking service reads them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryClaims {
    pub sub: String,
    pub aud: String,
    pub iat: u64,
    pub exp: u64,
    pub jti: String,
}

#[derive(Debug, Deserialize)]
pub struct BookingRequest {
    pub queue: String,
    #[serde(default)]
    pub seat: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Booking {
    pub booking_id: String,
    pub queue: String,
    pub place: String,
    pub session: String,
    pub seat: Option<String>,
}

/// Verifies an entry token for `queue`.
pub async fn verify(keys: &Keys, token: &str, queue: &str) -> Result<EntryClaims, ApiError> {
    let header = jsonwebtoken::decode_header(token)
        .map_err(|e| ApiError::unauthorized(format!("malformed token: {e}")))?;
    if header.alg != Algorithm::EdDSA {
        return Err(ApiError::unauthorized("token must be signed with EdDSA"));
    }
    let kid = header
        .kid
        .ok_or_else(|| ApiError::unauthorized("token has no kid"))?;
    let key = keys.key(&kid).await?;
    let mut v = Validation::new(Algorithm::EdDSA);
    v.set_audience(&[queue]);
    v.set_required_spec_claims(&["exp", "aud", "sub"]);
    v.leeway = 5;
    jsonwebtoken::decode::<EntryClaims>(token, &key, &v)
        .map(|d| d.claims)
        .map_err(|e| ApiError::unauthorized(format!("invalid entry token: {e}")))
}

/// The dispatcher's session API, called with the entry token itself.
pub struct Sessions {
    base: String,
    http: reqwest::Client,
}

impl Sessions {
    pub fn new(base: &str) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            base: format!("{}/api/session", base.trim_end_matches('/')),
            http,
        })
    }

    /// `Ok` while the token's session is active; `403` once it has ended.
    async fn check(&self, token: &str) -> Result<(), ApiError> {
        let r = self
            .http
            .get(&self.base)
            .bearer_auth(token)
            .send()
            .await
            .map_err(unreachable)?;
        match r.status() {
            StatusCode::OK => Ok(()),
            StatusCode::GONE => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "the entry token's session has ended",
            )),
            StatusCode::UNAUTHORIZED => Err(ApiError::unauthorized(
                "the dispatcher does not know this entry token",
            )),
            s => {
                tracing::warn!(status = %s, "the dispatcher's session API failed");
                Err(ApiError::unavailable("cannot check the session"))
            }
        }
    }

    /// Ends the token's session (idempotent on the dispatcher's side).
    async fn release(&self, token: &str) -> Result<(), ApiError> {
        let r = self
            .http
            .delete(&self.base)
            .bearer_auth(token)
            .send()
            .await
            .map_err(unreachable)?;
        if r.status() == StatusCode::NO_CONTENT {
            Ok(())
        } else {
            tracing::warn!(status = %r.status(), "could not release a session");
            Err(ApiError::unavailable("cannot release the session"))
        }
    }
}

fn unreachable(e: reqwest::Error) -> ApiError {
    tracing::warn!(error = %e, "the dispatcher's session API is unreachable");
    ApiError::unavailable("cannot reach the dispatcher")
}

/// What the routes share.
pub struct App {
    pub keys: Keys,
    pub sessions: Sessions,
}

async fn book(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<BookingRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Booking>), ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| ApiError::unauthorized("Authorization: Bearer <entry token> required"))?;
    let claims = verify(&app.keys, token, &req.queue).await?;
    app.sessions.check(token).await?;
    let booking = Booking {
        booking_id: format!("bk-{:016x}", rand::random::<u64>()),
        queue: req.queue,
        place: claims.sub,
        session: claims.jti,
        seat: req.seat,
    };
    // One booking per session: release it, so the token cannot book again and the slot frees.
    app.sessions.release(token).await?;
    tracing::info!(queue = %booking.queue, place = %booking.place, "booked");
    Ok((StatusCode::CREATED, Json(booking)))
}

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/api/bookings", post(book))
        .merge(usher_http::health_routes(|_verbose| async {
            usher_http::Readiness {
                ready: true,
                details: serde_json::Value::Null,
            }
        }))
        .with_state(app)
}

/// Runs the demo booking service on `listener` until `shutdown` resolves.
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let app = Arc::new(App {
        keys: Keys::new(cfg.jwks_url.clone())?,
        sessions: Sessions::new(&cfg.dispatcher_url)?,
    });
    tracing::info!(listen = %listener.local_addr()?, jwks = %cfg.jwks_url, dispatcher = %cfg.dispatcher_url, "demo booking service running");
    usher_http::serve(listener, router(app), cfg.serve, shutdown).await?;
    Ok(())
}
