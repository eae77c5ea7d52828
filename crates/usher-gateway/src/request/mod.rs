//! Reading an HTTP/1.x request head strictly, and the error answers written without the
//! router. Pure functions over bytes, so a property test can feed them anything (`props`).
//!
//! Strict where a lax reading lets two parsers disagree about where a request ends (request
//! smuggling behind a front proxy): `Content-Length` headers that differ, or one with
//! `Transfer-Encoding`, are refused with `400` and the connection closes. No route of the
//! gateway takes a request body, so a request that announces one is refused at its head
//! (`413`), before a byte of it is read: a connection never holds more than its head.
//!
//! A head arrives in pieces; [`HeadReader`] looks at each byte a bounded number of times
//! however the pieces fall (parsing the whole buffer after every read was quadratic in the
//! head's size: a 16 KiB head sent a byte at a time cost 134 MB of parsing).

mod headers;

use axum::http::StatusCode;
use usher_http::ApiError;

pub(crate) use headers::Headers;

/// Longest request head accepted.
pub(crate) const MAX_HEAD: usize = 16 * 1024;
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
    pub headers: Headers,
    pub content_length: usize,
    pub head_len: usize,
}

impl Head {
    /// The values of header `name` (lower case), in order.
    pub(crate) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| *n == name)
            .map(|(_, v)| v)
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
        // More header lines than the server reads is a head too large, as RFC 6585 has it.
        Err(httparse::Error::TooManyHeaders) => Err(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            format!("too many header fields (at most {MAX_HEADERS})"),
        )),
        Err(e) => Err(ApiError::bad_request(format!("malformed request: {e}"))),
    }
}

/// Reads one request head as its bytes arrive into a buffer: [`HeadReader::feed`] after
/// each read. The parser runs on the first bytes (so garbage is refused at once), and then
/// only when the bytes hold the blank line that ends a head (or the buffer is full); between,
/// only the bytes new since the last call are scanned for it. Each byte is thus scanned once
/// and parsed at most a few times: the work is linear in the head's size, however the client
/// splits it.
#[derive(Debug, Default)]
pub(crate) struct HeadReader {
    /// Bytes of the buffer already scanned for the end of the head.
    scanned: usize,
    /// Where the request line starts: past the empty lines a client may send before it
    /// (RFC 9112, 2.2), which are no head's end.
    start: Option<usize>,
    /// Bytes handed to the parser so far (what a test of the linear bound counts).
    #[cfg_attr(not(test), allow(dead_code))]
    parsed: usize,
}

impl HeadReader {
    /// What `buf` (the bytes read so far, this head's first byte at its start) holds.
    pub(crate) fn feed(&mut self, buf: &[u8]) -> Result<Parsed, ApiError> {
        let first = self.scanned == 0 && !buf.is_empty();
        let from = self.scanned;
        self.scanned = buf.len();
        let start = match self.start {
            Some(s) => s,
            None => match buf[from..].iter().position(|b| !matches!(b, b'\r' | b'\n')) {
                Some(i) => *self.start.insert(from + i),
                // Only empty lines so far: parsed on the first bytes, and once they fill a
                // head (431), like any other head: else a client sending nothing but line
                // ends grew the buffer until the head timeout (a security review: one
                // connection took a gigabyte).
                None => return self.parse_if(first || buf.len() >= MAX_HEAD, buf),
            },
        };
        // The end is a line feed followed by an empty line (`\n\n` or `\n\r\n`): look from
        // two bytes before the new ones, so an end split across reads is found.
        let look = from.saturating_sub(2).max(start);
        let ended = buf[look..].windows(2).enumerate().any(|(i, w)| {
            w[0] == b'\n'
                && (w[1] == b'\n' || (w[1] == b'\r' && buf.get(look + i + 2) == Some(&b'\n')))
        });
        self.parse_if(first || ended || buf.len() >= MAX_HEAD, buf)
    }

    fn parse_if(&mut self, run: bool, buf: &[u8]) -> Result<Parsed, ApiError> {
        if !run {
            return Ok(Parsed::Partial);
        }
        self.parsed += buf.len();
        parse(buf)
    }

    /// Bytes handed to the parser so far.
    #[cfg(test)]
    pub(crate) fn parsed(&self) -> usize {
        self.parsed
    }
}

fn head_of(req: &httparse::Request<'_, '_>, head_len: usize) -> Result<Head, ApiError> {
    let minor_version = req.version.unwrap_or(1);
    // `close` in any `Connection` field closes (RFC 9110, 7.6.1), whatever another says;
    // HTTP/1.0 keeps the connection only when asked. Whole comma-separated tokens, any case.
    let (mut close, mut asked_keep_alive) = (false, false);
    let mut last_event_id = None;
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    let mut headers = Headers::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        match headers.push(h.name, h.value) {
            "connection" => {
                for token in String::from_utf8_lossy(h.value).split(',') {
                    let token = token.trim();
                    close |= token.eq_ignore_ascii_case("close");
                    asked_keep_alive |= token.eq_ignore_ascii_case("keep-alive");
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
    }
    let keep_alive = !close && (minor_version == 1 || asked_keep_alive);
    if chunked && content_length.is_some() {
        return Err(ApiError::bad_request(
            "Content-Length together with Transfer-Encoding is refused",
        ));
    }
    let content_length = match (chunked, content_length) {
        (true, _) => usize::MAX,
        (false, n) => n.unwrap_or(0),
    };
    if content_length > 0 {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the gateway's routes take no request body",
        ));
    }
    Ok(Head {
        method: req.method.unwrap_or("").to_owned(),
        target: origin_form(req.path.unwrap_or("/"))?,
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

/// How a response's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// `content-length`.
    Exact(usize),
    /// `transfer-encoding: chunked` (HTTP/1.1).
    Chunked,
    /// The body ends when the connection closes (HTTP/1.0, size unknown).
    UntilClose,
}

/// The request target as the routes read it: the origin form (`/path?query`). A server must
/// accept the absolute form too (`http://host/path?query`, RFC 9112, 3.2.2), which clients
/// send to a proxy and a proxy may pass on: it is read as the `http` crate reads a URI (what
/// hyper and axum do), and its scheme and authority are dropped (nothing here reads the
/// host). An `http` URI without a host, or with user information, is refused (RFC 9110, 4.2.1
/// and 4.2.4), as a proxy in front could read it as another host; so is any other scheme, a
/// fragment (`#`: never part of a request target, and parsers end the authority at it
/// differently), and any other form but `*`. Stream, reserve and router then read one path.
fn origin_form(target: &str) -> Result<String, ApiError> {
    let refused = || {
        ApiError::bad_request(
            "the request target must be a path, or an http(s) URI with a host and no user information",
        )
    };
    if target.contains('#') {
        return Err(refused());
    }
    if target.starts_with('/') || target == "*" {
        return Ok(target.to_owned());
    }
    let uri: axum::http::Uri = target.parse().map_err(|_| refused())?;
    let web = uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("http") || s.eq_ignore_ascii_case("https"));
    match uri.authority() {
        Some(a) if web && !a.host().is_empty() && !a.as_str().contains('@') => {
            Ok(match uri.query() {
                Some(q) => format!("{}?{q}", uri.path()),
                None => uri.path().to_owned(),
            })
        }
        _ => Err(refused()),
    }
}

/// A response head: status line, `headers` (name, value; neither contains CR or LF), the
/// body's framing, `connection: close` unless `keep_alive`, then the blank line.
pub(crate) fn response_head(
    status: StatusCode,
    headers: &[(&str, &str)],
    length: BodyLength,
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
    match length {
        BodyLength::Exact(n) => {
            let _ = write!(out, "content-length: {n}\r\n");
        }
        BodyLength::Chunked => out.push_str("transfer-encoding: chunked\r\n"),
        BodyLength::UntilClose => {}
    }
    if !keep_alive {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    out.into_bytes()
}

/// A whole response: [`response_head`] with a `content-length`, then `body`.
pub(crate) fn response_bytes(
    status: StatusCode,
    headers: &[(&str, &str)],
    body: &[u8],
    keep_alive: bool,
) -> Vec<u8> {
    let mut bytes = response_head(status, headers, BodyLength::Exact(body.len()), keep_alive);
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
    fn close_in_any_connection_field_closes() {
        let kept = |h: &str| head(h.as_bytes()).map(|h| h.keep_alive);
        assert_eq!(kept("GET / HTTP/1.1\r\n\r\n"), Ok(true));
        assert_eq!(kept("GET / HTTP/1.0\r\n\r\n"), Ok(false));
        assert_eq!(
            kept("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            kept("GET / HTTP/1.0\r\nconnection: close\r\nconnection: keep-alive\r\n\r\n"),
            Ok(false)
        );
        assert_eq!(
            kept("GET / HTTP/1.1\r\nconnection: keep-alive, close\r\n\r\n"),
            Ok(false)
        );
        assert_eq!(
            kept("GET / HTTP/1.1\r\nconnection: x-close-not\r\n\r\n"),
            Ok(true)
        );
        assert_eq!(
            kept("GET / HTTP/1.0\r\nconnection: keep-alive-ish\r\n\r\n"),
            Ok(false)
        );
    }

    #[test]
    fn an_absolute_target_is_read_as_its_path() {
        let target =
            |t: &str| head(format!("GET {t} HTTP/1.1\r\n\r\n").as_bytes()).map(|h| h.target);
        assert_eq!(
            target("http://gw.example/api/queues/q1/stream?ticket=a.1.b"),
            Ok("/api/queues/q1/stream?ticket=a.1.b".to_owned())
        );
        assert_eq!(
            target("HTTPS://gw.example:443/readyz"),
            Ok("/readyz".to_owned())
        );
        assert_eq!(target("http://gw.example"), Ok("/".to_owned()));
        assert_eq!(target("http://gw.example?x=1"), Ok("/?x=1".to_owned()));
        assert_eq!(
            target("/http://gw.example/x"),
            Ok("/http://gw.example/x".to_owned())
        );
        assert_eq!(target("*"), Ok("*".to_owned()));
        assert_eq!(target("http://[::1]:8080/readyz"), Ok("/readyz".to_owned()));
        for refused in [
            "http:///readyz",
            "http://user@gw.example/readyz",
            "http://gw.example:80@evil.example/readyz",
            "https://?x",
            "http://a#/metrics",
            "/readyz#x",
            "ftp://gw.example/metrics",
            "ws://gw.example/readyz",
            "http:/readyz",
            "readyz",
        ] {
            let e = target(refused).expect_err(refused);
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{refused}");
        }
        let stream = head(b"GET http://gw.example/api/queues/q1/stream HTTP/1.1\r\n\r\n")
            .map(|h| stream_target(&h.target).map(|(q, _)| q.to_owned()));
        assert_eq!(stream, Ok(Some("q1".to_owned())));
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
        let same = b"POST / HTTP/1.1\r\ncontent-length: 0\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(head(same).map(|h| h.content_length), Ok(0));
        // No route takes a body: one announced is refused at the head.
        let body = b"POST / HTTP/1.1\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\n";
        assert_eq!(
            head(body).map_err(|e| e.status),
            Err(StatusCode::PAYLOAD_TOO_LARGE)
        );
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

    /// Feeds `bytes` to a [`HeadReader`] `step` bytes at a time, as reads would bring them;
    /// the outcome and the bytes handed to the parser.
    fn read_in_steps(bytes: &[u8], step: usize) -> (Result<Parsed, ApiError>, usize) {
        let mut r = HeadReader::default();
        let mut end = 0;
        loop {
            end = (end + step).min(bytes.len());
            match r.feed(&bytes[..end]) {
                Ok(Parsed::Partial) if end < bytes.len() => {}
                outcome => return (outcome, r.parsed()),
            }
        }
    }

    /// A head just under 16 KiB with as many headers as allowed, after `blank` empty lines.
    fn big_head(blank: usize) -> Vec<u8> {
        let mut head = b"\r\n".repeat(blank);
        head.extend_from_slice(b"GET /api/queues/q/status HTTP/1.1\r\n");
        for _ in 0..MAX_HEADERS - 1 {
            head.extend_from_slice(b"x-pad: ");
            head.extend(std::iter::repeat_n(b'a', 330 - blank / 24));
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        head
    }

    #[test]
    fn parse_work_is_linear_in_the_heads_size() {
        for blank in [0, 2000] {
            let head = big_head(blank);
            assert!(
                head.len() < MAX_HEAD && head.len() > MAX_HEAD - 1024,
                "{}",
                head.len()
            );
            for step in [1, 7, 1024] {
                let (outcome, parsed) = read_in_steps(&head, step);
                let h = match outcome {
                    Ok(Parsed::Complete(h)) => h,
                    other => panic!("not complete: {other:?}"),
                };
                assert_eq!(h.head_len, head.len());
                // The first bytes and the whole head: at most twice the head, where parsing
                // the whole buffer after every read was (n / step)² / 2 × step.
                assert!(
                    parsed <= 2 * head.len(),
                    "{parsed} bytes parsed for a {}-byte head read {step} at a time",
                    head.len()
                );
            }
        }
    }

    #[test]
    fn an_end_split_across_reads_is_found_and_garbage_is_refused_at_once() {
        for end in [&b"\r\n\r\n"[..], b"\n\n", b"\n\r\n", b"\r\n\n"] {
            let mut bytes = b"GET /healthz HTTP/1.1\r\nhost: x".to_vec();
            bytes.extend_from_slice(end);
            for step in 1..bytes.len() {
                let (outcome, _) = read_in_steps(&bytes, step);
                assert!(
                    matches!(outcome, Ok(Parsed::Complete(_))),
                    "{end:?} in steps of {step}"
                );
            }
        }
        let mut r = HeadReader::default();
        assert!(r.feed(b"\x00\x01 garbage").is_err());
    }

    /// More header fields than the server reads: `431`, like a head too long.
    #[test]
    fn too_many_header_fields_are_431() {
        let mut head = b"GET /healthz HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            head.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        let e = parse(&head).expect_err("one header too many");
        assert_eq!(e.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
        let fewer: Vec<u8> = String::from_utf8(head)
            .expect("ascii")
            .replacen(&format!("x-h{MAX_HEADERS}: v\r\n"), "", 1)
            .into_bytes();
        assert!(matches!(parse(&fewer), Ok(Parsed::Complete(_))));
    }

    /// A head of nothing but empty lines meets the same 16 KiB cap as any other head.
    #[test]
    fn a_head_of_empty_lines_is_capped_at_max_head() {
        for blank in [&b"\r\n"[..], b"\n"] {
            let bytes = blank.repeat(2 * MAX_HEAD / blank.len());
            let mut r = HeadReader::default();
            assert!(matches!(r.feed(&bytes[..2]), Ok(Parsed::Partial)));
            let under = r.feed(&bytes[..MAX_HEAD - 2]);
            assert!(matches!(under, Ok(Parsed::Partial)), "{under:?}");
            let outcome = r.feed(&bytes[..MAX_HEAD]);
            assert!(
                matches!(&outcome, Err(e) if e.status == StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
                "{} bytes of empty lines: {outcome:?}",
                MAX_HEAD
            );
        }
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
