//! The admin API's access and audit trail: no unauthenticated access from anywhere (a
//! reverse proxy on the same host included), no start without a token outside development
//! mode, a development token that replicas share, and a record of every change.

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use usher_testkit::config::{admin_client, ADMIN_LABEL, ADMIN_TOKEN};
use usher_testkit::procs::{binary, free_addr, Proc};
use usher_testkit::wait::eventually;
use usher_testkit::{RedisServer, Stack};

/// A reverse proxy on loopback, as an operator might put in front of the dispatcher: every
/// connection is forwarded byte for byte, so the dispatcher sees a loopback peer.
async fn loopback_proxy(upstream: std::net::SocketAddr) -> anyhow::Result<String> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut client, _)) = l.accept().await {
            tokio::spawn(async move {
                if let Ok(mut server) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    Ok(format!("http://{addr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_through_a_loopback_proxy_needs_the_token() -> anyhow::Result<()> {
    let stack = Stack::start(Default::default()).await?;
    let proxy = loopback_proxy(stack.dispatcher.addr).await?;
    let anonymous = reqwest::Client::new();
    let url = format!("{proxy}/admin/queues/proxied");
    let body = json!({"admit_per_second": 1});

    // The requests that worked through a same-host proxy before: PUT and DELETE.
    let r = anonymous.put(&url).json(&body).send().await?;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await?;
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("token")),
        "{v}"
    );
    assert_eq!(anonymous.delete(&url).send().await?.status(), 401);
    assert_eq!(
        anonymous
            .get(format!("{proxy}/admin/queues"))
            .send()
            .await?
            .status(),
        401
    );
    assert_eq!(
        anonymous
            .put(&url)
            .bearer_auth("wrong")
            .json(&body)
            .send()
            .await?
            .status(),
        401
    );
    // Directly on loopback too: the address exempts nobody.
    let direct = format!("{}/admin/queues/proxied", stack.dispatcher.url());
    assert_eq!(
        anonymous.put(&direct).json(&body).send().await?.status(),
        401
    );
    assert!(
        stack.queue("proxied").await?["error"].is_string(),
        "not created"
    );

    // With the token, through the proxy, it works.
    let admin = admin_client();
    assert_eq!(admin.put(&url).json(&body).send().await?.status(), 201);
    let r = admin.delete(&url).send().await?;
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<Value>().await?["open"], false);
    // Public routes stay public.
    for path in ["/.well-known/jwks.json", "/healthz", "/readyz"] {
        assert_eq!(
            anonymous
                .get(format!("{proxy}{path}"))
                .send()
                .await?
                .status(),
            200,
            "{path}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_refuses_to_start_without_an_admin_token_outside_dev_mode(
) -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let run = |env: &[(&str, &str)]| -> anyhow::Result<std::process::Output> {
        let listen = free_addr()?.to_string();
        Ok(std::process::Command::new(binary("usher-dispatcher")?)
            .env_clear()
            .env("USHER_REDIS_URL", redis.url())
            .env("USHER_LISTEN", listen)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .output()?)
    };
    for env in [
        vec![],
        vec![("USHER_DEV", "0")],
        vec![("USHER_ADMIN_TOKEN", " ")],
        vec![("USHER_ADMIN_TOKEN", "a:x,a:y")],
        vec![("USHER_ADMIN_TOKEN", "bad label:x")],
    ] {
        // Refused at once, before serving anything: `output()` returns because it exited.
        let out = run(&env)?;
        let text = String::from_utf8_lossy(&out.stderr).to_string()
            + &String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{env:?} started: {text}");
        assert!(text.contains("USHER_ADMIN_TOKEN"), "{env:?}: {text}");
    }
    let out = run(&[])?;
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("USHER_DEV=1"),
        "the error says how to run in dev: {text}"
    );
    Ok(())
}

/// The development token a dispatcher logged at start.
fn logged_dev_token(p: &Proc) -> Option<String> {
    p.log_text().lines().find_map(|l| {
        let v: Value = serde_json::from_str(l).ok()?;
        v["fields"]["admin_token"].as_str().map(str::to_owned)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_replicas_share_one_admin_token_and_audit_to_the_json_log() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_DEV", "1".to_owned()),
        ("USHER_LOG_FORMAT", "json".to_owned()),
    ];
    let a = Proc::start("usher-dispatcher", &env).await?;
    let b = Proc::start("usher-dispatcher", &env).await?;
    let ta = logged_dev_token(&a)
        .ok_or_else(|| anyhow::anyhow!("no token logged:\n{}", a.log_tail()))?;
    let tb = logged_dev_token(&b)
        .ok_or_else(|| anyhow::anyhow!("no token logged:\n{}", b.log_tail()))?;
    assert_eq!(ta, tb, "replicas agree on the development token");
    assert!(ta.len() >= 32, "a long random token: {ta}");
    assert_ne!(ta, ADMIN_TOKEN);
    // Logged once per process, not per request.
    assert_eq!(a.log_text().matches(&ta).count(), 1);

    let http = reqwest::Client::new();
    for (p, name) in [(&a, "from-a"), (&b, "from-b")] {
        let url = format!("{}/admin/queues/{name}", p.url());
        let body = json!({"admit_per_second": 3});
        assert_eq!(http.put(&url).json(&body).send().await?.status(), 401);
        let r = http.put(&url).bearer_auth(&ta).json(&body).send().await?;
        assert_eq!(r.status(), 201);
    }
    // Each replica sees the queue the other created.
    let r = http
        .get(format!("{}/admin/queues", a.url()))
        .bearer_auth(&ta)
        .send()
        .await?;
    let v: Value = r.json().await?;
    assert_eq!(v["queues"].as_array().map(Vec::len), Some(2), "{v}");

    // The change is in the JSON log, as an `audit` event naming the dev label.
    let audit_line = eventually("an audit line in the JSON log", async || {
        a.log_text().lines().find_map(|l| {
            let v: Value = serde_json::from_str(l).ok()?;
            (v["target"] == "audit").then_some(v)
        })
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", a.log_tail()))?;
    assert_eq!(audit_line["fields"]["who"], "dev");
    assert_eq!(audit_line["fields"]["method"], "PUT");
    assert_eq!(audit_line["fields"]["path"], "/admin/queues/from-a");
    assert_eq!(audit_line["fields"]["status"], 201);
    assert!(
        !audit_line.to_string().contains(&ta),
        "no token in the audit line"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_change_is_audited_and_readable_newest_first() -> anyhow::Result<()> {
    let stack = Stack::start(Default::default()).await?;
    let d = stack.dispatcher.url();
    let http = &stack.http;
    stack.create_queue("audited", 5.0).await?;
    stack.put_queue("audited", json!({"paused": true})).await?;
    let r = http
        .post(format!("{d}/admin/queues/audited/notice"))
        .json(&json!({"message": "Doors open at 10:00"}))
        .send()
        .await?;
    assert_eq!(r.status(), 202);
    // A refused change is recorded too, with its status.
    let r = http
        .put(format!("{d}/admin/queues/audited"))
        .json(&json!({"admit_per_second": -1}))
        .send()
        .await?;
    assert_eq!(r.status(), 400);
    let r = http
        .delete(format!("{d}/admin/queues/audited?reason=sold_out"))
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    // Reads and unauthenticated attempts are not changes.
    stack.queue("audited").await?;
    let anonymous = reqwest::Client::new();
    let r = anonymous
        .delete(format!("{d}/admin/queues/audited"))
        .send()
        .await?;
    assert_eq!(r.status(), 401);

    let r = http.get(format!("{d}/admin/audit?limit=10")).send().await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    let records = v["records"].as_array().cloned().unwrap_or_default();
    let seen: Vec<(String, String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap_or("").to_owned(),
                r["path"].as_str().unwrap_or("").to_owned(),
                r["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let want = [
        ("DELETE", "/admin/queues/audited?reason=sold_out", 200),
        ("PUT", "/admin/queues/audited", 400),
        ("POST", "/admin/queues/audited/notice", 202),
        ("PUT", "/admin/queues/audited", 200),
        ("PUT", "/admin/queues/audited", 201),
    ];
    let want: Vec<(String, String, u64)> = want
        .iter()
        .map(|(m, p, s)| (m.to_string(), p.to_string(), *s))
        .collect();
    assert_eq!(seen, want, "newest first: {v}");
    for r in &records {
        assert_eq!(r["who"], ADMIN_LABEL);
        assert!(r["at_ms"].as_u64().is_some_and(|t| t > 1_600_000_000_000));
        assert!(r["id"].as_str().is_some_and(|id| id.contains('-')));
    }
    assert_eq!(
        records[2]["summary"],
        r#"{"message":"Doors open at 10:00"}"#
    );
    assert_eq!(records[3]["summary"], r#"{"paused":true}"#);
    assert!(
        !v.to_string().contains(ADMIN_TOKEN),
        "no token in the trail"
    );

    // The limit is honoured and checked; the trail needs the token.
    let v: Value = http
        .get(format!("{d}/admin/audit?limit=2"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(v["records"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["records"][0]["method"], "DELETE");
    for bad in ["limit=0", "limit=1001", "limit=x", "other=1"] {
        let r = http.get(format!("{d}/admin/audit?{bad}")).send().await?;
        assert_eq!(r.status(), 400, "{bad}");
    }
    let r = anonymous.get(format!("{d}/admin/audit")).send().await?;
    assert_eq!(r.status(), 401);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_requires_the_bearer_token_when_configured() -> anyhow::Result<()> {
    usher_testkit::stack::init_logs();
    let redis = usher_testkit::RedisServer::start()?;
    let mut cfg = usher_testkit::config::dispatcher(&redis.url(), 100);
    cfg.admin_token = Some("s3cret-token-0123456789abcdef0123".into());
    let d = usher_testkit::stack::Server::spawn(|l, rx| {
        usher_dispatcher::run(cfg, l, async move {
            let _ = rx.await;
        })
    })
    .await?;
    let http = reqwest::Client::new();
    let url = format!("{}/admin/queues/x", d.url());
    let body = json!({"admit_per_second": 1});
    let r = http.put(&url).json(&body).send().await?;
    assert_eq!(r.status(), 401);
    let v: Value = r.json().await?;
    assert!(v["error"].as_str().is_some());
    let r = http
        .put(&url)
        .bearer_auth("wrong")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 401);
    let r = http
        .put(&url)
        .bearer_auth("s3cret-token-0123456789abcdef0123")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 201);
    let r = http
        .put(&url)
        .bearer_auth("s3cret-token-0123456789abcdef0123")
        .json(&body)
        .send()
        .await?;
    assert_eq!(r.status(), 200);
    let r = http
        .get(format!("{}/admin/queues", d.url()))
        .bearer_auth("s3cret-token-0123456789abcdef0123")
        .send()
        .await?;
    let v: Value = r.json().await?;
    assert_eq!(v["queues"][0]["queue"], "x");
    // JWKS and health stay public.
    assert_eq!(
        http.get(format!("{}/.well-known/jwks.json", d.url()))
            .send()
            .await?
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{}/readyz", d.url()))
            .send()
            .await?
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{}/healthz", d.url()))
            .send()
            .await?
            .status(),
        200
    );
    d.stop().await?;
    Ok(())
}
