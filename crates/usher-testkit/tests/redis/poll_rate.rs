//! Status polls and leaves on a binding queue (`bind: "browser_key"`) are metered per client
//! address (issue 23): each request with a good proof spends its `jti` in Redis for 130 s, so
//! without a rate a client holding one live place could grow the queue's Redis master without
//! bound by signing fresh proofs. Past `USHER_IP_POLL_BURST` (refilled at
//! `USHER_IP_POLL_RATE`) the routes answer `429` with `Retry-After` before any proof is
//! checked or Redis is asked, and a place over for good spends no proof at all.
//!
//! The gateway is the binary, configured through its environment, and the client signs its
//! proofs as any non-browser client would (ES256 compact JWS over its own P-256 key).

use std::net::{IpAddr, Ipv4Addr};

use usher_core::binding::Bind;
use usher_core::ids::QueueId;
use usher_core::store::{QueueConfig, Store};
use usher_testkit::dpop::{spent_proofs, BrowserKey};
use usher_testkit::line::T;
use usher_testkit::procs::Proc;
use usher_testkit::{RedisServer, SseClient};

/// The queue every test here binds.
const Q: &str = "bound";

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// Redis, a paused binding queue, and a gateway binary with `env` added.
async fn bound_gateway(env: &[(&str, &str)]) -> anyhow::Result<(RedisServer, Store, Proc)> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    store
        .put_queue(
            &QueueId::new(Q)?,
            &QueueConfig {
                paused: true,
                bind: Bind::BrowserKey,
                ..QueueConfig::default()
            },
        )
        .await?;
    let mut vars = vec![("USHER_REDIS_URL", redis.url())];
    vars.extend(env.iter().map(|(k, v)| (*k, (*v).to_owned())));
    let gw = Proc::start("usher-gateway", &vars).await?;
    Ok((redis, store, gw))
}

/// Joins from `from` with a proof by `key`: the place's ticket, and its stream (held open).
async fn join(
    gw: &Proc,
    from: u8,
    key: &BrowserKey,
) -> anyhow::Result<(String, usher_testkit::sse::SseConn)> {
    let stream = format!("/api/queues/{Q}/stream");
    let browser = SseClient::from_address(gw.url(), loopback(from), Default::default())?;
    let proof = key.proof("GET", &stream, None);
    let mut conn = browser
        .open(&format!("{stream}?proof={proof}"), None)
        .await?;
    anyhow::ensure!(conn.status == 200, "join: {:?}", conn.error_body);
    let waiting = conn.wait_for("waiting", T).await?;
    Ok((waiting.id, conn))
}

/// The gateway's count of requests refused for `reason` (`/metrics`).
async fn refusals(gw: &Proc, reason: &str) -> anyhow::Result<u64> {
    let text = reqwest::get(format!("{}/metrics", gw.url()))
        .await?
        .text()
        .await?;
    let series = format!("usher_gateway_streams_refused_total{{reason=\"{reason}\"}} ");
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64))
}

/// One client with one live place sends status polls, each with a fresh proof, as fast as
/// it can: past the burst it is answered `429` (JSON, `Retry-After`), its leave too, and the
/// proofs Redis holds stay within the burst and the rate; another address is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_polls_past_the_rate_spend_no_proofs() -> anyhow::Result<()> {
    const BURST: usize = 10;
    const POLLS: usize = 200;
    let (redis, _store, gw) =
        bound_gateway(&[("USHER_IP_POLL_RATE", "1"), ("USHER_IP_POLL_BURST", "10")]).await?;
    let key = BrowserKey::from_seed(7);
    let (ticket, _held) = join(&gw, 2, &key).await?;
    let joined = spent_proofs(&redis.url(), Q).await?;
    assert_eq!(joined, 1, "the join spent its proof");

    let client = reqwest::Client::builder()
        .local_address(loopback(2))
        .build()?;
    let status_path = format!("/api/queues/{Q}/status");
    let status = async |client: &reqwest::Client| -> anyhow::Result<reqwest::Response> {
        let proof = key.proof("GET", &status_path, None);
        Ok(client
            .get(format!("{}{status_path}", gw.url()))
            .query(&[("ticket", ticket.as_str()), ("proof", proof.as_str())])
            .send()
            .await?)
    };
    let started = std::time::Instant::now();
    let (mut served, mut refused) = (0usize, None);
    for _ in 0..POLLS {
        let r = status(&client).await?;
        match r.status().as_u16() {
            200 => served += 1,
            429 => {
                if refused.is_none() {
                    let retry = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    let body: serde_json::Value = r.json().await?;
                    refused = Some((retry, body));
                }
            }
            other => anyhow::bail!("a status poll answered {other}: {}", r.text().await?),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (retry, body) = refused.ok_or_else(|| {
        anyhow::anyhow!("{POLLS} polls in {elapsed:.1} s: none was refused ({served} served)")
    })?;
    assert!(retry.is_some_and(|s| s >= 1), "Retry-After: {retry:?}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("too many")),
        "{body}"
    );
    // The burst, and one a second since (a slow machine gets what its time allows).
    let allowed = BURST + elapsed.ceil() as usize;
    assert!(served <= allowed, "{served} polls served in {elapsed:.1} s");
    let spent = spent_proofs(&redis.url(), Q).await?;
    assert!(
        spent <= joined + allowed,
        "{spent} proofs in Redis after {served} polls served"
    );
    // A leave draws from the same bucket (before anything else). Two leaves at once: the
    // bucket, empty since the last refused poll, may have refilled one token meanwhile (one a
    // second; seen once in CI, the leave answered 204), never two, so at least one is refused.
    let leave_path = format!("/api/queues/{Q}/tickets/{ticket}");
    let mut leaves = Vec::new();
    for _ in 0..2 {
        let leave = client
            .delete(format!("{}{leave_path}", gw.url()))
            .query(&[("proof", key.proof("DELETE", &leave_path, None))])
            .send()
            .await?;
        leaves.push(leave.status().as_u16());
    }
    let refused_leaves = leaves.iter().filter(|&&s| s == 429).count();
    assert!(refused_leaves >= 1, "the leaves: {leaves:?}");
    let counted = refusals(&gw, "ip_polls").await?;
    assert_eq!(
        counted as usize,
        POLLS - served + refused_leaves,
        "refusals on /metrics"
    );
    // Another address has a bucket of its own.
    let other = reqwest::Client::builder()
        .local_address(loopback(3))
        .build()?;
    assert_eq!(status(&other).await?.status().as_u16(), 200);
    Ok(())
}

/// A place over for good (here: left, and its key forgotten as the dispatcher's pruning does
/// within a second) answers its status without spending a proof: the answer is harmless to
/// repeat, and the requests write nothing to Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_over_for_good_spends_no_proof() -> anyhow::Result<()> {
    let (redis, store, gw) = bound_gateway(&[]).await?;
    let key = BrowserKey::from_seed(9);
    let (ticket, held) = join(&gw, 2, &key).await?;
    drop(held);
    let http = reqwest::Client::new();
    let leave_path = format!("/api/queues/{Q}/tickets/{ticket}");
    let left = http
        .delete(format!("{}{leave_path}", gw.url()))
        .query(&[("proof", key.proof("DELETE", &leave_path, None))])
        .send()
        .await?;
    assert_eq!(left.status().as_u16(), 204);
    assert_eq!(
        store.prune_bound(&QueueId::new(Q)?).await?,
        1,
        "the key pruned"
    );
    let before = spent_proofs(&redis.url(), Q).await?;
    assert_eq!(before, 2, "the join's proof and the leave's");
    let status_path = format!("/api/queues/{Q}/status");
    for _ in 0..5 {
        let r = http
            .get(format!("{}{status_path}", gw.url()))
            .query(&[
                ("ticket", ticket.as_str()),
                ("proof", key.proof("GET", &status_path, None).as_str()),
            ])
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), 410, "{}", r.text().await?);
    }
    assert_eq!(
        spent_proofs(&redis.url(), Q).await?,
        before,
        "a place over for good spent proofs"
    );
    // A proof is still required, and must still be good.
    let r = http
        .get(format!("{}{status_path}", gw.url()))
        .query(&[("ticket", ticket.as_str())])
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 403);
    Ok(())
}

/// One place's key shared by many addresses (each within its own rate) spends at most the
/// place's bucket: 30 at once, then one a second; past it `429` with `Retry-After`. Requests
/// with the ticket but another key (a copied ticket) are refused before they draw from the
/// place's bucket, so they cannot starve its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_place_polled_from_many_addresses_spends_a_bounded_number_of_proofs(
) -> anyhow::Result<()> {
    const PLACE_BURST: usize = 30;
    let (redis, _store, gw) = bound_gateway(&[("USHER_IP_POLL_RATE", "0")]).await?;
    let key = BrowserKey::from_seed(11);
    let (ticket, _held) = join(&gw, 2, &key).await?;
    let status_path = format!("/api/queues/{Q}/status");
    let clients = (10..20)
        .map(|last| {
            reqwest::Client::builder()
                .local_address(loopback(last))
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let status =
        async |client: &reqwest::Client, key: &BrowserKey| -> anyhow::Result<reqwest::Response> {
            let proof = key.proof("GET", &status_path, None);
            Ok(client
                .get(format!("{}{status_path}", gw.url()))
                .query(&[("ticket", ticket.as_str()), ("proof", proof.as_str())])
                .send()
                .await?)
        };
    // A copied ticket with another key: refused, and the owner's bucket untouched.
    let thief = BrowserKey::from_seed(12);
    for client in clients.iter().cycle().take(2 * PLACE_BURST) {
        assert_eq!(status(client, &thief).await?.status().as_u16(), 403);
    }
    let started = std::time::Instant::now();
    let (mut served, mut retry_after) = (0usize, None);
    for client in clients.iter().cycle().take(200) {
        let r = status(client, &key).await?;
        match r.status().as_u16() {
            200 => served += 1,
            429 => {
                retry_after = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
            }
            other => anyhow::bail!("a status poll answered {other}: {}", r.text().await?),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        served >= PLACE_BURST,
        "the owner was served {served} polls only"
    );
    let allowed = PLACE_BURST + elapsed.ceil() as usize;
    assert!(served <= allowed, "{served} polls served in {elapsed:.1} s");
    assert!(
        retry_after.is_some_and(|s| s >= 1),
        "Retry-After: {retry_after:?}"
    );
    assert_eq!(
        refusals(&gw, "place_proofs").await? as usize,
        200 - served,
        "refusals on /metrics"
    );
    let spent = spent_proofs(&redis.url(), Q).await?;
    assert!(
        spent <= 1 + allowed,
        "{spent} proofs in Redis after {served} polls served"
    );
    Ok(())
}

/// A spent proof travels in URLs (`?ticket=…&proof=…`): whoever copied one can replay it as
/// often as they like. Each replay is refused and writes nothing, and it must not use up the
/// place's share either: after 60 replays from many addresses the owner's next fresh proof
/// is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_proofs_do_not_use_up_the_owners_share() -> anyhow::Result<()> {
    let (_redis, _store, gw) = bound_gateway(&[("USHER_IP_POLL_RATE", "0")]).await?;
    let key = BrowserKey::from_seed(13);
    let (ticket, _held) = join(&gw, 2, &key).await?;
    let status_path = format!("/api/queues/{Q}/status");
    let status = async |client: &reqwest::Client, proof: &str| -> anyhow::Result<u16> {
        Ok(client
            .get(format!("{}{status_path}", gw.url()))
            .query(&[("ticket", ticket.as_str()), ("proof", proof)])
            .send()
            .await?
            .status()
            .as_u16())
    };
    let owner = reqwest::Client::builder()
        .local_address(loopback(2))
        .build()?;
    let copied = key.proof("GET", &status_path, None);
    assert_eq!(status(&owner, &copied).await?, 200, "the owner's poll");
    for last in (30..90).map(loopback) {
        let thief = reqwest::Client::builder().local_address(last).build()?;
        assert_eq!(status(&thief, &copied).await?, 403, "a replay");
    }
    let fresh = key.proof("GET", &status_path, None);
    assert_eq!(
        status(&owner, &fresh).await?,
        200,
        "the owner is served after 60 replays of its spent proof"
    );
    assert_eq!(refusals(&gw, "place_proofs").await?, 0);
    Ok(())
}

/// A stream resume spends a proof too: one address resuming its place with fresh proofs as
/// fast as it can draws from its poll bucket like status polls do, so what it can make Redis
/// keep is bounded per address whichever route it uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_resumes_draw_from_the_addresss_poll_bucket() -> anyhow::Result<()> {
    const BURST: usize = 5;
    let (redis, _store, gw) =
        bound_gateway(&[("USHER_IP_POLL_RATE", "1"), ("USHER_IP_POLL_BURST", "5")]).await?;
    let key = BrowserKey::from_seed(14);
    let (ticket, held) = join(&gw, 2, &key).await?;
    drop(held);
    let stream = format!("/api/queues/{Q}/stream");
    let browser = SseClient::from_address(gw.url(), loopback(2), Default::default())?;
    let started = std::time::Instant::now();
    let (mut served, mut refused) = (0usize, 0usize);
    for _ in 0..40 {
        let proof = key.proof("GET", &stream, None);
        let mut conn = browser
            .open(&format!("{stream}?ticket={ticket}&proof={proof}"), None)
            .await?;
        anyhow::ensure!(conn.status == 200, "resume: {:?}", conn.error_body);
        // A resume served says where the place stands; one refused carries `retry:` only.
        match conn.next_event(T).await? {
            Some(e) if e.event == "waiting" => served += 1,
            None => refused += 1,
            Some(e) => anyhow::bail!("a resume got {:?}: {}", e.event, e.data),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        refused > 0,
        "40 resumes in {elapsed:.1} s: none was refused"
    );
    let allowed = BURST + elapsed.ceil() as usize;
    assert!(
        served <= allowed,
        "{served} resumes served in {elapsed:.1} s"
    );
    let spent = spent_proofs(&redis.url(), Q).await?;
    assert!(
        spent <= 1 + allowed,
        "{spent} proofs in Redis after {served} resumes served"
    );
    assert!(refusals(&gw, "ip_polls").await? as usize >= refused);
    Ok(())
}
