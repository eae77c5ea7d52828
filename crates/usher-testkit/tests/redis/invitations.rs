//! Invitations (docs/sale-day.md, "Invitations"): a shop signs an invitation (an Ed25519
//! JWT) for one of its accounts; the page exchanges it for a one-use join code
//! (`POST /api/queues/{q}/invitation`) and joins with `?join=<code>`. Here on a real stack:
//! invitations signed in the test with a fresh key, streams read as `EventSource` reads them,
//! the entry token verified on the dispatcher's JWKS as a booking service does.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::{json, Value};
use usher_testkit::dpop::BrowserKey;
use usher_testkit::line::{data, jwks, verify_token, PAUSED};
use usher_testkit::sse::{SseConn, Watcher};
use usher_testkit::stack::StackOptions;
use usher_testkit::{eventually, SseClient, Stack};

use crate::shop::Shop;

const T: Duration = Duration::from_secs(10);

fn now_secs() -> u64 {
    usher_core::time::now_ms() / 1000
}

/// `POST /api/queues/{queue}/invitation` with `invitation` as the bearer: (status, body).
async fn post(
    gateway: &str,
    queue: &str,
    invitation: Option<&str>,
) -> anyhow::Result<(u16, Value)> {
    let mut r = reqwest::Client::new().post(format!("{gateway}/api/queues/{queue}/invitation"));
    if let Some(i) = invitation {
        r = r.bearer_auth(i);
    }
    let r = r.send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

/// A join code for `invitation`.
async fn code(gateway: &str, queue: &str, invitation: &str) -> anyhow::Result<String> {
    let (status, body) = post(gateway, queue, Some(invitation)).await?;
    anyhow::ensure!(status == 200, "POST invitation answered {status}: {body}");
    anyhow::ensure!(body["expires_in"] == 60, "{body}");
    Ok(body["join_code"].as_str().unwrap_or_default().to_owned())
}

/// Opens `queue`'s stream with `query` (e.g. `join=<code>`).
async fn open(gateway: &str, queue: &str, query: &str) -> anyhow::Result<SseConn> {
    SseClient::new(gateway)
        .open(&format!("/api/queues/{queue}/stream?{query}"), None)
        .await
}

/// The first event a stream hears: (name, data, ticket).
async fn first(conn: &mut SseConn) -> anyhow::Result<(String, Value, String)> {
    let e = conn
        .next_event(T)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the stream ended without an event"))?;
    Ok((e.event.clone(), data(&e), e.id.clone()))
}

/// Joins with a code for `invitation`; expects a place: (ticket, position, the stream).
async fn join_invited(
    gateway: &str,
    queue: &str,
    invitation: &str,
    proof: Option<String>,
) -> anyhow::Result<(String, u64, Watcher)> {
    let c = code(gateway, queue, invitation).await?;
    let query = match proof {
        Some(p) => format!("join={c}&proof={p}"),
        None => format!("join={c}"),
    };
    let mut conn = open(gateway, queue, &query).await?;
    anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
    let e = conn.wait_for("waiting", T).await?;
    let pos = data(&e)["position"].as_u64().unwrap_or(0);
    Ok((e.id.clone(), pos, Watcher::spawn_with(conn, vec![e])))
}

fn place_of(ticket: &str) -> String {
    ticket.split('.').nth(1).unwrap_or_default().to_owned()
}

/// Admits at 50/s and waits until `w` (`what`) hears `admitted`: its entry token, and the
/// token's claims verified on the dispatcher's JWKS as a booking service verifies them.
async fn admit(stack: &Stack, q: &str, w: &Watcher, what: &str) -> anyhow::Result<(String, Value)> {
    stack
        .put_queue(q, json!({"admit_per_second": 50.0}))
        .await?;
    let admitted = eventually(what, async || w.last("admitted")).await?;
    let token = data(&admitted)["token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let claims = verify_token(&jwks(stack).await?, &token, q)?;
    Ok((token, claims))
}

/// Waits until `w` heard `closed` and returns its reason.
async fn closed_reason(w: &Watcher) -> anyhow::Result<String> {
    eventually("the stream to hear `closed`", async || {
        w.last("closed")
            .map(|e| data(&e)["reason"].as_str().unwrap_or_default().to_owned())
    })
    .await
}

/// A forged, expired, other-queue or `alg: none` invitation gets no join code; a queue that
/// requires an invitation refuses a join without one with `event: invitation_refused`; a join
/// code is good once; bad keys are refused when the operator registers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_expired_and_foreign_invitations_are_refused() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateway_url(0);
    let (shop, stranger) = (Shop::new("shop-1"), Shop::new("shop-1"));
    let settings = json!({"admit_per_second": PAUSED, "passthrough": false,
        "invitations": "required", "invitation_keys": [shop.jwk()]});
    stack.put_queue("presale", settings.clone()).await?;
    stack.put_queue("elsewhere", settings).await?;
    stack.create_queue("public", PAUSED).await?;

    // The operator's keys are checked: not Ed25519, too many, `kid` twice, none for `required`.
    let mut ec = shop.jwk();
    ec["kty"] = "EC".into();
    let many: Vec<Value> = (0..9).map(|_| Shop::new("k").jwk()).collect();
    for (body, why) in [
        (json!({"invitation_keys": [ec]}), "an EC key"),
        (json!({"invitation_keys": many}), "nine keys"),
        (
            json!({"invitation_keys": [shop.jwk(), shop.jwk()]}),
            "a kid twice",
        ),
        (
            json!({"invitation_keys": []}),
            "no key for a required queue",
        ),
    ] {
        let r = stack
            .http
            .put(format!("{}/admin/queues/presale", stack.dispatcher.url()))
            .json(&body)
            .send()
            .await?;
        assert_eq!(r.status().as_u16(), 400, "{why}: {}", r.text().await?);
    }
    let shown = stack.queue("presale").await?;
    assert_eq!(shown["invitations"], "required", "{shown}");
    assert_eq!(shown["invitation_keys"][0]["kid"], "shop-1", "{shown}");

    let exp = now_secs() + 3600;
    let header = json!({"alg": "EdDSA", "kid": "shop-1"});
    let claims = json!({"sub": "acct-1", "aud": "presale", "exp": exp});
    let refused = [
        (None, 401, "invalid", "no invitation"),
        (
            Some(stranger.invite("acct-1", "presale")),
            401,
            "forged",
            "another key, same kid",
        ),
        (
            Some(shop.sign_with(json!({"alg": "EdDSA", "kid": "shop-2"}), claims.clone())),
            401,
            "forged",
            "an unknown kid",
        ),
        (
            Some(shop.sign_with(
                header.clone(),
                json!({"sub": "acct-1", "aud": "presale", "exp": now_secs() - 120}),
            )),
            401,
            "expired",
            "expired two minutes ago",
        ),
        (
            Some(shop.invite("acct-1", "elsewhere")),
            403,
            "other_queue",
            "made for another queue",
        ),
        (
            Some(format!(
                "{}.{}.",
                URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"shop-1"}"#),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            )),
            401,
            "invalid",
            "alg none",
        ),
    ];
    for (invitation, status, reason, why) in refused {
        let (got, body) = post(&gw, "presale", invitation.as_deref()).await?;
        assert_eq!(got, status, "{why}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with(&format!("invitation_refused: {reason}")),
            "{why}: {error}"
        );
    }
    let (status, body) = post(&gw, "public", Some(&shop.invite("acct-1", "public"))).await?;
    assert_eq!(status, 409, "a queue without invitations: {body}");
    assert_eq!(post(&gw, "nosuch", Some("x.y.z")).await?.0, 404);

    // A join without a code: refused, no place.
    let mut conn = open(&gw, "presale", "").await?;
    let (event, ev, ticket) = first(&mut conn).await?;
    assert_eq!(event, "invitation_refused");
    assert_eq!(ev["reason"], "required", "{ev}");
    assert!(ticket.is_empty(), "no ticket for a refused join");
    // A code is good once.
    let c = code(&gw, "presale", &shop.invite("acct-1", "presale")).await?;
    let mut conn = open(&gw, "presale", &format!("join={c}")).await?;
    let (event, ev, _) = first(&mut conn).await?;
    assert_eq!(event, "waiting", "{ev}");
    assert_eq!(ev["position"], 1);
    let mut again = open(&gw, "presale", &format!("join={c}")).await?;
    let (event, ev, _) = first(&mut again).await?;
    assert_eq!(
        (event.as_str(), &ev["reason"]),
        ("invitation_refused", &json!("join_code"))
    );
    let mut made_up = open(&gw, "presale", "join=not-a-code").await?;
    assert_eq!(first(&mut made_up).await?.1["reason"], "join_code");
    // A code is the queue's: another queue's code takes nothing here.
    let c = code(&gw, "elsewhere", &shop.invite("acct-1", "elsewhere")).await?;
    let mut foreign = open(&gw, "presale", &format!("join={c}")).await?;
    assert_eq!(first(&mut foreign).await?.1["reason"], "join_code");
    assert_eq!(
        stack.waiting("presale").await?,
        1,
        "only the good join took a place"
    );
    drop(conn);
    Ok(())
}

/// Two browsers with one account hold one place: the second (on another gateway) takes the
/// first's place over, at its position; the first hears `resumed_elsewhere`; the second is
/// admitted with a token a booking service accepts. Two joins of one account that race end
/// with one place too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_browsers_with_one_account_hold_one_place() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 2,
        ..StackOptions::default()
    })
    .await?;
    let (g0, g1) = (stack.gateway_url(0), stack.gateway_url(1));
    let shop = Shop::new("shop-1");
    let q = "members";
    stack
        .put_queue(
            q,
            json!({"admit_per_second": PAUSED, "passthrough": false,
            "invitations": "optional", "invitation_keys": [shop.jwk()]}),
        )
        .await?;
    let (t1, p1, phone) = join_invited(&g0, q, &shop.invite("acct-1", q), None).await?;
    assert_eq!(p1, 1);
    // Anyone may join an optional queue.
    let (_, p2, _public) = usher_testkit::line::join_watch(&SseClient::new(g0.clone()), q).await?;
    assert_eq!(p2, 2);
    let (t2, p3, laptop) = join_invited(&g1, q, &shop.invite("acct-1", q), None).await?;
    assert_eq!(p3, 1, "the account's place, not a new one at the tail");
    assert_eq!(place_of(&t2), place_of(&t1), "the same place, a new ticket");
    assert_eq!(closed_reason(&phone).await?, "resumed_elsewhere");
    assert_eq!(stack.waiting(q).await?, 2);

    // Two joins of another account at once: one place.
    let invitation = shop.invite("acct-2", q);
    let (a, b) = tokio::join!(
        join_invited(&g0, q, &invitation, None),
        join_invited(&g1, q, &invitation, None)
    );
    let ((ta, _, wa), (tb, _, wb)) = (a?, b?);
    eventually("one of the racing streams to end", async || {
        wa.last("closed").is_some() || wb.last("closed").is_some()
    })
    .await?;
    let loser = if wa.last("closed").is_some() {
        &wa
    } else {
        &wb
    };
    assert_eq!(closed_reason(loser).await?, "resumed_elsewhere");
    assert_eq!(stack.waiting(q).await?, 3, "acct-2 holds one place");
    let _ = (ta, tb);

    // The laptop's place is admitted: the token verifies as a booking service checks it.
    let (token, claims) = admit(&stack, q, &laptop, "the laptop to be admitted").await?;
    assert_eq!(claims["aud"], q);
    assert!(
        phone.last("admitted").is_none(),
        "the older device hears no admission"
    );
    // Admitted, its session active, on a queue that binds nothing: the account's new device
    // is given that admission (the same token), not a second place.
    let c = code(&g0, q, &shop.invite("acct-1", q)).await?;
    let mut tablet = open(&g0, q, &format!("join={c}")).await?;
    let (event, ev, ticket) = first(&mut tablet).await?;
    assert_eq!(event, "admitted", "{ev}");
    assert_eq!(ev["token"], token.as_str());
    assert_eq!(place_of(&ticket), place_of(&t2));
    // Once that session is over, the account joins again: a new place.
    let end = reqwest::Client::new()
        .delete(format!("{}/api/session", stack.dispatcher.url()))
        .bearer_auth(&token)
        .send()
        .await?;
    assert_eq!(end.status().as_u16(), 204);
    let c = code(&g0, q, &shop.invite("acct-1", q)).await?;
    let mut again = open(&g0, q, &format!("join={c}")).await?;
    let (event, ev, ticket) = first(&mut again).await?;
    assert_eq!(event, "waiting", "{ev}");
    assert_ne!(place_of(&ticket), place_of(&t2), "a new place");
    Ok(())
}

/// Before a scheduled sale's draw an account holds one entry in the pre-queue: a second
/// device takes the entry over, so the account enters the draw once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_enters_a_scheduled_sales_draw_once() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateway_url(0);
    let shop = Shop::new("shop-1");
    let q = "drawn-presale";
    let opens = usher_core::time::rfc3339_ms(usher_core::time::now_ms() + 3_600_000);
    stack
        .put_queue(
            q,
            json!({"admit_per_second": PAUSED, "passthrough": false,
            "invitations": "required", "invitation_keys": [shop.jwk()], "opens_at": opens}),
        )
        .await?;
    let scheduled = async |account: &str| -> anyhow::Result<(String, Watcher)> {
        let c = code(&gw, q, &shop.invite(account, q)).await?;
        let mut conn = open(&gw, q, &format!("join={c}")).await?;
        let e = conn.wait_for("scheduled", T).await?;
        Ok((e.id.clone(), Watcher::spawn_with(conn, vec![e])))
    };
    let (t1, first_device) = scheduled("acct-3").await?;
    let (t2, _second_device) = scheduled("acct-3").await?;
    assert_eq!(place_of(&t2), place_of(&t1), "the same entry");
    assert_eq!(closed_reason(&first_device).await?, "resumed_elsewhere");
    let (_, _other) = scheduled("acct-4").await?;
    let v = stack.queue(q).await?;
    assert_eq!(v["entrants"], 2, "one entry per account: {v}");
    Ok(())
}

/// On a queue that binds places to the browser's key, a valid invitation rebinds the account's
/// place to the new browser's key: the new device resumes and is admitted with a token bound to
/// its key (`cnf.jkt`); the older device's key proves the place no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invitation_rebinds_a_bound_place_to_the_new_browser() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateway_url(0);
    let shop = Shop::new("shop-1");
    let q = "bound-presale";
    let stream = format!("/api/queues/{q}/stream");
    stack
        .put_queue(
            q,
            json!({"admit_per_second": PAUSED, "passthrough": false,
            "bind": "browser_key", "invitations": "required", "invitation_keys": [shop.jwk()]}),
        )
        .await?;
    let (old_key, new_key) = (BrowserKey::generate(), BrowserKey::generate());
    let proof = |k: &BrowserKey| Some(k.proof("GET", &stream, None));
    let (t1, _, old) = join_invited(&gw, q, &shop.invite("acct-9", q), proof(&old_key)).await?;
    let (t2, pos, new) = join_invited(&gw, q, &shop.invite("acct-9", q), proof(&new_key)).await?;
    assert_eq!((place_of(&t2), pos), (place_of(&t1), 1));
    assert_eq!(closed_reason(&old).await?, "resumed_elsewhere");
    // The old device's ticket and key resume nothing now.
    let p = old_key.proof("GET", &stream, None);
    let mut back = open(&gw, q, &format!("ticket={t1}&proof={p}")).await?;
    let (event, ev, _) = first(&mut back).await?;
    assert_eq!(
        (event.as_str(), &ev["reason"]),
        ("proof_required", &json!("wrong_key"))
    );

    let (_, claims) = admit(&stack, q, &new, "the new device to be admitted").await?;
    assert_eq!(claims["cnf"]["jkt"], new_key.thumbprint(), "{claims}");

    // Admitted on a binding queue: the token is the device's; a third device is told so.
    let c = code(&gw, q, &shop.invite("acct-9", q)).await?;
    let p = BrowserKey::generate().proof("GET", &stream, None);
    let mut third = open(&gw, q, &format!("join={c}&proof={p}")).await?;
    assert_eq!(first(&mut third).await?.1["reason"], "admitted_elsewhere");
    Ok(())
}
