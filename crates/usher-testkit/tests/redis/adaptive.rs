//! The adaptive rate follows a backend's load reports, drops to 0 without a fresh one (no
//! ETA then), and only booking services holding `USHER_SERVICE_TOKEN` may report; and a fixed
//! rate holds within 2% over a long drain.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use usher_core::ids::QueueId;
use usher_core::store::Store;
use usher_core::time::now_ms;
use usher_testkit::line::{data, T};
use usher_testkit::procs::Proc;
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::{probe, RedisServer, SseClient};

const SERVICE_TOKEN: &str = "service-token-for-tests-0123456789";
const STALE_SECS: u64 = 2;

/// A load report as a booking service sends it: with `token` as its bearer, or none.
async fn report(base: &str, token: Option<&str>, body: &str) -> anyhow::Result<u16> {
    let mut r = reqwest::Client::new()
        .put(format!("{base}/api/backends/booking-main/load"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    Ok(r.send().await?.status().as_u16())
}

async fn queue(http: &reqwest::Client, base: &str) -> anyhow::Result<Value> {
    Ok(http
        .get(format!("{base}/admin/queues/adapt"))
        .send()
        .await?
        .json()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rate_follows_load_reports_and_stops_without_them() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = |token: Option<&str>| {
        let mut e = vec![
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
        ];
        if let Some(t) = token {
            e.push(("USHER_SERVICE_TOKEN", t.to_owned()));
        }
        e
    };
    let d = Proc::start("usher-dispatcher", &env(Some(SERVICE_TOKEN))).await?;
    let gw = Proc::start("usher-gateway", &env(None)).await?;
    let http = usher_testkit::config::admin_client();
    let base = d.url();
    let adaptive = json!({"backend": "booking-main", "load_low": 0, "load_high": 100,
        "min_per_second": 2, "max_per_second": 20, "stale_after_seconds": STALE_SECS});
    let r = http
        .put(format!("{base}/admin/queues/adapt"))
        .json(&json!({"admit_per_second": 10.0, "passthrough": false, "adaptive": adaptive}))
        .send()
        .await?;
    assert_eq!(r.status(), 201);

    // Bad settings are refused with a JSON error.
    for bad in [
        json!({"adaptive": {"backend": "b", "load_low": 5, "load_high": 5, "min_per_second": 1,
            "max_per_second": 2, "stale_after_seconds": 1}}),
        json!({"adaptive": {"backend": "b", "load_low": 0, "load_high": 5, "min_per_second": 3,
            "max_per_second": 2, "stale_after_seconds": 1}}),
        json!({"adaptive": {"backend": "b", "load_low": 0, "load_high": 5, "min_per_second": -1,
            "max_per_second": 2, "stale_after_seconds": 1}}),
        json!({"adaptive": {"backend": "b c", "load_low": 0, "load_high": 5,
            "min_per_second": 1, "max_per_second": 2, "stale_after_seconds": 1}}),
        json!({"max_active": -1}),
        json!({"max_active": 0}),
    ] {
        let r = http
            .put(format!("{base}/admin/queues/adapt"))
            .json(&bad)
            .send()
            .await?;
        assert_eq!(r.status(), 400, "{bad}");
        let e: Value = r.json().await?;
        assert!(e["error"].as_str().is_some(), "{e}");
    }

    // No report yet: two ticks later nobody is admitted, and waiting browsers get no ETA.
    let probe = probe::RedisProbe::connect(&redis.url()).await?;
    let adapt = QueueId::new("adapt")?;
    probe.ticks(&adapt, 2).await?;
    let q = queue(&http, &base).await?;
    assert_eq!(q["rate_reason"], "load_missing", "{q}");
    assert_eq!(q["effective_per_second"], 0.0);
    let client = SseClient::new(gw.url());
    let mut conn = client.open("/api/queues/adapt/stream", None).await?;
    let w = conn.wait_for("waiting", T).await?;
    assert_eq!(data(&w)["eta_seconds"], Value::Null, "{}", w.data);
    let watcher = Watcher::spawn_with(conn, vec![w]);

    // Reports without the right token are refused; bad reports too.
    assert_eq!(report(&base, None, r#"{"load": 1}"#).await?, 401);
    assert_eq!(report(&base, Some("wrong"), r#"{"load": 1}"#).await?, 401);
    let ok = Some(SERVICE_TOKEN);
    for bad in [
        r#"{"load": -1}"#,
        r#"{"load": "x"}"#,
        "not json",
        r#"{"lod": 1}"#,
    ] {
        assert_eq!(report(&base, ok, bad).await?, 400, "{bad}");
    }
    assert_eq!(queue(&http, &base).await?["rate_reason"], "load_missing");

    // A scripted sequence of reports: the rate follows the interpolation. `sent` and `acked`
    // bracket the last report: the dispatcher stamped it between the two.
    let (mut sent, mut acked) = (Instant::now(), Instant::now());
    for (load, rate) in [
        (0.0, 20.0),
        (50.0, 11.0),
        (75.0, 6.5),
        (100.0, 2.0),
        (500.0, 2.0),
        (-0.0, 20.0),
    ] {
        sent = Instant::now();
        assert_eq!(
            report(&base, ok, &format!(r#"{{"load": {load}}}"#)).await?,
            204
        );
        acked = Instant::now();
        let q = queue(&http, &base).await?;
        assert_eq!(q["rate_reason"], "adaptive", "{q}");
        assert_eq!(q["effective_per_second"], rate, "load {load}: {q}");
    }
    // The waiting browser is admitted now that the backend reports.
    eventually("the waiting browser admitted", async || {
        watcher.last("admitted").is_some()
    })
    .await?;

    // Reports stop: the rate is 0 from stale_after_seconds after the last one, and not before.
    // The dispatcher decides at each request, so bracket each answer by the request's start
    // and end instead of trusting this test's own (possibly starved) timing:
    // - a stale answer that ended at `end` means end - sent >= stale_after;
    // - a fresh answer to a request started at `start` means start - acked < stale_after.
    let stale_after = Duration::from_secs(STALE_SECS);
    let mut last_fresh_start = acked;
    let went_stale_end = loop {
        let start = Instant::now();
        let stale = queue(&http, &base).await?["rate_reason"] == "load_missing";
        let end = Instant::now();
        if stale {
            break end;
        }
        last_fresh_start = start;
        anyhow::ensure!(
            end - acked < usher_testkit::wait::patient(Duration::from_secs(30)),
            "the rate never went to 0 without reports"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "stale {:?} after the last report (its answer's end)",
        went_stale_end - sent
    );
    // Millisecond stamps: a millisecond of rounding either way.
    assert!(
        went_stale_end - sent + Duration::from_millis(1) >= stale_after,
        "stale {:?} after the last report was sent",
        went_stale_end - sent
    );
    assert!(
        last_fresh_start.saturating_duration_since(acked) <= stale_after + Duration::from_millis(1),
        "still fresh {:?} after the last report was acknowledged",
        last_fresh_start.saturating_duration_since(acked)
    );
    // A browser joining once ticks have run on the stale rate waits without an ETA, and is
    // admitted once reports resume.
    probe.ticks(&adapt, 2).await?;
    let mut conn = client.open("/api/queues/adapt/stream", None).await?;
    let w = conn.wait_for("waiting", T).await?;
    assert_eq!(data(&w)["eta_seconds"], Value::Null, "{}", w.data);
    assert_eq!(report(&base, ok, r#"{"load": 10}"#).await?, 204);
    conn.wait_for("admitted", T).await?;

    // A dispatcher without USHER_SERVICE_TOKEN refuses every report.
    let bare = Proc::start("usher-dispatcher", &env(None)).await?;
    assert_eq!(report(&bare.url(), ok, r#"{"load": 1}"#).await?, 401);
    assert_eq!(report(&bare.url(), None, r#"{"load": 1}"#).await?, 401);
    Ok(())
}

/// A fixed rate over a long drain, within 2%, on the dispatcher's clock: the admissions
/// between two ticks over the time between them (each tick's time and count are read
/// together), so only the bucket's fractional carry (under one place) is off. A dispatcher
/// stalled past the refill's 1 s cap loses that budget by design; over 20 s that takes a
/// stall of more than 1.4 s to break the 2%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_rate_holds_within_two_percent_over_a_long_drain() -> anyhow::Result<()> {
    let _solo = usher_testkit::solo().await; // measures a rate
    const RATE: f64 = 100.0;
    const WINDOW: Duration = Duration::from_secs(20);
    let stack = Stack::start(StackOptions {
        tick_ms: 100,
        ..Default::default()
    })
    .await?;
    stack
        .put_queue(
            "rate",
            json!({"admit_per_second": RATE, "paused": true, "passthrough": false}),
        )
        .await?;
    let store = Store::connect(&stack.redis.url()).await?;
    let q = QueueId::new("rate")?;
    // Enough places for the whole window and more (browsers of another gateway).
    for _ in 0..(RATE as usize * 26 / 500 + 1) {
        store.join_many(&q, 999, now_ms(), 500).await?;
    }
    let _ = probe::join(&store, &q, 999, now_ms()).await?;
    stack.put_queue("rate", json!({"paused": false})).await?;
    // The measurement's warm-up: the window starts on a drain that has run for a while (20
    // ticks, 2 s at 100 ms), not on its first ticks.
    let warm = probe::RedisProbe::connect(&stack.redis.url()).await?;
    warm.ticks(&q, 20).await?;
    // Count on the dispatcher's clock: each tick writes its time and the admissions it made
    // together, so a slow read here cannot stretch or shrink the window.
    let redis = probe::RedisProbe::connect(&stack.redis.url()).await?;
    let (t0, n0) = redis.last_tick(&q).await?;
    // The measurement window itself: a rate is measured over wall-clock time.
    tokio::time::sleep(WINDOW).await;
    let (t1, n1) = redis.last_tick(&q).await?;
    let v = stack.queue("rate").await?;
    assert!(v["waiting"].as_u64() > Some(0), "the line never ran dry");
    let secs = (t1 - t0) as f64 / 1000.0;
    let measured = (n1 - n0) as f64 / secs;
    println!(
        "{} admitted in {secs:.2} s of ticks: {measured:.2}/s against {RATE}/s",
        n1 - n0
    );
    assert!(
        (measured - RATE).abs() <= RATE * 0.02,
        "measured {measured:.2}/s against {RATE}/s"
    );
    Ok(())
}
