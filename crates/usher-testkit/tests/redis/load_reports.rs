//! Load reports from the booking side reach an adaptive queue: `usher-admission`'s
//! `report_load` and the demo booking service's reporter, against a real dispatcher and Redis.

use std::time::Duration;

use serde_json::{json, Value};
use usher_admission::Admission;
use usher_testkit::procs::Proc;
use usher_testkit::stack::Server;
use usher_testkit::wait::eventually;
use usher_testkit::RedisServer;

const SERVICE_TOKEN: &str = "service-token-for-load-reports-4f2a";

/// The dispatcher with the service token, and an adaptive queue `q` following `backend`
/// (load 0 → 20/s, load 100 → 2/s).
async fn dispatcher_with_adaptive_queue(
    redis: &RedisServer,
    q: &str,
    backend: &str,
) -> anyhow::Result<Proc> {
    let d = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_SERVICE_TOKEN", SERVICE_TOKEN.to_owned()),
        ],
    )
    .await?;
    let r = usher_testkit::config::admin_client()
        .put(format!("{}/admin/queues/{q}", d.url()))
        .json(
            &json!({"admit_per_second": 10, "passthrough": false, "adaptive": {
            "backend": backend, "load_low": 0, "load_high": 100, "min_per_second": 2,
            "max_per_second": 20, "stale_after_seconds": 5}}),
        )
        .send()
        .await?;
    anyhow::ensure!(r.status() == 201, "PUT queue: {}", r.status());
    Ok(d)
}

async fn queue(d: &Proc, q: &str) -> anyhow::Result<Value> {
    Ok(usher_testkit::config::admin_client()
        .get(format!("{}/admin/queues/{q}", d.url()))
        .send()
        .await?
        .json()
        .await?)
}

/// Polls the queue until `done` holds for its view (or fails after 10 s with the last view).
async fn until(d: &Proc, q: &str, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    eventually(&format!("queue {q}'s view to change"), async || {
        let v = queue(d, q).await?;
        anyhow::ensure!(done(&v), "{v}");
        Ok(v)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_load_sets_the_adaptive_rate_and_needs_the_service_token() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let d = dispatcher_with_adaptive_queue(&redis, "show", "booking-main").await?;
    assert_eq!(queue(&d, "show").await?["rate_reason"], "load_missing");

    let service = Admission::builder(d.url())
        .service_token(SERVICE_TOKEN)
        .build()?;
    service.report_load("booking-main", 50.0).await?;
    let v = until(&d, "show", |v| v["rate_reason"] == "adaptive").await?;
    // Half way between 20/s (load 0) and 2/s (load 100).
    assert_eq!(v["effective_per_second"], 11.0, "{v}");
    service.report_load("booking-main", 100.0).await?;
    until(&d, "show", |v| v["effective_per_second"] == 2.0).await?;

    // Without the token, or with another one, the report is refused and changes nothing.
    for anonymous in [
        Admission::builder(d.url()).any_queue().build()?,
        Admission::builder(d.url())
            .service_token("not-the-service-token-0123456789abcdef")
            .build()?,
    ] {
        assert!(
            anonymous.report_load("booking-main", 0.0).await.is_err(),
            "a report without the service token is refused"
        );
    }
    assert_eq!(queue(&d, "show").await?["effective_per_second"], 2.0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_booking_service_reports_its_request_rate() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let d = dispatcher_with_adaptive_queue(&redis, "demo", "demo-backend").await?;
    let mut cfg = usher_testkit::config::booking(&d.url());
    cfg.load_backend = Some("demo-backend".to_owned());
    cfg.service_token = Some(SERVICE_TOKEN.to_owned());
    cfg.load_report_seconds = 1;
    let booking = Server::spawn(|l, rx| {
        usher_booking_demo::run(cfg, l, async move {
            let _ = rx.await;
        })
    })
    .await?;
    // An idle service reports load 0: the queue admits at its maximum.
    let v = until(&d, "demo", |v| v["rate_reason"] == "adaptive").await?;
    assert_eq!(v["effective_per_second"], 20.0, "{v}");
    // Busy: requests (refused ones count too) raise the reported load, so the rate drops.
    let seats = format!("{}/api/seats", booking.url());
    let busy = tokio::spawn(async move {
        let http = reqwest::Client::new();
        loop {
            let _ = http.get(&seats).send().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let slowed = until(&d, "demo", |v| {
        v["effective_per_second"].as_f64().is_some_and(|r| r < 20.0)
    })
    .await;
    busy.abort();
    let slowed = slowed?;
    assert_eq!(slowed["rate_reason"], "adaptive", "{slowed}");
    booking.stop().await?;
    Ok(())
}
