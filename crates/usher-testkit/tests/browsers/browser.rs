//! The waiting-room page in a real browser: Debian's Chromium driven by Playwright
//! (`crates/usher-testkit/browser/waiting_room.py`), against real processes. The test installs
//! what it needs (`scripts/ensure-browser.sh`: chromium with apt, Playwright and k6 in a venv
//! under target/), so `cargo test` on a fresh clone runs it. Screenshots of every state go to
//! `target/screenshots/`. A scheduled sale on the page (`scheduled_page.py`): the countdown,
//! the draw, the position and admission, and a draw voided by a Redis data loss.

use std::time::Duration;

use anyhow::Context;
use usher_testkit::procs::Proc;
use usher_testkit::tools::{booking_demo, browser_venv, drive, workspace, Controls};
use usher_testkit::RedisServer;

/// Every scenario the driver must report as passed.
const SCENARIOS: [&str; 11] = [
    "join and see the position",
    "reload keeps the place",
    "two tabs share one stream and the second takes over",
    "a ticket resumed elsewhere offers to continue here",
    "a gateway killed under the page reconnects and keeps the place",
    "the Korean page",
    "leave the line",
    "notices are shown as they arrive",
    "admitted: the position goes down, then a POST with a token that verifies",
    "sold out",
    "embedded: postMessage to the embedding origin only",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_room_page_works_in_chromium() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let env = [("USHER_REDIS_URL", redis.url())];
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[env[0].clone(), ("USHER_TICK_MS", "200".into())],
    )
    .await?;
    let mut gateway = Proc::start(
        "usher-gateway",
        &[env[0].clone(), ("USHER_RETRY_MS", "1000".into())],
    )
    .await?;
    let booking = booking_demo(&dispatcher).await?;
    let shots = workspace().join("target/screenshots");
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "waiting_room.py",
        &usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), &booking.url()),
    )?;
    let passed = drive(
        driver,
        &mut GatewayControls(&mut gateway),
        Duration::from_secs(240),
    )
    .await?;
    assert_eq!(passed, SCENARIOS, "every scenario ran and passed");
    for shot in [
        "waiting",
        "second-tab",
        "resumed-elsewhere",
        "reconnecting",
        "korean",
        "leave-confirm",
        "left",
        "notice",
        "admitted",
        "sold-out",
        "embedded",
    ] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {}.png of this run",
            shots.join(shot).display()
        );
    }
    Ok(())
}

/// `kill-gateway` and `start-gateway`.
struct GatewayControls<'a>(&'a mut Proc);

impl Controls for GatewayControls<'_> {
    async fn control(&mut self, cmd: &str) -> anyhow::Result<()> {
        match cmd {
            "kill-gateway" => self.0.kill9(),
            "start-gateway" => self.0.restart().await?,
            other => anyhow::bail!("unknown control {other:?}"),
        }
        Ok(())
    }
}

/// `flush-redis`: Redis loses everything (a `FLUSHALL`), as in a data loss.
struct FlushControls(String);

impl Controls for FlushControls {
    async fn control(&mut self, cmd: &str) -> anyhow::Result<()> {
        anyhow::ensure!(cmd == "flush-redis", "unknown control {cmd:?}");
        let client = redis::Client::open(self.0.as_str())?;
        let mut c = client.get_multiplexed_async_connection().await?;
        let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await?;
        Ok(())
    }
}

/// A scheduled sale on the page: a countdown to `opens_at` that goes down, "you are in the
/// draw", the position after the draw, then admission with a token that verifies; and a draw
/// voided by a Redis data loss (the queue comes back from `USHER_QUEUES_FILE` without the
/// sale), explained in English and Korean before the position shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_sale_counts_down_draws_and_explains_a_void_draw() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("queues.yaml");
    std::fs::write(&file, "void:\n  paused: true\n")?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "200".into()),
        ("USHER_HEARTBEAT_MS", "300".into()),
        // The draw ends the pre-queue streams with a retry: of at least 1 s (jittered), so
        // "you are in the draw" stays on screen until the browser resumes into the line.
        ("USHER_RETRY_MS", "2000".into()),
        ("USHER_QUEUES_FILE", file.display().to_string()),
        (
            "USHER_TICKET_KEY",
            "page-draw-test-ticket-key-0123456789abcd".into(),
        ),
        (
            "USHER_JWT_KEY",
            usher_mint::token::SigningKey::generate_pem()?,
        ),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env).await?;
    let booking = booking_demo(&dispatcher).await?;
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "scheduled_page.py",
        &usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), &booking.url()),
    )?;
    let passed = drive(
        driver,
        &mut FlushControls(redis.url()),
        Duration::from_secs(180),
    )
    .await
    .with_context(|| {
        format!(
            "gateway:\n{}\ndispatcher:\n{}",
            gateway.log_tail(),
            dispatcher.log_tail()
        )
    })?;
    assert_eq!(
        passed,
        [
            "countdown, then the draw, then a position, then admission",
            "a draw voided by a data loss is explained, in English and Korean",
            "a full pre-queue is explained, and no place is taken",
        ]
    );
    let shots = workspace().join("target/screenshots");
    for shot in [
        "scheduled-countdown",
        "scheduled-draw",
        "scheduled-position",
        "scheduled-admitted",
        "draw-void",
        "draw-void-korean",
        "pre-queue-full",
    ] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {}.png of this run",
            shots.join(shot).display()
        );
    }
    Ok(())
}
