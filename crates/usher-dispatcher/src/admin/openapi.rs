//! The admin queue handlers' descriptions, as stubs registered with
//! [`usher_http::openapi::route`] (which serves the real handler at the stub's path and
//! methods), to keep `queues.rs` short. The other admin handlers carry their own
//! `#[utoipa::path]`; the error sets admin routes share are in `errors.rs`.

use usher_core::ids::QueueId;
use usher_http::openapi::ErrorBody;

use super::errors::{AdminReadErrors, AdminWriteErrors};
use super::queue_update::QueueUpdate;
use super::queue_view::{QueueList, QueueView};
use super::queues::{NoticeBody, NoticeSent};

#[utoipa::path(
    get,
    path = "/admin/queues",
    tag = "admin",
    security(("admin_token" = [])),
    responses((status = 200, description = "Every configured queue.", body = QueueList), AdminReadErrors),
)]
#[allow(dead_code)] // The description of `queues::list_queues`.
pub(crate) fn list_queues() {}

#[utoipa::path(
    get,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    responses(
        (status = 200, description = "The queue's settings, counters and effective rate. `ETag`: the settings' version (`settings_version`, quoted), for `If-Match` on `PUT`.", body = QueueView,
            headers(("ETag" = String, description = "The settings' version, e.g. `\"3\"`."))),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminReadErrors,
    ),
)]
#[allow(dead_code)] // The description of `queues::get_queue`.
pub(crate) fn get_queue() {}

#[utoipa::path(
    put,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("If-Match" = Option<String>, Header, description = "The `ETag` of the settings this change was made from (`\"3\"`, or `*` for any existing queue): the change is written only while they are still at that version, else `412`. Without it the change is written whatever the version."),
    ),
    request_body(content = QueueUpdate, description = "Omitted fields keep their value (the defaults for a new queue). `opens_at`, `draw_beacon`, `max_active`, `max_entrants`, `adaptive`, `maintenance` and `arrival_seconds` take `null` to unset; the page settings take `\"\"`."),
    responses(
        (status = 200, description = "Updated; `ETag` is the new version.", body = QueueView,
            headers(("ETag" = String, description = "The settings' new version."))),
        (status = 201, description = "Created; `ETag` is its version.", body = QueueView,
            headers(("ETag" = String, description = "The settings' version."))),
        (status = 409, description = "A change that needs `\"confirm\": true` without it (the error names the reason): `grace_seconds` below 10, `max_entrants` below the pre-queue's entrants, an `opens_at` (or `null`) that discards a draw that ran. Or `draw_seed` differs from the seed a pending sale committed to, or is the seed of this queue's earlier draw (drawn or voided), which is public: a new sale needs a new seed. Or `lanes` would remove a lane that still has places in line (or make or unmake the default lane one that has), or a queue would have both lanes and `opens_at`.", body = ErrorBody),
        (status = 412, description = "`If-Match` names another version than the settings are at (someone changed them since), or the queue does not exist: nothing was changed.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `queues::put_queue`.
pub(crate) fn put_queue() {}

#[utoipa::path(
    delete,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("reason" = Option<String>, Query, description = "`queue_closed` (the default) or `sold_out`: what every waiting browser's `closed` event says."),
    ),
    responses(
        (status = 200, description = "Closed; the queue as it is now.", body = QueueView),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `queues::close_queue`.
pub(crate) fn close_queue() {}

#[utoipa::path(
    post,
    path = "/admin/queues/{queue}/notice",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    request_body(content = NoticeBody, description = "Non-empty, at most 500 characters, no control characters."),
    responses(
        (status = 202, description = "Sent to every live gateway holding browsers of the queue; each waiting browser gets `event: notice`.", body = NoticeSent),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `queues::notice`.
pub(crate) fn notice() {}
