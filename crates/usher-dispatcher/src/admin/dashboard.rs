//! The operator dashboard: `GET /admin/ui` and its assets at `/admin/ui/assets/{name}`.
//!
//! Plain HTML, CSS and JS compiled into the binary (`crates/usher-dispatcher/ui/`): no CDN, no
//! build step. The page itself holds no data and is served without the admin token; every
//! number and every control goes through the admin API, whose calls the page makes with the
//! token the operator typed (kept in `sessionStorage`, sent as `Authorization: Bearer`; no
//! cookie, so no cross-site request can act with it). The policy allows scripts, styles and
//! requests to this origin only, no inline script, no forms and no framing (no clickjacking of
//! the controls).

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use usher_http::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The dashboard's Content-Security-Policy.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; \
     frame-ancestors 'none'; base-uri 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const INDEX: &str = include_str!("../../ui/index.html");

/// The fairness report's page (`GET /admin/ui/report?queue=`; docs/fairness-report.md).
const REPORT: &str = include_str!("../../ui/report.html");

const ASSETS: [Asset; 3] = [
    Asset {
        name: "dashboard.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/dashboard.js"),
    },
    Asset {
        name: "dashboard.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../ui/dashboard.css"),
    },
    Asset {
        name: "report.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../ui/report.js"),
    },
];

/// `GET /admin/ui` and `GET /admin/ui/assets/{name}`.
pub fn routes<S: Clone + Send + Sync + 'static>() -> OpenApiRouter<S> {
    OpenApiRouter::new()
        .routes(routes!(index))
        .routes(routes!(report_page))
        .routes(routes!(asset))
}

/// A static response with the dashboard's security headers. `no-cache`: the assets carry no
/// version in their URL, so a browser revalidates them and never runs an old script against a
/// newer admin API.
fn respond(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

#[utoipa::path(
    get,
    path = "/admin/ui",
    tag = "dashboard",
    responses((status = 200, description = "The dashboard's page (served without the token; a strict Content-Security-Policy, no framing).", content_type = "text/html", body = String)),
)]
async fn index() -> Response {
    respond("text/html; charset=utf-8", INDEX)
}

#[utoipa::path(
    get,
    path = "/admin/ui/report",
    tag = "dashboard",
    params(("queue" = Option<String>, Query, description = "The queue whose fairness report the page shows (the page also asks for one).")),
    responses((status = 200, description = "The fairness report's page (docs/fairness-report.md): it reads `GET /admin/queues/{queue}/report` with the token the dashboard keeps in the tab, and draws it as SVG (served without the token; the dashboard's policy).", content_type = "text/html", body = String)),
)]
async fn report_page() -> Response {
    respond("text/html; charset=utf-8", REPORT)
}

#[utoipa::path(
    get,
    path = "/admin/ui/assets/{name}",
    tag = "dashboard",
    params(("name" = String, Path, description = "`dashboard.js`, `dashboard.css` or `report.js`.")),
    responses(
        (status = 200, description = "The asset (`Cache-Control: no-cache`).", content((String = "text/javascript"), (String = "text/css"))),
        (status = 404, description = "No such asset.", body = usher_http::openapi::ErrorBody),
    ),
)]
async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => respond(a.content_type, a.body),
        None => ApiError::not_found(format!("no asset {name:?}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_embedded_assets() {
        // Each asset is used by one of the pages (the dashboard, or the fairness report's).
        for a in &ASSETS {
            let name = format!("/admin/ui/assets/{}", a.name);
            assert!(
                INDEX.contains(&name) || REPORT.contains(&name),
                "{}",
                a.name
            );
        }
        for page in [INDEX, REPORT] {
            for used in page.split("/admin/ui/assets/").skip(1) {
                let name = used.split('"').next().unwrap_or_default();
                assert!(
                    ASSETS.iter().any(|a| a.name == name),
                    "{name} is not embedded"
                );
            }
            assert!(!page.contains("<script>"), "no inline script");
            assert!(!page.contains("style="), "no inline style");
        }
    }
}
