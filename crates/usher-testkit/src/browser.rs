//! A simulated browser: behaves like `EventSource` behind a load balancer. It reconnects when
//! a stream ends or a connection fails (waiting `retry:`), sends `Last-Event-ID`, gives up on a
//! non-200 answer, and — like a page's script — closes the stream on `admitted` or `closed`.
//! Each reconnect goes to the next gateway, as a load balancer may route it anywhere.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use usher_sse::Item;

use crate::sse::SseClient;

/// Everything one browser saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// The ticket (SSE id) it holds.
    pub ticket: Option<String>,
    /// `(when, position)` of every `waiting` event.
    pub positions: Vec<(Instant, u64)>,
    /// Payloads of `admitted` events.
    pub admitted: Vec<Value>,
    /// Payloads of `closed` events.
    pub closed: Vec<Value>,
    /// Payloads of `scheduled` events (in a scheduled sale's pre-queue).
    pub scheduled: Vec<Value>,
    /// Payloads of `draw_void` events (the draw its pre-queue place joined was voided).
    pub draw_void: Vec<Value>,
    /// Responses received (first connection included).
    pub connects: u32,
    /// The status that made it give up, if any.
    pub gave_up: Option<u16>,
    /// When it (re)connected successfully after the last interruption.
    pub last_connect: Option<Instant>,
}

impl Seen {
    /// The place id in its ticket.
    pub fn place(&self) -> Option<u64> {
        self.ticket.as_deref()?.split('.').nth(1)?.parse().ok()
    }
}

pub struct Browser {
    seen: Arc<Mutex<Seen>>,
    done: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Browser {
    /// Starts browsing `queue` through `gateways`, first connecting to `gateways[first]`.
    /// It stops by itself after `deadline`.
    pub fn spawn(gateways: Vec<SseClient>, queue: &str, first: usize, deadline: Duration) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let done = Arc::new(AtomicBool::new(false));
        let (s, d, path) = (
            seen.clone(),
            done.clone(),
            format!("/api/queues/{queue}/stream"),
        );
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(deadline, browse(gateways, path, first, s)).await;
            d.store(true, Ordering::SeqCst);
        });
        Self { seen, done, task }
    }

    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Admitted, closed, or given up.
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn browse(gateways: Vec<SseClient>, path: String, first: usize, seen: Arc<Mutex<Seen>>) {
    let record =
        |f: &mut dyn FnMut(&mut Seen)| f(&mut seen.lock().unwrap_or_else(|p| p.into_inner()));
    let mut retry = Duration::from_millis(1000);
    let mut i = first;
    loop {
        let gw = &gateways[i % gateways.len()];
        i += 1;
        let ticket = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ticket
            .clone();
        let conn = gw.open(&path, ticket.as_deref()).await;
        let mut conn = match conn {
            Ok(c) => c,
            Err(_) => {
                tokio::time::sleep(retry).await;
                continue;
            }
        };
        record(&mut |s| s.connects += 1);
        if conn.status != 200 {
            record(&mut |s| s.gave_up = Some(conn.status));
            return;
        }
        record(&mut |s| s.last_connect = Some(Instant::now()));
        loop {
            match conn.next_item(Duration::from_secs(3600)).await {
                Ok(Some(Item::Retry(ms))) => retry = Duration::from_millis(ms),
                Ok(Some(Item::Event(e))) => {
                    let data: Value = serde_json::from_str(&e.data).unwrap_or(Value::Null);
                    let mut finished = false;
                    record(&mut |s| {
                        if !e.id.is_empty() {
                            s.ticket = Some(e.id.clone());
                        }
                        match e.event.as_str() {
                            "waiting" => {
                                if let Some(p) = data["position"].as_u64() {
                                    s.positions.push((Instant::now(), p));
                                }
                            }
                            "admitted" => {
                                s.admitted.push(data.clone());
                                finished = true;
                            }
                            "closed" => {
                                s.closed.push(data.clone());
                                finished = true;
                            }
                            "scheduled" => s.scheduled.push(data.clone()),
                            "draw_void" => s.draw_void.push(data.clone()),
                            _ => {}
                        }
                    });
                    if finished {
                        return;
                    }
                }
                Ok(Some(Item::Comment(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        tokio::time::sleep(retry).await;
    }
}
