//! One shard of a real Redis Cluster loses its data: its replica is killed, then its master
//! restarts empty (no RDB, no AOF) with its `nodes.conf`, so it rejoins owning the same slots
//! and nothing in them. That is per queue what a whole Redis restarted empty is
//! (`data_loss.rs`): the queues on the lost shard get a new epoch from `USHER_QUEUES_FILE`
//! and their connected browsers' places are put back by the gateways in their order, while
//! the queues on the other shards go on as if nothing happened (same epoch, no `closed`,
//! positions only falling, everyone admitted once).
//!
//! Each test loses the shard of one global key, so every global key's loss is met: the queue
//! registry (with `usher:dispatchers`, `usher:draws` and the audit stream: one shard with
//! `redis-cli --cluster create`'s slot split), the gateway registry, and the development keys.
//! The cluster runs with `cluster-require-full-coverage no`: with the default, every shard
//! refuses commands while one slot has no master, so the others would stall for the outage.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::json;
use usher_core::ids::QueueId;
use usher_core::keys::{self, QueueKeys};
use usher_core::store::Store;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::browser::Browser;
use usher_testkit::config::admin_client;
use usher_testkit::line::{
    data, heartbeats_done, join_watch, jwks_at, place_of, position, positions, queue_view,
    verify_token, wait_waiting,
};
use usher_testkit::procs::Proc;
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::{RedisCluster, SseClient};

/// Browsers per queue.
const N: usize = 10;
/// Queues on the lost shard, and on the others.
const PER_SIDE: usize = 2;

/// A queue and its browsers in join order: (ticket, watcher).
struct Line {
    queue: String,
    browsers: Vec<(String, Watcher)>,
}

/// `PER_SIDE` queue names whose slots the master on `lost` serves, and `PER_SIDE` it does not.
fn pick_queues(c: &RedisCluster, lost: u16) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for i in 0..200 {
        let name = format!("sale-{i}");
        let meta = QueueKeys::new(&QueueId::new(&name)?).meta;
        let side = if c.master_port_of(&meta)? == lost {
            &mut on
        } else {
            &mut off
        };
        if side.len() < PER_SIDE {
            side.push(name);
        }
        if on.len() == PER_SIDE && off.len() == PER_SIDE {
            return Ok((on, off));
        }
    }
    anyhow::bail!("no queue names for both sides")
}

fn admitted(line: &Line) -> usize {
    line.browsers
        .iter()
        .filter(|(_, w)| w.last("admitted").is_some())
        .count()
}

/// Every browser of `line` was admitted exactly once, for its own place, with a token the
/// dispatcher's JWKS verifies, its `jti` seen nowhere else (`jtis`), and never told `closed`.
async fn each_admitted_once(
    d: &Proc,
    line: &Line,
    jtis: &mut HashSet<String>,
) -> anyhow::Result<()> {
    let jwks = jwks_at(&admin_client(), &d.url()).await?;
    for (ticket, w) in &line.browsers {
        let all = w.all("admitted");
        assert_eq!(all.len(), 1, "{ticket}: exactly one admission");
        assert!(
            w.last("closed").is_none(),
            "{ticket}: {:?}",
            w.last("closed")
        );
        let token = data(&all[0])["token"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let claims = verify_token(&jwks, &token, &line.queue)?;
        assert_eq!(claims["sub"], place_of(ticket).to_string(), "{ticket}");
        assert!(
            jtis.insert(claims["jti"].to_string()),
            "{ticket}: jti reused"
        );
    }
    Ok(())
}

/// Loses the shard holding `global` (a global key) while browsers wait in queues on it and
/// drain from queues elsewhere; `dev_keys` runs without configured keys (development keys
/// shared through Redis).
async fn shard_loss(global: &str, dev_keys: bool) -> anyhow::Result<()> {
    let mut cluster = tokio::task::block_in_place(|| {
        RedisCluster::start(&[
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-require-full-coverage",
            "no",
        ])
    })?;
    let lost = cluster.master_port_of(global)?;
    let (on_lost, on_kept) = tokio::task::block_in_place(|| pick_queues(&cluster, lost))?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("queues.yaml");
    let yaml: String = on_lost
        .iter()
        .chain(&on_kept)
        .map(|q| format!("{q}:\n  admit_per_second: 2\n  paused: true\n"))
        .collect();
    std::fs::write(&file, yaml)?;
    let mut env = vec![
        ("USHER_REDIS_MODE", "cluster".to_owned()),
        ("USHER_REDIS_URL", cluster.urls().join(",")),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_LEASE_TTL_MS", "300".to_owned()),
        ("USHER_HEARTBEAT_MS", "300".to_owned()),
        ("USHER_QUEUES_FILE", file.display().to_string()),
    ];
    if dev_keys {
        env.push(("USHER_DEV", "1".to_owned()));
        env.push((
            "USHER_ADMIN_TOKEN",
            usher_testkit::config::admin_token_spec(),
        ));
    } else {
        env.push((
            "USHER_TICKET_KEY",
            "shard-loss-test-ticket-key-0123456789abcdef".to_owned(),
        ));
        env.push((
            "USHER_JWT_KEY",
            usher_mint::token::SigningKey::generate_pem()?,
        ));
    }
    let d = Proc::start("usher-dispatcher", &env).await?;
    let g0 = Proc::start("usher-gateway", &env).await?;
    let g1 = Proc::start("usher-gateway", &env).await?;
    let clients = [SseClient::new(g0.url()), SseClient::new(g1.url())];
    let mut lines = Vec::new();
    for q in on_lost.iter().chain(&on_kept) {
        let mut browsers = Vec::with_capacity(N);
        for i in 0..N {
            let (ticket, _, w) = join_watch(&clients[i % 2], q).await?;
            browsers.push((ticket, w));
        }
        wait_waiting(&d, q, N as u64).await?;
        lines.push(Line {
            queue: q.clone(),
            browsers,
        });
    }
    let (lost_lines, kept_lines) = lines.split_at(PER_SIDE);
    let store = Store::open(&cluster.redis_args()).await?;
    let mut epochs = Vec::new();
    for l in &lines {
        epochs.push(store.queue_epoch(&QueueId::new(&l.queue)?).await?);
    }
    // The queues elsewhere drain through the loss.
    let http = admin_client();
    for l in kept_lines {
        // 1/s: the ten places take about 10 s, so the loss (which takes over 2 s: a restarted
        // master stays unwritable that long) surely comes mid-drain.
        let r = http
            .put(format!("{}/admin/queues/{}", d.url(), l.queue))
            .json(&json!({"paused": false, "admit_per_second": 1}))
            .send()
            .await?;
        assert_eq!(r.status(), 200);
    }
    eventually("each kept line to admit", async || {
        kept_lines.iter().all(|l| admitted(l) >= 1)
    })
    .await?;
    // The gateways have seen every queue's epoch.
    heartbeats_done(&store).await?;

    let on_shard: Vec<&str> = [
        keys::QUEUES,
        keys::DISPATCHERS,
        keys::DRAWS,
        keys::AUDIT,
        keys::GW_LIVE,
        keys::DEV_JWT_KEY,
        keys::DEV_TICKET_KEY,
        keys::DEV_ADMIN_TOKEN,
    ]
    .into_iter()
    .filter(|k| cluster.master_port_of(k).is_ok_and(|p| p == lost))
    .collect();
    tokio::task::block_in_place(|| cluster.lose_shard(lost))?;
    let at_loss: Vec<usize> = kept_lines.iter().map(admitted).collect();
    assert!(
        at_loss.iter().all(|&n| n < N),
        "the other queues still had browsers waiting: {at_loss:?}"
    );
    eprintln!("shard of {global} lost, with the global keys {on_shard:?}");

    // The lost queues are configured again from the file (a new epoch), and the gateways
    // put every connected browser's place back.
    for l in lost_lines {
        wait_waiting(&d, &l.queue, N as u64).await?;
    }
    for (l, before) in lines.iter().zip(&epochs) {
        let now = store.queue_epoch(&QueueId::new(&l.queue)?).await?;
        if lost_lines.iter().any(|x| x.queue == l.queue) {
            assert!(now.is_some() && now != *before, "{}: a new epoch", l.queue);
        } else {
            assert_eq!(now, *before, "{}: its shard kept its epoch", l.queue);
        }
    }
    // The queues elsewhere kept going: more admitted than at the loss, then everyone.
    eventually_within(
        "the other shards' queues to keep admitting",
        Duration::from_secs(30),
        async || {
            if kept_lines
                .iter()
                .zip(&at_loss)
                .all(|(l, &n)| admitted(l) > n)
            {
                Ok(())
            } else {
                Err(format!(
                    "the other shards' queues stalled: {:?} at the loss\n{}",
                    at_loss,
                    d.log_tail()
                ))
            }
        },
    )
    .await?;
    for l in lost_lines {
        for (t, w) in &l.browsers {
            assert!(!w.has_ended(), "{t}: stream ended: {:?}", w.last("closed"));
        }
        // Relative order kept: positions follow the join order.
        eventually(
            &format!("{}: positions in join order", l.queue),
            async || {
                let p: Vec<Option<u64>> = l.browsers.iter().map(|(_, w)| position(w)).collect();
                if p.iter().all(Option::is_some) && p.windows(2).all(|w| w[0] < w[1]) {
                    Ok(())
                } else {
                    Err(Seen(p))
                }
            },
        )
        .await?;
        let r = http
            .put(format!("{}/admin/queues/{}", d.url(), l.queue))
            .json(&json!({"paused": false, "admit_per_second": 20}))
            .send()
            .await?;
        assert_eq!(r.status(), 200);
    }
    eventually_within("every line admitted", Duration::from_secs(40), async || {
        if lines.iter().all(|l| admitted(l) == N) {
            Ok(())
        } else {
            Err(format!(
                "not all admitted: {:?}\n{}\n{}",
                lines.iter().map(admitted).collect::<Vec<_>>(),
                d.log_tail(),
                g0.log_tail()
            ))
        }
    })
    .await?;
    let mut jtis = HashSet::new();
    for l in &lines {
        each_admitted_once(&d, l, &mut jtis).await?;
    }
    // On the other shards, nobody's position ever went up.
    for l in kept_lines {
        for (t, w) in &l.browsers {
            let p = positions(w);
            assert!(p.windows(2).all(|w| w[0] >= w[1]), "{t}: {p:?}");
        }
        let v = queue_view(&d, &l.queue).await;
        assert!(
            v.as_ref().is_some_and(|v| v["admitted_total"] == N as u64),
            "{}: admitted once each: {v:?}",
            l.queue
        );
    }
    drop((g0, g1, d));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_queue_registry_shard_restores_its_queues_and_spares_the_others(
) -> anyhow::Result<()> {
    shard_loss(keys::QUEUES, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_gateway_registry_shard_restores_its_queues_and_spares_the_others(
) -> anyhow::Result<()> {
    shard_loss(keys::GW_LIVE, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_development_keys_shard_keeps_tickets_and_tokens_valid() -> anyhow::Result<()> {
    shard_loss(keys::DEV_JWT_KEY, true).await
}

/// A scheduled sale on a shard that survives, while the shard holding `usher:draws` (the
/// sales whose draw is pending) loses its data: the dispatcher lists the sale again from its
/// own pending draw, draws it at its time, and the pre-queue's browsers are put in line and
/// admitted, each with a token of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_draw_is_still_drawn_after_the_sales_registry_shard_is_lost() -> anyhow::Result<()>
{
    let mut stack = Stack::<RedisCluster>::launch(StackOptions {
        redis_args: vec![
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-require-full-coverage",
            "no",
        ],
        ..StackOptions::default()
    })
    .await?;
    let lost = stack.redis.master_port_of(keys::DRAWS)?;
    let (_, elsewhere) = tokio::task::block_in_place(|| pick_queues(&stack.redis, lost))?;
    let q = elsewhere[0].as_str();
    stack.create_queue(q, 50.0).await?;
    stack
        .put_queue(q, json!({"opens_at": rfc3339_ms(now_ms() + 4000)}))
        .await?;
    let clients = vec![SseClient::new(stack.gateway_url(0))];
    let browsers: Vec<Browser> = (0..4)
        .map(|i| Browser::spawn(clients.clone(), q, i, Duration::from_secs(60)))
        .collect();
    eventually("every browser is in the pre-queue", async || {
        browsers.iter().all(|b| !b.seen().scheduled.is_empty())
    })
    .await?;
    // The dispatcher has read the registries since the sale was scheduled: a sale scheduled
    // less than a tick before the loss is known to no dispatcher (docs/failure-model.md,
    // "Every failure"). Five of its ticks, counted on its /metrics.
    usher_testkit::line::counter_grows(
        &stack.dispatcher.url(),
        "usher_tick_duration_seconds_count",
        5,
    )
    .await?;
    tokio::task::block_in_place(|| stack.redis.lose_shard(lost))?;

    eventually_within(
        "every browser admitted",
        Duration::from_secs(30),
        async || {
            if browsers.iter().all(|b| !b.seen().admitted.is_empty()) {
                Ok(())
            } else {
                Err(format!(
                    "the sale was drawn and everyone admitted: {:?}",
                    browsers
                        .iter()
                        .map(|b| b.seen().admitted.len())
                        .collect::<Vec<_>>()
                ))
            }
        },
    )
    .await?;
    let jwks = jwks_at(&stack.http, &stack.dispatcher.url()).await?;
    let mut jtis = HashSet::new();
    for b in &browsers {
        let s = b.seen();
        assert_eq!(s.admitted.len(), 1, "{s:?}");
        let token = s.admitted[0]["token"].as_str().unwrap_or_default();
        let claims = verify_token(&jwks, token, q)?;
        assert!(jtis.insert(claims["jti"].to_string()), "jti reused");
    }
    Ok(())
}
