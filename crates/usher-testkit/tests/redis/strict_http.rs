//! Strict HTTP: requests two parsers could read differently are refused, HTTP/1.0 gets a body
//! it can read, and every error answer, on the gateway and on the dispatcher, is JSON.

use serde_json::Value;
use usher_testkit::line::PAUSED;
use usher_testkit::line::T;
use usher_testkit::raw;
use usher_testkit::stack::{Stack, StackOptions};

/// Sends `request` on a new connection; the answer, and whether the server closed after it.
async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> anyhow::Result<(raw::Response, bool)> {
    let mut s = raw::send(None, addr, request).await?;
    let r = raw::read_response(&mut s, None, T).await?;
    let closed = raw::closed_within(&mut s, std::time::Duration::from_secs(2)).await;
    Ok((r, closed))
}

/// A stack with a paused queue `q`, and the address of its first gateway.
async fn gateway_with_queue() -> anyhow::Result<(Stack, std::net::SocketAddr)> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("q", PAUSED).await?;
    let gw = stack.gateways[0].addr;
    Ok((stack, gw))
}

/// Each of `requests`, on a connection of its own, is answered `status` with a JSON error, and
/// the connection closes.
async fn refused_and_closed(
    gw: std::net::SocketAddr,
    requests: &[&[u8]],
    status: u16,
) -> anyhow::Result<()> {
    for request in requests {
        let (r, closed) = ask(gw, request).await?;
        assert_json_error(&r, status)?;
        assert!(
            closed,
            "the connection stayed open after {}",
            String::from_utf8_lossy(request)
        );
    }
    Ok(())
}

fn assert_json_error(r: &raw::Response, status: u16) -> anyhow::Result<()> {
    assert_eq!(r.status, status, "{}", r.text());
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("application/json")),
        "{:?}",
        r.headers
    );
    let v: Value = r.json()?;
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_lengths_and_bad_last_event_ids_are_refused() -> anyhow::Result<()> {
    let (stack, gw) = gateway_with_queue().await?;
    refused_and_closed(
        gw,
        &[
            b"POST /api/queues/q/status HTTP/1.1\r\ncontent-length: 1\r\ncontent-length: 12\r\n\r\nx",
            b"POST /api/queues/q/status HTTP/1.1\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
            b"GET /api/queues/q/status HTTP/1.1\r\ncontent-length: -1\r\n\r\n",
        ],
        400,
    )
    .await?;
    // A Last-Event-ID that is not UTF-8: 400, and no place is created.
    let (r, _) = ask(
        gw,
        b"GET /api/queues/q/stream HTTP/1.1\r\naccept: text/event-stream\r\nlast-event-id: q.1.\xff\xfe\r\n\r\n",
    )
    .await?;
    assert_json_error(&r, 400)?;
    assert_eq!(stack.queue("q").await?["waiting"], 0, "a place was created");
    Ok(())
}

/// A head of nothing but empty lines is a head like any other: refused at 16 KiB (`431`),
/// not read on until the head timeout (a security review grew one gateway by a gigabyte
/// through one connection sending line ends). Exactly 16 KiB is sent, so the gateway reads
/// all of it and closes without a reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_of_empty_lines_is_refused_at_the_head_limit() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateways[0].addr;
    let heads: Vec<Vec<u8>> = [&b"\r\n"[..], b"\n"]
        .iter()
        .map(|blank| blank.repeat(16 * 1024 / blank.len()))
        .collect();
    let heads: Vec<&[u8]> = heads.iter().map(Vec::as_slice).collect();
    refused_and_closed(gw, &heads, 431).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_stream_is_close_delimited() -> anyhow::Result<()> {
    let (_stack, gw) = gateway_with_queue().await?;
    let mut s = raw::send(
        None,
        gw,
        b"GET /api/queues/q/stream HTTP/1.0\r\naccept: text/event-stream\r\n\r\n",
    )
    .await?;
    // Up to the end of the first event's data.
    let r = raw::read_response(&mut s, Some(b"}\n\n"), T).await?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), None, "{:?}", r.headers);
    assert_eq!(r.header("connection"), Some("close"));
    // The body is the SSE text itself, no chunk sizes around it.
    let text = r.text();
    assert!(text.starts_with("retry: "), "{text:?}");
    let mut parser = usher_sse::Parser::new();
    let items = parser.push(&r.body);
    assert!(
        items
            .iter()
            .any(|i| matches!(i, usher_sse::Item::Event(e) if e.event == "waiting")),
        "{text:?}"
    );
    // An HTTP/1.1 stream is still chunked.
    let mut s = raw::send(None, gw, b"GET /api/queues/q/stream HTTP/1.1\r\n\r\n").await?;
    let r = raw::read_response(&mut s, Some(b"event: waiting\n"), T).await?;
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    Ok(())
}

/// An HTTP/1.0 client that asks to keep its connection is told so (`connection: keep-alive`)
/// and can send its next request on it; one that does not ask gets `connection: close`, and
/// the connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_1_0_keep_alive_is_confirmed_and_kept() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateways[0].addr;
    let asked = b"GET /readyz HTTP/1.0\r\nconnection: keep-alive\r\n\r\n";
    let mut s = raw::send(None, gw, asked).await?;
    for round in 0..2 {
        let r = raw::read_response(&mut s, None, T).await?;
        assert_eq!(r.status, 200, "round {round}: {}", r.text());
        assert_eq!(
            r.header("connection"),
            Some("keep-alive"),
            "round {round}: {:?}",
            r.headers
        );
        assert!(r.header("content-length").is_some(), "{:?}", r.headers);
        tokio::io::AsyncWriteExt::write_all(&mut s, asked).await?;
    }
    let (r, closed) = ask(gw, b"GET /readyz HTTP/1.0\r\n\r\n").await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("connection"), Some("close"), "{:?}", r.headers);
    assert!(
        closed,
        "an HTTP/1.0 connection that did not ask to be kept stayed open"
    );
    Ok(())
}

/// The absolute form of a request target (`GET http://host/path`), which a server must accept
/// (RFC 9112, 3.2.2), reaches the same routes as the path: a stream opens and hears its place,
/// the probes answer. Without a host, with user information, with a fragment or of another
/// scheme, it is refused as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absolute_request_target_reaches_the_route_of_its_path() -> anyhow::Result<()> {
    let (stack, gw) = gateway_with_queue().await?;
    let mut s = raw::send(
        None,
        gw,
        format!("GET http://{gw}/api/queues/q/stream HTTP/1.1\r\nhost: {gw}\r\n\r\n").as_bytes(),
    )
    .await?;
    let r = raw::read_response(&mut s, Some(b"event: waiting\n"), T).await?;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        stack.queue("q").await?["waiting"],
        1,
        "the stream took no place"
    );
    let (r, _) = ask(gw, b"GET HTTP://gw.example/readyz HTTP/1.1\r\n\r\n").await?;
    assert_eq!(r.status, 200, "{}", r.text());
    refused_and_closed(
        gw,
        &[
            b"GET http:///readyz HTTP/1.1\r\n\r\n",
            b"GET http://user@gw.example/readyz HTTP/1.1\r\n\r\n",
            b"GET http://gw.example#/metrics HTTP/1.1\r\n\r\n",
            b"GET ftp://gw.example/readyz HTTP/1.1\r\n\r\n",
        ],
        400,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_answer_is_json() -> anyhow::Result<()> {
    let (stack, gw) = gateway_with_queue().await?;
    let dispatcher = stack.dispatcher.addr;
    // Admin requests carry the token, so the router and the extractors, not the admin
    // auth, answer them.
    let auth = format!(
        "authorization: Bearer {}\r\n",
        usher_testkit::config::ADMIN_TOKEN
    );
    let admin = |head: &str, rest: &str| format!("{head}\r\n{auth}{rest}").into_bytes();
    let cases: [(std::net::SocketAddr, Vec<u8>, u16); 8] = [
        (gw, b"GET /nowhere HTTP/1.1\r\n\r\n".to_vec(), 404),
        (
            gw,
            b"POST /api/queues/q/status HTTP/1.1\r\ncontent-length: 0\r\n\r\n".to_vec(),
            405,
        ),
        (
            gw,
            b"GET /api/queues/q/status?ticket=x&ticket=y HTTP/1.1\r\n\r\n".to_vec(),
            400,
        ),
        (gw, b"BROKEN\r\n\r\n".to_vec(), 400),
        (dispatcher, b"GET /nowhere HTTP/1.1\r\n\r\n".to_vec(), 404),
        (
            dispatcher,
            admin(
                "PATCH /admin/queues/q HTTP/1.1",
                "content-length: 0\r\n\r\n",
            ),
            405,
        ),
        (
            dispatcher,
            admin(
                "PUT /admin/queues/q HTTP/1.1",
                "content-type: application/json\r\ncontent-length: 9\r\n\r\n{not json",
            ),
            400,
        ),
        (
            dispatcher,
            admin(
                "PUT /admin/queues/q HTTP/1.1",
                "content-type: text/plain\r\ncontent-length: 2\r\n\r\n{}",
            ),
            400,
        ),
    ];
    for (addr, request, status) in cases {
        let (r, _) = ask(addr, &request).await?;
        assert_json_error(&r, status)
            .map_err(|e| anyhow::anyhow!("{}: {e}", String::from_utf8_lossy(&request)))?;
    }
    Ok(())
}
