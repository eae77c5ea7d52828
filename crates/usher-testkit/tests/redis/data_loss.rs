//! Redis restarted empty or flushed while gateways hold browsers: queues come back from
//! `USHER_QUEUES_FILE`, connected browsers keep their places in their order and are all
//! admitted, no place id is handed out twice, and no gateway index is ever shared.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use usher_core::ids::ServerId;
use usher_core::store::Store;
use usher_core::time::now_ms;
use usher_testkit::config::admin_client;
use usher_testkit::line::{
    data, heartbeats_done, join_watch, place_of, position, queue_view, verify_token, wait_waiting,
};
use usher_testkit::procs::Proc;
use usher_testkit::sse::Watcher;
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::{RedisServer, SseClient};

/// How Redis loses its data in a test.
#[derive(Clone, Copy, Debug)]
enum Loss {
    Flush,
    Restart,
}

/// `FLUSHALL` on the Redis at `url`.
async fn flushall(url: &str) -> anyhow::Result<()> {
    Ok(usher_testkit::RedisProbe::connect(url)
        .await?
        .flushall()
        .await?)
}

/// Browsers in join order: (ticket, watcher).
type Browsers = Vec<(String, Watcher)>;

async fn join_all(gateways: &[SseClient], queue: &str, n: usize) -> anyhow::Result<Browsers> {
    let mut out = Vec::new();
    for i in 0..n {
        let (ticket, _, w) = join_watch(&gateways[i % gateways.len()], queue).await?;
        out.push((ticket, w));
    }
    Ok(out)
}

async fn survives(loss: Loss) -> anyhow::Result<()> {
    let mut redis = RedisServer::start()?;
    let url = redis.url();
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("queues.yaml");
    std::fs::write(
        &file,
        "# the queues of this event\nshow:\n  admit_per_second: 40\n  paused: true\n  session_ttl_seconds: 600\n",
    )?;
    let env = [
        ("USHER_REDIS_URL", url.clone()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_LEASE_TTL_MS", "300".to_owned()),
        ("USHER_HEARTBEAT_MS", "300".to_owned()),
        ("USHER_QUEUES_FILE", file.display().to_string()),
        (
            "USHER_TICKET_KEY",
            "data-loss-test-ticket-key-0123456789abcdef".to_owned(),
        ),
        (
            "USHER_JWT_KEY",
            usher_mint::token::SigningKey::generate_pem()?,
        ),
    ];
    let d = Proc::start("usher-dispatcher", &env).await?;
    // Created from the file at start.
    anyhow::ensure!(
        queue_view(&d, "show").await.is_some(),
        "queue from the file"
    );
    let g0 = Proc::start("usher-gateway", &env).await?;
    let g1 = Proc::start("usher-gateway", &env).await?;
    let clients = [SseClient::new(g0.url()), SseClient::new(g1.url())];
    let browsers = join_all(&clients, "show", 30).await?;
    let before: Vec<u64> = browsers.iter().map(|(t, _)| place_of(t)).collect();
    wait_waiting(&d, "show", 30).await?;
    // Both gateways have seen the queue's epoch: a restore needs the epoch it replaces.
    heartbeats_done(&Store::connect(&url).await?).await?;

    match loss {
        Loss::Flush => flushall(&url).await?,
        Loss::Restart => redis.restart()?, // no persistence: it comes back empty
    }
    // A gateway starting right after the loss, before the others' heartbeats repaired the
    // registry, must not end up sharing an index with them.
    let g2 = Proc::start("usher-gateway", &env).await?;

    // The dispatcher configures the queue again from the file; the gateways put their
    // browsers' places back.
    wait_waiting(&d, "show", 30).await?;
    for (t, w) in &browsers {
        assert!(!w.has_ended(), "{t}: stream ended: {:?}", w.last("closed"));
        assert!(w.last("closed").is_none());
    }
    // No index shared: every live gateway has its own.
    let store = Store::connect(&url).await?;
    heartbeats_done(&store).await?;
    let live: Vec<(u16, ServerId)> = store
        .gateways(now_ms())
        .await?
        .into_iter()
        .filter(|g| g.is_alive(now_ms()))
        .map(|g| (g.index, g.server_id))
        .collect();
    let indexes: HashSet<u16> = live.iter().map(|(i, _)| *i).collect();
    let ids: HashSet<&ServerId> = live.iter().map(|(_, id)| id).collect();
    assert_eq!(
        (live.len(), indexes.len(), ids.len()),
        (3, 3, 3),
        "{live:?}"
    );

    // A browser joining now gets a place id above every earlier one: none is reused.
    let (late, _, late_w) = join_watch(&clients[0], "show").await?;
    let highest = before.iter().copied().max().unwrap_or(0);
    assert!(place_of(&late) > highest, "{late} after {highest}");
    wait_waiting(&d, "show", 31).await?;

    // Relative order kept: positions follow the join order.
    eventually("positions in join order", async || {
        let p: Vec<Option<u64>> = browsers.iter().map(|(_, w)| position(w)).collect();
        if p.iter().all(Option::is_some) && p.windows(2).all(|w| w[0] < w[1]) {
            Ok(())
        } else {
            Err(Seen(p))
        }
    })
    .await?;

    // Everyone is admitted, in order, with tokens that verify and name their own places.
    let http = admin_client();
    let r = http
        .put(format!("{}/admin/queues/show", d.url()))
        .json(&json!({"paused": false}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let everyone: Vec<&Watcher> = browsers.iter().map(|(_, w)| w).chain([&late_w]).collect();
    eventually_within("everyone admitted", Duration::from_secs(20), async || {
        if everyone.iter().all(|w| w.last("admitted").is_some()) {
            Ok(())
        } else {
            Err(format!(
                "not all admitted: {} of {}: {:?}\n{}\n{}",
                everyone
                    .iter()
                    .filter(|w| w.last("admitted").is_some())
                    .count(),
                everyone.len(),
                queue_view(&d, "show").await,
                d.log_tail(),
                g0.log_tail()
            ))
        }
    })
    .await?;
    let jwks = usher_testkit::line::jwks_at(&http, &d.url()).await?;
    let mut subs = HashSet::new();
    for ((ticket, w), place) in browsers.iter().zip(&before) {
        let e = w
            .last("admitted")
            .ok_or_else(|| anyhow::anyhow!("admitted"))?;
        let claims = verify_token(&jwks, data(&e)["token"].as_str().unwrap_or(""), "show")?;
        assert_eq!(claims["sub"], place.to_string(), "{ticket}");
        assert!(subs.insert(claims["jti"].to_string()), "jti reused");
    }
    drop((g0, g1, g2));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushall_keeps_connected_browsers_in_order_and_admits_them_all() -> anyhow::Result<()> {
    survives(Loss::Flush).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_persistence_keeps_connected_browsers_in_order(
) -> anyhow::Result<()> {
    survives(Loss::Restart).await
}

/// Without a queues file and nobody configuring the queue again, the browsers' places are
/// really lost: past the restore window they hear `place_lost` (not `queue_closed`). Within
/// the window, an operator's `PUT` brings them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn places_are_lost_only_when_the_queue_does_not_come_back_in_time() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let url = redis.url();
    let env = [
        ("USHER_REDIS_URL", url.clone()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_LEASE_TTL_MS", "300".to_owned()),
        ("USHER_HEARTBEAT_MS", "200".to_owned()),
        ("USHER_RESTORE_WINDOW_SECS", "3".to_owned()),
    ];
    let d = Proc::start("usher-dispatcher", &env).await?;
    let g = Proc::start("usher-gateway", &env).await?;
    let http = admin_client();
    let put = |q: &'static str| {
        http.put(format!("{}/admin/queues/{q}", d.url()))
            .json(&json!({"admit_per_second": 1, "paused": true}))
            .send()
    };
    assert_eq!(put("kept").await?.status(), 201);
    assert_eq!(put("gone").await?.status(), 201);
    let client = SseClient::new(g.url());
    let kept = join_all(std::slice::from_ref(&client), "kept", 5).await?;
    let gone = join_all(std::slice::from_ref(&client), "gone", 5).await?;
    wait_waiting(&d, "gone", 5).await?;
    heartbeats_done(&Store::connect(&url).await?).await?; // the gateway has seen both epochs

    flushall(&url).await?;
    // Inside the window the queues have to come back in: the gateway registered again and
    // its heartbeats have seen the loss (the window's end is the next step's subject).
    let store = Store::connect(&url).await?;
    eventually("the gateway to register again after the loss", async || {
        let now = now_ms();
        store
            .gateways(now)
            .await
            .is_ok_and(|gs| gs.iter().any(|g| g.is_alive(now)))
    })
    .await?;
    heartbeats_done(&store).await?;
    // Within the window nobody is told anything, and an operator configures "kept" again.
    for (t, w) in kept.iter().chain(&gone) {
        assert!(!w.has_ended(), "{t} ended early: {:?}", w.last("closed"));
    }
    assert_eq!(put("kept").await?.status(), 201);
    wait_waiting(&d, "kept", 5).await?;
    // "gone" never comes back: its browsers hear place_lost once the window is over.
    eventually_within(
        "\"gone\"'s streams to end",
        Duration::from_secs(10),
        async || gone.iter().all(|(_, w)| w.has_ended()),
    )
    .await?;
    for (t, w) in &gone {
        let c = w
            .last("closed")
            .ok_or_else(|| anyhow::anyhow!("{t}: no closed event"))?;
        assert_eq!(data(&c)["reason"], "place_lost", "{t}");
    }
    for (t, w) in &kept {
        assert!(!w.has_ended(), "{t}: {:?}", w.last("closed"));
    }
    Ok(())
}

/// Registration and heartbeat check ownership in one script each: after the registry was
/// lost, a new process may take a live one's index, but the live one's heartbeat then fails
/// and overwrites nothing, and it registers under another index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_index_is_never_shared_after_the_registry_is_lost() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let ttl = Duration::from_secs(10);
    let (a, b) = (ServerId::new("gw-a")?, ServerId::new("gw-b")?);
    let ia = store.register_gateway(&a, now_ms(), ttl).await?;
    assert!(store.heartbeat_gateway(ia, &a, now_ms(), ttl).await?);

    // Lost before A's next heartbeat: B registers first and gets A's index.
    flushall(&redis.url()).await?;
    let ib = store.register_gateway(&b, now_ms(), ttl).await?;
    assert_eq!(ib, ia, "the registry forgot A, so B may take the index");
    assert!(
        !store.heartbeat_gateway(ia, &a, now_ms(), ttl).await?,
        "A no longer owns it"
    );
    let owners = store.live_gateways(now_ms()).await?;
    assert_eq!(owners.get(&ib), Some(&b), "A's heartbeat overwrote nothing");
    let ia2 = store.register_gateway(&a, now_ms(), ttl).await?;
    assert_ne!(ia2, ib);
    assert!(store.heartbeat_gateway(ia2, &a, now_ms(), ttl).await?);
    assert!(store.heartbeat_gateway(ib, &b, now_ms(), ttl).await?);

    // Lost again, and this time A's heartbeat comes first: it repairs its entry, and a
    // process registering afterwards gets neither index.
    flushall(&redis.url()).await?;
    assert!(store.heartbeat_gateway(ia2, &a, now_ms(), ttl).await?);
    assert!(store.heartbeat_gateway(ib, &b, now_ms(), ttl).await?);
    let c = ServerId::new("gw-c")?;
    let ic = store.register_gateway(&c, now_ms(), ttl).await?;
    assert!(![ia2, ib].contains(&ic), "{ic} is taken");
    let owners = store.live_gateways(now_ms()).await?;
    assert_eq!(owners.len(), 3);
    assert_eq!(
        (owners.get(&ia2), owners.get(&ib), owners.get(&ic)),
        (Some(&a), Some(&b), Some(&c))
    );
    Ok(())
}

/// Redis forgot its scripts (`SCRIPT FLUSH`: as after a restart, which keeps none, even with
/// the data on disk): the next store call is refused `NOSCRIPT`, loads its script and runs it
/// then. Nothing is lost and nobody is told to try later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_call_after_redis_forgot_its_scripts_loads_them_again() -> anyhow::Result<()> {
    use usher_core::ids::QueueId;
    use usher_core::store::{PlaceState, QueueConfig};
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let probe = usher_testkit::RedisProbe::connect(&redis.url()).await?;
    let q = QueueId::new("forgot")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let position = |b: &usher_core::store::Joined| match b.state(0) {
        PlaceState::Waiting { position, .. } => Ok(position),
        other => anyhow::bail!("{other:?}"),
    };
    assert_eq!(position(&store.join_many(&q, 1, now_ms(), 1).await?)?, 1);
    probe.script_flush().await?;
    let loads = probe.calls("script|load").await?;
    assert_eq!(position(&store.join_many(&q, 1, now_ms(), 1).await?)?, 2);
    assert_eq!(
        probe.calls("script|load").await?,
        loads + 1,
        "the join's script, loaded again"
    );
    Ok(())
}
