//! A queue's line as the integration tests walk it: joining and watching streams, positions,
//! admissions and their entry tokens (verified the way a booking service verifies them), and
//! the set-ups several test areas share.

use std::time::Duration;

use crate::wait::{eventually, eventually_within};
use crate::{stack, RedisServer};
use usher_core::ids::{QueueId, ServerId};
use usher_core::store::{QueueConfig, Store};
use usher_core::time::now_ms;

use crate::sse::{SseConn, Watcher};
use crate::SseClient;
use serde_json::Value;
use usher_sse::Event;

/// A gateway the test plays itself: registered (its index returned) with its stream made, so
/// the test reads exactly what a dispatcher writes to it, in the order written
/// (`Store::read_stream`).
pub async fn played_gateway(store: &Store, name: &str) -> anyhow::Result<(ServerId, u16)> {
    let gw = ServerId::new(name)?;
    let index = store
        .register_gateway(&gw, now_ms(), Duration::from_secs(600))
        .await?;
    store.ensure_stream(&gw, Duration::from_secs(600)).await?;
    Ok((gw, index))
}

/// Reads what a dispatcher wrote to a [`played_gateway`]'s stream since the last read (waiting
/// up to 200 ms for something), as (entry time on Redis's clock in ms, message), and appends
/// it to `log`.
pub async fn read_played(
    store: &Store,
    gw: &ServerId,
    log: &mut Vec<(u64, usher_core::messages::StreamMessage)>,
) -> anyhow::Result<()> {
    let read = store
        .read_stream(gw, 500, Duration::from_millis(200))
        .await?
        .unwrap_or_default();
    for e in read {
        let entry_ms: u64 = e.id.split('-').next().unwrap_or("").parse()?;
        log.extend(e.message.map(|m| (entry_ms, m)));
    }
    Ok(())
}

/// The limit of a test's single waits on a stream (see [`crate::wait::patience`]).
pub const T: Duration = Duration::from_secs(10);

/// A rate that admits nobody during a test (a queue must have a rate above zero).
pub const PAUSED: f64 = 0.000_001;

pub fn data(e: &usher_sse::Event) -> Value {
    serde_json::from_str(&e.data).expect("event data is JSON")
}

/// Opens a stream and reads up to the first `waiting` event; returns (ticket, position, conn).
pub async fn join(client: &SseClient, queue: &str) -> anyhow::Result<(String, u64, SseConn)> {
    let (e, conn) = join_event(client, queue).await?;
    let pos = data(&e)["position"].as_u64().unwrap_or(0);
    Ok((e.id.clone(), pos, conn))
}

async fn join_event(client: &SseClient, queue: &str) -> anyhow::Result<(Event, SseConn)> {
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), None)
        .await?;
    anyhow::ensure!(
        conn.status == 200,
        "join answered {}: {:?}",
        conn.status,
        conn.error_body
    );
    let e = conn.wait_for("waiting", T).await?;
    Ok((e, conn))
}

/// Joins and keeps reading in the background (the first `waiting` event included).
pub async fn join_watch(client: &SseClient, queue: &str) -> anyhow::Result<(String, u64, Watcher)> {
    let (e, conn) = join_event(client, queue).await?;
    let pos = data(&e)["position"].as_u64().unwrap_or(0);
    Ok((e.id.clone(), pos, Watcher::spawn_with(conn, vec![e])))
}

/// `(ticket, watcher)` for `n` browsers joining `queue` through `client`, one after another.
pub async fn waiters(
    client: &SseClient,
    queue: &str,
    n: usize,
) -> anyhow::Result<Vec<(String, Watcher)>> {
    let mut out = Vec::new();
    for _ in 0..n {
        let (ticket, _, w) = join_watch(client, queue).await?;
        out.push((ticket, w));
    }
    Ok(out)
}

/// The latest `waiting` position seen by a watcher, or `first` if none arrived yet.
pub fn position(w: &Watcher) -> Option<u64> {
    w.last("waiting")
        .and_then(|e| data(&e)["position"].as_u64())
}

/// Every position a watcher saw, in order.
pub fn positions(w: &Watcher) -> Vec<u64> {
    w.all("waiting")
        .iter()
        .filter_map(|e| data(e)["position"].as_u64())
        .collect()
}

pub fn place_of(ticket: &str) -> u64 {
    ticket
        .split('.')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("ticket names a place")
}

/// The dispatcher's published keys, fetched as a booking service fetches them.
pub async fn jwks(stack: &crate::stack::Stack) -> anyhow::Result<jsonwebtoken::jwk::JwkSet> {
    jwks_at(&stack.http, &stack.dispatcher.url()).await
}

/// The published keys of the dispatcher at `dispatcher_url`.
pub async fn jwks_at(
    http: &reqwest::Client,
    dispatcher_url: &str,
) -> anyhow::Result<jsonwebtoken::jwk::JwkSet> {
    Ok(http
        .get(format!("{dispatcher_url}/.well-known/jwks.json"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

/// Verifies an entry token the way a booking service does (the key named by `kid` in the
/// JWKS, EdDSA only, audience = the queue, expiry checked); returns its claims.
pub fn verify_token(
    jwks: &jsonwebtoken::jwk::JwkSet,
    token: &str,
    queue: &str,
) -> anyhow::Result<Value> {
    let header = jsonwebtoken::decode_header(token)?;
    anyhow::ensure!(
        header.alg == jsonwebtoken::Algorithm::EdDSA,
        "alg {:?}",
        header.alg
    );
    let kid = header
        .kid
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("no kid"))?;
    let jwk = jwks
        .find(kid)
        .ok_or_else(|| anyhow::anyhow!("kid {kid} not in the JWKS"))?;
    let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
    v.set_audience(&[queue]);
    Ok(
        jsonwebtoken::decode::<Value>(token, &jsonwebtoken::DecodingKey::from_jwk(jwk)?, &v)?
            .claims,
    )
}

/// A Redis, a queue admitting `admit_per_second`, and one in-process gateway that has
/// registered itself: (redis, store, gateway, queue, the gateway's server id).
pub async fn one_gateway(
    queue: &str,
    admit_per_second: f64,
) -> anyhow::Result<(RedisServer, Store, stack::Server, QueueId, ServerId)> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new(queue)?;
    store
        .put_queue(
            &q,
            &QueueConfig {
                admit_per_second,
                ..Default::default()
            },
        )
        .await?;
    let gw = stack::gateway(&redis.url()).await?;
    // The gateway registers itself as it starts (30 s: a loaded machine).
    let gws = eventually_within(
        "the gateway to register",
        Duration::from_secs(30),
        async || {
            let gws = store.gateways(now_ms()).await?;
            anyhow::ensure!(!gws.is_empty(), "no gateway registered");
            Ok(gws)
        },
    )
    .await?;
    anyhow::ensure!(gws.len() == 1, "one gateway registered: {gws:?}");
    let id = gws[0].server_id.clone();
    Ok((redis, store, gw, q, id))
}

/// Takes the queue's lease, as a dispatcher would.
pub async fn take_lease(store: &Store, q: &QueueId) -> anyhow::Result<usher_core::store::Lease> {
    store
        .acquire_lease(q, "test", Duration::from_secs(60))
        .await?
        .ok_or_else(|| anyhow::anyhow!("lease"))
}

/// Joins `queue` and waits for admission; returns (ticket, token).
pub async fn admitted(stack: &crate::Stack, queue: &str) -> anyhow::Result<(String, String)> {
    let client = SseClient::new(stack.gateway_url(0));
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), None)
        .await?;
    anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
    let a = conn.wait_for("admitted", T).await?;
    let token = data(&a)["token"].as_str().unwrap_or_default().to_owned();
    Ok((a.id.clone(), token))
}

/// The claims of a token (its signature is checked elsewhere).
pub fn claims(token: &str) -> anyhow::Result<usher_mint::token::Claims> {
    use base64::Engine;
    let part = token.split('.').nth(1).unwrap_or_default();
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part)?;
    Ok(serde_json::from_slice(&json)?)
}

/// The payload of a JWT as JSON, its signature unchecked (for tests that read what a token
/// says; [`verify_token`] checks one as a booking service does).
pub fn token_payload(token: &str) -> anyhow::Result<Value> {
    use base64::Engine;
    let part = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("not a JWT: {token}"))?;
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(part)?;
    Ok(serde_json::from_slice(&json)?)
}

/// Creates or changes queue `queue` with `body` through the admin API of the dispatcher at
/// `dispatcher_url`, with `http` (e.g. [`crate::config::admin_client`]); errors unless it
/// answers 2xx, and returns the queue as the answer shows it.
pub async fn put_queue_at(
    http: &reqwest::Client,
    dispatcher_url: &str,
    queue: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let r = http
        .put(format!("{dispatcher_url}/admin/queues/{queue}"))
        .json(&body)
        .send()
        .await?;
    let status = r.status();
    anyhow::ensure!(status.is_success(), "PUT queue {queue}: {status}");
    Ok(r.json().await.unwrap_or(Value::Null))
}

/// The dispatcher's (development) signing key, to mint tokens it would never mint.
pub async fn dispatcher_key(stack: &crate::Stack) -> anyhow::Result<usher_mint::token::SigningKey> {
    let store = Store::connect(&stack.redis.url()).await?;
    let pem = store
        .shared_dev_secret(
            usher_core::store::DevSecret::JwtKey,
            usher_mint::token::SigningKey::generate_pem()?,
        )
        .await?;
    Ok(usher_mint::token::SigningKey::from_pkcs8_pem(&pem)?)
}

/// The whole path against running servers, as a user sees it: creates an open queue `queue`
/// on the dispatcher (loopback admin), joins it on the gateway, waits for `admitted`, and
/// verifies the entry token against the dispatcher's JWKS.
pub async fn join_and_admit(
    http: &reqwest::Client,
    dispatcher_url: &str,
    gateway_url: &str,
    queue: &str,
) -> anyhow::Result<Admitted> {
    let r = http
        .put(format!("{dispatcher_url}/admin/queues/{queue}"))
        // Passthrough off: the path under test shows a position before the admission.
        .json(&serde_json::json!({"admit_per_second": 50.0, "open": true, "passthrough": false}))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "PUT queue: {}", r.status());
    let client = SseClient::new(gateway_url.to_owned());
    let (ticket, pos, mut conn) = join(&client, queue).await?;
    anyhow::ensure!(pos >= 1, "a position: {pos}");
    let admitted = conn.wait_for("admitted", T).await?;
    anyhow::ensure!(admitted.id == ticket, "admitted names the ticket");
    let token = data(&admitted)["token"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("admitted without a token"))?
        .to_owned();
    let claims = verify_token(&jwks_at(http, dispatcher_url).await?, &token, queue)?;
    anyhow::ensure!(
        claims["sub"].as_str() == Some(place_of(&ticket).to_string().as_str()),
        "the token is for this place: {claims}"
    );
    Ok(Admitted {
        ticket,
        token,
        claims,
    })
}

/// What [`join_and_admit`] saw: the ticket, its entry token and the token's verified claims.
pub struct Admitted {
    pub ticket: String,
    pub token: String,
    pub claims: Value,
}

/// The queue's counters as the admin API shows them (`None` while it does not exist).
pub async fn queue_view(d: &crate::procs::Proc, q: &str) -> Option<Value> {
    let r = crate::config::admin_client()
        .get(format!("{}/admin/queues/{q}", d.url()))
        .send()
        .await
        .ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.json().await.ok()
}

/// Waits (up to 20 s) until the dispatcher at `d` shows `n` places waiting in `q`.
pub async fn wait_waiting(d: &crate::procs::Proc, q: &str, n: u64) -> anyhow::Result<()> {
    let what = format!("{q} to show {n} waiting");
    eventually_within(&what, Duration::from_secs(20), async || {
        let v = queue_view(d, q).await;
        if v.as_ref().is_some_and(|v| v["waiting"] == n) {
            Ok(())
        } else {
            Err(format!("{v:?}\n{}", d.log_tail()))
        }
    })
    .await
}

/// `n` simulated browsers joining `queue`'s pre-queue through `clients` (each reconnects to the
/// next, as behind a load balancer) and staying up to `hold`, once every one of them holds a
/// pre-queue place (`event: scheduled`).
pub async fn in_pre_queue(
    clients: Vec<SseClient>,
    queue: &str,
    n: usize,
    hold: Duration,
) -> anyhow::Result<Vec<crate::browser::Browser>> {
    let browsers: Vec<_> = (0..n)
        .map(|i| crate::browser::Browser::spawn(clients.clone(), queue, i, hold))
        .collect();
    eventually("every browser is in the pre-queue", async || {
        browsers.iter().all(|b| !b.seen().scheduled.is_empty())
    })
    .await?;
    Ok(browsers)
}

/// Waits until every live gateway has run one whole heartbeat that began after this call (so
/// it has seen every queue's epoch and every pending draw's commitment as they are now). A
/// beat writes the gateway's registry expiry first, then observes the queues; two new expiries
/// mean the beat between them ran whole. Deterministic where a fixed sleep is a guess.
pub async fn heartbeats_done(store: &Store) -> anyhow::Result<()> {
    use std::collections::HashMap;
    let read = || async {
        let now = now_ms();
        Ok::<_, anyhow::Error>(
            store
                .gateways(now)
                .await?
                .into_iter()
                .filter(|g| g.is_alive(now))
                .map(|g| (g.index, g.alive_until_ms))
                .collect::<HashMap<_, _>>(),
        )
    };
    let mut last = read().await?;
    anyhow::ensure!(!last.is_empty(), "no live gateway");
    let mut changes: HashMap<u16, u32> = last.keys().map(|k| (*k, 0)).collect();
    eventually_within(
        "every live gateway to run two heartbeats",
        Duration::from_secs(30),
        async || {
            let now = read().await?;
            for (i, n) in changes.iter_mut() {
                if now.get(i) != last.get(i) {
                    *n += 1;
                }
            }
            last = now;
            anyhow::ensure!(
                changes.values().all(|&n| n >= 2),
                "changes seen: {changes:?}"
            );
            Ok(())
        },
    )
    .await
}

/// The value of the unlabelled series `series` on the server at `url`'s `/metrics`.
async fn series_value(http: &reqwest::Client, url: &str, series: &str) -> anyhow::Result<u64> {
    let text = http
        .get(format!("{url}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| anyhow::anyhow!("no {series} on {url}/metrics"))
}

/// Waits until the unlabelled counter `series` on the server at `url` (gateway or
/// dispatcher) has grown by `by` since the call: `what` happened that many more times (a
/// failed Redis call, a tick, a flush round). A series not exported yet counts as 0.
pub async fn counter_grows(url: &str, series: &str, by: u64) -> anyhow::Result<()> {
    // Fresh connections: a gateway with a small stream cap closes idle keep-alive ones.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(crate::wait::patient(Duration::from_secs(10)))
        .build()?;
    let start = series_value(&http, url, series).await.unwrap_or(0);
    eventually(&format!("{series} on {url} to grow by {by}"), async || {
        let now = series_value(&http, url, series).await.unwrap_or(0);
        anyhow::ensure!(now >= start + by, "{now}, waiting for {}", start + by);
        Ok(())
    })
    .await
}

/// Waits until the gateway at `url` has done `rounds` more rounds of its away flush than when
/// called: every disconnect it had seen by then is written to Redis (or, for a browser back in
/// time, not written). For checks that a disconnect did *not* change the line, which leave
/// nothing else to wait for.
pub async fn away_flushed(url: &str, rounds: u64) -> anyhow::Result<()> {
    counter_grows(url, "usher_gateway_away_flushes_total", rounds).await
}
