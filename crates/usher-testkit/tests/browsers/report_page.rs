//! The fairness report's page (issue 25, part 2), in Chromium driven by Playwright
//! (`crates/usher-testkit/browser/report_page.py`), against real processes: a sale recorded
//! through the store on a synthetic clock (half an hour of joins, admissions, browsers away
//! for good and sessions booked, released or expired, run in a few seconds), then the page
//! opened from the dashboard draws each plot. The screenshot goes to
//! `target/screenshots/fairness-report.png` (docs/fairness-report.png is a copy).

use std::time::Duration;

use usher_core::ids::{PlaceId, QueueId};
use usher_core::record::{JoinNote, NetworkHash};
use usher_core::store::{PlaceState, QueueConfig, Store, Tick};
use usher_core::time::now_ms;
use usher_testkit::line::take_lease;
use usher_testkit::procs::Proc;
use usher_testkit::tools::{browser_venv, drive};
use usher_testkit::{tick_args, tick_calls, RedisServer};

const TOKEN: &str = "report-test-admin-token-5e2a9c81d7f4";

/// Records a sale in `concert`: 20 minutes of joins (a rush, then a trickle) at 2 admissions a
/// second, one join in twenty away for good, a third of the joins from one busy network, and
/// of the sessions six in ten booked, one in ten released, the rest expired.
async fn record_a_sale(store: &Store) -> anyhow::Result<()> {
    let q = QueueId::new("concert")?;
    let cfg = QueueConfig {
        admit_per_second: 2.0,
        grace_seconds: 30,
        session_ttl_seconds: 120,
        passthrough: false,
        record: true,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &cfg).await?;
    let lease = take_lease(store, &q).await?;
    let t0 = now_ms() - 40 * 60_000;
    let mut n = 0u64;
    for s in 0..1800u64 {
        let now = t0 + s * 1000;
        let minute = s / 60;
        // Joins per second: 3 in the first four minutes, then fewer each minute.
        let joins = match minute {
            0..=3 => 3,
            4..=19 => u64::from(s.is_multiple_of(minute - 2)),
            _ => 0,
        };
        for _ in 0..joins {
            n += 1;
            let ip = if n.is_multiple_of(3) {
                "203.0.113.9".to_owned()
            } else {
                format!("10.{}.{}.1", n % 200, n % 7)
            };
            let note = JoinNote {
                network: Some(NetworkHash::of(b"report page", &q, ip.parse()?)),
                issue_to_join_ms: None,
            };
            let b = store
                .join_recorded(&q, 1, now, &[None], &[], None, &[note])
                .await?;
            if let Ok(PlaceState::Waiting { place, .. }) = b.outcome(0) {
                if n.is_multiple_of(20) {
                    store.mark_away(&q, &[place], 1, now + 500).await?;
                }
            }
        }
        for t in tick_calls(store, &q, &tick_args(&lease, now)).await? {
            if let Tick::Ticked(o) = t {
                for e in &o.fresh {
                    let p: PlaceId = e.place;
                    match p.0 % 10 {
                        0..=5 => {
                            store.consume_session(&q, p, now + 20_000).await?;
                        }
                        6 => {
                            store.end_session(&q, p, now + 30_000).await?;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_page_draws_its_plots() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    record_a_sale(&store).await?;
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_ADMIN_TOKEN", TOKEN.into()),
        ],
    )
    .await?;
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "report_page.py",
        &[
            ("USHER_TEST_DISPATCHER", dispatcher.url()),
            ("USHER_TEST_ADMIN_TOKEN", TOKEN.to_string()),
        ],
    )?;
    let passed = drive(driver, &mut (), Duration::from_secs(120)).await?;
    assert_eq!(passed, ["the report page draws every plot"]);
    assert!(
        usher_testkit::tools::screenshot_since("fairness-report", started),
        "screenshot fairness-report.png of this run"
    );
    Ok(())
}
