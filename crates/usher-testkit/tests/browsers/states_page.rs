//! The states people see on the waiting-room page (issue 24, item 6), in Chromium driven by
//! Playwright (`crates/usher-testkit/browser/states_page.py`), against real processes: a
//! scheduled sale's opening time in the browser's time zone (two zones) with the draw
//! explained; maintenance shown at once and cleared, places kept; an ended sale's text, also
//! after a reload (410); a wrong link's page (404, not JSON); the demo shop on a phone: its landing
//! page, the line, the entry page, a booked seat. Screenshots go to `target/screenshots/`.

use std::time::Duration;

use usher_testkit::procs::Proc;
use usher_testkit::tools::{browser_venv, drive};
use usher_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_states_people_understand() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "200".into()),
        ("USHER_RETRY_MS", "1000".into()),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env).await?;
    // The demo shop's landing page links the waiting room of `shop`.
    let booking = Proc::start(
        "usher-booking-demo",
        &[
            (
                "USHER_JWKS_URL",
                format!("{}/.well-known/jwks.json", dispatcher.url()),
            ),
            ("USHER_DISPATCHER_URL", dispatcher.url()),
            ("USHER_QUEUE_PAGE_URL", format!("{}/q/shop", gateway.url())),
        ],
    )
    .await?;
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "states_page.py",
        &usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), &booking.url()),
    )?;
    let passed = drive(driver, &mut (), Duration::from_secs(180))
        .await
        .map_err(|e| {
            e.context(format!(
                "gateway:\n{}\ndispatcher:\n{}",
                gateway.log_tail(),
                dispatcher.log_tail()
            ))
        })?;
    assert_eq!(
        passed,
        [
            "the opening time in the browser's time zone, and the draw explained",
            "maintenance is shown at once with its text, places kept, and cleared",
            "an ended sale shows the operator's text, also after a reload",
            "a wrong link shows a page, not JSON",
            "the demo shop fits a phone: landing, the line, booking",
        ]
    );
    for shot in [
        "scheduled-opening-time",
        "maintenance",
        "ended",
        "unknown-queue",
        "demo-landing",
        "demo-entry",
        "demo-booked",
    ] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {shot}.png of this run"
        );
    }
    Ok(())
}
