//! The demo's HTML pages: the entry page an admitted browser lands on (with a "Book" button)
//! and the booking's confirmation. Phone-sized (a viewport, one column, large buttons), no
//! script; every value shown is an id filtered to `[A-Za-z0-9._-]`, safe in HTML.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

/// `POST /book` form: the entry page's hidden fields and the seat picked.
#[derive(Debug, Deserialize)]
pub struct BookForm {
    pub token: String,
    pub queue: String,
    pub seat: Option<String>,
}

const HEAD: &str = "<!doctype html><html lang=en><head><meta charset=utf-8>\
<meta name=viewport content=\"width=device-width, initial-scale=1\"><title>Booking</title>\
<style>body{font-family:system-ui,sans-serif;margin:0;padding:1rem;line-height:1.5;\
max-width:30rem;margin-inline:auto}h1{font-size:1.4rem}label,button{display:block;\
width:100%;margin:.75rem 0;font-size:1.1rem}select,button{font:inherit;width:100%;\
min-height:2.75rem}button,.button{background:#0b57b0;color:#fff;border:0;border-radius:.5rem}\
.button{display:block;text-align:center;padding:.7rem;font-size:1.1rem;text-decoration:none}</style>\
</head><body>";

/// Only the characters of an id (and of a JWT): safe in HTML text and attributes.
fn id_chars(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect()
}

/// An HTML answer, never cached (it carries an entry token).
pub fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// `--queue-page-url`'s check: an `http://` or `https://` URL without characters that would
/// need escaping in an HTML attribute.
pub fn page_url(s: &str) -> Result<String, String> {
    let ok = (s.starts_with("http://") || s.starts_with("https://"))
        && !s
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || "\"'<>&".contains(c));
    ok.then(|| s.to_owned())
        .ok_or_else(|| "must be an http:// or https:// URL (no spaces, quotes, <, > or &)".into())
}

/// The shop's landing page: a link to the waiting room (`--queue-page-url`), or how to set it.
pub fn landing(queue_page: Option<&str>) -> String {
    let go = match queue_page {
        Some(url) => format!(
            "<p>Tickets go on sale through a waiting room: join the line, and when it is your \
             turn you come back here to book.</p><a id=join class=button href=\"{url}\">Join \
             the queue</a>"
        ),
        None => "<p id=unset>Set <code>USHER_QUEUE_PAGE_URL</code> to the waiting room's page \
                 (e.g. <code>http://127.0.0.1:8080/q/demo</code>) to link it here.</p>"
            .to_owned(),
    };
    format!("{HEAD}<h1>usher demo shop</h1>{go}</body></html>")
}

/// The page an admitted browser lands on: who it is, and a form that books a seat with its
/// token. A token bound to the browser's key books only with a fresh proof of that key, which
/// this page (on another origin than the waiting room, with no script) cannot make: it says so.
pub fn entry(queue: &str, place: &str, token: &str, bound: bool) -> String {
    let (q, p) = (id_chars(queue), id_chars(place));
    let book = if bound {
        "<p id=bound>This entry is bound to your browser's key: a shop books it through \
         <code>POST /api/bookings</code> with the browser's proof (<code>DPoP</code>).</p>"
            .to_owned()
    } else {
        format!(
            "<form id=book method=post action=/book>\
             <input type=hidden name=token value=\"{t}\"><input type=hidden name=queue value=\"{q}\">\
             <label>Seat <select name=seat><option>A1</option><option>A2</option>\
             <option>B1</option></select></label><button type=submit>Book this seat</button></form>",
            t = id_chars(token),
        )
    };
    format!(
        "{HEAD}<h1 id=entry data-queue=\"{q}\" data-place=\"{p}\">Welcome: entry verified for \
         queue {q}, place {p}</h1>{book}</body></html>"
    )
}

/// The booking's confirmation.
pub fn booked(booking_id: &str, queue: &str, seat: Option<&str>) -> String {
    let seat = seat.map(id_chars).unwrap_or_else(|| "any".into());
    format!(
        "{HEAD}<h1 id=booked data-booking=\"{b}\">Booked: seat {seat} in {q}</h1>\
         <p>Your booking is <strong>{b}</strong>.</p></body></html>",
        b = id_chars(booking_id),
        q = id_chars(queue),
    )
}
