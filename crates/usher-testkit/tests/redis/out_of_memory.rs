//! Redis out of memory (`maxmemory`, policy `noeviction`): refused writes are reported as
//! what they are, joins back off longer, the log does not grow per request, and an operator
//! can still close a queue to free memory.

use std::time::Duration;

use serde_json::{json, Value};
use usher_core::ids::QueueId;
use usher_core::store::{Store, JOIN_BATCH_MAX};
use usher_core::time::now_ms;
use usher_sse::Item;
use usher_testkit::config::admin_client;
use usher_testkit::procs::Proc;
use usher_testkit::{RedisProbe, RedisServer, SseClient};

/// `used_memory` from `INFO memory`.
async fn used_memory(probe: &RedisProbe) -> anyhow::Result<u64> {
    let info = probe.info("memory").await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no used_memory in INFO"))
}

async fn config_set(url: &str, name: &str, value: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut c = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(&mut c)
        .await?;
    Ok(())
}

/// The `retry:` a stream answered with, and whether it carried any event.
async fn retry_of(client: &SseClient, path: &str) -> anyhow::Result<(u16, Option<u64>, bool)> {
    let mut conn = client.open(path, None).await?;
    let (mut retry, mut event) = (None, false);
    while let Some(item) = conn.next_item(Duration::from_secs(10)).await? {
        match item {
            Item::Retry(ms) => retry = Some(ms),
            Item::Event(_) => event = true,
            Item::Comment(_) => {}
        }
    }
    Ok((conn.status, retry, event))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_is_reported_backed_off_logged_once_and_closing_frees_it(
) -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let url = redis.url();
    let env = [
        ("USHER_REDIS_URL", url.clone()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_LEASE_TTL_MS", "300".to_owned()),
        ("USHER_RETRY_MS", "1000".to_owned()),
        ("USHER_HEARTBEAT_MS", "500".to_owned()),
    ];
    let d = Proc::start("usher-dispatcher", &env).await?;
    let g = Proc::start("usher-gateway", &env).await?;
    let http = admin_client();
    let put = |q: &str| {
        http.put(format!("{}/admin/queues/{q}", d.url()))
            .json(&json!({"admit_per_second": 1, "paused": true}))
            .send()
    };
    assert_eq!(put("full").await?.status(), 201);

    // A long line fills Redis: 60,000 places (a few MB), taken the way a gateway takes them.
    let store = Store::connect(&url).await?;
    let q = QueueId::new("full")?;
    for _ in 0..(60_000 / JOIN_BATCH_MAX) {
        store.join_many(&q, 1, now_ms(), JOIN_BATCH_MAX).await?;
    }
    let probe = RedisProbe::connect(&url).await?;
    let used = used_memory(&probe).await?;
    // Just below what is used now: every write that may grow memory is refused.
    config_set(&url, "maxmemory-policy", "noeviction").await?;
    config_set(&url, "maxmemory", &(used - 256 * 1024).to_string()).await?;

    // Joins answer 200 with a retry ten times the usual one (jittered), and no place.
    let client = SseClient::new(g.url());
    let (status, retry, event) = retry_of(&client, "/api/queues/full/stream").await?;
    assert_eq!(status, 200);
    assert!(!event, "no place taken");
    let retry = retry.ok_or_else(|| anyhow::anyhow!("no retry: field"))?;
    assert!(
        retry >= 5_000,
        "a longer backoff than USHER_RETRY_MS = 1000: {retry}"
    );
    // Many refused joins: counted, but logged at most once per period.
    let joins: Vec<_> = (0..300)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move { retry_of(&c, "/api/queues/full/stream").await })
        })
        .collect();
    for j in joins {
        let (status, retry, event) = j.await??;
        assert_eq!(status, 200);
        assert!(!event);
        assert!(retry.is_some_and(|r| r >= 5_000), "{retry:?}");
    }
    let log = g.log_text();
    let oom_lines = log.matches("REDIS OUT OF MEMORY").count();
    assert!(
        (1..=2).contains(&oom_lines),
        "{oom_lines} lines:\n{}",
        g.log_tail()
    );
    assert_eq!(
        log.matches("redis request failed").count(),
        0,
        "no line per request"
    );
    let metrics = reqwest::get(format!("{}/metrics", g.url()))
        .await?
        .text()
        .await?;
    let value = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Joins arriving together share one Redis call: each refused call counts once, each
    // refused stream once.
    assert!(
        value("usher_redis_out_of_memory_total ") >= 1.0,
        "{metrics}"
    );
    assert!(
        value("usher_gateway_streams_refused_total{reason=\"redis\"} ") >= 301.0,
        "{metrics}"
    );

    // Admin writes say Redis is out of memory, not that it is unavailable.
    let r = put("another").await?;
    assert_eq!(r.status(), 507);
    let v: Value = r.json().await?;
    let err = v["error"].as_str().unwrap_or_default();
    assert!(err.contains("out of memory"), "{v}");
    // Reads still work.
    let r = http
        .get(format!("{}/admin/queues/full", d.url()))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await?["waiting"], 60_000);

    // Closing works under OOM and frees the line: `PUT {"open": false}` closes before it
    // writes the settings (which Redis would refuse first), and the close script deletes
    // before it writes. DELETE runs the same close.
    let r = http
        .put(format!("{}/admin/queues/full", d.url()))
        .json(&json!({"open": false}))
        .send()
        .await?;
    assert_eq!(r.status(), 200, "{}", r.text().await?);
    let r = http
        .get(format!("{}/admin/queues/full", d.url()))
        .send()
        .await?;
    let v: Value = r.json().await?;
    assert_eq!(
        (v["open"].clone(), v["waiting"].clone()),
        (json!(false), json!(0))
    );
    assert!(used_memory(&probe).await? < used - 256 * 1024);
    // With the memory back, the service is too.
    assert_eq!(put("another").await?.status(), 201);
    assert_eq!(
        http.put(format!("{}/admin/queues/another", d.url()))
            .json(&json!({"paused": false}))
            .send()
            .await?
            .status(),
        200
    );
    let (_, pos, _) = usher_testkit::line::join(&client, "another").await?;
    assert_eq!(pos, 1);
    Ok(())
}
