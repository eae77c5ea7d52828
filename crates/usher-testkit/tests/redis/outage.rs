//! Redis going away and coming back; a browser moving between gateways.

use std::time::Duration;

use serde_json::json;
use usher_testkit::line::*;
use usher_testkit::sse::SseItem;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::SseClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_keeps_browsers_connected_and_everything_recovers_without_restarts(
) -> anyhow::Result<()> {
    let mut stack = Stack::start(StackOptions {
        redis_args: vec![
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ],
        ..Default::default()
    })
    .await?;
    stack.create_queue("out", PAUSED).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let (ticket, _, w) = join_watch(&client, "out").await?;

    stack.redis.kill();
    // Readiness: `/readyz` stays 200 (every replica shares Redis: failing it would take them
    // all out of the load balancer, whose 503 makes EventSource give up); `?verbose` tells.
    let ready = |url: String| {
        let http = stack.http.clone();
        async move {
            let plain = http
                .get(format!("{url}/readyz"))
                .send()
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0);
            let verbose: serde_json::Value =
                match http.get(format!("{url}/readyz?verbose")).send().await {
                    Ok(r) => r.json().await.unwrap_or_default(),
                    Err(_) => serde_json::Value::Null,
                };
            (plain, verbose["redis"].as_str().unwrap_or("").to_owned())
        }
    };
    for (name, url) in [
        ("gateway", stack.gateway_url(0)),
        ("dispatcher", stack.dispatcher.url()),
    ] {
        assert_eq!(
            ready(url).await,
            (200, "unreachable".to_owned()),
            "{name}: ready, and reports redis separately"
        );
    }
    // New browsers get 200 + retry: and the end of the stream, never an error status that
    // would make EventSource give up: one alone, and forty arriving together (their joins
    // wait for one call and fail with it).
    let try_later = |client: &SseClient| {
        let client = client.clone();
        async move {
            let mut c = client.open("/api/queues/out/stream", None).await?;
            anyhow::ensure!(c.status == 200, "status {}", c.status);
            anyhow::ensure!(matches!(c.next_item(T).await?, Some(SseItem::Retry(_))));
            anyhow::ensure!(c.next_item(T).await?.is_none(), "the stream ends");
            Ok::<_, anyhow::Error>(())
        }
    };
    try_later(&client).await?;
    futures::future::try_join_all((0..40).map(|_| try_later(&client))).await?;
    // The waiting browser stays connected through several of the gateway's failed Redis calls
    // (each backs off 100 ms to 5 s).
    usher_testkit::line::counter_grows(&stack.gateway_url(0), "usher_redis_errors_total", 3)
        .await?;
    assert!(
        !w.has_ended(),
        "browsers stay connected while redis is away"
    );

    stack.redis.restart()?;
    eventually_within(
        "both see redis again without a restart",
        Duration::from_secs(15),
        async || {
            let ok = (200, "ok".to_owned());
            let seen = (
                ready(stack.gateway_url(0)).await,
                ready(stack.dispatcher.url()).await,
            );
            if seen.0 == ok && seen.1 == ok {
                Ok(())
            } else {
                Err(Seen(seen))
            }
        },
    )
    .await?;
    // Admission resumes without restarting anything, and the waiter gets its token.
    eventually("the admin API writes to redis again", async || {
        stack
            .put_queue("out", json!({"admit_per_second": 100}))
            .await
    })
    .await?;
    // 30 s: the gateway's stream reader backs off up to 5 s while Redis is away.
    let a = eventually_within(
        "the waiter is admitted after redis returns",
        Duration::from_secs(30),
        async || w.last("admitted"),
    )
    .await?;
    assert_eq!(a.id, ticket);
    // Joins work again: the failed calls left nothing behind that would hold them.
    let (_, position, _) = join(&client, "out").await?;
    assert_eq!(position, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_on_another_gateway_moves_the_place_and_ends_the_old_stream() -> anyhow::Result<()>
{
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    stack.create_queue("move", PAUSED).await?;
    let a = SseClient::new(stack.gateway_url(0));
    let b = SseClient::new(stack.gateway_url(1));
    let (_t0, _, _w0) = join_watch(&a, "move").await?;
    let (ticket, pos, old) = join_watch(&a, "move").await?;
    assert_eq!(pos, 2);
    let mut moved = b.open("/api/queues/move/stream", Some(&ticket)).await?;
    let w = moved.wait_for("waiting", T).await?;
    assert_eq!(data(&w)["position"], 2);
    eventually("gateway A ends its stale stream", async || old.has_ended()).await?;
    let closed = old
        .last("closed")
        .expect("the old stream is told why it ended");
    assert_eq!(
        data(&closed)["reason"],
        "resumed_elsewhere",
        "so the old tab does not reconnect and take the place back"
    );
    // A negative check: A's clean-up of the old stream, written by its away flushes, must
    // neither drop the place nor add one; wait for two of them.
    usher_testkit::line::away_flushed(&stack.gateway_url(0), 2).await?;
    assert_eq!(
        stack.queue("move").await?["waiting"],
        2,
        "no place lost, none added"
    );
    // Admission now goes to gateway B.
    let moved = usher_testkit::sse::Watcher::spawn(moved);
    stack
        .put_queue("move", json!({"admit_per_second": 100}))
        .await?;
    eventually("the moved browser admitted on gateway B", async || {
        moved.last("admitted").is_some()
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_cap_browsers_are_told_to_retry_not_turned_away() -> anyhow::Result<()> {
    usher_testkit::stack::init_logs();
    let redis = usher_testkit::RedisServer::start()?;
    let d = usher_testkit::stack::dispatcher(&redis.url(), 100).await?;
    let mut cfg = usher_testkit::config::gateway(&redis.url());
    cfg.max_connections = 2;
    let g = usher_testkit::stack::Server::spawn(|l, rx| {
        usher_gateway::run(cfg, l, async move {
            let _ = rx.await;
        })
    })
    .await?;
    let http = usher_testkit::config::admin_client();
    http.put(format!("{}/admin/queues/cap", d.url()))
        .json(&json!({"admit_per_second": PAUSED}))
        .send()
        .await?
        .error_for_status()?;
    let client = SseClient::new(g.url());
    let (_t1, _, _w1) = join_watch(&client, "cap").await?;
    let (_t2, _, _w2) = join_watch(&client, "cap").await?;
    let mut third = client.open("/api/queues/cap/stream", None).await?;
    assert_eq!(
        third.status, 200,
        "never a status that makes EventSource give up"
    );
    let Some(SseItem::Retry(ms)) = third.next_item(T).await? else {
        panic!("a retry: comes first")
    };
    assert!(
        (500..=1500).contains(&ms),
        "jittered around the configured 1000 ms: {ms}"
    );
    assert_eq!(third.next_item(T).await?, None, "and the stream ends");
    let q: serde_json::Value = http
        .get(format!("{}/admin/queues/cap", d.url()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(q["waiting"], 2, "the turned-back browser took no place");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsers_that_hang_up_mid_request_leave_no_ghost_places() -> anyhow::Result<()> {
    use tokio::io::AsyncWriteExt;
    let stack = Stack::start(StackOptions::default()).await?;
    stack
        .put_queue(
            "ghosts",
            json!({"admit_per_second": PAUSED, "grace_seconds": 1, "confirm": true}),
        )
        .await?;
    let addr = stack.gateways[0].addr;
    for _ in 0..50 {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(b"GET /api/queues/ghosts/stream HTTP/1.1\r\nHost: x\r\n\r\n")
            .await?;
        drop(s); // hang up without reading anything
    }
    // Whatever places those requests took are marked away and dropped after the grace period:
    // none stays in line, none is ever admitted.
    let q = eventually("the ghosts' places are dropped", async || {
        let q = stack.queue("ghosts").await?;
        if q["waiting"] == 0 && q["dropped_total"].as_u64().unwrap_or(0) > 0 {
            Ok(q)
        } else {
            Err(anyhow::anyhow!("{q}"))
        }
    })
    .await?;
    assert_eq!(q["waiting"], 0, "{q}");
    assert_eq!(q["admitted_total"], 0, "{q}");
    println!(
        "ghost requests: {} places taken, all dropped after the grace period",
        q["dropped_total"]
    );
    Ok(())
}
