//! A browser that drops its connection and comes straight back to the same gateway (a reload,
//! a phone switching networks) keeps a present place: it is admitted at its turn.
//!
//! The gateway writes disconnects to Redis in batches (a flush every few tens of ms). A resume
//! that reached Redis before the batch that recorded its own disconnect used to leave the
//! place marked away although its browser was connected, and ticks pass away places over: the
//! browser waited, connected, until its grace period ended.

mod common;

use std::time::Duration;

use common::{data, join, T};
use serde_json::json;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::SseClient;

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
    // Every disconnect has been flushed by now (the flush runs every 50 ms).
    tokio::time::sleep(Duration::from_millis(500)).await;
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
