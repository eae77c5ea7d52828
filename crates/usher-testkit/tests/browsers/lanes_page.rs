//! Lanes on the operator dashboard (issue 24, item 2), in Chromium driven by Playwright
//! (`crates/usher-testkit/browser/lanes_dashboard.py`), against real processes: a queue with
//! two lanes shows each lane's share and how many wait in it, the default lane marked.
//! The screenshot goes to `target/screenshots/dashboard-lanes.png`.

use std::time::Duration;

use anyhow::Context;
use usher_testkit::procs::Proc;
use usher_testkit::sse::SseConn;
use usher_testkit::tools::{browser_venv, drive, Controls};
use usher_testkit::{RedisServer, SseClient};

const TOKEN: &str = "lanes-test-admin-token-7d1f0b93c2a4";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_each_lane_and_its_count() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_ADMIN_TOKEN", TOKEN.into()),
            ("USHER_TICK_MS", "200".into()),
        ],
    )
    .await?;
    let gateway = Proc::start("usher-gateway", &[("USHER_REDIS_URL", redis.url())]).await?;
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "lanes_dashboard.py",
        &[
            ("USHER_TEST_DISPATCHER", dispatcher.url()),
            ("USHER_TEST_ADMIN_TOKEN", TOKEN.to_string()),
        ],
    )?;
    let mut joins = Joins {
        gateway: gateway.url(),
        streams: Vec::new(),
    };
    let passed = drive(driver, &mut joins, Duration::from_secs(120)).await?;
    assert_eq!(passed, ["the dashboard shows each lane's share and count"]);
    assert_eq!(
        joins.streams.len(),
        3,
        "the three joins the dashboard counted"
    );
    assert!(
        usher_testkit::tools::screenshot_since("dashboard-lanes", started),
        "screenshot dashboard-lanes.png of this run"
    );
    Ok(())
}

/// `join <queue> <n>`: `n` streams join `queue` (its default lane) and stay open.
struct Joins {
    gateway: String,
    streams: Vec<SseConn>,
}

impl Controls for Joins {
    async fn control(&mut self, cmd: &str) -> anyhow::Result<()> {
        let rest = cmd.strip_prefix("join ").context("join <queue> <n>")?;
        let (queue, n) = rest.split_once(' ').context("join <queue> <n>")?;
        for _ in 0..n.parse::<usize>()? {
            let (_, _, conn) =
                usher_testkit::line::join(&SseClient::new(self.gateway.clone()), queue).await?;
            self.streams.push(conn);
        }
        Ok(())
    }
}
