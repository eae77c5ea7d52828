//! The admin API: everything behind the admin token, and the operator dashboard that calls it.
//!
//! * `auth` — the admin tokens and their labels; the middleware every admin route passes.
//! * `errors` — the error answers admin routes share, as the API description lists them.
//! * `audit` — the trail of admin changes (`GET /admin/audit`), recorded by a middleware.
//! * `sale` — `opens_at` in `PUT /admin/queues/{queue}`: a scheduled sale, its seed, and
//!   `POST /admin/queues/{queue}/beacon`. (The draw itself runs in the tick loop.)
//! * `states` — `maintenance` and `ended` in `PUT /admin/queues/{queue}`: what each means
//!   for the line, and the `status` message browsers hear.
//! * `no_shows` — `arrival_seconds` and `make_up_no_shows` in `PUT /admin/queues/{queue}`:
//!   the checks a no-show setting must pass.
//! * `inventory` — `basket_size`, `sold_out_grace_seconds` and `inventory_stale_after_seconds`
//!   in `PUT /admin/queues/{queue}`, and the last inventory report `GET` shows.
//! * `edits` — safe concurrent edits: the settings' version (`ETag`, `If-Match`) and the
//!   changes that need `"confirm": true`.
//! * `report` — `record` and `record_retention_seconds` in `PUT /admin/queues/{queue}`, and
//!   `GET /admin/queues/{queue}/report`: the fairness report, as JSON or CSV.
//! * `queue_update` — the `PUT /admin/queues/{queue}` body and `configured`, its checks and
//!   the settings it makes (shared with `USHER_QUEUES_FILE`).
//! * `queue_view` — a queue as the admin API shows it.
//! * `queues` — the queue handlers: list, get, put, close, notice.
//! * `openapi` — the queue handlers' descriptions (the other handlers carry their own).
//! * `gateways` — `GET /admin/gateways`: the registered gateways and their queues.
//! * `readiness` — `GET /admin/readiness?crowd=N`: is the deployment ready for a sale.
//! * `dashboard` — the operator dashboard at `/admin/ui` (embedded HTML, CSS and JS).
//!
//! Imports run one way, down this list: each module uses only those above it and
//! `crate::state` (which uses only `auth` of these), and this file uses them all. [`routes`] is the admin part of the dispatcher's route table.

pub(crate) mod audit;
pub(crate) mod auth;
mod dashboard;
mod door;
mod edits;
mod errors;
mod gateways;
mod inventory;
mod invitations;
mod lanes;
mod no_shows;
mod openapi;
pub(crate) mod queue_update;
mod queue_view;
pub(crate) mod queues;
mod readiness;
mod report;
mod sale;
mod states;

use axum::middleware;
use usher_http::openapi::route;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// The admin routes, each behind the admin token and recorded in the audit trail, and the
/// dashboard (static: it holds no data and calls the admin routes with the operator's token).
/// A route is added with `.routes(routes!(handler))` for an annotated handler, or
/// `.routes(route::<stub>(handler))` for one described in `openapi.rs`.
pub(crate) fn routes(state: &AppState) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(route::<openapi::__path_list_queues, _, _, _>(
            queues::list_queues,
        ))
        .routes(route::<openapi::__path_get_queue, _, _, _>(
            queues::get_queue,
        ))
        .routes(route::<openapi::__path_put_queue, _, _, _>(
            queues::put_queue,
        ))
        .routes(route::<openapi::__path_close_queue, _, _, _>(
            queues::close_queue,
        ))
        .routes(route::<openapi::__path_notice, _, _, _>(queues::notice))
        .routes(routes!(gateways::list_gateways))
        .routes(routes!(readiness::readiness))
        .routes(routes!(sale::post_beacon))
        .routes(routes!(audit::list))
        .routes(routes!(report::get_report))
        // The last layer runs first: authorize, then record the change.
        .route_layer(middleware::from_fn_with_state(state.clone(), audit::record))
        .route_layer(middleware::from_fn_with_state(
            state.admin_tokens.clone(),
            auth::authorize,
        ))
        .merge(dashboard::routes())
}
