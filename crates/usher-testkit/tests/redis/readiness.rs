//! Ready before the sale (issue 24, item 7): `GET /admin/readiness?crowd=N` on real
//! dispatchers, gateways and `redis-server`s, each check made to pass and to fail by what it
//! looks at (Redis started with and without AOF or `noeviction`, a small `maxmemory`, the
//! development keys or configured ones, one dispatcher or two, gateways' caps, open files,
//! clocks).

use std::time::Duration;

use serde_json::Value;
use usher_core::ids::ServerId;
use usher_core::store::{GatewayFacts, Store};
use usher_core::time::now_ms;
use usher_testkit::stack::{self, Server};
use usher_testkit::wait::eventually;
use usher_testkit::RedisServer;

/// Redis without persistence, as the other tests run it, unless a test says otherwise.
const NO_AOF: &[&str] = &["--save", "", "--appendonly", "no"];

/// A deployment: one Redis, dispatchers and gateways (in this process, on real sockets).
struct Deployment {
    redis: RedisServer,
    dispatchers: Vec<Server>,
    gateways: Vec<Server>,
    http: reqwest::Client,
}

/// How to start it.
struct Plan<'a> {
    redis_args: &'a [&'a str],
    dispatchers: usize,
    gateways: usize,
    /// Configured entry-token and ticket keys (else the development ones, shared in Redis).
    real_keys: bool,
    /// Each gateway's stream cap, and its socket cap.
    max_streams: u64,
    max_sockets: u64,
}

impl Default for Plan<'_> {
    fn default() -> Self {
        Self {
            redis_args: NO_AOF,
            dispatchers: 1,
            gateways: 1,
            real_keys: false,
            max_streams: 1000,
            max_sockets: 1000,
        }
    }
}

/// One entry-token key and one ticket key for the whole deployment.
struct Keys {
    jwt: String,
    ticket: String,
}

impl Deployment {
    async fn start(plan: Plan<'_>) -> anyhow::Result<Self> {
        let redis = RedisServer::start_with(plan.redis_args)?;
        let keys = Keys {
            jwt: usher_mint::token::SigningKey::generate_pem()?,
            ticket: "readiness-test-ticket-key-0123456789abcdef".to_owned(),
        };
        let mut d = Self {
            redis,
            dispatchers: Vec::new(),
            gateways: Vec::new(),
            http: usher_testkit::config::admin_client(),
        };
        for _ in 0..plan.dispatchers {
            d.add_dispatcher(plan.real_keys.then_some(&keys), None)
                .await?;
        }
        for _ in 0..plan.gateways {
            let mut g = usher_testkit::config::gateway(&d.redis.url());
            g.max_connections = plan.max_streams;
            g.max_sockets = plan.max_sockets;
            if plan.real_keys {
                g.ticket_key = Some(keys.ticket.clone());
            }
            d.gateways.push(stack::gateway_with(g).await?);
        }
        // Every gateway has reported its facts once.
        let want = plan.gateways;
        let store = d.store().await?;
        eventually("the gateways to report their facts", async || {
            let n = store.gateway_facts().await?.len();
            anyhow::ensure!(n == want, "{n} of {want} reported");
            Ok(())
        })
        .await?;
        Ok(d)
    }

    /// Adds a dispatcher replica (with the deployment's entry-token key if given, and its
    /// own socket cap); returns its replica id.
    async fn add_dispatcher(
        &mut self,
        keys: Option<&Keys>,
        max_sockets: Option<u64>,
    ) -> anyhow::Result<String> {
        let mut cfg = usher_testkit::config::dispatcher(&self.redis.url(), 100);
        cfg.jwt_key = keys.map(|k| k.jwt.clone());
        if let Some(n) = max_sockets {
            cfg.serve.max_sockets = n;
        }
        let id = cfg.replica_id.clone();
        self.dispatchers.push(stack::dispatcher_with(cfg).await?);
        Ok(id)
    }

    /// Waits until `check` comes out `outcome` with `text` in its detail.
    async fn until(&self, name: &str, outcome: &str, text: &str) -> anyhow::Result<Value> {
        eventually(
            &format!("{name} to be {outcome} with {text:?}"),
            async || {
                let (got, check) = self.check(name, None).await?;
                let detail = check["detail"].as_str().unwrap_or("");
                anyhow::ensure!(got == outcome && detail.contains(text), "{check}");
                Ok(check)
            },
        )
        .await
    }

    async fn store(&self) -> anyhow::Result<Store> {
        Ok(Store::connect(&self.redis.url()).await?)
    }

    /// The readiness report (from the first dispatcher), for `crowd` if given.
    async fn report(&self, crowd: Option<u64>) -> anyhow::Result<Value> {
        let mut url = format!("{}/admin/readiness", self.dispatchers[0].url());
        if let Some(n) = crowd {
            url.push_str(&format!("?crowd={n}"));
        }
        let r = self.http.get(url).send().await?;
        anyhow::ensure!(r.status() == 200, "readiness answered {}", r.status());
        Ok(r.json().await?)
    }

    /// One check of the report: (outcome, the whole check).
    async fn check(&self, name: &str, crowd: Option<u64>) -> anyhow::Result<(String, Value)> {
        let report = self.report(crowd).await?;
        let check = report["checks"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["check"] == name))
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no check {name} in {report}"))?;
        let outcome = check["outcome"].as_str().unwrap_or("").to_owned();
        // A check that does not pass says the fix; one that passes says none.
        match outcome.as_str() {
            "pass" => anyhow::ensure!(check["fix"].is_null(), "{check}"),
            "warn" | "fail" => anyhow::ensure!(
                check["fix"].as_str().is_some_and(|f| f.ends_with('.')),
                "{check}"
            ),
            _ => anyhow::bail!("outcome {outcome:?}: {check}"),
        }
        Ok((outcome, check))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_passes_with_aof_and_fails_without() -> anyhow::Result<()> {
    let off = Deployment::start(Plan::default()).await?;
    let (outcome, check) = off.check("persistence", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    assert!(check["fix"]
        .as_str()
        .is_some_and(|f| f.contains("appendonly yes")));
    // The report's outcome is its worst check's.
    assert_eq!(off.report(None).await?["outcome"], "fail");
    let on = Deployment::start(Plan {
        redis_args: &["--save", "", "--appendonly", "yes"],
        ..Plan::default()
    })
    .await?;
    assert_eq!(on.check("persistence", None).await?.0, "pass");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_passes_with_noeviction_and_fails_with_another_policy() -> anyhow::Result<()> {
    let lru = Deployment::start(Plan {
        redis_args: &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "allkeys-lru",
        ],
        ..Plan::default()
    })
    .await?;
    let (outcome, check) = lru.check("eviction", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    assert!(check["detail"]
        .as_str()
        .is_some_and(|d| d.contains("allkeys-lru")));
    let no = Deployment::start(Plan {
        redis_args: &[
            "--save",
            "",
            "--appendonly",
            "no",
            "--maxmemory-policy",
            "noeviction",
        ],
        ..Plan::default()
    })
    .await?;
    assert_eq!(no.check("eviction", None).await?.0, "pass");
    Ok(())
}

/// Memory for the crowd: 300 B a person against `maxmemory` less what Redis uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_passes_for_a_crowd_that_fits_and_fails_for_one_that_does_not() -> anyhow::Result<()>
{
    let d = Deployment::start(Plan {
        redis_args: &["--save", "", "--appendonly", "no", "--maxmemory", "64mb"],
        ..Plan::default()
    })
    .await?;
    assert_eq!(d.check("memory", Some(10_000)).await?.0, "pass");
    let (outcome, check) = d.check("memory", Some(1_000_000)).await?;
    assert_eq!(outcome, "fail", "300 MB for a crowd of a million: {check}");
    assert_eq!(d.check("memory", None).await?.0, "warn", "no crowd given");
    // No maxmemory: Redis would grow until the system kills it.
    let unlimited = Deployment::start(Plan::default()).await?;
    let (outcome, check) = unlimited.check("memory", Some(10)).await?;
    assert_eq!(outcome, "warn", "{check}");
    assert!(check["fix"]
        .as_str()
        .is_some_and(|f| f.contains("maxmemory")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_keys_fail_with_the_development_keys_and_pass_with_configured_ones(
) -> anyhow::Result<()> {
    let dev = Deployment::start(Plan::default()).await?;
    let (outcome, check) = dev.check("signing_keys", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    let detail = check["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("this dispatcher signs entry tokens with the development key"),
        "{detail}"
    );
    assert!(
        detail.contains("gateways sign tickets with the development key"),
        "{detail}"
    );
    let mut real = Deployment::start(Plan {
        real_keys: true,
        ..Plan::default()
    })
    .await?;
    assert_eq!(real.check("signing_keys", None).await?.0, "pass");
    // Another replica without a key: named from its own report.
    let other = real.add_dispatcher(None, None).await?;
    real.until(
        "signing_keys",
        "fail",
        &format!("dispatchers sign entry tokens with the development key: {other}"),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_fail_with_one_dispatcher_and_pass_with_two() -> anyhow::Result<()> {
    let mut d = Deployment::start(Plan::default()).await?;
    let (outcome, check) = d.check("dispatcher_replicas", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    d.add_dispatcher(None, None).await?;
    d.until("dispatcher_replicas", "pass", "2 live").await?;
    // The other replica's clock is compared too, from its own report.
    d.until("clocks", "pass", "1 other dispatchers").await?;
    Ok(())
}

/// Two gateways of 1,000 streams each: a crowd of 900 fits even without one (pass), 1,500
/// only with both (warn), 5,000 not at all (fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_capacity_follows_the_gateways_caps() -> anyhow::Result<()> {
    let d = Deployment::start(Plan {
        gateways: 2,
        ..Plan::default()
    })
    .await?;
    assert_eq!(d.check("gateway_capacity", Some(900)).await?.0, "pass");
    assert_eq!(d.check("gateway_capacity", Some(1500)).await?.0, "warn");
    let (outcome, check) = d.check("gateway_capacity", Some(5000)).await?;
    assert_eq!(outcome, "fail", "{check}");
    assert!(check["detail"]
        .as_str()
        .is_some_and(|t| t.contains("2 live gateways hold 2000 streams")));
    Ok(())
}

/// A gateway whose socket cap is above the open files it may hold fails the check; one
/// within it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_files_fail_when_a_gateway_may_not_open_its_sockets() -> anyhow::Result<()> {
    let ok = Deployment::start(Plan::default()).await?;
    let (outcome, check) = ok.check("open_files", None).await?;
    assert_eq!(outcome, "pass", "{check}");
    let Some(limit) = usher_runtime::open_files_limit() else {
        // No limit on this machine: no socket cap can exceed it.
        return Ok(());
    };
    let over = Deployment::start(Plan {
        max_sockets: limit + 1,
        ..Plan::default()
    })
    .await?;
    let (outcome, check) = over.check("open_files", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    assert!(check["detail"]
        .as_str()
        .is_some_and(|t| t.contains("gateway ")));
    // Another dispatcher whose socket cap is above its limit: named from its own report.
    let mut two = Deployment::start(Plan::default()).await?;
    let other = two.add_dispatcher(None, Some(limit + 1)).await?;
    two.until("open_files", "fail", &format!("dispatcher {other}: "))
        .await?;
    Ok(())
}

/// Servers on this machine share its clock: pass. A gateway whose clock is off reports its
/// offset from Redis' `TIME` with its heartbeat; no test can move a real process's clock, so
/// here a gateway registered through usher-core's store reports what such a one would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clocks_pass_in_step_and_fail_when_a_gateway_is_off() -> anyhow::Result<()> {
    let d = Deployment::start(Plan::default()).await?;
    let (outcome, check) = d.check("clocks", None).await?;
    assert_eq!(outcome, "pass", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|t| t.contains("1 gateways report theirs")),
        "{check}"
    );
    let store = d.store().await?;
    let id = ServerId::new("gw-slow-clock")?;
    let index = store
        .register_gateway(&id, now_ms(), Duration::from_secs(60))
        .await?;
    let off_by = |ms| GatewayFacts {
        max_streams: 1000,
        max_sockets: 1000,
        open_files: None,
        open_files_needed: 1128,
        dev_ticket_key: false,
        clock_offset_ms: Some(ms),
    };
    store.report_gateway_facts(index, &off_by(600)).await?;
    assert_eq!(d.check("clocks", None).await?.0, "warn");
    store.report_gateway_facts(index, &off_by(-5000)).await?;
    let (outcome, check) = d.check("clocks", None).await?;
    assert_eq!(outcome, "fail", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|t| t.contains("gateway gw-slow-clock 5000 ms")),
        "{check}"
    );
    Ok(())
}
