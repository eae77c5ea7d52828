//! `GET /metrics` on the real binaries: the Prometheus text format, counters that move by
//! exactly what the browsers did, per-queue gauges labelled with their queue, and nothing
//! that names a ticket or a token.

use std::time::Duration;

use serde_json::json;
use usher_testkit::line::put_queue_at;
use usher_testkit::line::{data, join, T};
use usher_testkit::procs::Proc;
use usher_testkit::wait::eventually_within;
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

/// Polls `base`'s metrics until `cond` holds for a scrape (or 30 s pass; a starved machine
/// may need them): the last scrape, which the caller's asserts then explain.
async fn scrape_until(
    http: &reqwest::Client,
    base: &str,
    cond: impl Fn(&[Sample]) -> bool,
) -> anyhow::Result<Scrape> {
    let wait = eventually_within("a scrape to hold", Duration::from_secs(30), async || {
        let s = scrape(http, base).await?;
        anyhow::ensure!(cond(&s.samples), "not yet");
        Ok(s)
    });
    match wait.await {
        Ok(s) => Ok(s),
        Err(_) => scrape(http, base).await,
    }
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
    // The gateway's requests go over a new connection each: with a cap of one stream, every
    // stream opened tells the gateway's idle keep-alive connections to close (so they never
    // hold descriptors from streams), and a pooled connection reused at that moment is reset.
    let gw_http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()?;
    put_queue_at(
        &http,
        &ds,
        "fast",
        json!({"admit_per_second": 50, "passthrough": false}),
    )
    .await?;
    put_queue_at(
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
    let scraped = scrape_until(&gw_http, &gw, |s| {
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
    let left = gw_http
        .delete(format!("{gw}/api/queues/held/tickets/{ticket}"))
        .send()
        .await?;
    assert_eq!(left.status(), 204);
    let closed = back.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "left");

    let g = scrape(&gw_http, &gw).await?;
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
    // Every Redis call is timed, in the Redis buckets (100 µs up), by command.
    assert!(
        gv(
            "usher_redis_command_duration_seconds_count",
            &[("command", "EVALSHA")]
        ) >= 4.0
    );
    assert!(g
        .samples
        .iter()
        .any(|s| s.name == "usher_redis_command_duration_seconds_bucket"
            && s.labels.contains(&("le".to_owned(), "0.0001".to_owned()))));
    assert_eq!(gv("usher_gateway_draining", &[]), 0.0);
    assert_eq!(gv("usher_gateway_drain_remaining_streams", &[]), 0.0);
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
    assert_eq!(
        dv("usher_tick_period_seconds", &[]),
        0.1,
        "the configured period"
    );
    assert_eq!(dv("usher_queue_paused", &[("queue", "held")]), 1.0);
    assert_eq!(dv("usher_queue_paused", &[("queue", "fast")]), 0.0);
    assert_eq!(
        dv("usher_queue_admit_per_second", &[("queue", "fast")]),
        50.0
    );
    // The effective rate and its reason, as the admin API shows them.
    assert_eq!(
        dv("usher_queue_effective_per_second", &[("queue", "fast")]),
        50.0
    );
    assert_eq!(
        dv("usher_queue_effective_per_second", &[("queue", "held")]),
        0.0
    );
    for (queue, reason) in [("fast", "configured"), ("held", "paused")] {
        assert_eq!(
            dv(
                "usher_queue_rate_reason",
                &[("queue", queue), ("reason", reason)]
            ),
            1.0,
            "{queue} admits for {reason}"
        );
        assert_eq!(
            dv(
                "usher_queue_rate_reason",
                &[("queue", queue), ("reason", "load_missing")]
            ),
            0.0
        );
    }
    assert!(
        dv(
            "usher_redis_command_duration_seconds_count",
            &[("command", "EVALSHA")]
        ) > 0.0
    );
    // The stream gauges are sampled each heartbeat: present, and nothing left unread. The
    // dispatcher keeps sending this gateway state while the queue is open, so one sample may
    // catch a message between XADD and XACK: wait for a sample with the reader caught up (a
    // stuck reader never gets there).
    let g = scrape_until(&http, &gw, |s| {
        s.iter().any(|x| x.name == "usher_gateway_stream_lag")
            && value(s, "usher_gateway_stream_lag", &[]) == 0.0
            && value(s, "usher_gateway_stream_pending", &[]) == 0.0
    })
    .await?;
    assert_eq!(
        value(&g.samples, "usher_gateway_stream_lag", &[]),
        0.0,
        "{}",
        g.text
    );
    assert_eq!(value(&g.samples, "usher_gateway_stream_pending", &[]), 0.0);

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
    let allowed = ["command", "le", "queue", "reason", "state"];
    assert!(
        labels.iter().all(|l| allowed.contains(&l.as_str())),
        "only bounded labels: {labels:?}"
    );

    // Redis goes away: a join is refused for it, and both servers count failed requests.
    redis.kill();
    let mut down = client.open("/api/queues/fast/stream", None).await?;
    assert!(down.next_event(T).await?.is_none(), "retry: only");
    let g = scrape(&gw_http, &gw).await?;
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
    let failed: f64 = g
        .samples
        .iter()
        .filter(|s| s.name == "usher_redis_command_errors_total")
        .map(|s| s.value)
        .sum();
    assert!(failed >= 1.0, "failed commands are counted:\n{}", g.text);
    let d = scrape_until(&http, &ds, |s| {
        value(s, "usher_redis_errors_total", &[]) >= 1.0
    })
    .await?;
    assert!(
        value(&d.samples, "usher_redis_errors_total", &[]) >= 1.0,
        "failed ticks are counted:\n{}",
        d.text
    );

    // Every metric the shipped alert rules and dashboard query is one these binaries export
    // (after this traffic, every series has been rendered by one of the two).
    let rendered: std::collections::BTreeSet<String> = g
        .samples
        .iter()
        .chain(&d.samples)
        .map(|s| s.name.clone())
        .collect();
    for used in queried_metrics()? {
        let exported = ["", "_bucket", "_count", "_sum"]
            .iter()
            .any(|suffix| rendered.contains(&format!("{used}{suffix}")));
        assert!(
            exported,
            "{used} is queried by deploy/ but not on /metrics: {rendered:?}"
        );
    }
    Ok(())
}

/// Every `usher_…` metric name in the alert rules and the Grafana dashboards under deploy/.
fn queried_metrics() -> anyhow::Result<std::collections::BTreeSet<String>> {
    let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let mut text = std::fs::read_to_string(deploy.join("prometheus/alerts.yml"))?;
    for e in std::fs::read_dir(deploy.join("grafana/dashboards"))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "json") {
            text.push_str(&std::fs::read_to_string(path)?);
        }
    }
    let names: std::collections::BTreeSet<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("usher_"))
        // A histogram's series are named after it.
        .map(|w| {
            ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| w.strip_suffix(s))
                .unwrap_or(w)
                .to_owned()
        })
        .collect();
    anyhow::ensure!(
        names.len() > 10,
        "too few metrics found in deploy/: {names:?}"
    );
    Ok(names)
}

/// The stream sample reads what a gateway has not read or not acknowledged, and the trace
/// context rides along with the entries that carry one (and is absent from those that don't).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_lag_and_trace_context_on_a_real_stream() -> anyhow::Result<()> {
    use usher_core::ids::{QueueId, ServerId};
    use usher_core::messages::{CloseReason, StreamMessage};
    use usher_core::store::{Store, StreamLag};

    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let gw = ServerId::new("gw-lag")?;
    assert_eq!(
        store.stream_lag(&gw).await?,
        StreamLag::default(),
        "no stream yet"
    );
    store.ensure_stream(&gw, Duration::from_secs(60)).await?;
    let msg = StreamMessage::Closed {
        queue: QueueId::new("q")?,
        reason: CloseReason::QueueClosed,
        message: None,
    };
    let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    store
        .send_traced(&[(gw.clone(), vec![msg.clone(), msg.clone()])], Some(tp))
        .await?;
    store.send(&[(gw.clone(), vec![msg.clone()])]).await?;
    assert_eq!(
        store.stream_lag(&gw).await?,
        StreamLag { lag: 3, pending: 0 }
    );
    let read = store
        .read_stream(&gw, 2, Duration::from_millis(100))
        .await?
        .unwrap_or_default();
    assert_eq!(read.len(), 2);
    assert!(read.iter().all(|e| e.traceparent.as_deref() == Some(tp)));
    assert!(read.iter().all(|e| e.message.as_ref() == Some(&msg)));
    assert_eq!(
        store.stream_lag(&gw).await?,
        StreamLag { lag: 1, pending: 2 }
    );
    let ids: Vec<String> = read.iter().map(|e| e.id.clone()).collect();
    store.ack(&gw, &ids).await?;
    let last = store
        .read_stream(&gw, 10, Duration::from_millis(100))
        .await?
        .unwrap_or_default();
    assert_eq!(last.len(), 1);
    assert_eq!(
        last[0].traceparent, None,
        "an entry without a trace context"
    );
    assert_eq!(last[0].message.as_ref(), Some(&msg));
    assert_eq!(
        store.stream_lag(&gw).await?,
        StreamLag { lag: 0, pending: 1 }
    );
    Ok(())
}

/// While a gateway drains, `/metrics` says so and counts the streams still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_progress_is_exported() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start("usher-dispatcher", &[("USHER_REDIS_URL", redis.url())]).await?;
    let mut gateway = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_DRAIN_DELAY_MS", "3000".to_owned()),
            ("USHER_DRAIN_SECS", "1".to_owned()),
        ],
    )
    .await?;
    let http = usher_testkit::config::admin_client();
    put_queue_at(
        &http,
        &dispatcher.url(),
        "held",
        json!({"admit_per_second": 1, "paused": true}),
    )
    .await?;
    let client = SseClient::new(gateway.url());
    let (_, _, conn) = join(&client, "held").await?;
    gateway.term()?;
    let g = scrape_until(&http, &gateway.url(), |s| {
        value(s, "usher_gateway_draining", &[]) == 1.0
    })
    .await?;
    assert_eq!(
        value(&g.samples, "usher_gateway_draining", &[]),
        1.0,
        "{}",
        g.text
    );
    assert_eq!(
        value(&g.samples, "usher_gateway_drain_remaining_streams", &[]),
        1.0,
        "the one open stream is still to end"
    );
    assert!(gateway.wait_exit(T).await?, "the gateway drains and exits");
    drop(conn);
    Ok(())
}
