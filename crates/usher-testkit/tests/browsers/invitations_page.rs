//! The waiting-room page on an invite-only queue (docs/sale-day.md, "Invitations"), in
//! Chromium driven by Playwright (`crates/usher-testkit/browser/invitations_page.py`), against
//! real processes: the page takes the invitation from the link's fragment, exchanges it for a
//! join code in a header (never in a URL) and joins; a second browser of the same account
//! takes the place over; a visit without an invitation, or with an expired one, is told so.

use std::time::Duration;

use usher_testkit::procs::Proc;
use usher_testkit::tools::{booking_demo, browser_venv, drive};
use usher_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_joins_with_the_invitation_in_its_link() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let redis_url = ("USHER_REDIS_URL", redis.url());
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[redis_url.clone(), ("USHER_TICK_MS", "200".into())],
    )
    .await?;
    let gateway = Proc::start(
        "usher-gateway",
        &[redis_url, ("USHER_RETRY_MS", "1000".into())],
    )
    .await?;
    let booking = booking_demo(&dispatcher).await?;
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "invitations_page.py",
        &usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), &booking.url()),
    )?;
    let passed = drive(driver, &mut (), Duration::from_secs(120)).await?;
    assert_eq!(
        passed,
        [
            "an invitation in the link joins; it leaves neither the address bar nor a URL",
            "a second browser of the same account takes the place over",
            "no invitation on an invite-only queue: the page says so",
            "an expired invitation: the page says so",
        ]
    );
    // The gateway never wrote the invitation to its log.
    assert!(
        !gateway.log_text().contains("eyJ"),
        "no JWT in the gateway's log"
    );
    for shot in ["invitation-waiting", "invitation-required"] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {shot}.png of this run"
        );
    }
    Ok(())
}
