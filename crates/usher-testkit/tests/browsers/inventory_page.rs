//! Admission that knows the inventory on the waiting-room page (issue 24, item 3), in Chromium
//! driven by Playwright (`crates/usher-testkit/browser/inventory_page.py`), against real
//! processes: each place reads how many are left and whether it is likely to get one, and a
//! report of 0 shows "Sold out for now" at once, places kept; the dashboard shows what is left. Screenshots go to
//! `target/screenshots/`.

use std::time::Duration;

use usher_testkit::procs::Proc;
use usher_testkit::tools::{browser_venv, drive};
use usher_testkit::RedisServer;

const SERVICE_TOKEN: &str = "service-token-for-the-inventory-page-01";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_tells_what_is_left_and_the_honest_chance() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "200".into()),
        ("USHER_SERVICE_TOKEN", SERVICE_TOKEN.into()),
    ];
    let dispatcher = Proc::start("usher-dispatcher", &env).await?;
    let gateway = Proc::start("usher-gateway", &env[..2]).await?;
    let mut driver_env =
        usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), "");
    driver_env.push(("USHER_TEST_SERVICE_TOKEN", SERVICE_TOKEN.into()));
    let driver = usher_testkit::tools::spawn_driver(&venv, "inventory_page.py", &driver_env)?;
    let passed = drive(driver, &mut (), Duration::from_secs(120))
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
            "each place reads how many are left and its honest chance, sold out at once",
            "the dashboard shows what is left and the report's age, and sets the basket",
        ]
    );
    for shot in [
        "inventory-unlikely",
        "inventory-sold-out",
        "inventory-dashboard",
    ] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {shot}.png of this run"
        );
    }
    Ok(())
}
