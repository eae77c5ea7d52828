//! Invitations at the gateway (docs/sale-day.md, "Invitations"): the route that exchanges a
//! shop's invitation for a one-use join code, and what a join with a code does (or a join
//! without one to a queue that requires it).
//!
//! The invitation travels once, in the `Authorization: Bearer` header of
//! `POST /api/queues/{queue}/invitation` (no body: the gateway's routes take none, and a
//! header is not in the request line that access logs write). The page reads it from the URL
//! fragment (which browsers never send) and opens its stream with `?join=<code>`: a random
//! code good for [`JOIN_CODE_TTL`], taken by the first join that brings it, on any gateway.
//!
//! A join with a code belongs to the code's account. If the account holds a live place, the
//! join resumes that place instead of taking a new one (the older device's stream hears
//! `resumed_elsewhere`; on a binding queue the place is bound to the new device's key first:
//! `lua/account.lua`). Otherwise it takes a new place, recorded for the account.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use serde::Serialize;
use usher_core::binding::Thumbprint;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::invitation::{verify, InvitationRefusal, Invitee};
use usher_core::messages::CloseReason;
use usher_core::store::{AccountPlace, LeaveOutcome, Store, StoreError};
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::client::IpKey;
use crate::errors::{
    logged, parse_queue, redis_unavailable, too_many_polls, unknown_queue, RouteError,
};
use crate::shared::Gateway;
use crate::update::Update;

/// How long a join code is good for: the page opens its stream at once.
pub(crate) const JOIN_CODE_TTL: Duration = Duration::from_secs(60);
/// A join code's length: 16 random bytes, base64url.
const JOIN_CODE_LEN: usize = 22;
/// The answer of `POST /api/queues/{queue}/invitation`.
#[derive(Serialize, utoipa::ToSchema)]
pub(crate) struct JoinCode {
    /// Open the stream with `?join=<join_code>`; one use.
    pub join_code: String,
    /// Seconds the code is good for.
    pub expires_in: u64,
}

/// `POST /api/queues/{queue}/invitation`: a shop's invitation (`Authorization: Bearer`)
/// exchanged for a one-use join code.
#[utoipa::path(
    post,
    path = "/api/queues/{queue}/invitation",
    tag = "browsers",
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("Authorization" = String, Header, description = "`Bearer <invitation>`: the shop's Ed25519 JWT (`alg` `EdDSA`, `kid` one of the queue's `invitation_keys`; `sub` the account, `aud` the queue, `exp`, optional `lane`). No body."),
    ),
    responses(
        (status = 200, description = "A join code, good once for 60 s at every gateway (`Cache-Control: no-store`): open the stream with `?join=<join_code>`.", body = JoinCode),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 401, description = "No invitation, or one refused: `invitation_refused: <reason>`, `invalid` (not an EdDSA JWT with good claims), `forged` (no key of this queue signed it) or `expired`.", body = ErrorBody),
        (status = 403, description = "`invitation_refused: other_queue`: the invitation was made for another queue (`aud`).", body = ErrorBody),
        (status = 404, description = "Unknown queue.", body = ErrorBody),
        (status = 409, description = "The queue takes no invitations (`invitations` is `none`).", body = ErrorBody),
        (status = 429, description = "Too many requests from this address (the status polls' rate, `USHER_IP_POLL_RATE`), with `Retry-After`.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
pub(crate) async fn invitation_handler(
    State(gw): State<Arc<Gateway>>,
    Extension(client): Extension<IpKey>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<Response, RouteError> {
    // The address's rate before anything else (a signature check costs more than a poll).
    gw.ip_limits().poll(client).map_err(too_many_polls)?;
    let q = parse_queue(&raw)?;
    let setting = gw
        .invitations()
        .get(gw.store(), &q)
        .await
        .map_err(redis_unavailable)?
        .ok_or_else(|| unknown_queue(&q))?;
    if !setting.mode.takes() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!("queue {q} takes no invitations: join without one"),
        )
        .into());
    }
    let invitation = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or_else(|| {
            ApiError::unauthorized(
                "invitation_refused: invalid (send the invitation as Authorization: Bearer <invitation>)",
            )
        })?;
    let invitee = verify(invitation.trim(), &q, &setting.keys, now_ms() / 1000).map_err(|r| {
        tracing::debug!(queue = %q, reason = r.as_str(), "invitation refused");
        refusal_error(r)
    })?;
    let ttl = JOIN_CODE_TTL.as_millis() as u64;
    let code = loop {
        let code = new_code();
        if gw
            .store()
            .put_join_code(&q, &code, &invitee, ttl)
            .await
            .map_err(redis_unavailable)?
        {
            break code;
        }
    };
    let body = JoinCode {
        join_code: code,
        expires_in: JOIN_CODE_TTL.as_secs(),
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

use usher_http::openapi::ErrorBody;

/// The error an invitation refused is answered with.
fn refusal_error(r: InvitationRefusal) -> ApiError {
    let status = match r {
        InvitationRefusal::OtherQueue => StatusCode::FORBIDDEN,
        _ => StatusCode::UNAUTHORIZED,
    };
    ApiError::new(status, format!("invitation_refused: {}", r.as_str()))
}

fn new_code() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// An invited join: whose, its lane, and the account's live place it takes over, if any.
pub(crate) struct Invited {
    pub(crate) account: String,
    /// The invitation's lane claim (its shape checked only).
    pub(crate) lane: Option<String>,
    /// The account's place, to resume for this device instead of taking a new one.
    pub(crate) takeover: Option<PlaceId>,
    /// The account's join lock, given back when the join is set up (dropped).
    _lock: Option<AccountLock>,
}

/// How long one join may hold its account's lock: far more than a join takes; a gateway
/// that stops mid-join blocks the account's next join no longer.
const ACCOUNT_LOCK_TTL: Duration = Duration::from_secs(5);
/// How often a join waiting for its account's lock asks again.
const ACCOUNT_LOCK_POLL: Duration = Duration::from_millis(20);

/// An account's join lock (`Store::lock_account`), held from the look at the account's place
/// until the place taken is recorded: a second device joining at the same moment waits, then
/// finds the first one's place and takes it over, instead of taking a second place.
struct AccountLock {
    store: Store,
    q: QueueId,
    account: String,
}

impl AccountLock {
    /// Waits for the lock (up to its TTL: then the holder is presumed gone, and the join goes
    /// on without it; [`record`] still leaves the account one place).
    async fn take(store: &Store, q: &QueueId, account: &str) -> Result<Option<Self>, StoreError> {
        let deadline = Instant::now() + ACCOUNT_LOCK_TTL;
        let ttl = ACCOUNT_LOCK_TTL.as_millis() as u64;
        while Instant::now() < deadline {
            if store.lock_account(q, account, ttl).await? {
                return Ok(Some(Self {
                    store: store.clone(),
                    q: q.clone(),
                    account: account.to_owned(),
                }));
            }
            tokio::time::sleep(ACCOUNT_LOCK_POLL).await;
        }
        Ok(None)
    }
}

impl Drop for AccountLock {
    fn drop(&mut self) {
        let (store, q, account) = (
            self.store.clone(),
            self.q.clone(),
            std::mem::take(&mut self.account),
        );
        tokio::spawn(async move {
            if let Err(e) = store.unlock_account(&q, &account).await {
                let _ = logged(e);
            }
        });
    }
}

/// Why a join goes no further.
pub(crate) enum Stop {
    Refused(InvitationRefusal),
    Store(StoreError),
}

/// What a stream request's join code (`join`) makes of it: `Ok(None)` for a resume (a ticket
/// names its place: the code is not taken) and for a join without a code to a queue that does
/// not require one; the invited join otherwise. `key`: the browser key the join proved (a
/// binding queue's), which a taken-over place is bound to.
pub(crate) async fn admit(
    gw: &Gateway,
    q: &QueueId,
    resuming: bool,
    join: Option<&str>,
    key: Option<&Thumbprint>,
) -> Result<Option<Invited>, Stop> {
    if resuming {
        return Ok(None);
    }
    let setting = gw
        .invitations()
        .get(gw.store(), q)
        .await
        .map_err(Stop::Store)?;
    let Some(code) = join else {
        return match setting {
            Some(s) if s.mode == usher_core::invitation::InvitationMode::Required => {
                Err(Stop::Refused(InvitationRefusal::Required))
            }
            _ => Ok(None),
        };
    };
    let well_formed = code.len() == JOIN_CODE_LEN
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let Some(Invitee { account, lane }) = (match well_formed {
        true => gw
            .store()
            .take_join_code(q, code)
            .await
            .map_err(Stop::Store)?,
        false => None,
    }) else {
        return Err(Stop::Refused(InvitationRefusal::JoinCode));
    };
    let lock = AccountLock::take(gw.store(), q, &account)
        .await
        .map_err(Stop::Store)?;
    let takeover = match gw
        .store()
        .account_place(q, &account, key)
        .await
        .map_err(Stop::Store)?
    {
        AccountPlace::None => None,
        AccountPlace::Live(p) => Some(p),
        // The token of an admitted place names its device's key on a binding queue: nobody
        // else can use it. Elsewhere the account's new device is given it (resumed).
        AccountPlace::Admitted(_) if setting.is_some_and(|s| s.bind.binds()) => {
            return Err(Stop::Refused(InvitationRefusal::AdmittedElsewhere));
        }
        AccountPlace::Admitted(p) => Some(p),
    };
    Ok(Some(Invited {
        account,
        lane,
        takeover,
        _lock: lock,
    }))
}

/// Records `place` as `account`'s one place. When the account held another (two of its
/// joins got past [`admit`] at once: only when one waited out the other's lock), that one is
/// removed (its stream hears `resumed_elsewhere` when held here, `place_lost` elsewhere):
/// the newest join holds the account's place.
pub(crate) async fn record(gw: &Gateway, q: &QueueId, account: &str, place: PlaceId) {
    let r = async {
        let Some(before) = gw.store().record_account(q, account, place).await? else {
            return Ok(());
        };
        if let LeaveOutcome::Left { gateway, place } = gw.store().leave(q, before).await? {
            match gateway {
                Some(h) if h != gw.index() => {
                    gw.tell_gateway(h, q, place, CloseReason::ResumedElsewhere)
                        .await
                }
                _ => {
                    gw.hub()
                        .finish(q, place, Update::closed(q, CloseReason::ResumedElsewhere));
                }
            }
        }
        Ok::<_, StoreError>(())
    }
    .await;
    if let Err(e) = r {
        let _ = logged(e);
    }
}
