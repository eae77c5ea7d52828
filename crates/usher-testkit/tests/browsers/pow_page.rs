//! The waiting-room page on a proof-of-work queue in a real browser (Debian's Chromium driven
//! by Playwright: `crates/usher-testkit/browser/pow.py`), against real processes: the page
//! solves the puzzle in its Web Worker with a progress bar, joins with the solution and is
//! admitted with a token that verifies. The driver also measures the page solver's hashes per
//! second: in its worker, and on the main thread unthrottled and with 4× CPU throttling
//! (Lighthouse's mobile setting, the phone estimate; CDP throttles the main thread only). The
//! figures are printed and written to `target/pow-figures.txt`, never asserted against a
//! target.

use std::time::Duration;

use usher_testkit::tools::{browser_venv, drive, workspace, Controls, PageStack};

const SCENARIOS: [&str; 3] = [
    "the page solves the puzzle in its worker, with progress, and joins",
    "admitted with a token that verifies",
    "the solver's speed, unthrottled and as a phone (4x CPU throttling)",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_solves_the_proof_of_work_in_chromium() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let stack = PageStack::start().await?;
    let driver = usher_testkit::tools::spawn_driver(&venv, "pow.py", &stack.driver_env())?;
    let mut figures = Figures(Vec::new());
    let passed = drive(driver, &mut figures, Duration::from_secs(240)).await?;
    let figures = figures.0;
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
    assert!(
        usher_testkit::tools::screenshot_since("pow-challenge", started),
        "the challenge's screenshot of this run"
    );
    Ok(())
}

/// The solver speeds the driver measured (`FIGURE` lines), printed as they come.
struct Figures(Vec<String>);

impl Controls for Figures {
    fn figure(&mut self, f: &str) {
        println!("proof of work: {f}");
        self.0.push(f.to_owned());
    }
}
