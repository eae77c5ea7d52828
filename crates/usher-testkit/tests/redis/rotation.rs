//! Entry-token key rotation on a real dispatcher process, restarted with a new key file:
//! [A] → [A, B as a public key] (B verify-only, rolled out) → [B, A] (B signs). Tokens signed
//! by A keep verifying, new ones carry B's kid, and the booking demo picks B up by itself.

use std::path::Path;

use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePublicKey};
use serde_json::json;
use usher_mint::token::SigningKey;
use usher_testkit::line::{data, jwks_at, verify_token, T};
use usher_testkit::procs::Proc;
use usher_testkit::{stack, RedisServer, SseClient};

/// A test key: its private PEM, its public PEM and its kid.
struct Key {
    private: String,
    public: String,
    kid: String,
}

fn key() -> anyhow::Result<Key> {
    let private = SigningKey::generate_pem()?;
    let public = ed25519_dalek::SigningKey::from_pkcs8_pem(&private)?
        .verifying_key()
        .to_public_key_pem(Default::default())?;
    let kid = SigningKey::from_pkcs8_pem(&private)?.kid().to_owned();
    Ok(Key {
        private,
        public,
        kid,
    })
}

fn write_keys(path: &Path, blocks: &[&str]) -> anyhow::Result<()> {
    Ok(std::fs::write(path, blocks.concat())?)
}

fn kid_of_token(token: &str) -> anyhow::Result<String> {
    jsonwebtoken::decode_header(token)?
        .kid
        .ok_or_else(|| anyhow::anyhow!("token without kid"))
}

/// A new browser joins `queue` and waits for its admission; its entry token.
async fn admitted_token(gateway: &SseClient, queue: &str) -> anyhow::Result<String> {
    let mut conn = gateway
        .open(&format!("/api/queues/{queue}/stream"), None)
        .await?;
    anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
    let e = conn.wait_for("admitted", T).await?;
    data(&e)["token"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("admitted without a token"))
}

/// The published kids in order, and the JWKS response's `Cache-Control`.
async fn published(http: &reqwest::Client, d: &Proc) -> anyhow::Result<(Vec<String>, String)> {
    let r = http
        .get(format!("{}/.well-known/jwks.json", d.url()))
        .send()
        .await?
        .error_for_status()?;
    let cache = r
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let set: jsonwebtoken::jwk::JwkSet = r.json().await?;
    let kids = set.keys.iter().filter_map(|k| k.common.key_id.clone());
    Ok((kids.collect(), cache))
}

/// Books with `token` at the demo booking service; the answer's status.
async fn book(http: &reqwest::Client, booking: &str, token: &str) -> anyhow::Result<u16> {
    let r = http
        .post(format!("{booking}/api/bookings"))
        .bearer_auth(token)
        .json(&json!({"queue": "show"}))
        .send()
        .await?;
    Ok(r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_signing_key_keeps_old_tokens_valid() -> anyhow::Result<()> {
    let (a, b) = (key()?, key()?);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("entry-token-keys.pem");
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_TICK_MS", "100".to_owned()),
        ("USHER_LEASE_TTL_MS", "300".to_owned()),
        ("USHER_JWT_KEY_FILE", file.display().to_string()),
    ];
    let http = usher_testkit::config::admin_client();

    // 1. One key, A: it signs, and it is all the JWKS lists.
    write_keys(&file, &[&a.private])?;
    let mut d = Proc::start("usher-dispatcher", &env).await?;
    let gw = stack::gateway(&redis.url()).await?;
    let gateway = SseClient::new(gw.url());
    let booking = stack::booking(&d.url()).await?;
    let r = http
        .put(format!("{}/admin/queues/show", d.url()))
        .json(&json!({"admit_per_second": 50}))
        .send()
        .await?;
    assert_eq!(r.status(), 201);
    let t1 = admitted_token(&gateway, "show").await?;
    assert_eq!(kid_of_token(&t1)?, a.kid);
    verify_token(&jwks_at(&http, &d.url()).await?, &t1, "show")?;
    let (kids, cache) = published(&http, &d).await?;
    assert_eq!(kids, std::slice::from_ref(&a.kid));
    assert_eq!(cache, "public, max-age=60");
    assert_eq!(book(&http, &booking.url(), &t1).await?, 201);

    // 2. Roll B out as a verify-only public key: A still signs; both are published.
    write_keys(&file, &[&a.private, &b.public])?;
    d.restart().await?;
    assert_eq!(
        published(&http, &d).await?.0,
        [a.kid.clone(), b.kid.clone()]
    );
    let t2 = admitted_token(&gateway, "show").await?;
    assert_eq!(kid_of_token(&t2)?, a.kid, "a verify-only key never signs");
    let set = jwks_at(&http, &d.url()).await?;
    verify_token(&set, &t1, "show")?;
    verify_token(&set, &t2, "show")?;

    // 3. B signs; A is kept, verify-only, until A's tokens have expired.
    write_keys(&file, &[&b.private, &a.private])?;
    d.restart().await?;
    assert_eq!(
        published(&http, &d).await?.0,
        [b.kid.clone(), a.kid.clone()]
    );
    let t3 = admitted_token(&gateway, "show").await?;
    assert_eq!(kid_of_token(&t3)?, b.kid, "new tokens carry the new kid");
    let set = jwks_at(&http, &d.url()).await?;
    verify_token(&set, &t1, "show")?;
    verify_token(&set, &t3, "show")?;
    // The booking demo cached [A] at step 1: B's kid makes it fetch the keys again.
    assert_eq!(book(&http, &booking.url(), &t3).await?, 201);
    // A token of the retired key whose session is still active books too: the session API
    // verifies it with the verify-only key. (T1 booked at step 1, which ended its session.)
    assert_eq!(book(&http, &booking.url(), &t2).await?, 201);
    assert_eq!(
        book(&http, &booking.url(), &t1).await?,
        403,
        "a session books once"
    );

    booking.stop().await?;
    gw.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusable_key_files_are_refused_at_startup() -> anyhow::Result<()> {
    let (a, b) = (key()?, key()?);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("entry-token-keys.pem");
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_JWT_KEY_FILE", file.display().to_string()),
    ];
    let cases: [(&[&str], &str); 4] = [
        (
            &[&a.private, &b.public, &a.public],
            "block 3 is the same key as block 1",
        ),
        (&[&b.public, &a.private], "block 1 is a public key"),
        (&[""], "no PEM block"),
        (
            &[&a.private, &b.private[..40]],
            "block 2 has no `-----END PRIVATE KEY-----`",
        ),
    ];
    for (blocks, expected) in cases {
        write_keys(&file, blocks)?;
        let refused = match Proc::start("usher-dispatcher", &env).await {
            Ok(_) => anyhow::bail!("a dispatcher started with a bad key file ({expected})"),
            Err(e) => e.to_string(),
        };
        assert!(refused.contains(expected), "{expected}: {refused}");
        let origin = format!("entry-token keys in USHER_JWT_KEY_FILE {}", file.display());
        assert!(refused.contains(&origin), "{refused}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usher_jwt_key_holds_the_same_key_list_as_the_file() -> anyhow::Result<()> {
    let (a, b) = (key()?, key()?);
    let redis = RedisServer::start()?;
    let inline = |blocks: &[&str]| {
        [
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_JWT_KEY", blocks.concat()),
        ]
    };
    let d = Proc::start("usher-dispatcher", &inline(&[&b.private, &a.public])).await?;
    let http = usher_testkit::config::admin_client();
    assert_eq!(
        published(&http, &d).await?.0,
        [b.kid.clone(), a.kid.clone()]
    );

    let refused = match Proc::start("usher-dispatcher", &inline(&[&b.private, &b.private])).await {
        Ok(_) => anyhow::bail!("a dispatcher started with the same key twice"),
        Err(e) => e.to_string(),
    };
    let expected = "entry-token keys in USHER_JWT_KEY: block 2 is the same key as block 1";
    assert!(refused.contains(expected), "{refused}");
    Ok(())
}
