//! A demo booking service: the other side of usher, built on `usher-admission`.
//!
//! `POST /api/bookings` with `Authorization: Bearer <entry token>` and a JSON body naming the
//! `queue` books a (pretend) seat — but only when the token verifies offline against the
//! dispatcher's JWKS with `aud` = that queue ([`Admission::verify_for`]) and this request is
//! the one that consumed its session ([`Admission::consume_for`]): the dispatcher ends the
//! session and tells exactly one of any number of concurrent bookings that it did, so one
//! admission books once (every other try gets `403`) and the slot frees at once. It holds no
//! key that could mint tokens. A token bound to the browser's key (`cnf.jkt`) books only with
//! the browser's proof of that key in the `DPoP` header: checked here
//! ([`Admission::verify_bound`]) and passed on to the dispatcher, which checks it again and
//! takes it once ([`Admission::consume_bound`]).
//!
//! `GET /api/seats?queue=Q` shows the guard for whole routes: [`Admission::layer`], for the
//! queue the request names, touching the session on each call so a browsing user's sliding
//! session stays alive. A token of another queue is refused (`403`) on every route.
//!
//! With `USHER_LOAD_BACKEND` set it reports its own request rate as that backend's load
//! ([`load`]).
//!
//! `POST /entry` is where usher's waiting-room page sends an admitted browser (the queue's
//! `booking_url`): an auto-submitted form with the fields `token`, `queue` and `expires_at`.
//! It verifies the token the same way and answers a small HTML page naming the place. A
//! token bound to the browser's key needs the form's `proof` too, each proof taken once
//! ([`replay`]) and passed on to the dispatcher with the session check
//! ([`Admission::check_bound`]). The page (phone-sized) has a "Book" button: `POST /book`, a
//! plain form that books like `POST /api/bookings` and shows the booking ([`pages`]).

pub mod load;
mod pages;
pub mod replay;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::{FormRejection, JsonRejection};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Form, Json, Router};
use clap::Parser;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use usher_admission::{
    Admission, BoundError, Claims, Consumption, Proof, SessionStatus, VerifyError,
};
use usher_http::ApiError;
use usher_runtime::LogFormat;

use load::RequestCounter;
use replay::{Spend, SpentProofs};

/// usher demo booking service — accepts bookings only with a valid entry token.
///
/// Verifies `Authorization: Bearer <entry token>` against the dispatcher's JWKS, with `aud`
/// equal to the `queue` named in the request body, and asks the dispatcher whether the
/// token's session is still active.
#[derive(Debug, Clone, Parser)]
#[command(name = "usher-booking-demo", version, about, long_about)]
pub struct Config {
    /// Address the HTTP server listens on.
    #[arg(long, env = "USHER_LISTEN", default_value = "0.0.0.0:8082")]
    pub listen: SocketAddr,

    /// Where the dispatcher publishes its public keys (`http://` or `https://`). Fetched on
    /// the first booking, again when a token names a key id not seen yet, and again once the
    /// keys are older than `--jwks-max-age-seconds` (one fetch at a time, at most one per
    /// `--jwks-min-gap-seconds` whatever the key ids).
    #[arg(
        long,
        env = "USHER_JWKS_URL",
        default_value = "http://127.0.0.1:8081/.well-known/jwks.json"
    )]
    pub jwks_url: String,

    /// The dispatcher's base URL, for the session API: a booking consumes the entry token's
    /// session (`POST /api/session/consume?queue=`) and goes ahead only if this request ended
    /// it; guarded pages ask whether it is still active (`POST /api/session/touch?queue=`).
    #[arg(
        long,
        env = "USHER_DISPATCHER_URL",
        default_value = "http://127.0.0.1:8081"
    )]
    pub dispatcher_url: String,

    /// Report this service's request rate (requests per second) as the load of this named
    /// backend (`PUT /api/backends/{name}/load` on the dispatcher), for queues whose adaptive
    /// rate follows it. Unset: no reports. Needs `--service-token`.
    #[arg(long, env = "USHER_LOAD_BACKEND", requires = "service_token")]
    pub load_backend: Option<String>,

    /// The dispatcher's service token (its `USHER_SERVICE_TOKEN`), sent with load reports.
    #[arg(long, env = "USHER_SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: Option<String>,

    /// Seconds between load reports. Keep it well under the queue's `stale_after_seconds`, or
    /// the dispatcher reads the backend as down between reports.
    #[arg(
        long,
        env = "USHER_LOAD_REPORT_SECONDS",
        default_value_t = 2,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub load_report_seconds: u64,

    /// The least time between two fetches of the keys, in seconds: a request with a key id
    /// not seen yet waits for the next fetch, due this long after the last one, so tokens with
    /// made-up key ids cannot keep the service fetching; a key published by a rotation is
    /// accepted after at most this long.
    #[arg(
        long,
        env = "USHER_JWKS_MIN_GAP_SECONDS",
        default_value_t = 3,
        value_parser = clap::value_parser!(u64).range(0..=3600)
    )]
    pub jwks_min_gap_seconds: u64,

    /// The longest time fetched keys are trusted, in seconds: a key the dispatcher removed
    /// from its key set stops being accepted within it. At least `--jwks-min-gap-seconds`.
    #[arg(
        long,
        env = "USHER_JWKS_MAX_AGE_SECONDS",
        default_value_t = 300,
        value_parser = clap::value_parser!(u64).range(1..=86_400)
    )]
    pub jwks_max_age_seconds: u64,

    /// The waiting-room page this demo shop's landing page (`GET /`) links to, e.g.
    /// `http://127.0.0.1:8080/q/demo`: a visitor goes from the shop to the line, and on
    /// admission back to `POST /entry` and its "Book" button. Unset: the landing page says how
    /// to set it. Must start with `http://` or `https://`.
    #[arg(long, env = "USHER_QUEUE_PAGE_URL", value_parser = pages::page_url)]
    pub queue_page_url: Option<String>,

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
    #[error("usher-admission set-up: {0}")]
    Admission(#[from] usher_admission::BuildError),
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

/// What the routes share.
pub struct App {
    pub admission: Admission,
    /// `--queue-page-url`: where the landing page sends visitors.
    pub queue_page_url: Option<String>,
    pub requests: Arc<RequestCounter>,
    /// The booking form's proofs taken already (`POST /entry`): one proof, one entry.
    pub spent_proofs: SpentProofs,
}

/// The most booking-form proofs the demo remembers at once (about 100 bytes each).
pub const SPENT_PROOFS_MAX: usize = 100_000;

/// `401` for a token that does not verify, `503` when the keys cannot be fetched.
fn refused(e: VerifyError) -> ApiError {
    if e.is_unavailable() {
        ApiError::unavailable("cannot fetch the dispatcher's keys")
    } else {
        ApiError::unauthorized(format!("invalid entry token: {e}"))
    }
}

/// [`refused`] for the token, `403` for its proof of the browser's key.
fn bound_refused(e: BoundError) -> ApiError {
    match e {
        BoundError::Token(e) => refused(e),
        BoundError::Proof(e) => ApiError::new(
            StatusCode::FORBIDDEN,
            format!("no proof of the browser key: {e}"),
        ),
    }
}

fn unreachable(e: usher_admission::Error) -> ApiError {
    tracing::warn!(error = %e, "the dispatcher's session API failed");
    ApiError::unavailable("cannot reach the dispatcher")
}

fn session_ended() -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "the entry token's session has ended")
}

fn other_queue() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "the entry token admits to another queue",
    )
}

fn unknown_token() -> ApiError {
    ApiError::unauthorized("the dispatcher does not know this entry token")
}

/// `403`: the dispatcher took no proof of the browser's key for a bound token.
fn no_proof(reason: &str) -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!("no proof of the browser key: the dispatcher says {reason}"),
    )
}

/// `Ok` while the token's session for `queue` is active: `403` once it has ended, for another
/// queue's token or a bound token without a good `proof`, `401` when the dispatcher does not
/// know the token. A bound token's proof is passed on: the dispatcher checks it too.
async fn require_active(
    app: &App,
    token: &str,
    queue: &str,
    proof: Option<Proof<'_>>,
) -> Result<(), ApiError> {
    let status = match proof {
        Some(p) => app.admission.check_bound(token, queue, p).await,
        None => app.admission.check_for(token, queue).await,
    };
    match status.map_err(unreachable)? {
        SessionStatus::Active(_) => Ok(()),
        SessionStatus::OtherQueue => Err(other_queue()),
        SessionStatus::Invalid => Err(unknown_token()),
        SessionStatus::ProofRefused(reason) => Err(no_proof(&reason)),
        _ => Err(session_ended()),
    }
}

/// The public URL of this demo's `path`, as a browser's proof names it (`htu`): a real
/// service uses its configured public URL rather than the Host header.
fn own_url(headers: &HeaderMap, path: &str) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    format!("http://{host}{path}")
}

async fn book(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Json<BookingRequest>, JsonRejection>,
) -> Result<(StatusCode, Json<Booking>), ApiError> {
    let Json(req) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let token = usher_admission::bearer_token(&headers)
        .ok_or_else(|| ApiError::unauthorized("Authorization: Bearer <entry token> required"))?;
    let booking = book_seat(&app, &headers, token, req).await?;
    Ok((StatusCode::CREATED, Json(booking)))
}

/// Books a seat with `token` for `req.queue`: checked offline, then the session consumed (a
/// bound token with its `DPoP` proof, when the request carries one).
async fn book_seat(
    app: &App,
    headers: &HeaderMap,
    token: &str,
    req: BookingRequest,
) -> Result<Booking, ApiError> {
    // A token bound to the browser's key comes with the browser's proof (`DPoP`), for this
    // request; without one, a bound token is refused here (a bearer route).
    let url = own_url(headers, "/api/bookings");
    let proof = headers
        .get("dpop")
        .and_then(|v| v.to_str().ok())
        .map(|jws| Proof {
            jws,
            method: "POST",
            url: &url,
        });
    let claims = match proof {
        Some(p) => {
            app.admission
                .verify_bound(token, &req.queue, Some(p.jws), p.method, p.url)
                .await
                .map_err(bound_refused)?
                .0
        }
        None => app
            .admission
            .verify_for(token, &req.queue)
            .await
            .map_err(refused)?,
    };
    // One booking per admission: book only if this request ended the session. Of 30
    // concurrent bookings with one token, the dispatcher tells exactly one it did. A bound
    // token's proof goes with it: the dispatcher checks it too and takes it once.
    let consumed = match proof.filter(|_| claims.cnf.is_some()) {
        Some(p) => app.admission.consume_bound(token, &req.queue, p).await,
        None => app.admission.consume_for(token, &req.queue).await,
    };
    match consumed.map_err(unreachable)? {
        Consumption::Consumed(_) => {}
        Consumption::OtherQueue => return Err(other_queue()),
        Consumption::Invalid => return Err(unknown_token()),
        Consumption::ProofRefused(reason) => return Err(no_proof(&reason)),
        _ => return Err(session_ended()),
    }
    let booking = Booking {
        booking_id: format!("bk-{:016x}", rand::random::<u64>()),
        queue: req.queue,
        place: claims.sub,
        session: claims.jti,
        seat: req.seat,
    };
    tracing::info!(queue = %booking.queue, place = %booking.place, "booked");
    Ok(booking)
}

/// `GET /`: the shop's landing page, with a link to the waiting room.
async fn landing(State(app): State<Arc<App>>) -> Response {
    pages::html(
        StatusCode::OK,
        pages::landing(app.queue_page_url.as_deref()),
    )
}

/// `POST /book`: the entry page's "Book" button (a plain form: `token`, `queue`, `seat`). Books
/// like `POST /api/bookings` and answers a page with the booking.
async fn book_form(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<pages::BookForm>, FormRejection>,
) -> Result<Response, ApiError> {
    let Form(f) = form.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let req = BookingRequest {
        queue: f.queue,
        seat: f.seat,
    };
    let booking = book_seat(&app, &headers, &f.token, req).await?;
    Ok(pages::html(
        StatusCode::CREATED,
        pages::booked(&booking.booking_id, &booking.queue, booking.seat.as_deref()),
    ))
}

/// The form usher's waiting-room page POSTs to the queue's `booking_url` on admission.
#[derive(Debug, Deserialize)]
pub struct EntryForm {
    pub token: String,
    pub queue: String,
    pub expires_at: Option<String>,
    /// A queue with `bind: "browser_key"`: the page's proof of the browser key the token names
    /// (`cnf.jkt`), over this URL and the token.
    pub proof: Option<String>,
}

/// `POST /entry`: a browser arriving from the waiting-room page. The token is checked like a
/// booking's (offline, then the session); the answer is the booking site's landing page.
async fn entry(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    form: Result<Form<EntryForm>, FormRejection>,
) -> Result<Response, ApiError> {
    let Form(f) = form.map_err(|e| ApiError::bad_request(e.body_text()))?;
    // A bound token's proof names the URL the page posted to: this demo's own.
    let url = own_url(&headers, "/entry");
    let (claims, proof) = app
        .admission
        .verify_bound(&f.token, &f.queue, f.proof.as_deref(), "POST", &url)
        .await
        .map_err(bound_refused)?;
    // One proof, one entry: its `jti` is remembered while the proof could pass.
    if let Some(proof) = proof {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let jkt = claims.cnf.as_ref().map_or("", |c| c.jkt.as_str());
        match app.spent_proofs.spend(jkt, &proof.jti, now) {
            Spend::First => {}
            Spend::Replayed => {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "no proof of the browser key: this proof was used already",
                ))
            }
            Spend::TooManyOfThisKey => {
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many entries with this browser key in the last minutes: try again",
                ))
            }
            Spend::Full => {
                return Err(ApiError::unavailable(
                    "too many entries in the last minutes: try again",
                ))
            }
        }
    }
    let proof = f.proof.as_deref().filter(|_| claims.cnf.is_some());
    let proof = proof.map(|jws| Proof {
        jws,
        method: "POST",
        url: &url,
    });
    require_active(&app, &f.token, &f.queue, proof).await?;
    tracing::info!(queue = %f.queue, place = %claims.sub, "entered from the waiting room");
    Ok(pages::html(
        StatusCode::OK,
        pages::entry(&f.queue, &claims.sub, &f.token, claims.cnf.is_some()),
    ))
}

/// The seats of the queue the request names (pretend), behind the admission layer: the token
/// admits to that queue.
async fn seats(
    Extension(claims): Extension<Claims>,
    Extension(session): Extension<usher_admission::ActiveSession>,
) -> Json<serde_json::Value> {
    Json(serde_json::json!({
        "queue": claims.aud,
        "seats": ["A1", "A2", "B1"],
        "session_expires_at": session.expires_at.unix_timestamp(),
    }))
}

/// Counts every API request, refused ones included: the load is what the service handles.
async fn count(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    app.requests.count();
    next.run(req).await
}

pub fn router(app: Arc<App>) -> Router {
    let guarded = Router::new()
        .route("/api/seats", get(seats))
        .route_layer(app.admission.layer().touching().queue_from_query("queue"));
    Router::new()
        .route("/api/bookings", post(book))
        .route("/entry", post(entry))
        .route("/book", post(book_form))
        .route("/", get(landing))
        .merge(guarded)
        // Health probes are not load.
        .layer(middleware::from_fn_with_state(app.clone(), count))
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
    // Any queue: every route names the queue it serves and passes it to the `*_for` calls.
    let mut admission = Admission::builder(&cfg.dispatcher_url)
        .jwks_url(&cfg.jwks_url)
        .any_queue()
        .jwks_refresh(
            Duration::from_secs(cfg.jwks_min_gap_seconds),
            Duration::from_secs(cfg.jwks_max_age_seconds),
        );
    if let Some(t) = &cfg.service_token {
        admission = admission.service_token(t);
    }
    let app = Arc::new(App {
        admission: admission.build()?,
        queue_page_url: cfg.queue_page_url.clone(),
        requests: Arc::default(),
        spent_proofs: SpentProofs::new(SPENT_PROOFS_MAX),
    });
    let reporter = cfg.load_backend.clone().map(|backend| {
        tracing::info!(%backend, every_seconds = cfg.load_report_seconds, "reporting load");
        load::spawn_reporter(
            app.admission.clone(),
            backend,
            Duration::from_secs(cfg.load_report_seconds),
            app.requests.clone(),
        )
    });
    tracing::info!(listen = %listener.local_addr()?, jwks = %cfg.jwks_url, dispatcher = %cfg.dispatcher_url, "demo booking service running");
    let served = usher_http::serve(listener, router(app), cfg.serve, shutdown).await;
    if let Some(r) = reporter {
        r.abort();
    }
    Ok(served?)
}
