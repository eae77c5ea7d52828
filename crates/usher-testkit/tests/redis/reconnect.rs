//! A browser that drops its connection and comes straight back to the same gateway (a reload,
//! a phone switching networks) keeps a present place: it is admitted at its turn.
//!
//! The gateway writes disconnects to Redis in batches (a flush every few tens of ms). A resume
//! that reached Redis before the batch that recorded its own disconnect used to leave the
//! place marked away although its browser was connected, and ticks pass away places over: the
//! browser waited, connected, until its grace period ended.

use serde_json::json;
use usher_testkit::line::{data, join, T};
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::{RedisProbe, SseClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_back_at_once_on_the_same_gateway_is_admitted_at_its_turn() -> anyhow::Result<()>
{
    const BROWSERS: usize = 30;
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("reload", 100.0).await?;
    // Paused while everyone joins and reloads, so nobody is admitted before the reloads.
    stack.put_queue("reload", json!({"paused": true})).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut tickets = Vec::new();
    for _ in 0..BROWSERS {
        let (ticket, _, conn) = join(&client, "reload").await?;
        tickets.push((ticket, conn));
    }
    // Each browser reloads: its connection drops and the same ticket resumes at once, well
    // within one flush of the disconnects.
    let mut resumed = Vec::new();
    for (ticket, conn) in tickets {
        drop(conn);
        let mut again = client
            .open("/api/queues/reload/stream", Some(&ticket))
            .await?;
        let w = again.wait_for("waiting", T).await?;
        assert_eq!(w.id, ticket, "the resume keeps the place");
        resumed.push((ticket, again));
    }
    // Every disconnect is flushed once the gateway's away flush has run twice more (what it
    // must not do, mark a resumed place away, leaves nothing else to wait for).
    usher_testkit::line::away_flushed(&stack.gateway_url(0), 2).await?;
    let q = stack.queue("reload").await?;
    assert_eq!(q["waiting"], BROWSERS, "{q}");

    stack.put_queue("reload", json!({"paused": false})).await?;
    for (ticket, mut conn) in resumed {
        // At 100/s the whole line is through in well under a second: ten seconds is only
        // slack for a loaded machine. A place left away would wait its 300 s grace period.
        let a = conn.wait_for("admitted", T).await?;
        assert_eq!(a.id, ticket);
        assert!(data(&a)["token"].as_str().is_some_and(|t| !t.is_empty()));
    }
    let q = stack.queue("reload").await?;
    assert_eq!(q["admitted_total"], BROWSERS, "{q}");
    assert_eq!(q["waiting"], 0, "{q}");
    Ok(())
}

/// A gateway that resumes a place tells the gateway that held it, through that gateway's
/// stream. The notice can arrive late: the browser may be back on the old gateway by then (a
/// reload that lands there again), and that newer connection must keep the place. Here the
/// notice is sent again, late on purpose, after the place came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_takeover_notice_spares_the_newer_connection() -> anyhow::Result<()> {
    use usher_core::ids::{PlaceId, QueueId};
    use usher_core::messages::{CloseReason, StreamMessage};
    use usher_core::store::Store;

    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    stack.create_queue("pingpong", 100.0).await?;
    stack.put_queue("pingpong", json!({"paused": true})).await?;
    let a = SseClient::new(stack.gateway_url(0));
    let b = SseClient::new(stack.gateway_url(1));
    let (ticket, _, mut first) = join(&a, "pingpong").await?;
    // Resumed on B: the connection on A is told, and ends.
    let mut on_b = b.open("/api/queues/pingpong/stream", Some(&ticket)).await?;
    on_b.wait_for("waiting", T).await?;
    let closed = first.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "resumed_elsewhere");
    // Back on A: the connection on B is told, and ends.
    let mut back = a.open("/api/queues/pingpong/stream", Some(&ticket)).await?;
    back.wait_for("waiting", T).await?;
    let closed = on_b.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "resumed_elsewhere");

    // B's notice of its takeover, arriving only now, at every gateway.
    let place: PlaceId = ticket
        .split('.')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("ticket {ticket} names no place"))?;
    let store = Store::connect(&stack.redis.url()).await?;
    let notice = StreamMessage::Ended {
        queue: QueueId::new("pingpong")?,
        place,
        reason: CloseReason::ResumedElsewhere,
    };
    let gateways = store.live_gateways(usher_core::time::now_ms()).await?;
    assert_eq!(gateways.len(), 2);
    let batches: Vec<_> = gateways
        .into_values()
        .map(|id| (id, vec![notice.clone()]))
        .collect();
    store.send(&batches).await?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    for (id, _) in &batches {
        probe.gateway_applied(id).await?;
    }

    // The connection on A holds the place in Redis: it stays, and is admitted at its turn.
    stack
        .put_queue("pingpong", json!({"paused": false}))
        .await?;
    let admitted = back.wait_for("admitted", T).await?;
    assert_eq!(admitted.id, ticket);
    assert!(data(&admitted)["token"]
        .as_str()
        .is_some_and(|t| !t.is_empty()));
    Ok(())
}
