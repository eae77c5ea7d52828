//! OpenTelemetry traces from the real binaries, collected by an in-process OTLP/HTTP receiver:
//! a browser's join, the tick that admits it and the delivery of its `admitted` event form
//! one linked trace, admin changes have spans, no span carries a ticket or a token, the last
//! spans are flushed at shutdown, and an unsupported protocol stops the start-up.

use std::time::Duration;

use serde_json::json;
use usher_testkit::line::{data, join, T};
use usher_testkit::otlp::{OtlpReceiver, Received};
use usher_testkit::procs::Proc;
use usher_testkit::{RedisServer, SseClient};

fn named<'a>(spans: &'a [Received], name: &str) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.span.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_tick_and_deliver_form_one_linked_trace() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let otlp = OtlpReceiver::start().await?;
    let traced = |extra: &[(&'static str, &str)]| {
        let mut env = vec![
            ("USHER_REDIS_URL", redis.url()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint()),
            ("OTEL_TRACES_SAMPLER", "parentbased_always_on".to_owned()),
        ];
        env.extend(extra.iter().map(|(k, v)| (*k, (*v).to_owned())));
        env
    };
    // The dispatcher exports only when its batch is full or at shutdown (a minute between
    // periodic exports): its spans arriving at all shows the flush on SIGTERM.
    let mut dispatcher = Proc::start(
        "usher-dispatcher",
        &traced(&[
            ("USHER_TICK_MS", "100"),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ]),
    )
    .await?;
    let gateway = Proc::start(
        "usher-gateway",
        &traced(&[
            ("OTEL_SERVICE_NAME", "edge-a"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]),
    )
    .await?;
    let http = usher_testkit::config::admin_client();
    let resp = http
        .put(format!("{}/admin/queues/fast", dispatcher.url()))
        // Passthrough off: the join waits and the tick admits it (join → tick → deliver).
        .json(&json!({"admit_per_second": 50, "passthrough": false}))
        .send()
        .await?;
    assert!(resp.status().is_success(), "PUT queue: {}", resp.status());

    let client = SseClient::new(gateway.url());
    let (ticket, _, mut conn) = join(&client, "fast").await?;
    let admitted = conn.wait_for("admitted", T).await?;
    let token = data(&admitted)["token"].as_str().unwrap_or("").to_owned();
    assert!(!token.is_empty(), "an admission carries its token");

    let gw_spans = otlp
        .wait_until("the gateway's join and deliver spans", |s| {
            !named(s, "join").is_empty() && !named(s, "deliver").is_empty()
        })
        .await?;
    let join_span = named(&gw_spans, "join")
        .first()
        .copied()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no join span: {gw_spans:?}\n{}", gateway.log_tail()))?;
    let deliver = named(&gw_spans, "deliver")
        .first()
        .copied()
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no deliver span: {gw_spans:?}"))?;
    assert_eq!(join_span.service, "edge-a", "OTEL_SERVICE_NAME is honoured");
    assert_eq!(join_span.attr("queue").as_deref(), Some("fast"));
    assert_eq!(deliver.attr("queue").as_deref(), Some("fast"));
    assert!(
        deliver
            .span
            .links
            .iter()
            .any(|l| l.trace_id == join_span.span.trace_id && l.span_id == join_span.span.span_id),
        "the delivery links to the browser's join: {:?}",
        deliver.span.links
    );

    // The dispatcher stops: what it holds is flushed.
    dispatcher.term()?;
    assert!(
        dispatcher.wait_exit(T).await?,
        "the dispatcher exits cleanly"
    );
    let spans = otlp
        .wait_until("the deliver span's parent", |s| {
            s.iter()
                .any(|r| r.span.span_id == deliver.span.parent_span_id)
        })
        .await?;
    let tick = spans
        .iter()
        .find(|r| r.span.span_id == deliver.span.parent_span_id)
        .ok_or_else(|| anyhow::anyhow!("the deliver span's parent was never exported"))?;
    assert_eq!(tick.span.name, "tick", "the delivery's parent is a tick");
    assert_eq!(tick.service, "usher-dispatcher", "the default service name");
    assert_eq!(
        tick.span.trace_id, deliver.span.trace_id,
        "tick and delivery share one trace"
    );
    assert_eq!(tick.attr("queue").as_deref(), Some("fast"));
    assert_eq!(
        tick.attr("admitted").as_deref(),
        Some("1"),
        "the count admitted"
    );
    let admin = named(&spans, "admin");
    assert!(
        admin
            .iter()
            .any(|a| a.attr("action").as_deref() == Some("put_queue")
                && a.attr("queue").as_deref() == Some("fast")),
        "an admin change has its span: {admin:?}"
    );
    for s in &spans {
        let text = format!("{:?}", s.span);
        assert!(!text.contains(&token), "a token in span {}", s.span.name);
        assert!(!text.contains(&ticket), "a ticket in span {}", s.span.name);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsupported_protocol_stops_the_start_up() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let otlp = OtlpReceiver::start().await?;
    let started = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ],
    )
    .await;
    let err = match started {
        Ok(_) => anyhow::bail!("a gateway asked for grpc traces started anyway"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("exited"), "it exits at start-up: {err}");
    assert!(
        err.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\" is not supported"),
        "and says why: {err}"
    );
    // An https collector is refused too: no TLS client is built in.
    let https = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "https://127.0.0.1:1".to_owned(),
            ),
        ],
    )
    .await;
    let err = match https {
        Ok(_) => anyhow::bail!("a dispatcher with an https collector started anyway"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("only http:// collectors"), "{err}");
    // Without the endpoint, traces are off and the same setting is ignored.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let off = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ],
    )
    .await?;
    drop(off);
    assert!(otlp.spans().is_empty(), "nothing was exported");
    Ok(())
}
