//! `GET /metrics` on the real binaries: the Prometheus text format, counters that move by
//! exactly what the browsers did, per-queue gauges labelled with their queue, and nothing
//! that names a ticket or a token.

mod common;

use std::time::Duration;

use common::{data, join, T};
use serde_json::{json, Value};
use usher_testkit::procs::Proc;
use usher_testkit::{RedisServer, SseClient};

/// One sample line of the text format: `name{k="v",…} value`.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// The samples of a scrape (comment lines skipped). Label values here never hold `,` or `"`,
/// so a plain split is enough for this test.
fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut out = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .ok_or_else(|| anyhow::anyhow!("no value in {line:?}"))?;
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest
                    .strip_suffix('}')
                    .ok_or_else(|| anyhow::anyhow!("unclosed labels in {line:?}"))?;
                let labels = inner
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (k, v) = p
                            .split_once('=')
                            .ok_or_else(|| anyhow::anyhow!("bad label in {line:?}"))?;
                        Ok((k.to_owned(), v.trim_matches('"').to_owned()))
                    })
                    .collect::<anyhow::Result<Vec<_>>>()?;
                (name, labels)
            }
            None => (series, Vec::new()),
        };
        out.push(Sample {
            name: name.to_owned(),
            labels,
            value: value.parse()?,
        });
    }
    Ok(out)
}

/// The value of the sample `name` whose labels are exactly `labels`; a counter never
/// incremented is not rendered at all, which reads as 0 here.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map_or(0.0, |s| s.value)
}

struct Scrape {
    text: String,
    samples: Vec<Sample>,
}

async fn scrape(http: &reqwest::Client, base: &str) -> anyhow::Result<Scrape> {
    let resp = http.get(format!("{base}/metrics")).send().await?;
    anyhow::ensure!(resp.status() == 200, "/metrics answered {}", resp.status());
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(ct == "text/plain; version=0.0.4", "content-type was {ct:?}");
    let text = resp.text().await?;
    let samples = parse(&text)?;
    Ok(Scrape { text, samples })
}

/// Polls `base`'s metrics until `cond` holds for a scrape (or time runs out): the last scrape.
async fn scrape_until(
    http: &reqwest::Client,
    base: &str,
    cond: impl Fn(&[Sample]) -> bool,
) -> anyhow::Result<Scrape> {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let s = scrape(http, base).await?;
        if cond(&s.samples) || tokio::time::Instant::now() > deadline {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn put_queue(http: &reqwest::Client, base: &str, q: &str, body: Value) -> anyhow::Result<()> {
    let resp = http
        .put(format!("{base}/admin/queues/{q}"))
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "PUT queue {q}: {}",
        resp.status()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_browsers_did_and_name_no_ticket() -> anyhow::Result<()> {
    let mut redis = RedisServer::start()?;
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
        ],
    )
    .await?;
    // A cap of one stream, so the test can be refused for it.
    let gateway = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_MAX_CONNECTIONS", "1".to_owned()),
        ],
    )
    .await?;
    let (gw, ds) = (gateway.url(), dispatcher.url());
    let http = usher_testkit::config::admin_client();
    put_queue(&http, &ds, "fast", json!({"admit_per_second": 50})).await?;
    put_queue(
        &http,
        &ds,
        "held",
        json!({"admit_per_second": 50, "paused": true}),
    )
    .await?;
    let client = SseClient::new(gw.clone());
    let mut secrets = Vec::new();

    // Three browsers join the fast line one after another and are admitted.
    for _ in 0..3 {
        let (ticket, _, mut conn) = join(&client, "fast").await?;
        let admitted = conn.wait_for("admitted", T).await?;
        secrets.push(ticket);
        secrets.push(
            data(&admitted)["token"]
                .as_str()
                .unwrap_or("none")
                .to_owned(),
        );
        assert!(conn.next_event(T).await?.is_none(), "the stream ends");
    }
    // One waits in the paused line, holding the gateway's only stream: the next is refused.
    let (ticket, _, first) = join(&client, "held").await?;
    secrets.push(ticket.clone());
    let mut refused = client.open("/api/queues/held/stream", None).await?;
    assert_eq!(refused.status, 200, "a refused stream still answers 200");
    assert!(
        refused.next_event(T).await?.is_none(),
        "a refused stream carries retry: and no event"
    );
    // It goes away and comes back with its ticket (a resume), then leaves.
    drop(first);
    let scraped = scrape_until(&http, &gw, |s| {
        value(s, "usher_gateway_connections", &[("state", "streaming")]) == 0.0
    })
    .await?;
    assert_eq!(
        value(
            &scraped.samples,
            "usher_gateway_connections",
            &[("state", "streaming")]
        ),
        0.0,
        "the closed stream is no longer counted"
    );
    let mut back = client
        .open("/api/queues/held/stream", Some(&ticket))
        .await?;
    back.wait_for("waiting", T).await?;
    let left = http
        .delete(format!("{gw}/api/queues/held/tickets/{ticket}"))
        .send()
        .await?;
    assert_eq!(left.status(), 204);
    let closed = back.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "left");

    let g = scrape(&http, &gw).await?;
    let gv = |name: &str, labels: &[(&str, &str)]| value(&g.samples, name, labels);
    assert_eq!(gv("usher_gateway_joins_total", &[]), 4.0, "{}", g.text);
    assert_eq!(gv("usher_gateway_resumes_total", &[]), 1.0);
    assert_eq!(gv("usher_gateway_leaves_total", &[]), 1.0);
    assert_eq!(gv("usher_gateway_admissions_delivered_total", &[]), 3.0);
    assert_eq!(
        gv("usher_gateway_streams_refused_total", &[("reason", "cap")]),
        1.0
    );
    assert_eq!(gv("usher_redis_errors_total", &[]), 0.0, "redis was up");
    assert!(g.text.contains("# TYPE usher_gateway_connections gauge"));
    assert!(g.text.contains("# HELP usher_gateway_joins_total"));

    let d = scrape_until(&http, &ds, |s| {
        value(s, "usher_queue_waiting", &[("queue", "held")]) == 0.0
            && value(s, "usher_queue_active", &[("queue", "fast")]) == 3.0
    })
    .await?;
    let dv = |name: &str, labels: &[(&str, &str)]| value(&d.samples, name, labels);
    assert_eq!(
        dv("usher_admitted_total", &[("queue", "fast")]),
        3.0,
        "{}",
        d.text
    );
    assert_eq!(dv("usher_admitted_total", &[("queue", "held")]), 0.0);
    assert!(
        dv("usher_tokens_minted_total", &[]) >= 3.0,
        "every admission has a token"
    );
    assert_eq!(dv("usher_queue_active", &[("queue", "fast")]), 3.0);
    assert_eq!(dv("usher_queue_waiting", &[("queue", "fast")]), 0.0);
    for gauge in ["usher_queue_waiting", "usher_queue_active"] {
        let queues: Vec<_> = d
            .samples
            .iter()
            .filter(|s| s.name == gauge)
            .map(|s| s.labels.clone())
            .collect();
        assert!(
            queues.iter().all(|l| l.len() == 1 && l[0].0 == "queue"),
            "{gauge} is labelled with its queue only: {queues:?}"
        );
        assert_eq!(queues.len(), 2, "{gauge}: one series per configured queue");
    }
    assert!(dv("usher_tick_duration_seconds_count", &[]) > 0.0);
    for le in ["0.001", "2", "+Inf"] {
        assert!(
            d.samples
                .iter()
                .any(|s| s.name == "usher_tick_duration_seconds_bucket"
                    && s.labels == [("le".to_owned(), le.to_owned())]),
            "a tick-duration bucket at {le} s:\n{}",
            d.text
        );
    }
    assert_eq!(dv("usher_redis_errors_total", &[]), 0.0, "redis was up");

    for body in [&g.text, &d.text] {
        for secret in &secrets {
            assert!(
                !body.contains(secret.as_str()),
                "a ticket or token in /metrics"
            );
        }
    }
    let labels: std::collections::BTreeSet<_> = g
        .samples
        .iter()
        .chain(&d.samples)
        .flat_map(|s| s.labels.iter().map(|(k, _)| k.clone()))
        .collect();
    let allowed = ["le", "queue", "reason", "state"];
    assert!(
        labels.iter().all(|l| allowed.contains(&l.as_str())),
        "only bounded labels: {labels:?}"
    );

    // Redis goes away: a join is refused for it, and both servers count failed requests.
    redis.kill();
    let mut down = client.open("/api/queues/fast/stream", None).await?;
    assert!(down.next_event(T).await?.is_none(), "retry: only");
    let g = scrape(&http, &gw).await?;
    assert_eq!(
        value(
            &g.samples,
            "usher_gateway_streams_refused_total",
            &[("reason", "redis")]
        ),
        1.0,
        "{}",
        g.text
    );
    assert!(value(&g.samples, "usher_redis_errors_total", &[]) >= 1.0);
    let d = scrape_until(&http, &ds, |s| {
        value(s, "usher_redis_errors_total", &[]) >= 1.0
    })
    .await?;
    assert!(
        value(&d.samples, "usher_redis_errors_total", &[]) >= 1.0,
        "failed ticks are counted:\n{}",
        d.text
    );
    Ok(())
}
