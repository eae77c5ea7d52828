//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use serde_json::Value;
use usher_core::sse::Event;
use usher_testkit::sse::{SseConn, Watcher};
use usher_testkit::SseClient;

pub const T: Duration = Duration::from_secs(10);

pub fn data(e: &usher_core::sse::Event) -> Value {
    serde_json::from_str(&e.data).expect("event data is JSON")
}

/// Opens a stream and reads up to the first `waiting` event; returns (ticket, position, conn).
pub async fn join(client: &SseClient, queue: &str) -> anyhow::Result<(String, u64, SseConn)> {
    let (e, conn) = join_event(client, queue).await?;
    let pos = data(&e)["position"].as_u64().unwrap_or(0);
    Ok((e.id.clone(), pos, conn))
}

async fn join_event(client: &SseClient, queue: &str) -> anyhow::Result<(Event, SseConn)> {
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), None)
        .await?;
    anyhow::ensure!(
        conn.status == 200,
        "join answered {}: {:?}",
        conn.status,
        conn.error_body
    );
    let e = conn.wait_for("waiting", T).await?;
    Ok((e, conn))
}

/// Joins and keeps reading in the background (the first `waiting` event included).
pub async fn join_watch(client: &SseClient, queue: &str) -> anyhow::Result<(String, u64, Watcher)> {
    let (e, conn) = join_event(client, queue).await?;
    let pos = data(&e)["position"].as_u64().unwrap_or(0);
    Ok((e.id.clone(), pos, Watcher::spawn_with(conn, vec![e])))
}

/// The latest `waiting` position seen by a watcher, or `first` if none arrived yet.
pub fn position(w: &Watcher) -> Option<u64> {
    w.last("waiting")
        .and_then(|e| data(&e)["position"].as_u64())
}

/// Every position a watcher saw, in order.
pub fn positions(w: &Watcher) -> Vec<u64> {
    w.all("waiting")
        .iter()
        .filter_map(|e| data(e)["position"].as_u64())
        .collect()
}

pub fn place_of(ticket: &str) -> u64 {
    ticket
        .split('.')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("ticket names a place")
}
