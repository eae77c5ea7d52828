//! Admission that knows the inventory (issue 24, item 3): the booking service reports what is
//! left (`PUT /api/queues/{q}/inventory`, service token); the queue admits only while the
//! report, less a basket per session consumed since and per active session, is above 0
//! (tick and passthrough); each waiting browser hears what is left and whether its place is
//! `likely`, `unlikely` or `unknown` to get some (at once after a report); nothing left and
//! no active session for `sold_out_grace_seconds` closes the line with `sold_out`, and a
//! report above 0 within the grace resumes admission. Real Redis, dispatcher and gateway;
//! browsers are SSE clients; tokens are verified against the JWKS as a booking service does.

use reqwest::Method;
use serde_json::{json, Value};
use usher_admission::Admission;
use usher_core::ids::QueueId;
use usher_core::time::now_ms;
use usher_testkit::acl::Component;
use usher_testkit::answers::json_error;
use usher_testkit::line::{data, jwks, verify_token, T};
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{dispatcher_with, gateway, Stack};
use usher_testkit::wait::eventually;
use usher_testkit::{RedisProbe, RedisServer, SseClient};

const SERVICE_TOKEN: &str = "service-token-for-inventory-tests-0123";

const ACL_PASSWORD: &str = "inventory-acl-password";

/// Redis, a dispatcher that takes booking services' reports (`USHER_SERVICE_TOKEN`) and
/// ticks every `tick_ms`, and one gateway; each binary runs as a Redis user with exactly its
/// ACL (`usher_testkit::acl`, the lines docs/managed-redis.md prints), so every inventory
/// script is proven to need no more ([`no_acl_denials`]).
async fn stack(tick_ms: u64) -> anyhow::Result<Stack> {
    let redis = RedisServer::start()?;
    let mut admin = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let mut url_of = async |name: &str, c: Component| -> anyhow::Result<String> {
        let line = c.setuser(name, ACL_PASSWORD);
        let mut words = line.split_whitespace();
        let mut cmd = redis::cmd(words.next().unwrap_or_default());
        let _: () = cmd
            .arg(words.collect::<Vec<_>>())
            .query_async(&mut admin)
            .await?;
        Ok(format!(
            "redis://{name}:{ACL_PASSWORD}@127.0.0.1:{}",
            redis.port()
        ))
    };
    let d_url = url_of("usher-dispatcher", Component::Dispatcher).await?;
    let g_url = url_of("usher-gateway", Component::Gateway).await?;
    let mut cfg = usher_testkit::config::dispatcher(&d_url, tick_ms);
    cfg.service_token = Some(SERVICE_TOKEN.to_owned());
    let dispatcher = dispatcher_with(cfg).await?;
    let gw = gateway(&g_url).await?;
    let stack = Stack {
        redis,
        dispatcher,
        gateways: vec![gw],
        booking: None,
        http: usher_testkit::config::admin_client(),
    };
    for u in [stack.dispatcher.url(), stack.gateway_url(0)] {
        eventually("the servers are ready", async || {
            stack
                .http
                .get(format!("{u}/readyz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await?;
    }
    Ok(stack)
}

/// Redis denied neither binary anything (its `ACL LOG` is empty).
async fn no_acl_denials(stack: &Stack) -> anyhow::Result<()> {
    let mut admin = redis::Client::open(stack.redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query_async(&mut admin).await?;
    anyhow::ensure!(log.is_empty(), "Redis denied usher something: {log:?}");
    Ok(())
}

/// `PUT /api/queues/{queue}/inventory` with `body`, as a booking service sends it.
async fn report(stack: &Stack, queue: &str, body: Value) -> anyhow::Result<reqwest::Response> {
    Ok(reqwest::Client::new()
        .put(format!(
            "{}/api/queues/{queue}/inventory",
            stack.dispatcher.url()
        ))
        .bearer_auth(SERVICE_TOKEN)
        .json(&body)
        .send()
        .await?)
}

/// Reports `remaining` and expects `200`; the answer.
async fn report_ok(stack: &Stack, queue: &str, remaining: u64) -> anyhow::Result<Value> {
    let r = report(stack, queue, json!({ "remaining": remaining })).await?;
    anyhow::ensure!(r.status() == 200, "report answered {}", r.status());
    Ok(r.json().await?)
}

async fn join(stack: &Stack, queue: &str, n: usize) -> anyhow::Result<Vec<Watcher>> {
    let client = SseClient::new(stack.gateway_url(0));
    let mut ws = Vec::new();
    for _ in 0..n {
        ws.push(usher_testkit::line::join_watch(&client, queue).await?.2);
    }
    Ok(ws)
}

/// The entry token a browser was admitted with.
fn token(w: &Watcher) -> Option<String> {
    w.last("admitted")
        .and_then(|e| data(&e)["token"].as_str().map(str::to_owned))
}

fn tokens(ws: &[Watcher]) -> Vec<String> {
    ws.iter().filter_map(token).collect()
}

/// The inventory of a browser's last `waiting` event: (remaining, chance).
fn outlook(w: &Watcher) -> Option<(u64, String)> {
    let e = w.last("waiting")?;
    let inv = data(&e)["inventory"].clone();
    Some((
        inv["remaining"].as_u64()?,
        inv["chance"].as_str()?.to_owned(),
    ))
}

/// `POST /api/session/consume?queue=` with `token`, as a booking service books: the status.
async fn consume(stack: &Stack, queue: &str, token: &str) -> anyhow::Result<u16> {
    Ok(stack
        .http
        .request(
            Method::POST,
            format!(
                "{}/api/session/consume?queue={queue}",
                stack.dispatcher.url()
            ),
        )
        .bearer_auth(token)
        .send()
        .await?
        .status()
        .as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_drive_admissions_and_a_consumed_session_counts_as_sold() -> anyhow::Result<()> {
    let stack = stack(100).await?;
    stack
        .put_queue(
            "inv",
            json!({"admit_per_second": 50.0, "passthrough": false, "basket_size": 1}),
        )
        .await?;
    let q = QueueId::new("inv")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;

    // Unhappy paths: JSON errors, nothing stored.
    let url = format!("{}/api/queues/inv/inventory", stack.dispatcher.url());
    let plain = reqwest::Client::new();
    let r = plain
        .put(&url)
        .json(&json!({"remaining": 3}))
        .send()
        .await?;
    json_error(r, 401).await?;
    let r = plain
        .put(&url)
        .bearer_auth("wrong-token-wrong-token-wrong-token")
        .json(&json!({"remaining": 3}))
        .send()
        .await?;
    json_error(r, 401).await?;
    for bad in [
        json!({"remaining": -1}),
        json!({"remaining": 2.5}),
        json!({"remaining": 1_000_000_001u64}),
        json!({"remaining": "3"}),
        json!({}),
        json!({"remaining": 3, "extra": 1}),
    ] {
        let msg = json_error(report(&stack, "inv", bad.clone()).await?, 400).await?;
        assert!(!msg.is_empty(), "{bad}");
    }
    json_error(
        report(&stack, "nosuch", json!({"remaining": 3})).await?,
        404,
    )
    .await?;
    json_error(
        report(&stack, "Bad Name", json!({"remaining": 3})).await?,
        400,
    )
    .await?;
    // Bad settings are refused with a JSON error, and change nothing.
    for bad in [
        json!({"basket_size": 0}),
        json!({"basket_size": 1001}),
        json!({"sold_out_grace_seconds": 0}),
        json!({"inventory_stale_after_seconds": 86_401}),
    ] {
        let r = stack
            .http
            .put(format!("{}/admin/queues/inv", stack.dispatcher.url()))
            .json(&bad)
            .send()
            .await?;
        json_error(r, 400).await?;
    }
    let view = stack.queue("inv").await?;
    assert_eq!(view["inventory_remaining"], Value::Null, "{view}");
    assert_eq!(view["basket_size"], 1);
    assert_eq!(view["sold_out_grace_seconds"], 120, "the default grace");

    // Remaining 3, basket 1: exactly three of six are admitted, the others wait.
    let answer = report_ok(&stack, "inv", 3).await?;
    assert_eq!(answer["admitting"], true, "{answer}");
    let ws = join(&stack, "inv", 6).await?;
    let admitted = eventually("three admitted", async || {
        let t = tokens(&ws);
        (t.len() >= 3).then_some(t)
    })
    .await?;
    probe.ticks(&q, 5).await?;
    assert_eq!(tokens(&ws).len(), 3, "no more than the inventory allows");
    let keys = jwks(&stack).await?;
    for t in &admitted {
        verify_token(&keys, t, "inv")?;
    }
    // The fourth browser, first in line, hears that nothing is free beyond the carts.
    let next = &ws[3];
    eventually("the next in line hears the inventory", async || {
        outlook(next).filter(|o| o == &(3, "unknown".to_owned()))
    })
    .await?;

    // A booking consumes one session: it counts as sold until the next report, so its
    // slot does not let anyone else in.
    assert_eq!(consume(&stack, "inv", &admitted[0]).await?, 200);
    probe.ticks(&q, 5).await?;
    assert_eq!(tokens(&ws).len(), 3, "a consumed session counts as sold");
    let view = stack.queue("inv").await?;
    assert_eq!(view["inventory_remaining"], 2, "{view}");
    assert_eq!(view["inventory_reported"], 3, "{view}");
    assert_eq!(view["inventory_stale"], false, "{view}");

    // The booking service reports 4 left (2 more than the 2 carts): two more are admitted,
    // through the client library booking services use.
    let service = Admission::builder(stack.dispatcher.url())
        .audiences(["inv"])
        .service_token(SERVICE_TOKEN)
        .build()?;
    service.report_inventory("inv", 4).await?;
    let more = eventually("two more admitted", async || {
        let t = tokens(&ws);
        (t.len() >= 5).then_some(t)
    })
    .await?;
    probe.ticks(&q, 5).await?;
    assert_eq!(tokens(&ws).len(), 5, "exactly two more");
    for t in &more {
        verify_token(&keys, t, "inv")?;
    }
    let view = stack.queue("inv").await?;
    assert_eq!(view["inventory_remaining"], 4, "{view}");
    assert_eq!(view["waiting"], 1, "{view}");
    // `/metrics` shows what is left at the last tick.
    let metrics = format!("{}/metrics", stack.dispatcher.url());
    eventually("the inventory gauge", async || {
        let text = stack.http.get(&metrics).send().await?.text().await?;
        let line = "usher_queue_inventory_remaining{queue=\"inv\"} 4";
        anyhow::ensure!(text.lines().any(|l| l == line), "no {line:?}");
        anyhow::Ok(())
    })
    .await?;
    assert!(
        service.report_inventory("nosuch", 1).await.is_err(),
        "an unknown queue is refused"
    );
    // The report forgotten, the queue admits as before: the last browser too.
    let forget = |queue: &str, token: &str| {
        reqwest::Client::new()
            .delete(format!(
                "{}/api/queues/{queue}/inventory",
                stack.dispatcher.url()
            ))
            .bearer_auth(token)
            .send()
    };
    json_error(
        forget("inv", "wrong-token-wrong-token-wrong-token").await?,
        401,
    )
    .await?;
    json_error(forget("nosuch", SERVICE_TOKEN).await?, 404).await?;
    assert_eq!(forget("inv", SERVICE_TOKEN).await?.status(), 204);
    let last = eventually("the last browser is admitted", async || token(&ws[5])).await?;
    verify_token(&keys, &last, "inv")?;
    assert_eq!(
        stack.queue("inv").await?["inventory_remaining"],
        Value::Null
    );
    no_acl_denials(&stack).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_admits_no_more_than_the_inventory() -> anyhow::Result<()> {
    let stack = stack(100).await?;
    stack
        .put_queue(
            "pass",
            json!({"admit_per_second": 50.0, "passthrough": true}),
        )
        .await?;
    let q = QueueId::new("pass")?;
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    // The bucket exists from the first tick on: passthrough could admit the second joiner.
    probe.ticks(&q, 2).await?;
    report_ok(&stack, "pass", 1).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let mut first = client.open("/api/queues/pass/stream", None).await?;
    let e = first
        .next_event(T)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the first stream ended without an event"))?;
    assert_eq!(e.event, "admitted", "nobody waits: the join itself admits");
    verify_token(
        &jwks(&stack).await?,
        data(&e)["token"].as_str().unwrap_or(""),
        "pass",
    )?;
    let (_, _, second) = usher_testkit::line::join_watch(&client, "pass").await?;
    probe.ticks(&q, 5).await?;
    assert!(
        token(&second).is_none(),
        "the second waits: one item, one admission"
    );
    assert_eq!(stack.waiting("pass").await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_place_hears_at_once_whether_it_is_likely_to_get_one() -> anyhow::Result<()> {
    // A tick a minute long: after the first, the only news browsers get is the report's.
    let stack = stack(60_000).await?;
    stack
        .put_queue(
            "odds",
            json!({"admit_per_second": 50.0, "passthrough": false,
            "paused": true}),
        )
        .await?;
    let ws = join(&stack, "odds", 4).await?;
    let answer = report_ok(&stack, "odds", 2).await?;
    assert_eq!(answer["gateways"], 1, "{answer}");
    let chances = eventually("every place hears its chance", async || {
        let o: Vec<_> = ws.iter().filter_map(outlook).collect();
        (o.len() == 4).then_some(o)
    })
    .await?;
    let want: Vec<(u64, String)> = ["likely", "likely", "unlikely", "unlikely"]
        .iter()
        .map(|c| (2, (*c).to_owned()))
        .collect();
    assert_eq!(chances, want, "2 left: the first two places are likely");
    // Sold out: every browser hears it at once.
    report_ok(&stack, "odds", 0).await?;
    eventually("everyone hears nothing is left", async || {
        ws.iter()
            .all(|w| outlook(w) == Some((0, "unlikely".to_owned())))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_report_tells_browsers_unknown() -> anyhow::Result<()> {
    let stack = stack(100).await?;
    stack
        .put_queue(
            "stale",
            json!({"admit_per_second": 50.0, "passthrough": false,
            "paused": true, "inventory_stale_after_seconds": 1}),
        )
        .await?;
    let ws = join(&stack, "stale", 2).await?;
    report_ok(&stack, "stale", 5).await?;
    // Told at once, while fresh (the whole stream is read: the next state may be stale
    // already on a slow machine).
    eventually("fresh: likely", async || {
        ws.iter().all(|w| {
            w.all("waiting").iter().any(|e| {
                let inv = &data(e)["inventory"];
                inv["remaining"] == 5 && inv["chance"] == "likely"
            })
        })
    })
    .await?;
    eventually("a second later the report is stale: unknown", async || {
        ws.iter()
            .all(|w| outlook(w) == Some((5, "unknown".to_owned())))
    })
    .await?;
    assert_eq!(stack.queue("stale").await?["inventory_stale"], true);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sold_out_closes_the_line_after_the_grace_and_a_report_within_it_resumes(
) -> anyhow::Result<()> {
    let stack = stack(100).await?;
    stack
        .put_queue(
            "last",
            json!({"admit_per_second": 50.0, "passthrough": false,
            "sold_out_grace_seconds": 3}),
        )
        .await?;
    report_ok(&stack, "last", 1).await?;
    let ws = join(&stack, "last", 3).await?;
    let first = eventually("the one item's buyer is admitted", async || token(&ws[0])).await?;
    // It buys: nothing is left, and no session is active; the grace starts.
    assert_eq!(consume(&stack, "last", &first).await?, 200);
    eventually("the line hears nothing is left", async || {
        outlook(&ws[1]) == Some((0, "unlikely".to_owned()))
    })
    .await?;
    // A cart elsewhere was abandoned: the booking service reports 1 within the grace, and
    // admission resumes in the same line.
    report_ok(&stack, "last", 1).await?;
    let second = eventually("the next is admitted", async || token(&ws[1])).await?;
    let sold = now_ms();
    assert_eq!(consume(&stack, "last", &second).await?, 200);
    // Nothing left again, no session active: once the grace is over the line closes.
    let closed = eventually("the line closes with sold_out", async || {
        ws[2].last("closed")
    })
    .await?;
    assert_eq!(data(&closed)["reason"], "sold_out");
    assert!(
        now_ms() >= sold + 3_000,
        "not before the grace: closed {} ms after the last sale",
        now_ms() - sold
    );
    assert!(token(&ws[2]).is_none(), "never admitted");
    let view = stack.queue("last").await?;
    assert_eq!(view["open"], false, "{view}");
    assert_eq!(view["waiting"], 0, "{view}");
    assert_eq!(view["inventory_remaining"], 0, "{view}");
    let probe = RedisProbe::connect(&stack.redis.url()).await?;
    let reason = probe
        .meta_field(&QueueId::new("last")?, "close_reason")
        .await?;
    assert_eq!(reason.as_deref(), Some("sold_out"), "kept for late resumes");
    no_acl_denials(&stack).await
}

// ---- The time rules at the store, on a synthetic clock (the scripts take `now`) ----

/// A synthetic "now": nothing below reads the wall clock.
const T0: u64 = 1_700_000_000_000;

/// One tick script call at `now_ms`.
async fn tick_at(
    store: &usher_core::store::Store,
    q: &QueueId,
    lease: &usher_core::store::Lease,
    now_ms: u64,
) -> anyhow::Result<usher_core::store::TickOutcome> {
    match store
        .tick(q, &usher_testkit::tick_args(lease, now_ms))
        .await?
    {
        usher_core::store::Tick::Ticked(o) => Ok(o),
        other => anyhow::bail!("tick at {now_ms}: {other:?}"),
    }
}

/// The grace runs from the first tick that finds nothing left and no session active, to the
/// millisecond; a report above 0 within it starts it over; the close checks it again. A
/// report is stale once older than `inventory_stale_after_seconds`, to the millisecond.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_and_staleness_run_to_the_millisecond() -> anyhow::Result<()> {
    use usher_core::store::{QueueConfig, Store};
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("clock")?;
    let config = QueueConfig {
        admit_per_second: 10.0,
        passthrough: false,
        sold_out_grace_seconds: 5,
        inventory_stale_after_seconds: 60,
        ..Default::default()
    };
    store.put_queue(&q, &config).await?;
    let joined = store.join_many(&q, 0, T0, 3).await?;
    let usher_core::store::PlaceState::Waiting {
        place: first_place, ..
    } = joined.state(0)
    else {
        anyhow::bail!("the first join waits");
    };
    let lease = usher_testkit::line::take_lease(&store, &q).await?;
    let inv = store.report_inventory(&q, 0, T0).await?;
    assert_eq!(inv.map(|i| (i.remaining, i.held)), Some((0, 0)));

    let first = tick_at(&store, &q, &lease, T0).await?;
    assert_eq!(first.admitted, 0, "nothing left: nobody admitted");
    assert!(!first.sold_out);
    assert!(
        !tick_at(&store, &q, &lease, T0 + 4_999).await?.sold_out,
        "within the grace"
    );
    assert!(
        !store.close_sold_out(&q, T0 + 4_999).await?,
        "the close checks the grace too"
    );
    // Items came back: the grace starts over, and admission resumes.
    store.report_inventory(&q, 1, T0 + 4_999).await?;
    let back = tick_at(&store, &q, &lease, T0 + 5_000).await?;
    assert!(!back.sold_out);
    assert_eq!(back.admitted, 1, "a report above 0 resumes admission");
    // Sold out again while that session is active: no grace yet.
    store.report_inventory(&q, 0, T0 + 5_000).await?;
    assert!(!tick_at(&store, &q, &lease, T0 + 20_000).await?.sold_out);
    // Its session (the first place's) ends, released: a cart abandoned with nothing left.
    // The grace starts at the next tick.
    store.end_session(&q, first_place, T0 + 20_000).await?;
    let idle = tick_at(&store, &q, &lease, T0 + 20_001).await?;
    assert!(!idle.sold_out);
    assert!(!tick_at(&store, &q, &lease, T0 + 25_000).await?.sold_out);
    let due = tick_at(&store, &q, &lease, T0 + 25_001).await?;
    assert!(due.sold_out, "5 s after the first idle tick");
    assert!(store.close_sold_out(&q, T0 + 25_001).await?);
    let cfg = store.queue_config(&q).await?.expect("configured");
    assert!(!cfg.open, "closed");

    // Staleness, on another queue: fresh up to 60 s after the report, stale after.
    let s = QueueId::new("stale")?;
    store.put_queue(&s, &config).await?;
    let lease = usher_testkit::line::take_lease(&store, &s).await?;
    store.report_inventory(&s, 10, T0).await?;
    let fresh = tick_at(&store, &s, &lease, T0 + 60_000).await?;
    assert_eq!(fresh.inventory.map(|i| i.stale), Some(false));
    let stale = tick_at(&store, &s, &lease, T0 + 60_001).await?;
    assert_eq!(
        stale.inventory.map(|i| (i.remaining, i.stale)),
        Some((10, true))
    );
    Ok(())
}
