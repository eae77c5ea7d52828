//! The waiting-room page: `GET /q/{queue}` and its assets at `/q/assets/{name}`.
//!
//! The page is plain HTML, CSS and JS that speak the public SSE contract and nothing else.
//! Per request the gateway fills in the language (`?lang=`, else `Accept-Language`), the
//! queue's page settings (read from Redis: title, logo, booking URL, embedding origin, and the
//! close reason of a closed queue) and that language's strings, and sends a strict
//! `Content-Security-Policy`: scripts and styles from this origin only, the form that carries
//! the entry token may go to the booking origin only, and only the configured embedding
//! origin may frame the page (nobody else can frame it and collect tokens).

mod template;

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use usher_core::ids::QueueId;
use usher_core::page_settings::PageSettings;
use usher_core::store::QueuePage;
use usher_http::openapi::ErrorBody;
use usher_http::ApiError;
use usher_http::PageForPeople;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use template::PageError;
use template::Template;

use crate::errors::{parse_queue, redis_unavailable};
use crate::shared::Gateway;

/// Assets carry a version in their URL (`?v=`), so browsers may keep them a day.
const ASSET_CACHE: &str = "public, max-age=86400";

/// The loaded page, shared by the routes.
#[derive(Debug)]
pub struct Page {
    template: Template,
}

impl Page {
    /// The built-in page, or the template directory of `USHER_PAGE_DIR`.
    pub fn load(dir: Option<&std::path::Path>) -> Result<Self, PageError> {
        Ok(Self {
            template: Template::load(dir)?,
        })
    }
}

#[derive(Clone)]
struct PageState {
    gw: Arc<Gateway>,
    page: Arc<Page>,
}

/// `GET /q/{queue}` and `GET /q/assets/{name}`.
pub(crate) fn routes(gw: Arc<Gateway>, page: Arc<Page>) -> OpenApiRouter {
    OpenApiRouter::new()
        .routes(routes!(asset))
        .routes(routes!(page_handler))
        .with_state(PageState { gw, page })
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    lang: Option<String>,
}

#[utoipa::path(
    get,
    path = "/q/{queue}",
    tag = "page",
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("lang" = Option<String>, Query, description = "The page's language (`en`, `ko`, or another of `USHER_PAGE_DIR`'s), over `Accept-Language`."),
    ),
    responses(
        (status = 200, description = "The waiting-room page (`Cache-Control: no-cache`, a strict `Content-Security-Policy` whose `frame-ancestors` is the queue's `embed_origin`, `Referrer-Policy: no-referrer`, `Vary: Accept-Language`).", content_type = "text/html", body = String),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 404, description = "Unknown queue: a short HTML page that says so in the request's language (a person followed a wrong link), not JSON.", content_type = "text/html", body = String),
        (status = 410, description = "The queue is closed (or its sale ended): the waiting-room page, which says why (the close reason, an ended sale's text).", content_type = "text/html", body = String),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn page_handler(
    State(st): State<PageState>,
    Path(raw): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let t = &st.page.template;
    let accept = headers
        .get(header::ACCEPT_LANGUAGE)
        .and_then(|v| v.to_str().ok());
    let lang = t.language(query.lang.as_deref(), accept);
    let Some(QueuePage {
        settings,
        closed,
        maintenance,
        ended,
    }) = st
        .gw
        .store()
        .queue_page(&q)
        .await
        .map_err(redis_unavailable)?
    else {
        // A person followed a wrong link: a page that says so, not the API's JSON.
        return Ok(unknown_page(t, lang));
    };
    let strings = t.strings(lang);
    let title = settings
        .title
        .clone()
        .or_else(|| {
            strings
                .get("title")
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| q.to_string());
    // A queue that binds places to the browser's key: the page makes the key, proves it with
    // every request, and reopens the stream itself after `retry_ms` (plain `EventSource`
    // would replay the same URL, without a fresh proof).
    let bind = st
        .gw
        .challenges()
        .setting(st.gw.store(), &q)
        .await
        .map_err(redis_unavailable)?
        .is_some_and(|s| s.bind.binds());
    let config = serde_json::json!({
        "queue": q,
        "bind": bind,
        "retry_ms": st.gw.config().retry_ms,
        "lang": lang,
        "title": title,
        "logo_url": settings.logo_url,
        "booking_url": settings.booking_url,
        "embed_origin": settings.embed_origin,
        "closed": closed,
        "maintenance": maintenance,
        "ended": ended,
        "stream": format!("/api/queues/{q}/stream"),
        "tickets": format!("/api/queues/{q}/tickets/"),
        "status": format!("/api/queues/{q}/status"),
        "strings": strings,
    });
    let html = t.render(lang, &title, &config);
    let mut response = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            // The page carries the queue's current settings: revalidate every time.
            (header::CACHE_CONTROL, "no-cache"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::VARY, "accept-language"),
        ],
        html,
    )
        .into_response();
    if closed.is_some() {
        // Still the page (it says why the line closed), with the status a closed line has.
        *response.status_mut() = StatusCode::GONE;
        response.extensions_mut().insert(PageForPeople);
    }
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(lang) {
        h.insert(header::CONTENT_LANGUAGE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&content_security_policy(&settings)) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    if settings.embed_origin.is_none() {
        // For browsers older than `frame-ancestors`.
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    Ok(response)
}

/// `404` with the short HTML page for an unknown queue.
fn unknown_page(t: &Template, lang: &str) -> Response {
    let mut response = (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::VARY, "accept-language"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
            (header::X_FRAME_OPTIONS, "DENY"),
        ],
        t.render_unknown(lang),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(lang) {
        response.headers_mut().insert(header::CONTENT_LANGUAGE, v);
    }
    response.extensions_mut().insert(PageForPeople);
    response
}

/// The page's policy: everything from this origin only; images also from the logo's origin;
/// forms (the entry token's POST) to the booking origin only; framed by the embedding origin
/// only (`'none'` without one).
fn content_security_policy(s: &PageSettings) -> String {
    let logo = s.logo_origin().map(|o| format!(" {o}")).unwrap_or_default();
    let form = s.booking_origin().unwrap_or_else(|| "'none'".into());
    let frame = s.embed_origin.as_deref().unwrap_or("'none'");
    format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:{logo}; \
         connect-src 'self'; worker-src 'self'; form-action {form}; frame-ancestors {frame}; \
         base-uri 'none'"
    )
}

#[utoipa::path(
    get,
    path = "/q/assets/{name}",
    tag = "page",
    params(("name" = String, Path, description = "An asset the page links (`page.js`, `page.css`, …).")),
    responses(
        (status = 200, description = "The asset, with its content type (`Cache-Control: public, max-age=86400`: the page links it with a version).", content((String = "text/javascript"), (String = "text/css"), (String = "application/json"))),
        (status = 404, description = "No such asset.", body = ErrorBody),
    ),
)]
async fn asset(State(st): State<PageState>, Path(name): Path<String>) -> Response {
    match st.page.template.asset(&name) {
        Some(a) => (
            [
                (header::CONTENT_TYPE, a.content_type),
                (header::CACHE_CONTROL, ASSET_CACHE),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            ],
            a.bytes.clone(),
        )
            .into_response(),
        None => ApiError::not_found(format!("no asset {name:?}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_only_the_configured_origins() {
        let none = content_security_policy(&PageSettings::default());
        assert!(none.contains("frame-ancestors 'none'"), "{none}");
        assert!(none.contains("form-action 'none'"), "{none}");
        assert!(none.contains("script-src 'self';"), "{none}");
        let s = PageSettings {
            booking_url: Some("https://tickets.example/book?x".into()),
            embed_origin: Some("https://shop.example".into()),
            logo_url: Some("https://cdn.example/l.png".into()),
            title: None,
        };
        let p = content_security_policy(&s);
        assert!(p.contains("form-action https://tickets.example;"), "{p}");
        assert!(p.contains("frame-ancestors https://shop.example;"), "{p}");
        assert!(
            p.contains("img-src 'self' data: https://cdn.example;"),
            "{p}"
        );
    }
}
