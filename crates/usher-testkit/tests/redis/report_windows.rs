//! The fairness record's windows and gaps, at the store on a real Redis with a synthetic
//! clock (issue 25, review of part 2): a record covers one opening, nothing writes to a
//! record its retention deleted, a record that stops recording gets its retention, the
//! places a close or an open door took out of the line are counted, a stale `away` entry
//! records no leave, times saturate at 49.7 days, and a real dispatcher makes one report at
//! a time.

use usher_core::door::DoorPeriod;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::messages::CloseReason;
use usher_core::record::{LeaveReason, RECORD_WIDTH};
use usher_core::store::Store;
use usher_core::time::now_ms;
use usher_testkit::line::take_lease;
use usher_testkit::{tick_args, tick_calls};

use crate::report_store::{config, entries, pttl, raw as conn};

async fn queue(store: &Store, id: &str) -> anyhow::Result<QueueId> {
    let q = QueueId::new(id)?;
    store.put_queue(&q, &config(true)).await?;
    Ok(q)
}

/// Joins `n` places at `now`, 1 ms apart, with no network: their ids.
async fn join(store: &Store, q: &QueueId, now: u64, n: usize) -> anyhow::Result<Vec<PlaceId>> {
    crate::report_store::join_places(store, q, now, n, false).await
}

/// Ticks every 100 ms from `from`, `ticks` times, whatever each answers.
async fn tick(store: &Store, q: &QueueId, from: u64, ticks: u64) -> anyhow::Result<()> {
    let lease = take_lease(store, q).await?;
    for i in 0..ticks {
        tick_calls(store, q, &tick_args(&lease, from + i * 100)).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_queue_starts_a_new_record() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "weekly").await?;
    let t0 = now_ms();
    join(&store, &q, t0, 3).await?;
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    assert!(
        pttl(&redis.url(), &q).await? > 0,
        "closed: kept for its retention"
    );
    // A week later (within the retention here), the queue opens for the next sale.
    store.put_queue(&q, &config(true)).await?;
    let t1 = t0 + 600_000;
    let second = join(&store, &q, t1, 2).await?;
    let e = entries(&redis.url(), &q).await?;
    assert_eq!(e.len(), 2, "only the second opening's places");
    assert_eq!(
        (e[0].joined_ms, e[1].joined_ms),
        (0, 1),
        "times from its start"
    );
    assert_eq!(pttl(&redis.url(), &q).await?, -1, "open: no retention");
    let r = store.fairness_report(&q).await?.expect("a queue");
    let info = r.record.expect("record");
    assert_eq!(info.places, 2);
    assert_eq!(info.since, usher_core::time::rfc3339_ms(t1));
    assert_eq!((info.closed, info.still_waiting), (false, 2));
    // Admission ordinals restart too.
    tick(&store, &q, t1 + 1000, 5).await?;
    let ords: Vec<Option<u32>> = entries(&redis.url(), &q)
        .await?
        .iter()
        .map(|x| x.admission)
        .collect();
    assert_eq!(ords, vec![Some(1), Some(2)], "{second:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_record_takes_no_late_writes() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "late").await?;
    let t0 = now_ms();
    let places = join(&store, &q, t0, 3).await?;
    tick(&store, &q, t0 + 1000, 5).await?;
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    // The retention passes (the key expires; meta still names the record's origin) while
    // sessions are still to end: a release, then the tick's expiries.
    let mut c = conn(&redis.url()).await?;
    let k = QueueKeys::new(&q);
    let _: () = redis::cmd("DEL").arg(&k.record).query_async(&mut c).await?;
    store.end_session(&q, places[0], t0 + 3000).await?;
    tick(&store, &q, t0 + 70_000, 1).await?;
    let exists: u64 = redis::cmd("EXISTS")
        .arg(&k.record)
        .query_async(&mut c)
        .await?;
    assert_eq!(exists, 0, "no record written after its deletion");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_turned_off_gets_its_retention() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "turned-off").await?;
    join(&store, &q, now_ms(), 2).await?;
    assert_eq!(pttl(&redis.url(), &q).await?, -1);
    store.put_queue(&q, &config(false)).await?;
    let ttl = pttl(&redis.url(), &q).await?;
    assert!((7_100_000..=7_200_000).contains(&ttl), "PTTL {ttl}");
    // Another PUT, or closing the queue, does not push the deletion back.
    let mut c = conn(&redis.url()).await?;
    let _: () = redis::cmd("PEXPIRE")
        .arg(QueueKeys::new(&q).record)
        .arg(5_000_000)
        .query_async(&mut c)
        .await?;
    store.put_queue(&q, &config(false)).await?;
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    let ttl = pttl(&redis.url(), &q).await?;
    assert!((1..=5_000_000).contains(&ttl), "PTTL {ttl}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_counts_places_the_door_and_the_close_took() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "door-close").await?;
    let places = join(&store, &q, now_ms(), 5).await?;
    let period = DoorPeriod {
        gateway: 0,
        opened_at: "2026-01-01T00:00:00Z".into(),
        closed_at: "2026-01-01T00:01:00Z".into(),
        admitted: 1,
    };
    assert_eq!(store.close_door(&q, &[places[1]], Some(&period)).await?, 1);
    let e = entries(&redis.url(), &q).await?;
    assert_eq!(e[1].left, Some(LeaveReason::Door));
    assert!(e[1].left_ms.is_some() && e[1].admission.is_none());
    let info = store.fairness_report(&q).await?.and_then(|r| r.record);
    let info = info.expect("record");
    assert_eq!(
        (info.closed, info.still_waiting, info.let_through_door),
        (false, 4, 1)
    );
    store.close_queue(&q, CloseReason::QueueClosed).await?;
    let info = store.fairness_report(&q).await?.and_then(|r| r.record);
    let info = info.expect("record");
    assert_eq!(
        (info.closed, info.waiting_at_close, info.still_waiting),
        (true, 4, 0)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_away_entry_records_no_leave() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "stale-away").await?;
    let t0 = now_ms();
    let places = join(&store, &q, t0, 2).await?;
    tick(&store, &q, t0 + 1000, 3).await?;
    // An `away` entry outlives its place (admitted already): its grace expires.
    let mut c = conn(&redis.url()).await?;
    let _: () = redis::cmd("ZADD")
        .arg(QueueKeys::new(&q).away)
        .arg(t0)
        .arg(places[0].0)
        .query_async(&mut c)
        .await?;
    tick(&store, &q, t0 + 10_000, 1).await?;
    let e = entries(&redis.url(), &q).await?;
    assert_eq!(e[0].admission, Some(1));
    assert_eq!((e[0].left, e[0].left_ms), (None, None), "no leave recorded");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn times_past_49_7_days_read_as_the_limit() -> anyhow::Result<()> {
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "long-open").await?;
    let t0 = now_ms();
    join(&store, &q, t0, 1).await?;
    // Admitted 50 days after the record began: past what 32 bits of ms hold.
    tick(&store, &q, t0 + 50 * 86_400_000, 2).await?;
    let e = entries(&redis.url(), &q).await?;
    assert_eq!(e[0].admission, Some(1));
    assert_eq!(
        e[0].admitted_ms,
        Some(u32::MAX - 1),
        "saturated at the limit"
    );
    Ok(())
}

/// A record of `n` places, each joined `i` ms in and admitted in order 60 s later.
fn admitted_record(n: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(n as usize * RECORD_WIDTH);
    for i in 0..n {
        out.extend([1, 0, 0, 0, 0, 0, 0xff, 0xff]);
        out.extend(i.to_be_bytes());
        out.extend((i + 60_001).to_be_bytes());
        out.extend((i + 1).to_be_bytes());
        out.extend(0u32.to_be_bytes());
        out.extend((1 + i % 1000).to_be_bytes());
        out.extend(0u32.to_be_bytes());
        out.extend([0xff, 0xff, 0, 0]);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_report_at_once_is_refused() -> anyhow::Result<()> {
    const TOKEN: &str = "report-windows-admin-token-0123456789";
    let redis = usher_testkit::RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = queue(&store, "big").await?;
    store
        .put_record(&q, &admitted_record(300_000), now_ms())
        .await?;
    let dispatcher = usher_testkit::procs::Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_ADMIN_TOKEN", TOKEN.into()),
        ],
    )
    .await?;
    let url = format!("{}/admin/queues/big/report", dispatcher.url());
    let http = reqwest::Client::new();
    let get = || http.get(&url).bearer_auth(TOKEN).send();
    // Two reports asked for at once: a report of 300,000 places takes a while, so whichever
    // takes the dispatcher's one permit first is made, and the other, arriving meanwhile, is
    // refused; the next, once the first is done, is made.
    let (a, b) = tokio::join!(get(), get());
    let (a, b) = (a?, b?);
    let (first, refused) = if a.status() == 429 { (b, a) } else { (a, b) };
    assert_eq!(refused.status(), 429, "one of two at once is refused");
    let retry: u64 = refused.headers()["retry-after"].to_str()?.parse()?;
    assert!(retry >= 1);
    let body: serde_json::Value = refused.json().await?;
    assert!(body["error"].is_string(), "{body}");
    assert_eq!(first.status(), 200);
    let r: serde_json::Value = first.json().await?;
    assert_eq!(r["record"]["places"], 300_000);
    assert_eq!(r["order"]["inversions"], 0);
    assert_eq!(
        get().await?.status(),
        200,
        "the next, once the first is done"
    );
    Ok(())
}
