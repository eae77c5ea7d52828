//! Reading an HTTP/1.x request head strictly, and the error answers written without the
//! router. Pure functions over bytes, so a property test can feed them anything (`props`).
//!
//! Strict where a lax reading lets two parsers disagree about where a request ends (request
//! smuggling behind a front proxy): `Content-Length` headers that differ, or one with
//! `Transfer-Encoding`, are refused with `400` and the connection closes.

use axum::http::StatusCode;
use usher_http::ApiError;

/// Longest request head accepted.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
/// Longest request body accepted (the API takes none; this is generous).
pub(crate) const MAX_BODY: usize = 64 * 1024;
/// Most header lines in a request head.
const MAX_HEADERS: usize = 48;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    /// The minor version: `0` for HTTP/1.0, `1` for HTTP/1.1.
    pub minor_version: u8,
    pub keep_alive: bool,
    pub last_event_id: Option<String>,
    /// Lower-case names, raw values, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub content_length: usize,
    pub head_len: usize,
}

impl Head {
    /// The values of header `name` (lower case), in order.
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }
}

/// What the bytes read so far hold.
#[derive(Debug)]
pub(crate) enum Parsed {
    Complete(Head),
    /// More bytes are needed (and may still come: `buf` is shorter than [`MAX_HEAD`]).
    Partial,
}

/// Parses the request head at the start of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, ApiError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(head_len)) => head_of(&req, head_len).map(Parsed::Complete),
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "request head too large",
        )),
        Ok(httparse::Status::Partial) => Ok(Parsed::Partial),
        Err(e) => Err(ApiError::bad_request(format!("malformed request: {e}"))),
    }
}

fn head_of(req: &httparse::Request<'_, '_>, head_len: usize) -> Result<Head, ApiError> {
    let minor_version = req.version.unwrap_or(1);
    let mut keep_alive = minor_version == 1;
    let mut last_event_id = None;
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "connection" => {
                let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                if v.contains("close") {
                    keep_alive = false;
                } else if v.contains("keep-alive") {
                    keep_alive = true;
                }
            }
            "last-event-id" => {
                let id = std::str::from_utf8(h.value).map_err(|_| {
                    ApiError::bad_request("the Last-Event-ID header is not valid UTF-8")
                })?;
                last_event_id = Some(id.to_owned());
            }
            "content-length" => {
                let n = parse_length(h.value)
                    .ok_or_else(|| ApiError::bad_request("malformed Content-Length"))?;
                if content_length.is_some_and(|m| m != n) {
                    return Err(ApiError::bad_request(
                        "Content-Length headers that differ are refused",
                    ));
                }
                content_length = Some(n);
            }
            "transfer-encoding" => chunked = true,
            _ => {}
        }
        headers.push((name, h.value.to_vec()));
    }
    if chunked && content_length.is_some() {
        return Err(ApiError::bad_request(
            "Content-Length together with Transfer-Encoding is refused",
        ));
    }
    let content_length = match (chunked, content_length) {
        (true, _) => usize::MAX,
        (false, n) => n.unwrap_or(0),
    };
    if content_length > MAX_BODY {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are limited to 64 KiB and must have a Content-Length",
        ));
    }
    Ok(Head {
        method: req.method.unwrap_or("").to_owned(),
        target: req.path.unwrap_or("/").to_owned(),
        minor_version,
        keep_alive,
        last_event_id,
        headers,
        content_length,
        head_len,
    })
}

/// A `Content-Length` value: decimal digits only (no sign, no list), surrounding blanks
/// allowed.
fn parse_length(v: &[u8]) -> Option<usize> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// `Some((queue, query))` for `/api/queues/{queue}/stream[?query]`.
pub(crate) fn stream_target(target: &str) -> Option<(&str, &str)> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let queue = path.strip_prefix("/api/queues/")?.strip_suffix("/stream")?;
    (!queue.contains('/')).then_some((queue, query))
}

/// The `ticket` query parameter; duplicates or undecodable values are errors.
pub(crate) fn ticket_param(query: &str) -> Result<Option<String>, ApiError> {
    query_param(query, "ticket")
}

/// The query parameter `name`, decoded; given twice it is refused (`400`).
pub(crate) fn query_param(query: &str, name: &str) -> Result<Option<String>, ApiError> {
    let mut value = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == name {
            if value.is_some() {
                return Err(ApiError::bad_request(format!("duplicate {name} parameter")));
            }
            value = Some(
                percent_decode(v).ok_or_else(|| ApiError::bad_request("malformed query string"))?,
            );
        }
    }
    Ok(value)
}

pub(crate) fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// A whole response: status line, `headers` (name, value; neither contains CR or LF),
/// `content-length`, `connection: close` unless `keep_alive`, then `body`.
pub(crate) fn response_bytes(
    status: StatusCode,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (k, v) in headers {
        // Writing to a String cannot fail.
        let _ = write!(out, "{k}: {v}\r\n");
    }
    let _ = write!(out, "content-length: {}\r\n", body.len());
    if !keep_alive {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// An error answer: `{"error": "..."}` with its status, and `retry-after` when given.
pub(crate) fn error_bytes(e: &ApiError, retry_after: Option<u64>, keep_alive: bool) -> Vec<u8> {
    let body = serde_json::json!({ "error": e.message }).to_string();
    let retry = retry_after.map(|s| s.to_string());
    let mut headers = vec![("content-type", "application/json")];
    if let Some(r) = &retry {
        headers.push(("retry-after", r.as_str()));
    }
    response_bytes(e.status, &headers, body.as_bytes(), keep_alive)
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    fn head(bytes: &[u8]) -> Result<Head, ApiError> {
        match parse(bytes)? {
            Parsed::Complete(h) => Ok(h),
            Parsed::Partial => Err(ApiError::bad_request("partial")),
        }
    }

    #[test]
    fn recognises_stream_targets() {
        assert_eq!(stream_target("/api/queues/q1/stream"), Some(("q1", "")));
        assert_eq!(
            stream_target("/api/queues/q1/stream?ticket=a.1.b"),
            Some(("q1", "ticket=a.1.b"))
        );
        assert_eq!(stream_target("/api/queues/q1/status"), None);
        assert_eq!(stream_target("/api/queues/a/b/stream"), None);
    }

    #[test]
    fn ticket_parameters() {
        assert_eq!(ticket_param("").ok().flatten(), None);
        assert_eq!(
            ticket_param("x=1&ticket=a.1.b").ok().flatten(),
            Some("a.1.b".into())
        );
        assert!(ticket_param("ticket=a&ticket=b").is_err());
        assert!(ticket_param("ticket=%zz").is_err());
        assert_eq!(percent_decode("a%2Eb"), Some("a.b".into()));
    }

    #[test]
    fn content_length_must_be_unambiguous() {
        let same = b"POST / HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(head(same).map(|h| h.content_length), Ok(3));
        let differ = b"POST / HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: 4\r\n\r\n";
        assert_eq!(
            head(differ).map_err(|e| e.status),
            Err(StatusCode::BAD_REQUEST)
        );
        let both = b"POST / HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(
            head(both).map_err(|e| e.status),
            Err(StatusCode::BAD_REQUEST)
        );
        let signed = b"POST / HTTP/1.1\r\ncontent-length: +3\r\n\r\n";
        assert_eq!(
            head(signed).map_err(|e| e.status),
            Err(StatusCode::BAD_REQUEST)
        );
        let chunked = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
        assert_eq!(
            head(chunked).map_err(|e| e.status),
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
    }

    #[test]
    fn last_event_id_must_be_utf8_and_versions_are_kept() {
        let bad = b"GET /api/queues/q/stream HTTP/1.1\r\nlast-event-id: \xff\xfe\r\n\r\n";
        assert_eq!(
            head(bad).map_err(|e| e.status),
            Err(StatusCode::BAD_REQUEST)
        );
        let old = head(b"GET / HTTP/1.0\r\n\r\n");
        assert_eq!(old.map(|h| (h.minor_version, h.keep_alive)), Ok((0, false)));
    }

    #[test]
    fn errors_are_json_responses() {
        let bytes = error_bytes(&ApiError::bad_request("no \"way\""), Some(3), false);
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut res = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(n)) = res.parse(&bytes) else {
            panic!("a complete response");
        };
        assert_eq!(res.code, Some(400));
        let v: serde_json::Value = serde_json::from_slice(&bytes[n..]).expect("JSON");
        assert_eq!(v["error"], "no \"way\"");
    }
}
