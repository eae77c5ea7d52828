//! A tower [`Layer`] that lets only admitted users through.
//!
//! For each request it takes the entry token from `Authorization: Bearer <token>`, verifies it
//! offline ([`Admission::verify`]), asks the dispatcher whether the session is still active
//! ([`Admission::check`], or [`Admission::touch`] with [`AdmissionLayer::touching`]) and only
//! then calls the inner service, with the token's [`Claims`] and the [`ActiveSession`] in the
//! request's extensions. Refusals are JSON, `{"error": "..."}`:
//!
//! | status | when |
//! |---|---|
//! | `400` | with [`AdmissionLayer::queue_from_query`], a request that names no queue, or names it more than once |
//! | `401` | no bearer token |
//! | `403` | a token that does not verify (forged, another key, another queue), a genuine token past its `exp`, a session that has ended (released, consumed or expired), or, with [`AdmissionLayer::queue_from_query`], a request naming a queue that is not one of the handle's [`crate::Builder::audiences`] |
//! | `500` | a handle built without an audience (it only reports load), or with [`crate::Builder::any_queue`] but no [`AdmissionLayer::queue_from_query`] |
//! | `503` | the JWKS or the dispatcher cannot be reached, so the token cannot be judged |
//!
//! The queue the token must admit to is the handle's ([`crate::Builder::audiences`]), or, with
//! [`AdmissionLayer::queue_from_query`], the one each request names, which must be one of the
//! handle's audiences (any, with [`crate::Builder::any_queue`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{header, HeaderMap, HeaderValue, Request, Response, StatusCode};
use tower::{Layer, Service};

use crate::{ActiveSession, Admission, Claims, SessionStatus};

/// Which online call the layer makes for each request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Online {
    /// `GET /api/session`.
    Check,
    /// `POST /api/session/touch`: every guarded request keeps a sliding session alive.
    Touch,
}

/// Guards the routes it wraps; made by [`Admission::layer`].
#[derive(Clone)]
pub struct AdmissionLayer {
    admission: Admission,
    online: Online,
    /// The query parameter that names the queue, if the request names it.
    queue_param: Option<&'static str>,
}

impl AdmissionLayer {
    pub(crate) fn new(admission: Admission) -> Self {
        Self {
            admission,
            online: Online::Check,
            queue_param: None,
        }
    }

    /// The queue the token must admit to is named by each request, in the query parameter
    /// `param` (e.g. `/api/seats?queue=show`); a request without it gets `400`. For a service
    /// that sells several queues, built with [`crate::Builder::any_queue`].
    pub fn queue_from_query(mut self, param: &'static str) -> Self {
        self.queue_param = Some(param);
        self
    }

    /// Touches the session on every guarded request instead of only checking it, so a busy
    /// user's sliding session stays alive (up to its cap).
    pub fn touching(mut self) -> Self {
        self.online = Online::Touch;
        self
    }
}

impl<S> Layer<S> for AdmissionLayer {
    type Service = AdmissionGuard<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AdmissionGuard {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`AdmissionLayer`] wraps around a route.
#[derive(Clone)]
pub struct AdmissionGuard<S> {
    inner: S,
    layer: AdmissionLayer,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for AdmissionGuard<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        // The clone is not ready; the one that was polled ready serves this request.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            let queue = match layer.queue_param.map(|p| queue_of(&req, p)).transpose() {
                Ok(q) => q,
                Err(refusal) => return Ok(refusal.response()),
            };
            match layer.admit(queue, req.headers()).await {
                Ok((claims, session)) => {
                    req.extensions_mut().insert(claims);
                    req.extensions_mut().insert(session);
                    inner.call(req).await
                }
                Err(refusal) => Ok(refusal.response()),
            }
        })
    }
}

/// The queue a request names in the query parameter `param`: once. Named twice, the handler
/// behind might read another one than the token was checked for (the first here, the last
/// there): refused, as the dispatcher refuses `?queue=a&queue=b`.
fn queue_of<B>(req: &Request<B>, param: &str) -> Result<String, Refusal> {
    let query = req.uri().query().unwrap_or_default();
    let mut named = url::form_urlencoded::parse(query.as_bytes()).filter(|(k, _)| k == param);
    let queue = named.next().map(|(_, v)| v.into_owned());
    if named.next().is_some() {
        return Err(Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("the queue is named more than once: one ?{param}=<queue>"),
        ));
    }
    queue.filter(|v| !v.is_empty()).ok_or_else(|| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            format!("the queue is required: ?{param}=<queue>"),
        )
    })
}

/// Why a request was turned away.
struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn response<B: From<String>>(self) -> Response<B> {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let mut r = Response::new(B::from(body));
        *r.status_mut() = self.status;
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

impl AdmissionLayer {
    async fn admit(
        &self,
        queue: Option<String>,
        headers: &HeaderMap,
    ) -> Result<(Claims, ActiveSession), Refusal> {
        let token = crate::bearer_token(headers).ok_or_else(|| {
            Refusal::new(
                StatusCode::UNAUTHORIZED,
                "Authorization: Bearer <entry token> required",
            )
        })?;
        let a = &self.admission;
        let verified = match &queue {
            Some(q) => a.verify_for(token, q).await,
            None => a.verify(token).await,
        };
        let claims = verified.map_err(|e| {
            if e.is_unavailable() {
                Refusal::new(StatusCode::SERVICE_UNAVAILABLE, "cannot fetch the keys")
            } else if matches!(
                e,
                crate::VerifyError::NoAudience | crate::VerifyError::QueueRequired
            ) {
                tracing::error!(
                    "the admission layer guards a route with a handle that names no queue \
                     (any_queue needs queue_from_query)"
                );
                Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "misconfigured")
            } else {
                Refusal::new(StatusCode::FORBIDDEN, e.to_string())
            }
        })?;
        let status = match (self.online, &queue) {
            (Online::Check, Some(q)) => a.check_for(token, q).await,
            (Online::Check, None) => a.check(token).await,
            (Online::Touch, Some(q)) => a.touch_for(token, q).await,
            (Online::Touch, None) => a.touch(token).await,
        };
        match status {
            Ok(SessionStatus::Active(session)) => Ok((claims, session)),
            Ok(SessionStatus::Ended) => Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "the entry token's session has ended",
            )),
            Ok(SessionStatus::Invalid) => Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "the dispatcher does not accept this entry token",
            )),
            Ok(SessionStatus::OtherQueue) => Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "the entry token admits to another queue",
            )),
            // A bound token is refused by the offline check already; the dispatcher agrees.
            Ok(SessionStatus::ProofRefused(reason)) => Err(Refusal::new(
                StatusCode::FORBIDDEN,
                format!("no proof of the browser key: {reason}"),
            )),
            Err(e) => {
                tracing::warn!(error = %e, "cannot check a session");
                Err(Refusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cannot check the session",
                ))
            }
        }
    }
}
