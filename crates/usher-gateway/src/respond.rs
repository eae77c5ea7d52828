//! Writing answers on a client connection: the router's, whatever their size, and the
//! server's own errors.
//!
//! An answer is never cut silently (a 1 MiB cap once made any longer answer an empty `200`,
//! and the public draw record of more than about 15,800 entrants unreadable): a short answer
//! goes in one write, head and body together; a longer one is streamed as the router's body
//! yields it.

use std::time::Duration;

use axum::body::Bytes;
use axum::http::StatusCode;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use usher_http::ApiError;

use crate::request::{self, BodyLength};

/// Answers up to this long are written in one piece, head and body together; longer ones
/// are streamed as the router's body yields them.
const WHOLE_RESPONSE: usize = 64 * 1024;

/// A write to a client that takes longer than this ends the connection (a stream's place is
/// kept for the grace period). A client that reads nothing must not hold a socket, and the
/// answer waiting for it, for as long as it acknowledges a zero window: no deadline and no
/// shedding reaches a connection blocked in a write (a security review held a gateway's
/// sockets with pipelined requests it never read the answers of). The hyper servers' one.
pub(crate) const WRITE_TIMEOUT: Duration = usher_http::WRITE_TIMEOUT;

/// Writes `bytes` whole within [`WRITE_TIMEOUT`] (`TimedOut` past it): every write of an
/// answer, and a stream's write the socket could not take at once.
pub(crate) async fn send(sock: &mut TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    match tokio::time::timeout(WRITE_TIMEOUT, sock.write_all(bytes)).await {
        Ok(written) => written,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

/// Writes the router's answer, whatever its size: a short one in one piece; a longer one
/// streamed as its body yields it, with a `Content-Length` when the size is known, else
/// chunked (`length_known` false: an HTTP/1.0 client, which gets a body that ends when the
/// connection closes). An answer that cannot be sent is never cut silently: a body that
/// fails before its first byte is answered `500`, one that fails later ends the connection
/// (the client sees a short body), and both are logged. `Err`: the connection must close.
pub(crate) async fn write_response(
    sock: &mut TcpStream,
    response: axum::response::Response,
    keep_alive: bool,
    length_known: bool,
) -> std::io::Result<()> {
    use axum::body::HttpBody as _;
    let (parts, body) = response.into_parts();
    let exact = body
        .size_hint()
        .exact()
        .and_then(|n| usize::try_from(n).ok());
    let mut headers: Vec<(&str, &str)> = parts
        .headers
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "content-length" | "transfer-encoding" | "connection"
            )
        })
        .map(|(k, v)| (k.as_str(), v.to_str().unwrap_or("")))
        .collect();
    let mut frames = body.into_data_stream();
    // The first piece of the body (or all of a short one) before the head: a body that
    // fails at once still gets an honest status.
    let mut first = Vec::new();
    let mut ended = false;
    while exact.is_some_and(|n| n <= WHOLE_RESPONSE && first.len() < n) || first.is_empty() {
        match frames.next().await {
            Some(Ok(b)) => first.extend_from_slice(&b),
            Some(Err(e)) => {
                tracing::error!(status = %parts.status, error = %e, "an answer's body failed before it was sent: answered 500");
                let e = ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the answer could not be produced",
                );
                send(sock, &request::error_bytes(&e, None, false)).await?;
                return Err(std::io::Error::other("response body failed"));
            }
            None => {
                ended = true;
                break;
            }
        }
    }
    let whole = ended || exact.is_some_and(|n| first.len() >= n && n <= WHOLE_RESPONSE);
    // A whole answer goes in one piece with its `content-length`; `length` frames the rest.
    let (length, keep_alive) = match exact {
        Some(n) => (BodyLength::Exact(n), keep_alive),
        None if whole || length_known => (BodyLength::Chunked, keep_alive),
        None => (BodyLength::UntilClose, false),
    };
    // An HTTP/1.0 client that asked to keep the connection is told it is kept: without the
    // header it takes every answer as the last (RFC 9112, appendix C.2.2).
    if keep_alive && !length_known {
        headers.push(("connection", "keep-alive"));
    }
    if whole {
        let bytes = request::response_bytes(parts.status, &headers, &first, keep_alive);
        return send(sock, &bytes).await;
    }
    let head = request::response_head(parts.status, &headers, length, keep_alive);
    let mut sent = 0usize;
    let mut piece = Bytes::from(first);
    let mut out = head;
    loop {
        sent += piece.len();
        match length {
            BodyLength::Chunked if !piece.is_empty() => {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(&piece);
                out.extend_from_slice(b"\r\n");
            }
            _ => out.extend_from_slice(&piece),
        }
        send(sock, &out).await?;
        out.clear();
        piece = match frames.next().await {
            Some(Ok(b)) => b,
            Some(Err(e)) => {
                tracing::error!(status = %parts.status, sent, error = %e, "an answer's body failed while it was sent: connection closed");
                return Err(std::io::Error::other("response body failed"));
            }
            None => break,
        };
    }
    match length {
        BodyLength::Exact(n) if sent != n => {
            tracing::error!(status = %parts.status, sent, expected = n, "an answer's body was not as long as it said: connection closed");
            Err(std::io::Error::other("response body length"))
        }
        BodyLength::Chunked => send(sock, b"0\r\n\r\n").await,
        BodyLength::UntilClose => Err(std::io::Error::other("body ends at close")),
        BodyLength::Exact(_) => Ok(()),
    }
}

/// Writes an error answer (`Retry-After` when given) and closes the connection after it.
pub(crate) async fn write_error(
    sock: &mut TcpStream,
    e: &ApiError,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    send(sock, &request::error_bytes(e, retry_after, false)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// Writes `response` on one end of a loopback connection and reads the other end until the
    /// writer closes it: what was sent, and whether `write_response` said to close.
    async fn sent(response: axum::response::Response) -> (Vec<u8>, bool) {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(l.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (mut server, _) = l.accept().await.expect("accept");
        let closed = write_response(&mut server, response, true, true)
            .await
            .is_err();
        drop(server);
        let mut out = Vec::new();
        let _ = client.read_to_end(&mut out).await;
        (out, closed)
    }

    fn failing_after(bytes: usize) -> Body {
        let ok = futures::stream::iter(
            (0..bytes / 1024).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 1024]))),
        );
        let fail = futures::stream::once(async { Err(std::io::Error::other("gone")) });
        Body::from_stream(ok.chain(fail))
    }

    /// A client that never reads its answer is closed after [`WRITE_TIMEOUT`] (on the paused
    /// clock: the write blocks, the runtime idles, the clock moves on to the deadline).
    #[tokio::test(start_paused = true)]
    async fn an_answer_nobody_reads_ends_the_connection_after_the_write_timeout() {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(l.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (mut server, _) = l.accept().await.expect("accept");
        // 32 MiB: more than the two ends' socket buffers take.
        let pieces = (0..512).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![b'a'; 64 * 1024])));
        let body = Body::from_stream(futures::stream::iter(pieces));
        let started = tokio::time::Instant::now();
        let response = axum::response::Response::new(body);
        // Bounded from outside too: without the deadline the write would wait forever, and
        // this fails instead of hanging (the paused clock skips to it as well).
        let written = tokio::time::timeout(
            2 * WRITE_TIMEOUT,
            write_response(&mut server, response, true, true),
        )
        .await
        .expect("the write gave up by its own deadline");
        assert_eq!(
            written.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::TimedOut)
        );
        assert!(started.elapsed() >= WRITE_TIMEOUT);
        drop(client);
    }

    #[tokio::test]
    async fn a_body_that_fails_at_once_is_a_500_never_an_empty_200() {
        let (out, closed) = sent(axum::response::Response::new(failing_after(0))).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 500 "), "{text}");
        assert!(text.contains("\"error\""), "{text}");
        assert!(closed);
    }

    #[tokio::test]
    async fn a_body_that_fails_midway_ends_the_connection_without_a_last_chunk() {
        let (out, closed) = sent(axum::response::Response::new(failing_after(200 * 1024))).await;
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 200 "), "{}", &text[..40]);
        assert!(text.contains("transfer-encoding: chunked"));
        assert!(
            !text.ends_with("0\r\n\r\n"),
            "a failed body must not look complete"
        );
        assert!(closed);
    }

    #[tokio::test]
    async fn a_long_body_of_unknown_size_arrives_whole_in_chunks() {
        let pieces = (0..300)
            .map(|i| Ok::<_, std::io::Error>(Bytes::from(vec![b'a' + (i % 26) as u8; 1000])));
        let body = Body::from_stream(futures::stream::iter(pieces));
        let (out, closed) = sent(axum::response::Response::new(body)).await;
        assert!(!closed, "a whole chunked answer keeps the connection");
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut res = httparse::Response::new(&mut headers);
        let Ok(httparse::Status::Complete(mut at)) = res.parse(&out) else {
            panic!("a response head");
        };
        let mut body = Vec::new();
        loop {
            let line_end = at
                + out[at..]
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .expect("a chunk size");
            let size =
                usize::from_str_radix(std::str::from_utf8(&out[at..line_end]).expect("hex"), 16)
                    .expect("a chunk size");
            at = line_end + 2;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&out[at..at + size]);
            at += size + 2;
        }
        assert_eq!(body.len(), 300_000);
        assert_eq!(body[299_999], b'a' + (299 % 26) as u8);
    }
}
