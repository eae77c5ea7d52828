//! Safe concurrent edits of a queue's settings (issue 24, item 8): a version (`ETag` on `GET`
//! and `PUT`), `If-Match` on `PUT` (`412` when stale, checked atomically with the write), a
//! `PUT` without it as before, and the changes that need `"confirm": true` (`409` naming the
//! reason without it). Real dispatcher, gateway and `redis-server`.

use std::time::Duration;

use reqwest::header::{ETAG, IF_MATCH};
use serde_json::{json, Value};
use usher_core::ids::QueueId;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::line::{PAUSED, T};
use usher_testkit::sse::SseItem;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually_within;
use usher_testkit::SseClient;

/// What a request got: status, `ETag` (if any), JSON body.
struct Answer {
    status: u16,
    etag: Option<String>,
    body: Value,
}

async fn answer(r: reqwest::Response) -> anyhow::Result<Answer> {
    let status = r.status().as_u16();
    let etag = r
        .headers()
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(Answer {
        status,
        etag,
        body: r.json().await?,
    })
}

async fn get(stack: &Stack, q: &str) -> anyhow::Result<Answer> {
    let url = format!("{}/admin/queues/{q}", stack.dispatcher.url());
    answer(stack.http.get(url).send().await?).await
}

/// `PUT /admin/queues/{q}` with `body`, and `If-Match: if_match` when given.
async fn put(
    stack: &Stack,
    q: &str,
    if_match: Option<&str>,
    body: Value,
) -> anyhow::Result<Answer> {
    let url = format!("{}/admin/queues/{q}", stack.dispatcher.url());
    let mut req = stack.http.put(url).json(&body);
    if let Some(tag) = if_match {
        req = req.header(IF_MATCH, tag);
    }
    answer(req.send().await?).await
}

async fn start() -> anyhow::Result<Stack> {
    Stack::start(StackOptions::default()).await
}

/// Two operators read the same settings and change them at once: exactly one change is
/// written; the other gets `412` (JSON) and changed nothing. The `ETag` is the version each
/// write raises by one, shown as `settings_version` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_editors_of_one_version_one_gets_412() -> anyhow::Result<()> {
    let stack = start().await?;
    let created = put(&stack, "q", None, json!({"admit_per_second": 5.0})).await?;
    assert_eq!(created.status, 201, "{}", created.body);
    let read = get(&stack, "q").await?;
    assert_eq!(read.etag.as_deref(), Some("\"1\""));
    assert_eq!(read.body["settings_version"], 1);
    let tag = read.etag.unwrap_or_default();
    for round in 0..5 {
        let tag_now = get(&stack, "q").await?.etag.unwrap_or_default();
        let (a, b) = tokio::join!(
            put(
                &stack,
                "q",
                Some(&tag_now),
                json!({"admit_per_second": 11.0})
            ),
            put(
                &stack,
                "q",
                Some(&tag_now),
                json!({"admit_per_second": 22.0})
            ),
        );
        let (a, b) = (a?, b?);
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [200, 412],
            "round {round}: {} / {}",
            a.body,
            b.body
        );
        let (won, lost, rate) = if a.status == 200 {
            (a, b, 11.0)
        } else {
            (b, a, 22.0)
        };
        assert!(
            lost.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("changed since you read them")),
            "{}",
            lost.body
        );
        let now = get(&stack, "q").await?;
        assert_eq!(
            now.body["admit_per_second"], rate,
            "the winner's change stands"
        );
        assert_eq!(now.etag, won.etag, "the PUT answers the new ETag");
    }
    // An editor still holding the first version is refused, and changes nothing.
    let stale = put(&stack, "q", Some(&tag), json!({"paused": true})).await?;
    assert_eq!(stale.status, 412, "{}", stale.body);
    let now = get(&stack, "q").await?;
    assert_eq!(now.body["paused"], false);
    assert_eq!(now.etag.as_deref(), Some("\"6\""));
    // `*` matches any version of an existing queue; any tag of a queue that does not exist
    // matches nothing.
    assert_eq!(
        put(&stack, "q", Some("*"), json!({"paused": true}))
            .await?
            .status,
        200
    );
    assert_eq!(put(&stack, "none", Some("*"), json!({})).await?.status, 412);
    assert_eq!(
        put(&stack, "none", Some("\"0\""), json!({})).await?.status,
        412
    );
    assert_eq!(
        get(&stack, "none").await?.status,
        404,
        "a refused PUT creates nothing"
    );
    Ok(())
}

/// A `PUT` without `If-Match` writes whatever the version, as before versions existed (and
/// raises it, so an editor holding the older one is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_without_if_match_writes_as_before() -> anyhow::Result<()> {
    let stack = start().await?;
    assert_eq!(put(&stack, "q", None, json!({})).await?.status, 201);
    let first = get(&stack, "q").await?.etag.unwrap_or_default();
    let other = put(&stack, "q", None, json!({"admit_per_second": 7.0})).await?;
    assert_eq!(other.status, 200, "{}", other.body);
    assert_eq!(other.etag.as_deref(), Some("\"2\""));
    let blind = put(&stack, "q", None, json!({"admit_per_second": 8.0})).await?;
    assert_eq!(blind.status, 200, "{}", blind.body);
    assert_eq!(blind.body["admit_per_second"], 8.0);
    let stale = put(&stack, "q", Some(&first), json!({"admit_per_second": 9.0})).await?;
    assert_eq!(stale.status, 412, "{}", stale.body);
    Ok(())
}

/// A queue written by the previous version has no version: it reads as version 0 (`ETag`
/// `"0"`), takes a `PUT` with that tag, and works as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_the_previous_version_reads_as_version_0() -> anyhow::Result<()> {
    let stack = start().await?;
    assert_eq!(
        put(&stack, "old", None, json!({"admit_per_second": 3.0}))
            .await?
            .status,
        201
    );
    // As the previous version stored it: the same settings, no version field.
    let meta = usher_core::keys::QueueKeys::new(&QueueId::new("old")?).meta;
    let removed = usher_testkit::redis_server::redis_cli(
        stack.redis.port(),
        &["HDEL", &meta, "settings_version"],
    )?;
    assert_eq!(removed.trim(), "1");
    let read = get(&stack, "old").await?;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.etag.as_deref(), Some("\"0\""));
    assert_eq!(read.body["settings_version"], 0);
    assert_eq!(read.body["admit_per_second"], 3.0);
    let changed = put(
        &stack,
        "old",
        Some("\"0\""),
        json!({"admit_per_second": 4.0}),
    )
    .await?;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.etag.as_deref(), Some("\"1\""));
    assert_eq!(
        put(&stack, "old", Some("\"0\""), json!({})).await?.status,
        412
    );
    Ok(())
}

/// `"error"` of a `409` names `what`.
fn names(a: &Answer, what: &str) -> bool {
    a.status == 409
        && a.body["error"]
            .as_str()
            .is_some_and(|e| e.contains(what) && e.contains("\"confirm\": true"))
}

/// `grace_seconds` below 10 needs `"confirm": true`, for a new queue too; 10 and above do
/// not, nor a value that is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_below_10_seconds_needs_confirm() -> anyhow::Result<()> {
    let stack = start().await?;
    let new = put(&stack, "q", None, json!({"grace_seconds": 1})).await?;
    assert!(
        names(&new, "grace_seconds 1"),
        "{} {}",
        new.status,
        new.body
    );
    assert_eq!(get(&stack, "q").await?.status, 404, "a 409 creates nothing");
    assert_eq!(
        put(&stack, "q", None, json!({"grace_seconds": 10}))
            .await?
            .status,
        201
    );
    let low = put(&stack, "q", None, json!({"grace_seconds": 9})).await?;
    assert!(
        names(&low, "grace_seconds 9"),
        "{} {}",
        low.status,
        low.body
    );
    assert_eq!(get(&stack, "q").await?.body["grace_seconds"], 10);
    let sure = put(
        &stack,
        "q",
        None,
        json!({"grace_seconds": 9, "confirm": true}),
    )
    .await?;
    assert_eq!(sure.status, 200, "{}", sure.body);
    assert_eq!(sure.body["grace_seconds"], 9);
    // Unchanged: nothing to confirm.
    let same = put(
        &stack,
        "q",
        None,
        json!({"grace_seconds": 9, "admit_per_second": 2.0}),
    )
    .await?;
    assert_eq!(same.status, 200, "{}", same.body);
    Ok(())
}

/// Joins `queue`'s pre-queue through the gateway (`event: scheduled`), keeping the stream.
async fn enter(c: &SseClient, queue: &str) -> anyhow::Result<usher_testkit::sse::SseConn> {
    let mut conn = c.open(&format!("/api/queues/{queue}/stream"), None).await?;
    anyhow::ensure!(conn.status == 200, "stream answered {}", conn.status);
    loop {
        match conn.next_item(T).await? {
            Some(SseItem::Event(e)) if e.event == "scheduled" => return Ok(conn),
            Some(SseItem::Event(e)) => anyhow::bail!("{} {}", e.event, e.data),
            Some(_) => {}
            None => anyhow::bail!("the stream ended before `scheduled`"),
        }
    }
}

/// `max_entrants` below the entrants the pre-queue holds needs `"confirm": true`; at or above
/// it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_entrants_below_the_entrants_needs_confirm() -> anyhow::Result<()> {
    let stack = start().await?;
    let opens = rfc3339_ms(now_ms() + 600_000);
    let r = put(
        &stack,
        "sale",
        None,
        json!({"admit_per_second": PAUSED, "opens_at": opens}),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let c = SseClient::new(stack.gateway_url(0));
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(enter(&c, "sale").await?);
    }
    let below = put(&stack, "sale", None, json!({"max_entrants": 2})).await?;
    assert!(
        names(&below, "max_entrants 2 is below the 3 entrants"),
        "{} {}",
        below.status,
        below.body
    );
    assert!(get(&stack, "sale").await?.body["max_entrants"].is_null());
    let at = put(&stack, "sale", None, json!({"max_entrants": 3})).await?;
    assert_eq!(at.status, 200, "{}", at.body);
    let sure = put(
        &stack,
        "sale",
        None,
        json!({"max_entrants": 1, "confirm": true}),
    )
    .await?;
    assert_eq!(sure.status, 200, "{}", sure.body);
    assert_eq!(sure.body["max_entrants"], 1);
    drop(streams);
    Ok(())
}

/// Moving a pending sale keeps its draw (no confirm); once the draw ran, a new `opens_at`
/// (or `null`) discards its record and the map from its tickets to their places: `409`
/// without `"confirm": true`, then `200` with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opens_at_that_discards_a_draw_needs_confirm() -> anyhow::Result<()> {
    let stack = start().await?;
    let far = rfc3339_ms(now_ms() + 600_000);
    let r = put(
        &stack,
        "sale",
        None,
        json!({"admit_per_second": PAUSED, "opens_at": far}),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    let c = SseClient::new(stack.gateway_url(0));
    let _entrant = enter(&c, "sale").await?;
    // Pending: moved, its draw kept.
    let soon = rfc3339_ms(now_ms() + 1_500);
    let moved = put(&stack, "sale", None, json!({"opens_at": soon})).await?;
    assert_eq!(moved.status, 200, "{}", moved.body);
    let url = format!("{}/api/queues/sale/draw", stack.gateway_url(0));
    eventually_within("the draw to run", Duration::from_secs(30), async || {
        let v: Value = stack.http.get(&url).send().await.ok()?.json().await.ok()?;
        (v["status"] == "done").then_some(())
    })
    .await?;
    let next = rfc3339_ms(now_ms() + 600_000);
    let discard = put(&stack, "sale", None, json!({"opens_at": next})).await?;
    assert!(
        names(&discard, "discards the draw"),
        "{} {}",
        discard.status,
        discard.body
    );
    let unschedule = put(&stack, "sale", None, json!({"opens_at": null})).await?;
    assert!(
        names(&unschedule, "discards the draw"),
        "{} {}",
        unschedule.status,
        unschedule.body
    );
    let record: Value = stack.http.get(&url).send().await?.json().await?;
    assert_eq!(record["status"], "done", "a 409 kept the record: {record}");
    let sure = put(
        &stack,
        "sale",
        None,
        json!({"opens_at": next, "confirm": true}),
    )
    .await?;
    assert_eq!(sure.status, 200, "{}", sure.body);
    let record: Value = stack.http.get(&url).send().await?.json().await?;
    assert_eq!(record["status"], "pending", "{record}");
    Ok(())
}

/// The store's versioned write checks and writes in one step: of many writers expecting the
/// same version at once, exactly one writes (no handler in between to serialize them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_check_is_atomic_with_the_write() -> anyhow::Result<()> {
    use usher_core::store::{QueueConfig, Store, VersionedWrite};
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("race")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let writes = (0..8).map(|i| {
        let (store, q) = (store.clone(), q.clone());
        tokio::spawn(async move {
            let cfg = QueueConfig {
                admit_per_second: f64::from(i + 1),
                ..QueueConfig::default()
            };
            store.put_queue_if(&q, &cfg, Some(1)).await
        })
    });
    let mut written = Vec::new();
    for w in writes {
        match w.await?? {
            VersionedWrite::Written(v) => written.push(v),
            VersionedWrite::Stale(v) => assert!(v >= 2, "stale at {v}"),
        }
    }
    assert_eq!(written, vec![2], "exactly one writer of version 1 wrote");
    Ok(())
}

/// A change of the schedule is written before the settings: two editors of one version who
/// both move a pending sale change it once, the winner's way; the loser's `412` changed
/// nothing (the version is claimed before the schedule is touched).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_schedule_editors_the_loser_changes_nothing() -> anyhow::Result<()> {
    let stack = start().await?;
    let first = rfc3339_ms(now_ms() + 600_000);
    let r = put(
        &stack,
        "sale",
        None,
        json!({"admit_per_second": PAUSED, "opens_at": first}),
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.body);
    for round in 0..5u64 {
        let tag = get(&stack, "sale").await?.etag.unwrap_or_default();
        let a_at = rfc3339_ms(now_ms() + 700_000 + round * 1000);
        let b_at = rfc3339_ms(now_ms() + 800_000 + round * 1000);
        let (a, b) = tokio::join!(
            put(&stack, "sale", Some(&tag), json!({"opens_at": a_at})),
            put(&stack, "sale", Some(&tag), json!({"opens_at": b_at})),
        );
        let (a, b) = (a?, b?);
        let mut statuses = [a.status, b.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [200, 412],
            "round {round}: {} / {}",
            a.body,
            b.body
        );
        let won = if a.status == 200 { &a_at } else { &b_at };
        let now = get(&stack, "sale").await?;
        assert_eq!(
            now.body["opens_at"].as_str(),
            Some(won.as_str()),
            "round {round}"
        );
    }
    Ok(())
}

/// Closing a queue changes a setting (`open`): an editor who read it before is refused. A
/// `PUT` with `If-Match` that closes the queue itself (`"open": false`) is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_makes_earlier_versions_stale() -> anyhow::Result<()> {
    let stack = start().await?;
    assert_eq!(put(&stack, "q", None, json!({})).await?.status, 201);
    let tag = get(&stack, "q").await?.etag.unwrap_or_default();
    let url = format!("{}/admin/queues/q", stack.dispatcher.url());
    assert_eq!(stack.http.delete(&url).send().await?.status(), 200);
    let stale = put(&stack, "q", Some(&tag), json!({"admit_per_second": 3.0})).await?;
    assert_eq!(stale.status, 412, "{}", stale.body);
    let reopened = get(&stack, "q").await?;
    let now = reopened.etag.unwrap_or_default();
    let open = put(&stack, "q", Some(&now), json!({"open": true})).await?;
    assert_eq!(open.status, 200, "{}", open.body);
    let tag = open.etag.unwrap_or_default();
    let closing = put(&stack, "q", Some(&tag), json!({"open": false})).await?;
    assert_eq!(closing.status, 200, "{}", closing.body);
    assert_eq!(closing.body["open"], false);
    Ok(())
}

/// `bind` cannot be switched on while places wait: they joined without a browser key, and a
/// binding queue admits no place without one, so each would lose its place at the head. The
/// change is refused (`409`, not a `confirm`), nothing changes, and the waiting browser is
/// still admitted; once the line is empty the switch goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_cannot_be_switched_on_while_places_wait() -> anyhow::Result<()> {
    let stack = start().await?;
    let created = put(&stack, "b", None, json!({"admit_per_second": PAUSED})).await?;
    assert_eq!(created.status, 201, "{}", created.body);
    let client = SseClient::new(stack.gateway_url(0));
    let mut browser = client.open("/api/queues/b/stream", None).await?;
    browser.wait_for("waiting", T).await?;

    for body in [
        json!({"bind": "browser_key"}),
        json!({"bind": "browser_key", "confirm": true}),
    ] {
        let refused = put(&stack, "b", None, body.clone()).await?;
        assert_eq!(refused.status, 409, "{body}: {}", refused.body);
        assert!(
            refused.body["error"]
                .as_str()
                .is_some_and(|e| e.contains("bind can be switched on only while nobody waits")),
            "{}",
            refused.body
        );
    }
    assert_eq!(get(&stack, "b").await?.body["bind"], "none", "unchanged");
    let resumed = put(&stack, "b", None, json!({"admit_per_second": 50.0})).await?;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    browser.wait_for("admitted", T).await?;

    // The line is empty now: the switch goes through.
    let on = put(&stack, "b", None, json!({"bind": "browser_key"})).await?;
    assert_eq!(on.status, 200, "{}", on.body);
    assert_eq!(on.body["bind"], "browser_key");
    Ok(())
}
