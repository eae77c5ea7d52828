//! The operator dashboard (`/admin/ui` on the dispatcher): its HTTP headers, and the whole UI
//! in a real browser — Debian's Chromium driven by Playwright
//! (`crates/usher-testkit/browser/dashboard.py`) against real Redis, dispatcher and gateway
//! processes, with simulated browsers waiting in the queue it creates. Screenshots go to
//! `target/screenshots/`.

use std::time::Duration;

use anyhow::Context;
use usher_testkit::answers::header;
use usher_testkit::browser::Browser;
use usher_testkit::procs::Proc;
use usher_testkit::tools::{browser_venv, drive, workspace, Controls};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{RedisServer, SseClient};

const TOKEN: &str = "dashboard-test-admin-token-5c2e8a41f09b";

/// Every scenario the driver must report as passed.
const SCENARIOS: [&str; 17] = [
    "a wrong token shows an error",
    "sign in keeps the token in sessionStorage, no cookie",
    "create a queue through the UI",
    "the numbers move while browsers wait",
    "a cancelled dialog makes no call",
    "pause stops admission while the line keeps its place",
    "send a notice",
    "maintenance with its text, and a scheduled sale's entrants",
    "change the rate: only the changed field is sent",
    "no-shows: the arrival deadline and make-up are set, the share is shown",
    // >>> door
    "the open door: set through the form, its last period shown",
    // <<< door
    "a stale edit is refused with 412 and the form shows the settings now",
    "resume admits everyone",
    "a change that needs confirming is asked again with the reason",
    "close with a reason",
    "the readiness panel shows each check and its fix",
    "sign out forgets the token",
];

async fn dispatcher(redis: &RedisServer) -> anyhow::Result<Proc> {
    Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_ADMIN_TOKEN", TOKEN.into()),
            ("USHER_TICK_MS", "200".into()),
        ],
    )
    .await
}

#[tokio::test]
async fn the_dashboard_is_served_with_a_strict_policy() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let d = dispatcher(&redis).await?;
    let http = reqwest::Client::new();
    // The page holds no data: it is served without the token.
    let page = http.get(format!("{}/admin/ui", d.url())).send().await?;
    assert_eq!(page.status(), 200);
    assert_eq!(header(&page, "content-type"), "text/html; charset=utf-8");
    let csp = header(&page, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self';",
        "style-src 'self';",
        "connect-src 'self';",
        "form-action 'none';",
        "frame-ancestors 'none';",
    ] {
        assert!(csp.contains(directive), "{directive} in {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(header(&page, "x-frame-options"), "DENY");
    assert_eq!(header(&page, "x-content-type-options"), "nosniff");
    assert_eq!(header(&page, "referrer-policy"), "no-referrer");
    assert!(header(&page, "set-cookie").is_empty());
    let html = page.text().await?;
    assert!(html.contains("/admin/ui/assets/dashboard.js"));
    for (name, ty) in [
        ("dashboard.js", "text/javascript; charset=utf-8"),
        ("dashboard.css", "text/css; charset=utf-8"),
    ] {
        let r = http
            .get(format!("{}/admin/ui/assets/{name}", d.url()))
            .send()
            .await?;
        assert_eq!(r.status(), 200, "{name}");
        assert_eq!(header(&r, "content-type"), ty, "{name}");
        assert_eq!(header(&r, "content-security-policy"), csp, "{name}");
        assert_eq!(header(&r, "x-content-type-options"), "nosniff", "{name}");
        assert!(!r.text().await?.is_empty(), "{name}");
    }
    for bad in ["nope.js", "..%2Fadmin.rs", "index.html"] {
        let r = http
            .get(format!("{}/admin/ui/assets/{bad}", d.url()))
            .send()
            .await?;
        assert_eq!(r.status(), 404, "{bad}");
        let body: serde_json::Value = r.json().await?;
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    // The data it shows stays behind the token.
    let gws = format!("{}/admin/gateways", d.url());
    let refused = http.get(&gws).send().await?;
    assert_eq!(refused.status(), 401);
    let wrong = http.get(&gws).bearer_auth("wrong").send().await?;
    assert_eq!(wrong.status(), 401);
    let body: serde_json::Value = http
        .get(&gws)
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(body, serde_json::json!({ "gateways": [] }));
    Ok(())
}

#[tokio::test]
async fn gateways_are_listed_with_their_queues() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let d = dispatcher(&redis).await?;
    let gw = Proc::start("usher-gateway", &[("USHER_REDIS_URL", redis.url())]).await?;
    let http = reqwest::Client::new();
    let put = http
        .put(format!("{}/admin/queues/gwq", d.url()))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "paused": true }))
        .send()
        .await?;
    assert_eq!(put.status(), 201);
    let waiting = Browser::spawn(
        vec![SseClient::new(gw.url())],
        "gwq",
        0,
        Duration::from_secs(30),
    );
    eventually("the browser waits", async || {
        !waiting.seen().positions.is_empty()
    })
    .await?;
    // The counts come with the gateway's next heartbeat.
    let body = eventually("the gateway's heartbeat to count the stream", async || {
        let body: serde_json::Value = http
            .get(format!("{}/admin/gateways", d.url()))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(body["gateways"][0]["streams"] == 1, "{body}");
        Ok(body)
    })
    .await?;
    assert_eq!(body["gateways"][0]["streams"], 1, "{body}");
    assert!(body["gateways"][0]["sockets"].as_u64() >= Some(1), "{body}");
    let gateways = body["gateways"].as_array().context("gateways")?;
    assert_eq!(gateways.len(), 1, "{body}");
    assert_eq!(gateways[0]["alive"], true, "{body}");
    assert_eq!(gateways[0]["queues"], serde_json::json!(["gwq"]), "{body}");
    assert!(gateways[0]["server_id"].is_string(), "{body}");
    // A gateway that stops is listed as gone, without counts.
    let mut gw = gw;
    gw.term()?;
    assert!(
        gw.wait_exit(Duration::from_secs(10)).await?,
        "the gateway exits"
    );
    let body: serde_json::Value = http
        .get(format!("{}/admin/gateways", d.url()))
        .bearer_auth(TOKEN)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(body["gateways"][0]["alive"], false, "{body}");
    assert_eq!(
        body["gateways"][0]["streams"],
        serde_json::Value::Null,
        "{body}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_works_in_chromium() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let redis = RedisServer::start()?;
    let d = dispatcher(&redis).await?;
    let gw = Proc::start("usher-gateway", &[("USHER_REDIS_URL", redis.url())]).await?;
    let shots = workspace().join("target/screenshots");
    let driver = usher_testkit::tools::spawn_driver(
        &venv,
        "dashboard.py",
        &[
            ("USHER_TEST_DISPATCHER", d.url()),
            ("USHER_TEST_GATEWAY", gw.url()),
            ("USHER_TEST_ADMIN_TOKEN", TOKEN.to_string()),
        ],
    )?;
    let mut controls = JoinControls {
        gateway: gw.url(),
        dispatcher: d.url(),
        browsers: Vec::new(),
    };
    // >>> door
    // The open-door scenario shows a recorded period: one is written through the store (as a
    // gateway writes it once Redis is back) as soon as the UI has created the queue.
    let seeded = tokio::spawn(seed_door_period(redis.url(), d.url()));
    let passed = drive(driver, &mut controls, Duration::from_secs(240)).await?;
    // <<< door
    // The browsers of the line the dashboard watched (not those of the scheduled sale's
    // pre-queue, which stay there until its draw).
    let browsers: Vec<Browser> = controls
        .browsers
        .into_iter()
        .filter_map(|(queue, b)| (queue == "dash").then_some(b))
        .collect();
    seeded.await??;
    assert_eq!(passed, SCENARIOS, "every scenario ran and passed");
    // The simulated browsers the dashboard watched were all admitted (it resumed the queue
    // and saw nobody waiting before closing it).
    assert_eq!(browsers.len(), 40);
    // The dashboard saw nobody waiting before it closed the queue; the admissions' delivery
    // may still be under way.
    // (The loop below asserts each browser's admission; this wait only gives them the time.)
    let _ = eventually_within(
        "every browser is admitted",
        Duration::from_secs(30),
        async || browsers.iter().all(|b| !b.seen().admitted.is_empty()),
    )
    .await;
    for b in &browsers {
        let seen = b.seen();
        assert!(!seen.positions.is_empty(), "{seen:?}");
        assert_eq!(seen.admitted.len(), 1, "{seen:?}");
    }
    for shot in [
        "dashboard-login-error",
        "dashboard",
        "dashboard-confirm",
        "dashboard-paused",
        "dashboard-maintenance",
        "dashboard-readiness",
    ] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {}.png of this run",
            shots.join(shot).display()
        );
    }
    Ok(())
}

/// `join <queue> <n>`: `n` simulated browsers join `queue` for the dashboard to watch.
struct JoinControls {
    gateway: String,
    dispatcher: String,
    /// Each simulated browser with the queue it joined.
    browsers: Vec<(String, Browser)>,
}

impl Controls for JoinControls {
    async fn control(&mut self, cmd: &str) -> anyhow::Result<()> {
        let rest = cmd.strip_prefix("join ").context("join <queue> <n>")?;
        let (queue, n) = rest.split_once(' ').context("join <queue> <n>")?;
        // Passthrough off: every simulated browser waits, and so shows a position, even when
        // the queue's bucket holds a token by the time they come.
        reqwest::Client::new()
            .put(format!("{}/admin/queues/{queue}", self.dispatcher))
            .bearer_auth(TOKEN)
            .json(&serde_json::json!({"passthrough": false}))
            .send()
            .await?
            .error_for_status()?;
        for _ in 0..n.parse::<usize>()? {
            self.browsers.push((
                queue.to_owned(),
                Browser::spawn(
                    vec![SseClient::new(self.gateway.clone())],
                    queue,
                    0,
                    Duration::from_secs(180),
                ),
            ));
        }
        Ok(())
    }
}

// >>> door
/// Once the dashboard created queue `dash`, records an open-door period for it, as a gateway
/// does when Redis answers again (`Store::close_door`).
async fn seed_door_period(redis_url: String, dispatcher_url: String) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    // Polled like `eventually` (whose checks are not `Send`, and this runs beside the driver).
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let created = http
            .get(format!("{dispatcher_url}/admin/queues/dash"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if created {
            break;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the dashboard did not create its queue"
        );
        tokio::time::sleep(usher_testkit::wait::POLL).await;
    }
    let store = usher_core::store::Store::connect(&redis_url).await?;
    let period = usher_core::door::DoorPeriod {
        gateway: 1,
        opened_at: "2026-05-01T09:00:00.000Z".into(),
        closed_at: "2026-05-01T09:01:30.000Z".into(),
        admitted: 7,
    };
    store
        .close_door(&usher_core::ids::QueueId::new("dash")?, &[], Some(&period))
        .await?;
    Ok(())
}
// <<< door
