//! No-shows (issue 24, item 4): a session arrives when the booking service first checks,
//! touches or consumes it; one not checked within `arrival_seconds` ends early and frees its
//! `max_active` slot; `make_up_no_shows` raises the rate by the measured no-show share, never
//! above twice the rate. Real Redis, dispatcher and gateway; browsers are SSE clients.

use std::collections::HashSet;

use reqwest::Method;
use serde_json::{json, Value};
use usher_core::ids::QueueId;
use usher_testkit::line::data;
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::{RedisProbe, SseClient};

async fn stack() -> anyhow::Result<Stack> {
    Stack::start(StackOptions {
        tick_ms: 100,
        ..Default::default()
    })
    .await
}

/// The entry token a browser was admitted with.
fn token(w: &Watcher) -> Option<String> {
    w.last("admitted")
        .and_then(|e| data(&e)["token"].as_str().map(str::to_owned))
}

/// `GET /api/session` with `token`, as a booking service checks an arrival: the status.
async fn check(stack: &Stack, token: &str) -> anyhow::Result<u16> {
    Ok(stack
        .http
        .request(
            Method::GET,
            format!("{}/api/session", stack.dispatcher.url()),
        )
        .bearer_auth(token)
        .send()
        .await?
        .status()
        .as_u16())
}

async fn join(stack: &Stack, queue: &str, n: usize) -> anyhow::Result<Vec<Watcher>> {
    let client = SseClient::new(stack.gateway_url(0));
    let mut ws = Vec::new();
    for _ in 0..n {
        ws.push(usher_testkit::line::join_watch(&client, queue).await?.2);
    }
    Ok(ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checked_session_is_kept_and_an_unchecked_one_ends_and_frees_its_slot(
) -> anyhow::Result<()> {
    let stack = stack().await?;
    let v = stack
        .put_queue(
            "ns",
            json!({"admit_per_second": 50.0, "max_active": 3, "passthrough": false,
                   "arrival_seconds": 2}),
        )
        .await?;
    assert_eq!(v["arrival_seconds"], 2);
    assert_eq!(v["make_up_no_shows"], false);
    let q = QueueId::new("ns")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let ws = join(&stack, "ns", 4).await?;
    let (a, b, c) = eventually("three admitted, the cap", async || {
        match (token(&ws[0]), token(&ws[1]), token(&ws[2])) {
            (Some(a), Some(b), Some(c)) => Some((a, b, c)),
            _ => None,
        }
    })
    .await?;
    assert!(
        token(&ws[3]).is_none(),
        "the fourth waits behind max_active"
    );
    // The booking service checks the first session and touches the second: both arrived.
    assert_eq!(check(&stack, &a).await?, 200);
    let touched = stack
        .http
        .post(format!("{}/api/session/touch", stack.dispatcher.url()))
        .bearer_auth(&b)
        .send()
        .await?;
    assert_eq!(touched.status(), 200);
    let (admitted_by, _) = probe.last_tick(&q).await?;
    // The third is never checked: its session ends after two seconds (room for the checks
    // above on a loaded machine) and its slot goes to the fourth browser.
    let d = eventually("the fourth is admitted into the freed slot", async || {
        token(&ws[3])
    })
    .await?;
    assert_eq!(check(&stack, &c).await?, 410, "the no-show's session ended");
    // Past the first two sessions' deadlines too (a tick later than two seconds after they
    // were admitted), they are still active: they arrived.
    eventually("a tick after the arrival deadlines", async || {
        let (at, _) = probe.last_tick(&q).await?;
        if at > admitted_by + 2_100 {
            Ok(())
        } else {
            Err(anyhow::anyhow!("last tick at {at}"))
        }
    })
    .await?;
    assert_eq!(check(&stack, &a).await?, 200, "a checked session is kept");
    assert_eq!(check(&stack, &b).await?, 200, "a touched session is kept");
    let view = stack.queue("ns").await?;
    assert_eq!(view["no_shows_total"], 1, "{view}");
    assert_eq!(view["active"], 3, "{view}");
    // Fewer than 10 outcomes: no share yet.
    assert_eq!(view["no_show_ratio"], Value::Null, "{view}");
    assert_eq!(check(&stack, &d).await?, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shows_raise_the_rate_up_to_twice_and_never_above() -> anyhow::Result<()> {
    const RATE: f64 = 4.0;
    let stack = stack().await?;
    stack
        .put_queue(
            "mk",
            json!({"admit_per_second": RATE, "passthrough": false, "arrival_seconds": 1,
                   "make_up_no_shows": true}),
        )
        .await?;
    let q = QueueId::new("mk")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let ws = join(&stack, "mk", 60).await?;
    // Every third browser's session is checked as soon as it is admitted (it arrives); the
    // others never are (no-shows): the share tends to 2/3, above the ½ at which the make-up
    // reaches its cap (4 ÷ (1 − 2/3) would be 12/s), so the cap is what holds the rate. Each poll also reads the rate the API shows and the rate
    // the tick's bucket last refilled at: neither ever exceeds twice the configured rate.
    let mut checked = HashSet::new();
    // A rate above twice the configured one, the first time one is seen (it ends the wait).
    let mut over: Option<String> = None;
    let (ratio, effective) = eventually("the rate is made up for the no-shows", async || {
        for (i, w) in ws.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
            if checked.contains(&i) {
                continue;
            }
            if let Some(t) = token(w) {
                anyhow::ensure!(check(&stack, &t).await? == 200, "browser {i} checked");
                checked.insert(i);
            }
        }
        let v = stack.queue("mk").await?;
        let effective = v["effective_per_second"].as_f64().unwrap_or(0.0);
        let bucket: f64 = probe
            .meta_field(&q, "bucket_rate")
            .await?
            .and_then(|r| r.parse().ok())
            .unwrap_or(0.0);
        if effective > 2.0 * RATE || bucket > 2.0 * RATE + 1e-9 {
            over = Some(format!("bucket {bucket}, view {v}"));
            return Ok((0.0, 0.0));
        }
        match v["no_show_ratio"].as_f64() {
            Some(r) if r >= 0.5 && effective == 2.0 * RATE && bucket == 2.0 * RATE => {
                anyhow::ensure!(v["rate_reason"] == "no_shows_made_up", "{v}");
                Ok((r, effective))
            }
            _ => Err(anyhow::anyhow!(
                "share {}, effective {effective}, bucket {bucket}, admitted {}",
                v["no_show_ratio"],
                v["admitted_total"]
            )),
        }
    })
    .await?;
    assert_eq!(over, None, "never above twice the configured rate");
    assert!(ratio <= 0.8, "about two in three never arrived: {ratio}");
    assert_eq!(effective, 2.0 * RATE, "capped at twice the rate");
    // `/metrics` says the same after a tick: the share, the no-shows, the reason, the rate.
    let url = format!("{}/metrics", stack.dispatcher.url());
    eventually("the no-show metrics", async || {
        let text = stack.http.get(&url).send().await?.text().await?;
        // The value of the series `name` whose labels include each of `labels`.
        let value = |name: &str, labels: &[&str]| {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!("{name}{{")) && labels.iter().all(|x| l.contains(x))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        let q = "queue=\"mk\"";
        let seen = (
            value("usher_queue_no_show_ratio", &[q]),
            value("usher_no_shows_total", &[q]),
            value(
                "usher_queue_rate_reason",
                &[q, "reason=\"no_shows_made_up\""],
            ),
            value("usher_queue_effective_per_second", &[q]),
        );
        match seen {
            (Some(r), Some(n), Some(1.0), Some(e)) if r >= 0.5 && n > 0.0 && e == 2.0 * RATE => {
                Ok(())
            }
            other => Err(anyhow::anyhow!("{other:?}")),
        }
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_shows_are_off_by_default_and_bad_settings_are_refused() -> anyhow::Result<()> {
    let stack = stack().await?;
    let v = stack
        .put_queue(
            "plain",
            json!({"admit_per_second": 50.0, "passthrough": false}),
        )
        .await?;
    assert_eq!(v["arrival_seconds"], Value::Null, "{v}");
    assert_eq!(v["make_up_no_shows"], false, "{v}");
    assert_eq!(v["no_show_ratio"], Value::Null, "{v}");
    let q = QueueId::new("plain")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let ws = join(&stack, "plain", 1).await?;
    let t = eventually("admitted", async || token(&ws[0])).await?;
    let (admitted_by, _) = probe.last_tick(&q).await?;
    eventually("a tick more than a second later", async || {
        let (at, _) = probe.last_tick(&q).await?;
        if at > admitted_by + 1_100 {
            Ok(())
        } else {
            Err(anyhow::anyhow!("last tick at {at}"))
        }
    })
    .await?;
    // Never checked, and kept: without arrival_seconds nothing ends early.
    let v = stack.queue("plain").await?;
    assert_eq!(
        (v["active"].as_u64(), v["no_shows_total"].as_u64()),
        (Some(1), Some(0)),
        "{v}"
    );
    assert_eq!(v["rate_reason"], "configured");
    assert_eq!(check(&stack, &t).await?, 200);

    let put = |body: Value| {
        let http = stack.http.clone();
        let url = format!("{}/admin/queues/plain", stack.dispatcher.url());
        async move { anyhow::Ok(http.put(url).json(&body).send().await?.status().as_u16()) }
    };
    assert_eq!(
        put(json!({"make_up_no_shows": true})).await?,
        400,
        "needs arrival_seconds"
    );
    assert_eq!(put(json!({"arrival_seconds": 0})).await?, 400);
    assert_eq!(
        put(json!({"arrival_seconds": 601})).await?,
        400,
        "past the TTL"
    );
    assert_eq!(
        put(json!({"arrival_seconds": 30, "make_up_no_shows": true})).await?,
        200
    );
    assert_eq!(
        put(json!({"arrival_seconds": null})).await?,
        400,
        "make-up still on"
    );
    assert_eq!(
        put(json!({"arrival_seconds": null, "make_up_no_shows": false})).await?,
        200
    );
    assert_eq!(stack.queue("plain").await?["arrival_seconds"], Value::Null);
    Ok(())
}

/// At the store, with a synthetic clock: `n` places of `q` (set up with `cfg`) join and are
/// admitted by a tick at `t0`; their ids, and the tick lease.
async fn admitted_at(
    store: &usher_core::store::Store,
    q: &QueueId,
    cfg: &usher_core::store::QueueConfig,
    n: usize,
    t0: u64,
) -> anyhow::Result<(usher_core::store::Lease, Vec<usher_core::ids::PlaceId>)> {
    store.put_queue(q, cfg).await?;
    let lease = usher_testkit::line::take_lease(store, q).await?;
    for _ in 0..n {
        usher_testkit::probe::join(store, q, 7, t0).await?;
    }
    let mut places = Vec::new();
    for tick in usher_testkit::tick_calls(store, q, &usher_testkit::tick_args(&lease, t0)).await? {
        if let usher_core::store::Tick::Ticked(out) = tick {
            places.extend(out.fresh.iter().map(|e| e.place));
        }
    }
    Ok((lease, places))
}

/// The no-shows the ticks at `now` end.
async fn no_shows_at(
    store: &usher_core::store::Store,
    q: &QueueId,
    lease: &usher_core::store::Lease,
    now: u64,
) -> anyhow::Result<u64> {
    let mut no_shows = 0;
    for tick in usher_testkit::tick_calls(store, q, &usher_testkit::tick_args(lease, now)).await? {
        if let usher_core::store::Tick::Ticked(out) = tick {
            no_shows += out.no_shows;
        }
    }
    Ok(no_shows)
}

/// The share at the store, with a synthetic clock: 300 sessions admitted at once, 200 of them
/// checked at once, the other 100 found by a tick after their deadline. The window keeps the
/// last 200 outcomes (trimmed as the 201st comes), so the share is 100 / 200; the no-shows'
/// sessions ended, the arrived ones are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_is_measured_over_the_last_200_outcomes() -> anyhow::Result<()> {
    use usher_core::store::{QueueConfig, SessionState, Store};
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("window")?;
    let cfg = QueueConfig {
        admit_per_second: 10_000.0,
        passthrough: false,
        arrival_seconds: Some(1),
        ..Default::default()
    };
    let t0 = usher_core::time::now_ms();
    let (lease, places) = admitted_at(&store, &q, &cfg, 300, t0).await?;
    assert_eq!(places.len(), 300, "all admitted at t0");
    for (i, p) in places.iter().enumerate().filter(|(i, _)| i % 3 != 0) {
        let state = store.session(&q, *p, t0 + 10).await?;
        assert!(
            matches!(state, SessionState::Active { .. }),
            "{i}: {state:?}"
        );
    }
    let later = t0 + 2_000;
    assert_eq!(no_shows_at(&store, &q, &lease, later).await?, 100);
    let stats = store.queue_stats(&q, later).await?;
    assert_eq!(
        (stats.active, stats.no_shows_total, stats.no_show_ratio),
        (200, 100, Some(0.5)),
        "{stats:?}"
    );
    assert_eq!(
        store.session(&q, places[0], later).await?,
        SessionState::Ended
    );
    assert!(matches!(
        store.session(&q, places[1], later).await?,
        SessionState::Active { .. }
    ));
    Ok(())
}

/// Turning `arrival_seconds` off drops every pending deadline: an operator who switches it
/// off mid-sale (real buyers being ended) ends nobody after that, even sessions admitted
/// while it was on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_arrival_off_ends_nobody_admitted_while_it_was_on() -> anyhow::Result<()> {
    use usher_core::store::{QueueConfig, SessionState, Store};
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("off")?;
    let on = QueueConfig {
        admit_per_second: 10_000.0,
        passthrough: false,
        arrival_seconds: Some(1),
        ..Default::default()
    };
    let t0 = usher_core::time::now_ms();
    let (lease, places) = admitted_at(&store, &q, &on, 5, t0).await?;
    assert_eq!(places.len(), 5, "all admitted at t0, each with a deadline");
    let off = QueueConfig {
        arrival_seconds: None,
        ..on
    };
    store.put_queue(&q, &off).await?;
    let later = t0 + 2_000;
    assert_eq!(
        no_shows_at(&store, &q, &lease, later).await?,
        0,
        "no deadline outlives the setting"
    );
    for p in &places {
        assert!(matches!(
            store.session(&q, *p, later).await?,
            SessionState::Active { .. }
        ));
    }
    Ok(())
}

/// A place admitted by its join (passthrough, `join.lua`) gets its deadline too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_admission_must_arrive_too() -> anyhow::Result<()> {
    let stack = stack().await?;
    stack
        .put_queue(
            "pt",
            json!({"admit_per_second": 50.0, "passthrough": true, "arrival_seconds": 1}),
        )
        .await?;
    let q = QueueId::new("pt")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    // The first tick sets the token bucket a passthrough join spends.
    probe.next_tick(&q, usher_testkit::wait::LIMIT).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut conn = client.open("/api/queues/pt/stream", None).await?;
    let first = conn
        .next_event(usher_testkit::line::T)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the stream ended without an event"))?;
    assert_eq!(first.event, "admitted", "admitted by the join: {first:?}");
    let token = data(&first)["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // Never checked: it ends after a second.
    let v = eventually("the passthrough no-show ends", async || {
        let v = stack.queue("pt").await?;
        if v["no_shows_total"] == 1 && v["active"] == 0 {
            Ok(v)
        } else {
            Err(anyhow::anyhow!("{v}"))
        }
    })
    .await?;
    assert_eq!(v["admitted_total"], 1, "{v}");
    assert_eq!(check(&stack, &token).await?, 410);
    Ok(())
}
