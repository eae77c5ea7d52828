//! The waiting-room page on a proof-of-work queue in a real browser (Debian's Chromium driven
//! by Playwright: `crates/usher-testkit/browser/pow.py`), against real processes: the page
//! solves the puzzle in its Web Worker with a progress bar, joins with the solution and is
//! admitted with a token that verifies. The driver also measures the page solver's hashes per
//! second: in its worker, and on the main thread unthrottled and with 4× CPU throttling
//! (Lighthouse's mobile setting, the phone estimate; CDP throttles the main thread only). The
//! figures are printed and written to `target/pow-figures.txt`, never asserted against a
//! target.

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, BufReader};
use usher_testkit::procs::Proc;
use usher_testkit::tools::{booking_demo, browser_venv, workspace};
use usher_testkit::RedisServer;

const SCENARIOS: [&str; 3] = [
    "the page solves the puzzle in its worker, with progress, and joins",
    "admitted with a token that verifies",
    "the solver's speed, unthrottled and as a phone (4x CPU throttling)",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_solves_the_proof_of_work_in_chromium() -> anyhow::Result<()> {
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
    let mut driver = usher_testkit::tools::spawn_driver(
        &venv,
        "pow.py",
        &usher_testkit::tools::page_driver_env(&gateway.url(), &dispatcher.url(), &booking.url()),
    )?;
    let mut lines = BufReader::new(driver.stdout.take().context("driver stdout")?).lines();
    let (mut result, mut figures) = (None, Vec::new());
    let run = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(f) = line.strip_prefix("FIGURE ") {
                println!("proof of work: {f}");
                figures.push(f.to_owned());
            } else if line.starts_with("RESULT ") {
                result = Some(line);
            } else {
                eprintln!("driver: {line}");
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(240), run)
        .await
        .context("the browser tests took longer than 4 minutes")??;
    let passed = usher_testkit::tools::driver_passed(&mut driver, result).await?;
    assert_eq!(passed, SCENARIOS, "every scenario ran and passed");
    assert!(
        figures
            .iter()
            .any(|f| f.starts_with("js_main_thread_hashes_per_second_4x_throttled ")),
        "the phone figure was measured: {figures:?}"
    );
    std::fs::write(
        workspace().join("target/pow-figures.txt"),
        figures.join("\n") + "\n",
    )?;
    assert!(workspace()
        .join("target/screenshots/pow-challenge.png")
        .exists());
    Ok(())
}
