//! Redis ACL users: each real binary runs as a user restricted to exactly the commands and
//! key patterns `usher_testkit::acl` lists for it (the lists docs/managed-redis.md prints), through the paths a
//! sale takes (a scheduled sale's draw included); Redis' own `ACL LOG` must then hold no
//! denial. The gateway's user cannot read the dispatcher's signing key.

use std::time::Duration;
use usher_testkit::line::{join, join_and_admit, T};

use serde_json::json;
use usher_core::keys;
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::acl::Component;
use usher_testkit::procs::Proc;
use usher_testkit::{RedisServer, SseClient};

const PASSWORD: &str = "acl-test-password";

/// Creates `user` with exactly `component`'s rules (the `ACL SETUSER` line docs/managed-redis.md prints);
/// returns its URL.
async fn user(
    admin: &mut redis::aio::MultiplexedConnection,
    redis: &RedisServer,
    user: &str,
    component: Component,
) -> anyhow::Result<String> {
    let line = component.setuser(user, PASSWORD);
    let mut words = line.split_whitespace();
    let mut cmd = redis::cmd(words.next().unwrap_or_default());
    let _: () = cmd
        .arg(words.collect::<Vec<_>>())
        .query_async(admin)
        .await?;
    Ok(format!(
        "redis://{user}:{PASSWORD}@127.0.0.1:{}",
        redis.port()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_binary_runs_as_a_user_with_exactly_its_acl() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let mut admin = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let d_url = user(
        &mut admin,
        &redis,
        "usher-dispatcher",
        Component::Dispatcher,
    )
    .await?;
    let g_url = user(&mut admin, &redis, "usher-gateway", Component::Gateway).await?;
    let _: () = redis::cmd("ACL")
        .arg("LOG")
        .arg("RESET")
        .query_async(&mut admin)
        .await?;

    let dispatcher = Proc::start("usher-dispatcher", &[("USHER_REDIS_URL", d_url)]).await?;
    let gateway_env = [
        ("USHER_REDIS_URL", g_url.clone()),
        ("USHER_DRAIN_DELAY_MS", "200".to_owned()),
        ("USHER_DRAIN_SECS", "1".to_owned()),
    ];
    let mut gateway = Proc::start("usher-gateway", &gateway_env).await?;
    let http = usher_testkit::config::admin_client();
    let (d, g) = (dispatcher.url(), gateway.url());

    // Join → admitted → token; then the session API a booking service calls.
    let a = join_and_admit(&http, &d, &g, "acl").await?;
    let bearer = format!("Bearer {}", a.token);
    let session = http
        .get(format!("{d}/api/session"))
        .header("authorization", &bearer)
        .send()
        .await?;
    assert_eq!(session.status(), 200);
    let touch = http
        .post(format!("{d}/api/session/touch"))
        .header("authorization", &bearer)
        .send()
        .await?;
    assert_eq!(touch.status(), 200);
    // Resume of the admitted place (its token again), its status, then the session ends.
    let client = SseClient::new(g.clone());
    let mut again = client
        .open("/api/queues/acl/stream", Some(a.ticket.as_str()))
        .await?;
    again.wait_for("admitted", T).await?;
    let status = http
        .get(format!("{g}/api/queues/acl/status?ticket={}", a.ticket))
        .send()
        .await?;
    assert_eq!(status.status(), 200);
    let end = http
        .delete(format!("{d}/api/session"))
        .header("authorization", &bearer)
        .send()
        .await?;
    assert_eq!(end.status(), 204);

    // A paused queue: waiting, a notice, a leave, a dropped connection, then closing.
    let r = http
        .put(format!("{d}/admin/queues/held"))
        .json(&json!({"admit_per_second": 1.0, "paused": true, "record": true}))
        .send()
        .await?;
    assert!(r.status().is_success());
    let (t1, _, mut c1) = join(&client, "held").await?;
    let (t2, _, c2) = join(&client, "held").await?;
    let notice = http
        .post(format!("{d}/admin/queues/held/notice"))
        .json(&json!({"message": "Doors open at eight"}))
        .send()
        .await?;
    assert_eq!(notice.status(), 202);
    c1.wait_for("notice", T).await?;
    let leave = http
        .delete(format!("{g}/api/queues/held/tickets/{t2}"))
        .send()
        .await?;
    assert_eq!(leave.status(), 204);
    drop(c2);
    assert_eq!(
        http.get(format!("{d}/admin/queues/held"))
            .send()
            .await?
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{d}/admin/queues")).send().await?.status(),
        200
    );
    // The readiness report reads INFO and TIME (issue 24): its user may.
    let ready = http
        .get(format!("{d}/admin/readiness?crowd=1000"))
        .send()
        .await?;
    assert_eq!(ready.status(), 200);
    let close = http
        .delete(format!("{d}/admin/queues/held?reason=sold_out"))
        .send()
        .await?;
    assert_eq!(close.status(), 200);
    let closed = c1.wait_for("closed", T).await?;
    assert!(closed.data.contains("sold_out"), "{}", closed.data);
    let _ = t1;

    // A scheduled sale: the pre-queue, its status, the draw, the record, resume into line.
    let sale = http
        .put(format!("{d}/admin/queues/sale"))
        .json(
            &json!({"admit_per_second": 50.0, "passthrough": false, "record": true,
            "opens_at": rfc3339_ms(now_ms() + 5000)}),
        )
        .send()
        .await?;
    assert!(sale.status().is_success(), "{}", sale.status());
    let mut pre = client.open("/api/queues/sale/stream", None).await?;
    let pre_ticket = pre.wait_for("scheduled", T).await?.id;
    let status: serde_json::Value = http
        .get(format!("{g}/api/queues/sale/status?ticket={pre_ticket}"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(status["state"], "scheduled", "{status}");
    let end = pre.next_event(Duration::from_secs(20)).await?;
    assert!(end.is_none(), "the draw ends the pre-queue stream: {end:?}");
    let record: serde_json::Value = http
        .get(format!("{g}/api/queues/sale/draw"))
        .send()
        .await?
        .json()
        .await?;
    assert!(record["seed"].is_string(), "the draw ran: {record}");
    let mut drawn = client
        .open("/api/queues/sale/stream", Some(pre_ticket.as_str()))
        .await?;
    drawn.wait_for("admitted", T).await?;
    // The fairness record of both (issue 25): written by the join, leave, away, close, draw
    // and tick scripts above, read in slices by the report.
    for q in ["held", "sale"] {
        let report: serde_json::Value = http
            .get(format!("{d}/admin/queues/{q}/report"))
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(report["recorded"], true, "{report}");
        assert!(report["record"]["places"].as_u64() >= Some(1), "{report}");
    }

    // >>> invitations: a join code taken once, an account's place taken over (its lock).
    {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine;
        use ed25519_dalek::Signer;
        let shop = ed25519_dalek::SigningKey::from_bytes(&[3u8; 32]);
        let jwk = json!({"kty": "OKP", "crv": "Ed25519", "kid": "k1",
            "x": URL_SAFE_NO_PAD.encode(shop.verifying_key().as_bytes())});
        let r = http
            .put(format!("{d}/admin/queues/invited"))
            .json(
                &json!({"admit_per_second": 1.0, "paused": true, "passthrough": false,
                "invitations": "required", "invitation_keys": [jwk]}),
            )
            .send()
            .await?;
        assert!(r.status().is_success(), "{}", r.status());
        let claims = json!({"sub": "a1", "aud": "invited", "exp": now_ms() / 1000 + 600});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"EdDSA","kid":"k1"}"#),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let invitation = format!(
            "{signed}.{}",
            URL_SAFE_NO_PAD.encode(shop.sign(signed.as_bytes()).to_bytes())
        );
        let mut held = Vec::new();
        for _ in 0..2 {
            let code: serde_json::Value = http
                .post(format!("{g}/api/queues/invited/invitation"))
                .bearer_auth(&invitation)
                .send()
                .await?
                .json()
                .await?;
            let code = code["join_code"].as_str().unwrap_or_default().to_owned();
            let mut conn = client
                .open(&format!("/api/queues/invited/stream?join={code}"), None)
                .await?;
            let e = conn.wait_for("waiting", T).await?;
            assert!(e.data.contains("\"position\":1"), "{}", e.data);
            held.push(conn);
        }
        held[0].wait_for("closed", T).await?;
    }
    // <<< invitations

    // A graceful stop deregisters the gateway.
    gateway.term()?;
    assert!(gateway.wait_exit(T).await?, "the gateway stops cleanly");

    // Nothing was denied along the way.
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query_async(&mut admin).await?;
    assert!(log.is_empty(), "Redis denied usher something: {log:?}");

    // Least privilege: the gateway's user cannot read the development signing key.
    let mut as_gateway = redis::Client::open(g_url)?
        .get_multiplexed_async_connection()
        .await?;
    let denied: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg(keys::DEV_JWT_KEY)
        .query_async(&mut as_gateway)
        .await;
    let err = denied.expect_err("the gateway's user reads no signing key");
    assert!(
        err.to_string().to_lowercase().contains("no permissions"),
        "{err}"
    );
    Ok(())
}

/// docs/managed-redis.md prints each binary's `ACL SETUSER` line exactly as `usher_testkit::acl`
/// defines it.
#[test]
fn readme_prints_the_acl_each_binary_needs() -> anyhow::Result<()> {
    let readme = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/managed-redis.md"),
    )?;
    for c in Component::ALL {
        let line = c.setuser(c.name(), "<password>");
        assert!(
            readme.contains(&line),
            "docs/managed-redis.md lacks:\n{line}"
        );
    }
    Ok(())
}
