//! A Redis data loss on a queue that binds places to the browser's key (`bind: "browser_key"`,
//! docs/security.md): the browser keys live in the queue's `bound` hash, which the loss takes
//! with the places. A gateway holding a browser through the loss puts its place back with the
//! key it checked at join (`restore.lua`), so that browser resumes with its key and its token
//! carries `cnf.jkt`; a place whose key is lost and that nobody held is lost too, so a copied
//! ticket can never take it over unbound.
//!
//! The client here makes its own P-256 key and ES256 proofs of possession (as
//! `browser/bind_client.py` does with PyJWT) and verifies the entry token with the dispatcher's
//! JWKS, as a booking service would.

use std::time::Duration;

use serde_json::json;
use usher_core::binding::{Bind, Thumbprint};
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::store::{
    DrawOutcome, DrawPrep, PlaceState, PreQueueFate, PreRestore, QueueConfig, SeenDraw, Store, Tick,
};
use usher_core::time::now_ms;
use usher_testkit::config::admin_client;
use usher_testkit::dpop::BrowserKey;
use usher_testkit::line::{
    away_flushed, data, heartbeats_done, jwks_at, place_of, queue_view, take_lease, verify_token,
    wait_waiting,
};
use usher_testkit::procs::Proc;
use usher_testkit::redis_server::redis_cli;
use usher_testkit::sse::{SseConn, Watcher};
use usher_testkit::wait::{eventually, eventually_within};
use usher_testkit::{tick_args, tick_calls, RedisServer, SseClient};

const Q: &str = "bound-loss";
const STREAM: &str = "/api/queues/bound-loss/stream";
const STATUS: &str = "/api/queues/bound-loss/status";
const T: Duration = Duration::from_secs(10);

/// Redis, a dispatcher and a gateway, with the binding queue configured (paused).
struct Stack {
    redis: RedisServer,
    dispatcher: Proc,
    gateway: Proc,
    client: SseClient,
    http: reqwest::Client,
}

impl Stack {
    async fn start() -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let env = [
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_LEASE_TTL_MS", "300".to_owned()),
            ("USHER_HEARTBEAT_MS", "200".to_owned()),
            (
                "USHER_TICKET_KEY",
                "bind-loss-test-ticket-key-0123456789abcdef".to_owned(),
            ),
            (
                "USHER_JWT_KEY",
                usher_mint::token::SigningKey::generate_pem()?,
            ),
        ];
        let dispatcher = Proc::start("usher-dispatcher", &env).await?;
        let gateway = Proc::start("usher-gateway", &env).await?;
        let s = Self {
            client: SseClient::new(gateway.url()),
            http: admin_client(),
            redis,
            dispatcher,
            gateway,
        };
        s.configure(true).await?;
        Ok(s)
    }

    /// `PUT /admin/queues/bound-loss` (after the loss, the operator configures it again).
    async fn configure(&self, paused: bool) -> anyhow::Result<()> {
        let r = self
            .http
            .put(format!("{}/admin/queues/{Q}", self.dispatcher.url()))
            .json(&json!({"paused": paused, "passthrough": false, "bind": "browser_key"}))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "PUT answered {}", r.status());
        Ok(())
    }

    /// Opens the stream with `?ticket=…&proof=…` (either left out when `None`).
    async fn open(&self, ticket: Option<&str>, proof: Option<String>) -> anyhow::Result<SseConn> {
        let mut query = Vec::new();
        if let Some(t) = ticket {
            query.push(format!("ticket={t}"));
        }
        if let Some(p) = proof {
            query.push(format!("proof={p}"));
        }
        self.client
            .open(&format!("{STREAM}?{}", query.join("&")), None)
            .await
    }

    /// Joins with `key`: (ticket, the stream held open).
    async fn join(&self, key: &BrowserKey) -> anyhow::Result<(String, Watcher)> {
        let mut conn = self
            .open(None, Some(key.proof("GET", STREAM, None)))
            .await?;
        anyhow::ensure!(conn.status == 200, "join: {}", conn.status);
        let e = conn.wait_for("waiting", T).await?;
        Ok((e.id.clone(), Watcher::spawn_with(conn, vec![e])))
    }

    /// The first event a resume of `ticket` with a proof by `key` hears: (its name, its data).
    async fn resume(
        &self,
        ticket: &str,
        key: &BrowserKey,
    ) -> anyhow::Result<(u16, Option<(String, serde_json::Value)>, SseConn)> {
        let mut conn = self
            .open(Some(ticket), Some(key.proof("GET", STREAM, None)))
            .await?;
        if conn.status != 200 {
            return Ok((conn.status, None, conn));
        }
        let first = conn
            .next_event(T)
            .await?
            .map(|e| (e.event.clone(), data(&e)));
        Ok((200, first, conn))
    }

    /// `GET …/status?ticket=…&proof=…` with a proof by `key`: (HTTP status, body).
    async fn status(&self, ticket: &str, key: &BrowserKey) -> anyhow::Result<(u16, String)> {
        let r = reqwest::get(format!(
            "{}{STATUS}?ticket={ticket}&proof={}",
            self.gateway.url(),
            key.proof("GET", STATUS, None)
        ))
        .await?;
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// The streams the gateway holds (its `usher_gateway_connections{state="streaming"}`).
    async fn streaming(&self) -> anyhow::Result<f64> {
        let text = reqwest::get(format!("{}/metrics", self.gateway.url()))
            .await?
            .text()
            .await?;
        text.lines()
            .find_map(|l| l.strip_prefix(r#"usher_gateway_connections{state="streaming"} "#))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no streaming gauge"))
    }

    /// Redis loses everything (`FLUSHALL`), once the gateway has seen the queue's epoch.
    async fn flush(&self) -> anyhow::Result<()> {
        let url = self.redis.url();
        heartbeats_done(&Store::connect(&url).await?).await?;
        Ok(usher_testkit::RedisProbe::connect(&url)
            .await?
            .flushall()
            .await?)
    }

    /// The operator configures the queue again after the loss, and the gateway puts back
    /// the `held` places.
    async fn reconfigure(&self, held: u64) -> anyhow::Result<()> {
        self.configure(true).await?;
        wait_waiting(&self.dispatcher, Q, held).await
    }

    /// Redis loses the last writes of the join of `place` and nothing else, as when it
    /// restarts from an AOF that ended before that join, or a replica that had not received
    /// it is promoted: the place, its away entry and its key are gone, and the place counter
    /// is back below it. The queue itself (its epoch) is kept, so no gateway restores.
    fn lose_join(&self, place: u64) -> anyhow::Result<()> {
        let k = QueueKeys::new(&QueueId::new(Q)?);
        let place = place.to_string();
        let script =
            "for i = 1, 2 do redis.call('ZREMRANGEBYSCORE', KEYS[i], ARGV[1], ARGV[1]) end \
            redis.call('ZREM', KEYS[3], ARGV[1]) redis.call('HDEL', KEYS[4], ARGV[1]) \
            redis.call('SET', KEYS[5], tostring(tonumber(ARGV[1]) - 1)) return 1";
        redis_cli(
            self.redis.port(),
            &[
                "EVAL", script, "5", &k.waiting, &k.parked, &k.away, &k.bound, &k.seq, &place,
            ],
        )?;
        Ok(())
    }
}

/// A browser held through the loss gets its place and its key back: a copied ticket (another
/// key) is still refused, the browser itself resumes with its key, and its entry token carries
/// `cnf.jkt` equal to its key's thumbprint, verified with the JWKS as a booking service does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_held_through_a_loss_keeps_its_key() -> anyhow::Result<()> {
    let s = Stack::start().await?;
    let (key, thief) = (BrowserKey::from_seed(7), BrowserKey::from_seed(9));
    let (ticket, held) = s.join(&key).await?;
    s.flush().await?;
    // Before the queue is back, a copied ticket can neither resume the place nor take it from
    // the browser holding it (its stream goes on).
    let (code, first, _) = s.resume(&ticket, &thief).await?;
    assert_eq!(
        (
            code,
            first
                .as_ref()
                .map(|(n, d)| (n.as_str(), d["reason"].clone()))
        ),
        (200, Some(("proof_required", json!("wrong_key")))),
        "a copied ticket while the queue is lost"
    );
    s.reconfigure(1).await?;
    assert!(
        !held.has_ended(),
        "held through the loss: {:?}",
        held.last("closed")
    );

    // A copied ticket with another key: refused, on the stream and the status route.
    let (code, first, _) = s.resume(&ticket, &thief).await?;
    assert_eq!(
        (
            code,
            first
                .as_ref()
                .map(|(n, d)| (n.as_str(), d["reason"].clone()))
        ),
        (200, Some(("proof_required", json!("wrong_key")))),
        "a copied ticket after the loss"
    );
    let (code, body) = s.status(&ticket, &thief).await?;
    assert!(code == 403 && body.contains("wrong_key"), "{code} {body}");

    // Its own browser, with its key: back in line at its place.
    let (code, first, mut conn) = s.resume(&ticket, &key).await?;
    assert_eq!(
        (code, first.as_ref().map(|(n, _)| n.as_str())),
        (200, Some("waiting")),
        "the browser's own resume after the loss: {first:?}"
    );
    let (code, body) = s.status(&ticket, &key).await?;
    assert!(code == 200 && body.contains("waiting"), "{code} {body}");

    // Admitted: the token names the key.
    s.configure(false).await?;
    let admitted = conn.wait_for("admitted", Duration::from_secs(20)).await?;
    let jwks = jwks_at(&s.http, &s.dispatcher.url()).await?;
    let claims = verify_token(&jwks, data(&admitted)["token"].as_str().unwrap_or(""), Q)?;
    assert_eq!(
        claims["cnf"],
        json!({"jkt": key.thumbprint()}),
        "the token is bound to the browser's key: {claims}"
    );
    Ok(())
}

/// A place nobody held through the loss lost its key with it: its ticket (copied, or even its
/// own browser's) cannot take it back, so no place of the queue is ever unbound and no token
/// without `cnf` is minted. (Without binding, `resume.lua` puts such a place back where it
/// stood: a signed ticket past the place counter names a place Redis lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_ticket_of_a_place_nobody_held_is_refused_after_a_loss() -> anyhow::Result<()> {
    let s = Stack::start().await?;
    let (held_key, away_key, thief) = (
        BrowserKey::from_seed(3),
        BrowserKey::from_seed(5),
        BrowserKey::from_seed(9),
    );
    // One browser held, one that joined after it and went away: nobody holds that place when
    // Redis loses its join.
    let (_, _held) = s.join(&held_key).await?;
    let (away_ticket, away) = s.join(&away_key).await?;
    away.disconnect();
    eventually("the gateway to let the away browser go", async || {
        anyhow::ensure!(s.streaming().await? == 1.0, "still streaming");
        Ok(())
    })
    .await?;
    // Its disconnect written to Redis before the loss, not after.
    away_flushed(&s.gateway.url(), 2).await?;
    s.lose_join(place_of(&away_ticket))?;

    let (code, first, _) = s.resume(&away_ticket, &thief).await?;
    assert_eq!(
        (code, first.as_ref().map(|(n, _)| n.as_str())),
        (410, None),
        "a copied ticket of a place whose key was lost: {first:?}"
    );
    let (code, body) = s.status(&away_ticket, &thief).await?;
    assert_ne!(code, 200, "the status route of a lost place: {body}");
    // Its own browser cannot prove what Redis no longer knows: the place is lost for it too.
    let (code, _, _) = s.resume(&away_ticket, &away_key).await?;
    assert_eq!(code, 410);
    // No place was put back unbound: the line is the held browser alone.
    s.configure(false).await?;
    eventually_within(
        "the held browser admitted",
        Duration::from_secs(20),
        async || {
            let v = queue_view(&s.dispatcher, Q).await;
            match v {
                Some(v) if v["waiting"] == 0 && v["admitted_total"] == 1 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// A thumbprint made of one character (what Redis stores; the store tests need no real key).
fn thumbprint(c: char) -> Thumbprint {
    Thumbprint::parse(&format!("{}A", c.to_string().repeat(Thumbprint::LEN - 1)))
        .expect("43 base64url characters")
}

/// The dispatcher mints by the keys in `bound`: the tick never admits a binding queue's place
/// that has none (put back without it, or joined before the queue bound), since its token
/// would carry no `cnf`. It is dropped at the head; the place with its key is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_without_its_key_is_never_admitted_on_a_binding_queue() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("keyless")?;
    let config = QueueConfig {
        admit_per_second: 100.0,
        passthrough: false,
        bind: Bind::BrowserKey,
        ..QueueConfig::default()
    };
    store.put_queue(&q, &config).await?;
    let key = thumbprint('k');
    let batch = store
        .join_bound(&q, 0, now_ms(), &[None, None], &[None, Some(key.clone())])
        .await?;
    let waiting = |i| match batch.outcome(i) {
        Ok(PlaceState::Waiting { place, .. }) => Ok(place),
        other => Err(anyhow::anyhow!("a waiting place expected, got {other:?}")),
    };
    let (keyless, bound) = (waiting(0)?, waiting(1)?);
    assert_eq!(
        store.place_keys(&q, &[keyless, bound]).await?,
        [None, Some(key)]
    );

    let lease = take_lease(&store, &q).await?;
    let calls = tick_calls(&store, &q, &tick_args(&lease, now_ms() + 1_000)).await?;
    let (admitted, dropped) = calls.iter().fold((0, 0), |(a, d), t| match t {
        Tick::Ticked(o) => (a + o.admitted, d + o.dropped),
        _ => (a, d),
    });
    assert_eq!(
        (admitted, dropped),
        (1, 1),
        "the keyed place admitted, the keyless one dropped: {calls:?}"
    );
    assert_eq!(
        store.status(&q, keyless, now_ms()).await?,
        PlaceState::Gone,
        "the keyless place is gone, not admitted"
    );
    assert_ne!(store.status(&q, bound, now_ms()).await?, PlaceState::Gone);
    Ok(())
}

/// A scheduled sale's pre-queue places put back after a loss get their keys back in the same
/// call, under the id they are put back with: into the pre-queue of a pending draw, into the
/// line when no draw is held (the draw void), and at the tail of the line under new ids when
/// the new draw ran already.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_queue_places_are_put_back_with_their_keys() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let config = QueueConfig {
        paused: true,
        bind: Bind::BrowserKey,
        ..QueueConfig::default()
    };
    let held = |p: u64| (PlaceId(p), EntrantHash([p as u8; 32]));
    let places = [held(3), held(4)];
    let keys = [Some(thumbprint('a')), None];

    // A pending draw: back in the pre-queue, with the key.
    let pending = QueueId::new("pending-sale")?;
    store.put_queue(&pending, &config).await?;
    store
        .schedule(&pending, Some(now_ms() + 3_600_000), &Seed::generate())
        .await?;
    let r = store
        .restore_pre_queue_bound(&pending, 0, &places, &keys, SeenDraw::default(), now_ms())
        .await?;
    assert!(
        matches!(
            r,
            PreRestore::Done {
                fate: PreQueueFate::Kept,
                restored: 2,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(
        store
            .place_keys(&pending, &[PlaceId(3), PlaceId(4)])
            .await?,
        keys,
        "each place with the key its gateway checked, none for the one it had none for"
    );

    // No draw held any more: the places go into the line, with their keys.
    let void = QueueId::new("void-sale")?;
    store.put_queue(&void, &config).await?;
    let r = store
        .restore_pre_queue_bound(&void, 0, &places, &keys, SeenDraw::default(), now_ms())
        .await?;
    assert!(
        matches!(
            r,
            PreRestore::Done {
                fate: PreQueueFate::Void,
                restored: 2,
                ..
            }
        ),
        "{r:?}"
    );
    assert_eq!(
        store.place_keys(&void, &[PlaceId(3), PlaceId(4)]).await?,
        keys
    );

    // The new draw ran before this gateway put its places back: they go to the tail of the
    // line under new ids (`drawn` maps them), and the key goes with the new id.
    let done = QueueId::new("done-sale")?;
    store.put_queue(&done, &config).await?;
    let seed = Seed::generate();
    assert!(store.schedule(&done, Some(now_ms()), &seed).await?);
    let lease = take_lease(&store, &done).await?;
    let DrawPrep::Ready(due) = store.prepare_draw(&done, &lease, 60_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready");
    };
    let recorded = due.recorded;
    let order = due.order();
    let outcome = store
        .run_draw(
            &done,
            &lease,
            60_000,
            now_ms(),
            recorded,
            &order.entrants,
            order.absent,
        )
        .await?;
    assert!(matches!(outcome, DrawOutcome::Done { .. }), "{outcome:?}");
    let r = store
        .restore_pre_queue_bound(&done, 0, &places, &keys, SeenDraw::default(), now_ms())
        .await?;
    assert!(
        matches!(
            r,
            PreRestore::Done {
                fate: PreQueueFate::Drawn,
                restored: 2,
                ..
            }
        ),
        "{r:?}"
    );
    let k = QueueKeys::new(&done);
    let new_id = |p: u64| -> anyhow::Result<PlaceId> {
        let id = redis_cli(redis.port(), &["HGET", &k.drawn, &p.to_string()])?;
        Ok(PlaceId(id.trim().parse()?))
    };
    let moved = [new_id(3)?, new_id(4)?];
    assert!(moved[0].0 > 4 && moved[1].0 > 4, "new ids: {moved:?}");
    assert_eq!(store.place_keys(&done, &moved).await?, keys);
    Ok(())
}
