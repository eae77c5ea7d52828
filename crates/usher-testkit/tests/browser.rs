//! The waiting-room page in a real browser: Debian's Chromium driven by Playwright
//! (`crates/usher-testkit/browser/waiting_room.py`), against real processes. The test installs
//! what it needs (`scripts/ensure-browser.sh`: chromium with apt, Playwright and k6 in a venv
//! under target/), so `cargo test` on a fresh clone runs it. Screenshots of every state go to
//! `target/screenshots/`.

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use usher_testkit::procs::Proc;
use usher_testkit::tools::{booking_demo, browser_venv, workspace};
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
    let mut driver = usher_testkit::tools::spawn_driver(
        &venv,
        "waiting_room.py",
        &[
            ("USHER_TEST_GATEWAY", gateway.url()),
            ("USHER_TEST_DISPATCHER", dispatcher.url()),
            (
                "USHER_TEST_ADMIN_TOKEN",
                usher_testkit::config::ADMIN_TOKEN.to_string(),
            ),
            ("USHER_TEST_BOOKING", booking.url()),
        ],
    )?;
    let mut stdin = driver.stdin.take().context("driver stdin")?;
    let mut lines = BufReader::new(driver.stdout.take().context("driver stdout")?).lines();
    let mut result = None;
    let run = async {
        while let Some(line) = lines.next_line().await? {
            match line.as_str() {
                "CONTROL kill-gateway" => gateway.kill9(),
                "CONTROL start-gateway" => gateway.restart().await?,
                l if l.starts_with("RESULT ") => {
                    result = Some(l.to_owned());
                    continue;
                }
                other => {
                    eprintln!("driver: {other}");
                    continue;
                }
            }
            stdin.write_all(b"OK\n").await?;
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .context("the browser tests took longer than 4 minutes")??;
    let passed = usher_testkit::tools::driver_passed(&mut driver, result).await?;
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
        let path = shots.join(format!("{shot}.png"));
        assert!(path.exists(), "screenshot {}", path.display());
    }
    Ok(())
}
