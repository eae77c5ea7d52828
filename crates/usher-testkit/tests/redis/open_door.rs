//! The open door (issue 24, item 5; `usher_core::door`): a queue with `on_outage: "open"` lets
//! a gateway's own browsers through at a bounded rate, with a door token, once the gateway has
//! not reached Redis for `door_after_seconds`; a `hold` queue lets nobody through; when Redis
//! is back the line resumes and everyone who kept a place keeps it.

use std::time::Duration;

use serde_json::{json, Value};
use usher_core::store::Store;
use usher_core::time::{now_ms, parse_rfc3339_ms};
use usher_mint::door::DoorClaims;
use usher_testkit::line::*;
use usher_testkit::sse::Watcher;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::SseClient;

/// The door queue's rate: one gateway, so the door lets through this many per second.
const RATE: f64 = 5.0;

/// Sends SIGCONT to a stopped redis-server when dropped, so a failing test never leaves it
/// frozen.
struct Frozen(u32);

impl Frozen {
    fn stop(pid: u32) -> anyhow::Result<Self> {
        signal(pid, "-STOP")?;
        Ok(Self(pid))
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) -> anyhow::Result<()> {
    let status = tokio::task::block_in_place(|| {
        std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
    })?;
    anyhow::ensure!(status.success(), "kill {sig} {pid}");
    Ok(())
}

/// The `admitted` event a watcher got, as JSON.
fn admitted(w: &Watcher) -> Option<Value> {
    w.last("admitted").map(|e| data(&e))
}

/// A labelled counter's value on the server at `url` (0 while absent).
async fn labelled(http: &reqwest::Client, url: &str, series: &str) -> anyhow::Result<u64> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64))
}

/// Waits until each gateway holds `queue`'s door tokens (`/readyz?verbose`, `door.ready`):
/// it got a `state` carrying them.
async fn door_ready(stack: &Stack, queue: &str) -> anyhow::Result<()> {
    for i in 0..stack.gateways.len() {
        let url = format!("{}/readyz?verbose", stack.gateway_url(i));
        eventually(
            &format!("gateway {i} to hold {queue}'s door tokens"),
            async || {
                let v: Value = stack.http.get(&url).send().await?.json().await?;
                let ready = v["door"]["ready"].as_array().cloned().unwrap_or_default();
                anyhow::ensure!(ready.contains(&json!(queue)), "{v}");
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

/// `POST /api/bookings` at the booking demo with `token`: its status.
async fn book(stack: &Stack, queue: &str, token: &str) -> anyhow::Result<u16> {
    let booking = stack
        .booking
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no booking demo"))?;
    book_at(&booking.url(), queue, token).await
}

/// `POST /api/bookings` at the booking demo at `url` with `token`: its status.
async fn book_at(url: &str, queue: &str, token: &str) -> anyhow::Result<u16> {
    let r = reqwest::Client::new()
        .post(format!("{url}/api/bookings"))
        .bearer_auth(token)
        .json(&json!({"queue": queue, "seat": "A1"}))
        .send()
        .await?;
    Ok(r.status().as_u16())
}

/// `GET /api/session?queue=` at the dispatcher with `token`: its status.
async fn session(stack: &Stack, queue: &str, token: &str) -> anyhow::Result<u16> {
    let r = reqwest::Client::new()
        .get(format!(
            "{}/api/session?queue={queue}",
            stack.dispatcher.url()
        ))
        .bearer_auth(token)
        .send()
        .await?;
    Ok(r.status().as_u16())
}

/// Redis stops: after the threshold the `open` queue's browsers are let through, lowest place
/// first, at the queue's rate, and book at the demo with the door token while Redis is still
/// away; the `hold` queue's browsers keep waiting. Redis returns: the door closes, its period
/// is recorded (admin API), the places let through are out of the line, and everyone else is
/// admitted by the dispatcher in order, with ordinary tokens, none of the door's twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_opens_the_door_at_the_rate_and_the_line_resumes_after() -> anyhow::Result<()>
{
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    // One slot, taken by the first browser of each queue: the others wait.
    let settings = |on_outage: &str| {
        json!({"admit_per_second": RATE, "session_ttl_seconds": 600, "open": true,
            "passthrough": false, "max_active": 1, "on_outage": on_outage,
            "door_after_seconds": 1})
    };
    let v = stack.put_queue("door", settings("open")).await?;
    assert_eq!(
        (v["on_outage"].as_str(), v["door_after_seconds"].as_u64()),
        (Some("open"), Some(1))
    );
    stack.put_queue("held", settings("hold")).await?;
    // An `open` queue whose reported inventory is taken (1 left, held by its one session):
    // its door lets nobody through either.
    stack.put_queue("sold", settings("open")).await?;
    let sold_q = usher_core::ids::QueueId::new("sold")?;
    Store::connect(&stack.redis.url())
        .await?
        .report_inventory(&sold_q, 1, now_ms())
        .await?;
    let client = SseClient::new(stack.gateway_url(0));
    for q in ["door", "held", "sold"] {
        let (_, _, w) = join_watch(&client, q).await?;
        eventually(&format!("the first of {q} to take the slot"), async || {
            admitted(&w)
        })
        .await?;
    }
    let line = waiters(&client, "door", 8).await?;
    let held = waiters(&client, "held", 2).await?;
    let sold = waiters(&client, "sold", 2).await?;
    // The gateway has the door tokens (a `state` carried them); the dispatcher signed them.
    door_ready(&stack, "door").await?;
    door_ready(&stack, "sold").await?;
    // The gateway learnt that the sold-out queue's door lets nobody through (a `state` after
    // its one session was admitted), before Redis stops.
    let url = format!("{}/readyz?verbose", stack.gateway_url(0));
    eventually("the sold-out queue's door share to be 0", async || {
        let v: Value = stack.http.get(&url).send().await?.json().await?;
        anyhow::ensure!(v["door"]["share_per_second"]["sold"] == json!(0.0), "{v}");
        Ok(())
    })
    .await?;
    let dispatcher = stack.dispatcher.url();
    let signed = labelled(
        &stack.http,
        &dispatcher,
        "usher_door_tokens_signed_total{queue=\"door\"}",
    )
    .await?;
    assert!(signed >= 2, "the current and the next window: {signed}");
    assert!(line.iter().chain(&held).all(|(_, w)| admitted(w).is_none()));

    let stopped_ms = now_ms();
    let frozen = Frozen::stop(stack.redis.pid())?;
    let through = |line: &[(String, Watcher)]| -> Vec<(usize, Value)> {
        line.iter()
            .enumerate()
            .filter_map(|(i, (_, w))| admitted(w).map(|a| (i, a)))
            .collect()
    };
    let first = eventually_within(
        "four browsers let through the open door",
        Duration::from_secs(20),
        async || {
            let t = through(&line);
            if t.len() >= 4 {
                Ok(t)
            } else {
                Err(Seen(t.len()))
            }
        },
    )
    .await?;
    // Lowest place first: the browsers let through are the first to have joined.
    let n = first.len();
    assert_eq!(
        first.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>(),
        "let through in place order"
    );
    let mut at: Vec<u64> = Vec::new();
    for (_, a) in &first {
        assert_eq!(a["door"], json!(true), "a door admission says so: {a}");
        at.push(parse_rfc3339_ms(a["admitted_at"].as_str().unwrap_or("")).unwrap_or(0));
    }
    // Not before the threshold (1 s; the door waits at least three heartbeats too).
    assert!(
        at[0] >= stopped_ms + 1000,
        "opened {} ms after the stop",
        at[0] - stopped_ms
    );
    // At the bounded rate: the first at once, then never more than the rate allows since
    // the door opened (10% for the gateway's 20 ms step and the timestamps); and not much
    // slower.
    for (j, t) in at.iter().enumerate() {
        let allowed = 1.0 + (t - at[0]) as f64 / 1000.0 * RATE * 1.1;
        assert!(
            (j + 1) as f64 <= allowed,
            "{} let through in {} ms: {at:?}",
            j + 1,
            t - at[0]
        );
    }
    let measured = (n - 1) as f64 / ((at[n - 1] - at[0]) as f64 / 1000.0);
    assert!(measured >= RATE / 2.0, "{measured:.1}/s: {at:?}");
    // The hold queue lets nobody through, nor the sold-out one (its door's rate is 0).
    assert!(
        held.iter().all(|(_, w)| admitted(w).is_none()),
        "a hold queue holds"
    );
    assert!(
        sold.iter().all(|(_, w)| admitted(w).is_none()),
        "a door lets nobody through once the inventory is taken"
    );
    // Redis is still away: the booking demo (usher-admission) and the dispatcher's session API
    // accept the door token offline.
    let token = first[0].1["token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(session(&stack, "door", &token).await?, 200);
    assert_eq!(
        session(&stack, "held", &token).await?,
        403,
        "another queue's"
    );
    for (_, a) in &first {
        assert_eq!(
            book(&stack, "door", a["token"].as_str().unwrap_or("")).await?,
            201
        );
    }

    drop(frozen);
    let door_periods = eventually_within(
        "the door period recorded once redis is back",
        Duration::from_secs(20),
        async || {
            let v = stack.queue("door").await.map_err(|e| Seen(e.to_string()))?;
            match v["door_periods"].as_array() {
                Some(p) if !p.is_empty() => Ok(v),
                _ => Err(Seen(v.to_string())),
            }
        },
    )
    .await?;
    let let_through = through(&line);
    let periods = door_periods["door_periods"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(periods.len(), 1, "{periods:?}");
    assert_eq!(
        periods[0]["admitted"].as_u64(),
        Some(let_through.len() as u64)
    );
    assert_eq!(
        door_periods["door_admitted_total"].as_u64(),
        Some(let_through.len() as u64)
    );
    let kept: Vec<&(String, Watcher)> = line.iter().skip(let_through.len()).collect();
    assert!(
        !kept.is_empty(),
        "some kept their place: {}",
        let_through.len()
    );
    // Only the places let through left the line.
    eventually("the places let through are out of the line", async || {
        let w = stack.waiting("door").await?;
        anyhow::ensure!(w == kept.len() as u64, "{w} waiting");
        Ok(())
    })
    .await?;
    // The line resumes: everyone who kept a place is admitted by the dispatcher, in order,
    // with an ordinary entry token for that place.
    stack.put_queue("door", json!({"max_active": null})).await?;
    let mut last_at = 0;
    for (ticket, w) in &kept {
        let a = eventually_within(
            "the rest admitted after redis returns",
            Duration::from_secs(20),
            async || admitted(w),
        )
        .await?;
        assert!(a.get("door").is_none(), "an ordinary admission: {a}");
        let at = parse_rfc3339_ms(a["admitted_at"].as_str().unwrap_or("")).unwrap_or(0);
        assert!(at >= last_at, "in place order");
        last_at = at;
        let place = place_of(ticket).to_string();
        let token = a["token"].as_str().unwrap_or_default();
        assert_eq!(session(&stack, "door", token).await?, 200);
        let claims: Value = serde_json::from_slice(&base64_claims(token)?)?;
        assert_eq!(claims["sub"].as_str(), Some(place.as_str()));
    }
    // Nobody was admitted twice: the first browser, then each who kept a place.
    let v = stack.queue("door").await?;
    assert_eq!(
        v["admitted_total"].as_u64(),
        Some(1 + kept.len() as u64),
        "{v}"
    );
    // The hold queue's browsers kept their places too.
    assert_eq!(stack.waiting("held").await?, 2);
    assert!(held.iter().all(|(_, w)| admitted(w).is_none()));
    assert_eq!(stack.waiting("sold").await?, 2);
    assert!(sold.iter().all(|(_, w)| admitted(w).is_none()));
    Ok(())
}

/// A JWT's claims, decoded (not verified: the session API verified the token).
fn base64_claims(token: &str) -> anyhow::Result<Vec<u8>> {
    use base64::Engine;
    let part = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("not a JWT"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part)?)
}

/// Door tokens are accepted only in their window and for their queue, by the session API
/// (`410` outside the window, `403` for another queue) and by the booking demo (usher-admission
/// verifies offline: `401` for a token it does not accept), its guarded route too, and still
/// once the dispatcher is gone; `bind` and an open door refuse each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door_tokens_hold_only_in_their_window_and_bind_refuses_the_door() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        booking: true,
        ..Default::default()
    })
    .await?;
    let put = |q: &'static str, body: Value| {
        let http = stack.http.clone();
        let url = format!("{}/admin/queues/{q}", stack.dispatcher.url());
        async move {
            let r = http.put(url).json(&body).send().await?;
            let status = r.status().as_u16();
            let v: Value = r.json().await?;
            Ok::<_, anyhow::Error>((status, v))
        }
    };
    let (status, v) = put("b", json!({"bind": "browser_key", "on_outage": "open"})).await?;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("on_outage")),
        "{v}"
    );
    let (status, v) = put("b", json!({"door_after_seconds": 0})).await?;
    assert_eq!(status, 400, "{v}");
    let (status, v) = put("a", json!({"on_outage": "open", "door_after_seconds": 2})).await?;
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        (
            &v["on_outage"],
            &v["door_after_seconds"],
            &v["door_periods"],
            &v["door_admitted_total"]
        ),
        (&json!("open"), &json!(2), &json!([]), &json!(0))
    );
    let (status, v) = put("a", json!({"bind": "browser_key"})).await?;
    assert_eq!(status, 409, "bind on an open-door queue: {v}");
    // A queue stored without the settings holds.
    let v = stack.create_queue("c", 1.0).await?;
    assert_eq!(
        (v["on_outage"].as_str(), v["door_after_seconds"].as_u64()),
        (Some("hold"), Some(30))
    );

    let key = dispatcher_key(&stack).await?;
    let now = now_ms() / 1000;
    let window = |q: &str, from: u64| key.mint_door(&DoorClaims::new(q, from, from + 600, now, 30));
    let current = window("a", now - now % 600);
    let past = window("a", now - now % 600 - 1200);
    let coming = window("a", now - now % 600 + 1200);
    let other = window("c", now - now % 600);
    for (token, session_status, booking_status, what) in [
        (&current, 200, 201, "the current window"),
        (&past, 410, 401, "a window that ended"),
        (&coming, 410, 401, "a window not begun"),
    ] {
        assert_eq!(
            session(&stack, "a", token).await?,
            session_status,
            "{what}: session API"
        );
        assert_eq!(
            book(&stack, "a", token).await?,
            booking_status,
            "{what}: booking demo"
        );
    }
    assert_eq!(
        session(&stack, "a", &other).await?,
        403,
        "another queue's door token"
    );
    assert_eq!(book(&stack, "a", &other).await?, 401);
    // A door token is a bearer pass for its window: a consume records nothing.
    assert_eq!(book(&stack, "a", &current).await?, 201);
    // The demo's guarded route (usher-admission's layer, touching) takes it too, in its window.
    let booking = stack
        .booking
        .as_ref()
        .map(|b| b.url())
        .ok_or_else(|| anyhow::anyhow!("no booking demo"))?;
    let seats = |token: String| {
        let url = format!("{booking}/api/seats?queue=a");
        async move {
            let r = reqwest::Client::new()
                .get(url)
                .bearer_auth(token)
                .send()
                .await?;
            Ok::<_, anyhow::Error>(r.status().as_u16())
        }
    };
    assert_eq!(seats(current.clone()).await?, 200);
    assert_eq!(seats(past.clone()).await?, 403);
    // The dispatcher gone: usher-admission judges a door token by itself (its JWKS cached),
    // in its window only.
    let Stack {
        dispatcher,
        booking: demo,
        ..
    } = stack;
    dispatcher.stop().await?;
    assert_eq!(book_at(&booking, "a", &current).await?, 201);
    assert_eq!(seats(current).await?, 200);
    assert_eq!(book_at(&booking, "a", &past).await?, 401);
    drop(demo);
    Ok(())
}

/// The door's rate is the queue's, shared by the live gateways: with two, each lets its own
/// browsers through at half the rate, lowest place first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_the_doors_rate() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..Default::default()
    })
    .await?;
    let rate = 4.0;
    stack
        .put_queue(
            "shared",
            json!({"admit_per_second": rate, "open": true, "passthrough": false,
                "max_active": 1, "on_outage": "open", "door_after_seconds": 1}),
        )
        .await?;
    let clients = [
        SseClient::new(stack.gateway_url(0)),
        SseClient::new(stack.gateway_url(1)),
    ];
    let (_, _, first) = join_watch(&clients[0], "shared").await?;
    eventually("the first to take the slot", async || admitted(&first)).await?;
    let mut lines = Vec::new();
    for c in &clients {
        lines.push(waiters(c, "shared", 5).await?);
    }
    door_ready(&stack, "shared").await?;

    let _frozen = Frozen::stop(stack.redis.pid())?;
    let through = |line: &[(String, Watcher)]| -> Vec<u64> {
        line.iter()
            .filter_map(|(_, w)| admitted(w))
            .map(|a| parse_rfc3339_ms(a["admitted_at"].as_str().unwrap_or("")).unwrap_or(0))
            .collect()
    };
    eventually_within(
        "three let through on each gateway",
        Duration::from_secs(20),
        async || {
            let n: Vec<usize> = lines.iter().map(|l| through(l).len()).collect();
            if n.iter().all(|&n| n >= 3) {
                Ok(())
            } else {
                Err(Seen(n))
            }
        },
    )
    .await?;
    let share = rate / 2.0;
    for line in &lines {
        let mut at = through(line);
        // Lowest place first on each gateway: a prefix of its own line.
        let n = at.len();
        assert!(line.iter().take(n).all(|(_, w)| admitted(w).is_some()));
        at.sort_unstable();
        for (j, t) in at.iter().enumerate() {
            let allowed = 1.0 + (t - at[0]) as f64 / 1000.0 * share * 1.1;
            assert!(
                (j + 1) as f64 <= allowed,
                "{} in {} ms at {share}/s: {at:?}",
                j + 1,
                t - at[0]
            );
        }
        let measured = (n - 1) as f64 / ((at[n - 1] - at[0]) as f64 / 1000.0);
        assert!(measured >= share / 2.0, "{measured:.1}/s: {at:?}");
    }
    Ok(())
}

/// A gateway records its door period as the Redis user of exactly its ACL
/// (`usher_testkit::acl`, as docs/managed-redis.md prints it), and the dispatcher's user
/// reads it back: `lua/door.lua` calls nothing either is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_door_is_recorded_and_read_with_the_binaries_acls() -> anyhow::Result<()> {
    use usher_core::door::DoorPeriod;
    use usher_core::ids::{PlaceId, QueueId};
    use usher_core::store::QueueConfig;
    use usher_testkit::acl::Component;

    let redis = usher_testkit::RedisServer::start()?;
    let admin = Store::connect(&redis.url()).await?;
    let q = QueueId::new("acl")?;
    admin.put_queue(&q, &QueueConfig::default()).await?;
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let url = |c: Component| {
        let line = c.setuser(c.name(), "door-acl-password");
        let mut words = line.split_whitespace();
        let mut cmd = redis::cmd(words.next().unwrap_or_default());
        cmd.arg(words.collect::<Vec<_>>());
        (
            cmd,
            format!(
                "redis://{}:door-acl-password@127.0.0.1:{}",
                c.name(),
                redis.port()
            ),
        )
    };
    let (gw_cmd, gw_url) = url(Component::Gateway);
    let (d_cmd, d_url) = url(Component::Dispatcher);
    let _: () = gw_cmd.query_async(&mut conn).await?;
    let _: () = d_cmd.query_async(&mut conn).await?;
    let gateway = Store::connect(&gw_url).await?;
    let period = DoorPeriod {
        gateway: 3,
        opened_at: "2026-05-01T09:00:00.000Z".into(),
        closed_at: "2026-05-01T09:00:05.000Z".into(),
        admitted: 2,
    };
    assert_eq!(
        gateway.close_door(&q, &[PlaceId(1)], Some(&period)).await?,
        0
    );
    let record = Store::connect(&d_url).await?.door_record(&q).await?;
    assert_eq!(record.door_periods, vec![period]);
    assert_eq!(record.door_admitted_total, 2);
    Ok(())
}
