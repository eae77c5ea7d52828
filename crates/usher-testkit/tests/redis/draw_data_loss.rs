//! A scheduled sale whose Redis state is lost (flushed) while browsers wait in its pre-queue:
//! the draw never silently differs from the commitment published before the loss.
//! * The queues file carries the sale's seed: the queue comes back with the same commitment,
//!   the draw runs at `opens_at` and the Python check of docs/policies.md verifies it.
//! * It does not: the draw is reported void (`GET /api/queues/{q}/draw`, `event: draw_void`)
//!   and the pre-queue takes part in a new committed draw (the file still names `opens_at`)
//!   or goes into the line in join order (it does not).
//!
//! Either way every browser connected through the loss is admitted exactly once, with a
//! token that verifies like a booking service would check it.

use crate::draw_check;

use std::collections::HashSet;
use std::time::Duration;

use draw_check::{drawn_order, entrant, python_check};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use usher_core::store::Store;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::browser::Browser;
use usher_testkit::config::admin_client;
use usher_testkit::line::{heartbeats_done, in_pre_queue, jwks_at, verify_token};
use usher_testkit::procs::Proc;
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{RedisProbe, RedisServer, SseClient};

const Q: &str = "sale";
/// Browsers in the pre-queue when Redis loses the queue.
const N: usize = 8;

/// The processes of one test: Redis, a dispatcher with a queues file, two gateways.
struct Setup {
    redis: RedisServer,
    d: Proc,
    gateways: Vec<Proc>,
    _dir: tempfile::TempDir,
}

impl Setup {
    /// Starts everything with `file` as `USHER_QUEUES_FILE`.
    async fn start(file: &str) -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("queues.yaml");
        std::fs::write(&path, file)?;
        let env = [
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_LEASE_TTL_MS", "300".to_owned()),
            ("USHER_HEARTBEAT_MS", "200".to_owned()),
            ("USHER_QUEUES_FILE", path.display().to_string()),
            (
                "USHER_TICKET_KEY",
                "draw-data-loss-test-ticket-key-0123456789".to_owned(),
            ),
            (
                "USHER_JWT_KEY",
                usher_mint::token::SigningKey::generate_pem()?,
            ),
        ];
        let d = Proc::start("usher-dispatcher", &env).await?;
        let gateways = vec![
            Proc::start("usher-gateway", &env).await?,
            Proc::start("usher-gateway", &env).await?,
        ];
        Ok(Self {
            redis,
            d,
            gateways,
            _dir: dir,
        })
    }

    /// `N` browsers in the pre-queue, spread over both gateways.
    async fn pre_queue(&self) -> anyhow::Result<Vec<Browser>> {
        let clients: Vec<SseClient> = self
            .gateways
            .iter()
            .map(|g| SseClient::new(g.url()))
            .collect();
        let browsers = in_pre_queue(clients, Q, N, Duration::from_secs(120)).await?;
        // A whole heartbeat each: every gateway has read the commitment its browsers joined.
        heartbeats_done(&Store::connect(&self.redis.url()).await?).await?;
        Ok(browsers)
    }

    /// `GET /api/queues/{Q}/draw` on the first gateway: (status, JSON).
    async fn record(&self) -> anyhow::Result<(u16, Value)> {
        let r = reqwest::get(format!("{}/api/queues/{Q}/draw", self.gateways[0].url())).await?;
        Ok((r.status().as_u16(), r.json().await?))
    }

    /// The draw record once `ready` holds for it (polled).
    async fn record_when(&self, ready: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        eventually_within(
            "the draw record to be ready",
            Duration::from_secs(60),
            async || {
                let (status, v) = self.record().await?;
                if status == 200 && ready(&v) {
                    Ok(v)
                } else {
                    Err(anyhow::anyhow!(
                        "{status} {v}\n{}\n{}",
                        self.d.log_tail(),
                        self.gateways[0].log_tail()
                    ))
                }
            },
        )
        .await
    }

    async fn flushall(&self) -> anyhow::Result<()> {
        Ok(RedisProbe::connect(&self.redis.url())
            .await?
            .flushall()
            .await?)
    }

    /// Unpauses the queue (configured again from the file, paused) and checks that every
    /// browser is admitted exactly once, with a token that verifies and names a place of its
    /// own. Returns the place ids in the browsers' order.
    async fn admit_everyone(&self, browsers: &[Browser]) -> anyhow::Result<Vec<u64>> {
        let http = admin_client();
        let r = http
            .put(format!("{}/admin/queues/{Q}", self.d.url()))
            .json(&json!({"paused": false}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "unpause: {}", r.status());
        eventually_within("everyone admitted", Duration::from_secs(30), async || {
            if browsers.iter().all(|b| !b.seen().admitted.is_empty()) {
                Ok(())
            } else {
                Err(format!(
                    "{:?}\n{}",
                    browsers.iter().map(Browser::seen).collect::<Vec<_>>(),
                    self.d.log_tail()
                ))
            }
        })
        .await?;
        // Time for a duplicate to show up, if there were one: two more ticks, and every
        // gateway has applied what they sent.
        let store = Store::connect(&self.redis.url()).await?;
        let probe = RedisProbe::connect(&self.redis.url()).await?;
        probe.ticks(&usher_core::ids::QueueId::new(Q)?, 2).await?;
        probe.gateways_applied(&store).await?;
        tokio::time::sleep(usher_testkit::wait::DELIVERY).await;
        let jwks = jwks_at(&http, &self.d.url()).await?;
        let (mut places, mut jtis) = (Vec::new(), HashSet::new());
        for b in browsers {
            let s = b.seen();
            anyhow::ensure!(s.admitted.len() == 1, "admitted once: {s:?}");
            anyhow::ensure!(s.closed.is_empty() && s.gave_up.is_none(), "{s:?}");
            let token = s.admitted[0]["token"].as_str().unwrap_or_default();
            let claims = verify_token(&jwks, token, Q)?;
            anyhow::ensure!(jtis.insert(claims["jti"].to_string()), "jti reused");
            places.push(claims["sub"].as_str().unwrap_or_default().parse::<u64>()?);
        }
        let distinct: HashSet<_> = places.iter().collect();
        anyhow::ensure!(distinct.len() == places.len(), "places shared: {places:?}");
        Ok(places)
    }
}

fn tickets(browsers: &[Browser]) -> Vec<String> {
    browsers
        .iter()
        .map(|b| b.seen().ticket.unwrap_or_default())
        .collect()
}

/// A paused queue whose sale opens `in_ms` from now, as a queues file entry.
fn sale_entry(in_ms: u64, seed: Option<&str>) -> String {
    let seed = seed.map_or(String::new(), |s| format!("  draw_seed: \"{s}\"\n"));
    format!(
        "{Q}:\n  admit_per_second: 50\n  paused: true\n  opens_at: \"{}\"\n{seed}",
        rfc3339_ms(now_ms() + in_ms)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_in_the_queues_file_keeps_the_published_commitment() -> anyhow::Result<()> {
    let seed = hex::encode(Sha256::digest(b"the operator's secret draw seed"));
    let s = Setup::start(&sale_entry(20_000, Some(&seed))).await?;
    let (status, before) = s.record().await?;
    assert_eq!(status, 200, "{before}");
    let commitment = before["commitment"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        commitment,
        hex::encode(Sha256::digest(hex::decode(&seed)?)),
        "the file's seed is the one committed to"
    );
    assert!(before["seed"].is_null(), "the seed stays secret: {before}");
    let browsers = s.pre_queue().await?;

    s.flushall().await?;
    // Configured again from the file: the same commitment, nothing void, and the pre-queue
    // back in it (the browsers never noticed).
    let back = s
        .record_when(|v| v["commitment"] == commitment.as_str())
        .await?;
    assert_eq!(
        (&back["status"], &back["voided"]),
        (&json!("pending"), &Value::Null)
    );

    let after = s.record_when(|v| v["status"] == "done").await?;
    assert_eq!(after["commitment"], commitment.as_str());
    assert_eq!(after["seed"], seed.as_str());
    assert!(after["voided"].is_null(), "{after}");
    let out = python_check(&after)?;
    assert_eq!(out.trim(), format!("draw verified: {N} entrants"));
    let hashes: Vec<String> = tickets(&browsers).iter().map(|t| entrant(t)).collect();
    let entrants: Vec<String> = serde_json::from_value(after["entrants"].clone())?;
    assert_eq!(
        entrants,
        drawn_order(&hex::decode(&seed)?, hashes.clone()),
        "every browser connected through the loss is drawn, in the seed's order"
    );
    for b in &browsers {
        assert!(
            b.seen().draw_void.is_empty(),
            "nothing is void: {:?}",
            b.seen()
        );
    }

    // Admitted in the drawn order.
    let places = s.admit_everyone(&browsers).await?;
    let mut by_rank: Vec<(usize, u64)> = hashes
        .iter()
        .zip(&places)
        .map(|(h, p)| {
            (
                entrants.iter().position(|e| e == h).unwrap_or(usize::MAX),
                *p,
            )
        })
        .collect();
    by_rank.sort_unstable();
    assert!(
        by_rank.windows(2).all(|w| w[0].1 < w[1].1),
        "places follow the drawn order: {by_rank:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_seed_the_draw_is_void_and_a_new_one_is_committed() -> anyhow::Result<()> {
    let s = Setup::start(&sale_entry(20_000, None)).await?;
    let (_, before) = s.record().await?;
    let voided = before["commitment"].as_str().unwrap_or_default().to_owned();
    assert_eq!(voided.len(), 64, "{before}");
    let browsers = s.pre_queue().await?;

    s.flushall().await?;
    // The file names opens_at but no seed: a new draw with a new commitment, and the one
    // published before is reported void, to the browsers too.
    let redrawn = s
        .record_when(|v| v["voided"].is_object() && v["commitment"].is_string())
        .await?;
    assert_eq!(redrawn["status"], "pending");
    assert_eq!(
        redrawn["voided"],
        json!({"reason": "redis_data_lost", "commitment": voided})
    );
    let commitment = redrawn["commitment"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_ne!(commitment, voided);
    eventually("every browser told the draw is void", async || {
        if browsers.iter().all(|b| !b.seen().draw_void.is_empty()) {
            Ok(())
        } else {
            Err(format!(
                "every pre-queue browser is told: {:?}",
                browsers.iter().map(Browser::seen).collect::<Vec<_>>()
            ))
        }
    })
    .await?;
    for b in &browsers {
        let seen = b.seen();
        assert_eq!(
            seen.draw_void[0],
            json!({"queue": Q, "reason": "redis_data_lost", "voided_commitment": voided, "commitment": commitment})
        );
    }

    // The new draw runs at opens_at and verifies against the new commitment; the record
    // still says the earlier one was void.
    let after = s.record_when(|v| v["status"] == "done").await?;
    assert_eq!(after["commitment"], commitment.as_str());
    assert_eq!(after["voided"], redrawn["voided"]);
    let out = python_check(&after)?;
    assert_eq!(out.trim(), format!("draw verified: {N} entrants"));
    s.admit_everyone(&browsers).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_the_file_does_not_name_is_void_and_its_pre_queue_keeps_join_order(
) -> anyhow::Result<()> {
    // The sale was scheduled through the admin API only; the file has the queue, not the sale.
    let s = Setup::start(&format!("{Q}:\n  admit_per_second: 50\n  paused: true\n")).await?;
    let r = admin_client()
        .put(format!("{}/admin/queues/{Q}", s.d.url()))
        .json(&json!({"opens_at": rfc3339_ms(now_ms() + 60_000)}))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let (_, before) = s.record().await?;
    let voided = before["commitment"].as_str().unwrap_or_default().to_owned();
    let browsers = s.pre_queue().await?;

    s.flushall().await?;
    let void = s.record_when(|v| v["status"] == "void").await?;
    assert_eq!(
        (&void["commitment"], &void["seed"], &void["entrants"]),
        (&Value::Null, &Value::Null, &Value::Null),
        "no draw is held: {void}"
    );
    assert_eq!(
        void["voided"],
        json!({"reason": "redis_data_lost", "commitment": voided})
    );
    assert_eq!(void["opens_at"], before["opens_at"]);
    // Told, then back in line (no draw: join order), long before the old opens_at.
    eventually(
        "every browser told the draw is void, with a position",
        async || {
            if browsers
                .iter()
                .all(|b| !b.seen().draw_void.is_empty() && !b.seen().positions.is_empty())
            {
                Ok(())
            } else {
                Err(format!(
                    "every browser is told and gets a position: {:?}",
                    browsers.iter().map(Browser::seen).collect::<Vec<_>>()
                ))
            }
        },
    )
    .await?;
    for b in &browsers {
        assert_eq!(b.seen().draw_void[0]["commitment"], Value::Null);
    }
    let places = s.admit_everyone(&browsers).await?;
    let mut by_join: Vec<(u64, u64)> = browsers
        .iter()
        .zip(&places)
        .map(|(b, p)| (b.seen().place().unwrap_or_default(), *p))
        .collect();
    by_join.sort_unstable();
    assert!(
        by_join.iter().all(|(t, p)| t == p),
        "each keeps its own place id: {by_join:?}"
    );
    Ok(())
}

/// The operator's side of keeping a commitment: `PUT` takes the `draw_seed` a new sale commits
/// to (so the queues file can carry it), refuses one that would re-seed a pending draw, and
/// never shows, logs or audits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_seed_is_taken_for_a_new_sale_only_and_never_shown() -> anyhow::Result<()> {
    let s = Setup::start(&format!("{Q}:\n  paused: true\n")).await?;
    let http = admin_client();
    let put = |body: Value| {
        http.put(format!("{}/admin/queues/{Q}", s.d.url()))
            .json(&body)
            .send()
    };
    let seed = hex::encode(Sha256::digest(b"another operator seed"));
    let opens_at = rfc3339_ms(now_ms() + 60_000);
    for (body, status, why) in [
        (json!({"draw_seed": seed}), 400, "with the opens_at"),
        (
            json!({"opens_at": opens_at, "draw_seed": "abcd"}),
            400,
            "32 bytes of hex",
        ),
        (
            json!({"opens_at": null, "draw_seed": seed}),
            400,
            "with the opens_at",
        ),
    ] {
        let r = put(body.clone()).await?;
        assert_eq!(r.status(), status, "{body}");
        let e: Value = r.json().await?;
        assert!(
            e["error"].as_str().unwrap_or("").contains(why),
            "{body}: {e}"
        );
    }
    let r = put(json!({"opens_at": opens_at, "draw_seed": seed})).await?;
    assert_eq!(r.status(), 200);
    let shown = r.text().await?;
    let (_, record) = s.record().await?;
    assert_eq!(
        record["commitment"],
        hex::encode(Sha256::digest(hex::decode(&seed)?)),
        "the sale commits to the operator's seed"
    );
    // Moving the pending sale with the same seed is fine; another seed would re-seed it.
    let later = rfc3339_ms(now_ms() + 90_000);
    let r = put(json!({"opens_at": later, "draw_seed": seed})).await?;
    assert_eq!(r.status(), 200);
    let other = hex::encode(Sha256::digest(b"a seed picked after people joined"));
    let r = put(json!({"opens_at": later, "draw_seed": other})).await?;
    assert_eq!(r.status(), 409);
    let (_, unchanged) = s.record().await?;
    assert_eq!(unchanged["commitment"], record["commitment"]);

    // Secret until the draw: not in the admin API, the draw record, the audit trail, logs.
    let queue = http
        .get(format!("{}/admin/queues/{Q}", s.d.url()))
        .send()
        .await?
        .text()
        .await?;
    let audit = http
        .get(format!("{}/admin/audit?limit=20", s.d.url()))
        .send()
        .await?
        .text()
        .await?;
    assert!(audit.contains("<secret>"), "{audit}");
    for (what, text) in [
        ("PUT's answer", shown),
        ("GET queue", queue),
        ("draw record", unchanged.to_string()),
        ("audit", audit),
        ("dispatcher log", s.d.log_text()),
    ] {
        for secret in [&seed, &other] {
            assert!(
                !text.contains(secret.as_str()),
                "{what} shows a seed: {text}"
            );
        }
    }

    // Once drawn, the seed is public (the record shows it): a new sale may not take it again,
    // or anyone could compute that sale's order in advance.
    let soon = rfc3339_ms(now_ms() + 1_500);
    let r = put(json!({"opens_at": soon, "draw_seed": seed, "paused": false})).await?;
    assert_eq!(r.status(), 200);
    let drawn = s.record_when(|r| r["status"] == "done").await?;
    assert_eq!(drawn["seed"], seed.as_str());
    let next = rfc3339_ms(now_ms() + 60_000);
    let r = put(json!({"opens_at": next, "draw_seed": seed})).await?;
    assert_eq!(r.status(), 409);
    let e: Value = r.json().await?;
    assert!(e["error"].as_str().unwrap_or("").contains("public"), "{e}");
    let fresh = hex::encode(Sha256::digest(b"the next sale's own seed"));
    // A new sale discards the drawn one's record: it needs confirming (issue 24).
    let r = put(json!({"opens_at": next, "draw_seed": fresh, "confirm": true})).await?;
    assert_eq!(r.status(), 200);
    Ok(())
}
