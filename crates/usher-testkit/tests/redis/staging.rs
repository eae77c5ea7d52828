//! Tokens staged on a gateway ahead of the tick, and connections reused after a stream ends.
//!
//! The test plays the dispatcher itself (no dispatcher runs), so it controls exactly which
//! messages reach the gateway's stream: staged tokens must stay unseen until the admission
//! names their place, and an admission whose token was never staged here must still reach
//! the browser (read from Redis).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use usher_core::ids::PlaceId;
use usher_core::messages::{Admission, StreamMessage};
use usher_core::store::TokenRecord;
use usher_core::time::now_ms;
use usher_testkit::line::*;
use usher_testkit::wait::{eventually, within, DELIVERY};
use usher_testkit::{stack, tick_once, RedisProbe, RedisServer, SseClient};

fn admission(place: u64, token: &str, at: u64, exp: u64) -> Admission {
    Admission {
        place: PlaceId(place),
        token: token.into(),
        admitted_at_ms: at,
        expires_at_ms: exp,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_tokens_show_only_on_admission_and_unstaged_ones_come_from_redis(
) -> anyhow::Result<()> {
    // 20/s and a first tick budgeted for 100 ms: the tick below admits the first two places.
    let (redis, store, gw, q, id) = one_gateway("stage", 20.0).await?;
    let client = SseClient::new(gw.url());
    let (t1, _, c1) = join_watch(&client, "stage").await?;
    let (t2, _, c2) = join_watch(&client, "stage").await?;
    let (t3, _, c3) = join_watch(&client, "stage").await?;
    let (p1, p2, p3) = (place_of(&t1), place_of(&t2), place_of(&t3));

    let at = now_ms();
    let exp = at + 600_000;
    // Tokens for places 1 and 3 are staged (3 will not be admitted).
    store
        .send(&[(
            id.clone(),
            vec![StreamMessage::Staged {
                queue: q.clone(),
                items: vec![
                    admission(p1, "staged-token-1", at, exp),
                    admission(p3, "staged-token-3", at, exp),
                ],
            }],
        )])
        .await?;
    let probe = RedisProbe::connect(&redis.url()).await?;
    probe.gateway_applied(&id).await?;
    tokio::time::sleep(DELIVERY).await;
    for w in [&c1, &c2, &c3] {
        assert!(
            w.last("admitted").is_none(),
            "nothing shown before admission"
        );
    }

    // Redis admits places 1 and 2, and the admission message names both before any record is
    // stored (as the dispatcher does): place 1's token is on the gateway, place 2's is not.
    let lease = take_lease(&store, &q).await?;
    tick_once(&store, &q, &lease).await?;
    store
        .send(&[(
            id.clone(),
            vec![StreamMessage::AdmittedStaged {
                queue: q.clone(),
                admitted_at_ms: at,
                expires_at_ms: exp,
                places: vec![PlaceId(p1), PlaceId(p2)],
            }],
        )])
        .await?;
    eventually(
        "place 1 admitted with its staged token at once",
        async || c1.last("admitted").is_some(),
    )
    .await?;
    // Place 2's record is stored a moment later; the gateway waits for it.
    probe.gateway_applied(&id).await?;
    tokio::time::sleep(DELIVERY).await;
    assert!(c2.last("admitted").is_none(), "no token to show yet");
    store
        .store_tokens(
            &q,
            &lease,
            &[(
                PlaceId(p2),
                TokenRecord {
                    admitted_at_ms: at,
                    expires_at_ms: exp,
                    token: "stored-token-2".into(),
                },
            )],
        )
        .await?;

    for (w, token) in [(&c1, "staged-token-1"), (&c2, "stored-token-2")] {
        eventually("the browser admitted", async || {
            if w.last("admitted").is_some() {
                Ok(())
            } else {
                Err(format!("admitted with {token}"))
            }
        })
        .await?;
        let e = w
            .last("admitted")
            .ok_or_else(|| anyhow::anyhow!("admitted"))?;
        assert_eq!(data(&e)["token"], token);
        assert_eq!(
            data(&e)["admitted_at"],
            usher_core::time::rfc3339_ms(at).as_str()
        );
    }
    // The staged token of a place that was not admitted is never shown.
    probe.gateway_applied(&id).await?;
    tokio::time::sleep(DELIVERY).await;
    assert!(c3.last("admitted").is_none(), "place 3 was not admitted");
    assert!(
        !c3.ended.load(std::sync::atomic::Ordering::SeqCst),
        "place 3 still waits"
    );

    // An admission with a different admission time does not use a token staged for another.
    store
        .send(&[(
            id.clone(),
            vec![StreamMessage::AdmittedStaged {
                queue: q.clone(),
                admitted_at_ms: at + 1000,
                expires_at_ms: exp,
                places: vec![PlaceId(p3)],
            }],
        )])
        .await?;
    probe.gateway_applied(&id).await?;
    tokio::time::sleep(DELIVERY).await;
    assert!(
        c3.last("admitted").is_none(),
        "a token staged for another admission time is not shown"
    );
    gw.stop().await
}

/// Reads from `sock` until `buf` contains `needle`.
async fn read_until(sock: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) -> anyhow::Result<()> {
    let what = format!("{:?}", String::from_utf8_lossy(needle));
    within(&what, T, async {
        while !buf.windows(needle.len()).any(|w| w == needle) {
            let mut chunk = [0u8; 4096];
            let n = sock.read(&mut chunk).await?;
            anyhow::ensure!(
                n > 0,
                "connection closed before {:?}; got {:?}",
                String::from_utf8_lossy(needle),
                String::from_utf8_lossy(buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
        anyhow::Ok(())
    })
    .await?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_serves_another_request_after_its_stream_ends() -> anyhow::Result<()> {
    let (_redis, store, gw, q, id) = one_gateway("reuse", 20.0).await?;
    let mut sock = TcpStream::connect(gw.addr).await?;
    sock.write_all(b"GET /api/queues/reuse/stream HTTP/1.1\r\nhost: usher\r\naccept: text/event-stream\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, b"event: waiting").await?;
    read_until(&mut sock, &mut buf, b"\n\n").await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let ticket = text
        .lines()
        .find_map(|l| l.strip_prefix("id: "))
        .ok_or_else(|| anyhow::anyhow!("no id in {text:?}"))?
        .to_owned();
    let place = place_of(&ticket);

    let at = now_ms();
    store
        .send(&[(
            id,
            vec![StreamMessage::Admitted {
                queue: q,
                items: vec![admission(place, "token-for-reuse", at, at + 60_000)],
            }],
        )])
        .await?;
    // The stream ends with the last chunk, and the connection stays open...
    read_until(&mut sock, &mut buf, b"\r\n0\r\n\r\n").await?;
    assert!(String::from_utf8_lossy(&buf).contains("token-for-reuse"));
    // ...for the next request.
    sock.write_all(b"GET /healthz HTTP/1.1\r\nhost: usher\r\n\r\n")
        .await?;
    let mut reply = Vec::new();
    read_until(&mut sock, &mut reply, b"ok\n").await?;
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    gw.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_pipelined_behind_a_stream_is_answered_and_connection_close_is_honoured(
) -> anyhow::Result<()> {
    let (_redis, store, gw, q, _id) = one_gateway("pipe", 20.0).await?;
    // An admitted place whose record is in Redis: resuming it is a stream that ends at once.
    let client = SseClient::new(gw.url());
    // The browser stays connected until its place is admitted: a place whose browser the
    // gateway has already marked away is passed over by the tick (and this one would then
    // wait on resume instead of ending).
    let (ticket, _, conn) = join(&client, "pipe").await?;
    let lease = take_lease(&store, &q).await?;
    tick_once(&store, &q, &lease).await?;
    let at = now_ms();
    store
        .store_tokens(
            &q,
            &lease,
            &[(
                PlaceId(place_of(&ticket)),
                TokenRecord {
                    admitted_at_ms: at,
                    expires_at_ms: at + 60_000,
                    token: "pipelined-token".into(),
                },
            )],
        )
        .await?;
    drop(conn);
    let stream = format!(
        "GET /api/queues/pipe/stream HTTP/1.1\r\nhost: usher\r\nlast-event-id: {ticket}\r\n"
    );

    // A second request right behind the stream in the same write: both are answered, in
    // order, on the one connection.
    let mut sock = TcpStream::connect(gw.addr).await?;
    sock.write_all(format!("{stream}\r\nGET /healthz HTTP/1.1\r\nhost: usher\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, b"ok\n").await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let stream_end = text
        .find("\r\n0\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("{text}"))?;
    assert!(text[..stream_end].contains("pipelined-token"), "{text}");
    assert!(text[stream_end..].contains("HTTP/1.1 200"), "{text}");

    // With `connection: close`, the connection ends with the stream.
    let mut sock = TcpStream::connect(gw.addr).await?;
    sock.write_all(format!("{stream}connection: close\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    within("the server to close", T, sock.read_to_end(&mut buf)).await??;
    let text = String::from_utf8_lossy(&buf);
    assert!(
        text.contains("pipelined-token") && text.ends_with("\r\n0\r\n\r\n"),
        "{text}"
    );
    gw.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_give_way_when_the_gateway_reaches_its_connection_cap(
) -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let mut cfg = usher_testkit::config::gateway(&redis.url());
    cfg.max_connections = 2;
    let gw = stack::Server::spawn(|l, rx| {
        usher_gateway::run(cfg, l, async move {
            let _ = rx.await;
        })
    })
    .await?;
    // Two connections, idle after one request each: at the cap.
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut sock = TcpStream::connect(gw.addr).await?;
        sock.write_all(b"GET /healthz HTTP/1.1\r\nhost: usher\r\n\r\n")
            .await?;
        let mut buf = Vec::new();
        read_until(&mut sock, &mut buf, b"ok\n").await?;
        idle.push(sock);
    }
    // A third connection makes them close, and is served.
    let mut sock = TcpStream::connect(gw.addr).await?;
    sock.write_all(b"GET /healthz HTTP/1.1\r\nhost: usher\r\n\r\n")
        .await?;
    let mut buf = Vec::new();
    read_until(&mut sock, &mut buf, b"ok\n").await?;
    for mut s in idle {
        let mut rest = [0u8; 16];
        assert_eq!(
            within("the rest of the answer", T, s.read(&mut rest)).await??,
            0,
            "an idle connection was closed"
        );
    }
    gw.stop().await
}
