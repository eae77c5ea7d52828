//! The fairness report end to end (issue 25, part 2): a real dispatcher and gateway, real SSE
//! browsers, and a sale whose answer is known in advance:
//! * a lane queue where `members` (90 %) is served before the general lane, one member
//!   arriving after three general browsers (3 inversions, each explained by `lane`), and a
//!   general browser away when its turn came, admitted after two later ones (2, `away`);
//! * a scheduled sale whose draw orders four entrants: its inversions are those of the
//!   published draw (recomputed here from the record, by counting pairs), each `draw`;
//! * a queue that does not record says so; an unknown queue is a 404.
//!
//! The CSV form is parsed and checked against the JSON.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::line::{data, join, T};
use usher_testkit::sse::SseConn;
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::SseClient;

use crate::draw_check::entrant;
use crate::shop::Shop;

async fn report(stack: &Stack, q: &str, suffix: &str) -> anyhow::Result<reqwest::Response> {
    Ok(stack
        .http
        .get(format!(
            "{}/admin/queues/{q}/report{suffix}",
            stack.dispatcher.url()
        ))
        .send()
        .await?)
}

/// The admitted event's token, once it comes.
async fn token(conn: &mut SseConn) -> anyhow::Result<String> {
    let e = conn.wait_for("admitted", T).await?;
    Ok(data(&e)["token"].as_str().unwrap_or_default().to_owned())
}

/// `method` on the session API with `token`: the status.
async fn session(stack: &Stack, method: Method, path: &str, token: &str) -> anyhow::Result<u16> {
    Ok(stack
        .http
        .request(method, format!("{}{path}", stack.dispatcher.url()))
        .bearer_auth(token)
        .send()
        .await?
        .status()
        .as_u16())
}

/// One `key,value` row of RFC 4180 CSV (a field in quotes may hold commas and `""`).
fn split_row(line: &str) -> anyhow::Result<(String, String)> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut field)),
            c => field.push(c),
        }
    }
    fields.push(field);
    anyhow::ensure!(fields.len() == 2 && !quoted, "not a key,value row: {line}");
    let value = fields.pop().unwrap_or_default();
    Ok((fields.pop().unwrap_or_default(), value))
}

/// Every `key,value` row of the CSV form agrees with the JSON form at that path.
fn csv_agrees(csv: &str, json: &Value) -> anyhow::Result<usize> {
    let mut rows = 0;
    let mut lines = csv.lines();
    anyhow::ensure!(lines.next() == Some("key,value"), "the header row");
    for line in lines {
        let (key, value) = split_row(line)?;
        let (key, value) = (key.as_str(), value.as_str());
        let mut at = json;
        for part in key.split('.') {
            at = match at {
                Value::Array(a) => &a[part.parse::<usize>()?],
                other => &other[part],
            };
        }
        let expected = match at {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        anyhow::ensure!(expected == value, "{key}: CSV {value}, JSON {expected}");
        rows += 1;
    }
    Ok(rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_explains_every_inversion_of_a_sale() -> anyhow::Result<()> {
    // A configured ticket key: networks are recorded only with one (a development key lives
    // in Redis beside the record, where it would let anyone reverse the hashes).
    let stack = Stack::start(StackOptions {
        ticket_key: Some("report-test-ticket-key-0123456789abcdef"),
        ..StackOptions::default()
    })
    .await?;
    let client = SseClient::new(stack.gateway_url(0));
    let shop = Shop::new("shop-report");

    // The draw's sale first: its opening time runs while the lane queue is set up.
    stack
        .put_queue(
            "drawn",
            json!({"admit_per_second": 50.0, "paused": true, "passthrough": false,
                "record": true, "opens_at": rfc3339_ms(now_ms() + 2500)}),
        )
        .await?;
    let mut pre = Vec::new();
    for _ in 0..4 {
        let mut c = client.open("/api/queues/drawn/stream", None).await?;
        let ticket = c.wait_for("scheduled", T).await?.id;
        pre.push((ticket, c));
    }

    stack
        .put_queue(
            "lanes",
            json!({"admit_per_second": 5.0, "paused": true, "passthrough": false,
                "record": true, "grace_seconds": 60, "invitations": "optional",
                "invitation_keys": [shop.jwk()],
                "lanes": [{"name": "general", "share": 10}, {"name": "members", "share": 90}]}),
        )
        .await?;
    // Arrival: g1, g2, g3 (general), m1 (members), g4.
    let (_, _, mut g1) = join(&client, "lanes").await?;
    let (t2, _, g2) = join(&client, "lanes").await?;
    let (_, _, mut g3) = join(&client, "lanes").await?;
    let code = {
        let invitation = shop.invite_to_lane("member-1", "lanes", "members");
        let r = reqwest::Client::new()
            .post(format!(
                "{}/api/queues/lanes/invitation",
                stack.gateway_url(0)
            ))
            .bearer_auth(invitation)
            .send()
            .await?;
        let body: Value = r.json().await?;
        body["join_code"].as_str().unwrap_or_default().to_owned()
    };
    let mut m1 = client
        .open(&format!("/api/queues/lanes/stream?join={code}"), None)
        .await?;
    m1.wait_for("waiting", T).await?;
    let (_, _, mut g4) = join(&client, "lanes").await?;
    // g2's connection drops: away.
    drop(g2);
    eventually("g2 to be away", async || {
        stack.queue("lanes").await.is_ok_and(|v| v["away"] == 1)
    })
    .await?;
    // One admission every other tick: m1 first (members is owed 0.9 of it), then the
    // general lane in order, g2 skipped while away.
    stack.put_queue("lanes", json!({"paused": false})).await?;
    let tm1 = token(&mut m1).await?;
    let tg1 = token(&mut g1).await?;
    let tg3 = token(&mut g3).await?;
    token(&mut g4).await?;
    let mut g2 = client
        .open("/api/queues/lanes/stream", Some(t2.as_str()))
        .await?;
    token(&mut g2).await?;
    // Sessions: one booked, one released.
    let consume = "/api/session/consume?queue=lanes";
    assert_eq!(session(&stack, Method::POST, consume, &tg1).await?, 200);
    assert_eq!(
        session(&stack, Method::DELETE, "/api/session", &tg3).await?,
        204
    );
    let _ = tm1;

    let r = report(&stack, "lanes", "").await?;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await?;
    assert_eq!(v["recorded"], true, "{v}");
    let o = &v["order"];
    assert_eq!(o["admitted"], 5, "{o}");
    assert_eq!(o["stayed_connected"], 4, "{o}");
    assert_eq!(
        o["explained"],
        json!({"lane": 3, "away": 2, "draw": 0, "unexplained": 0}),
        "m1 overtook g1, g2, g3; g3 and g4 overtook g2 while it was away"
    );
    // Connected, in arrival order g1 g3 m1 g4, admitted m1 g1 g3 g4: 2 of 6 pairs.
    assert_eq!(o["inversions"], 2, "{o}");
    let tau = o["kendall_tau"].as_f64().unwrap_or(0.0);
    assert!((tau - 1.0 / 3.0).abs() < 1e-9, "{tau}");
    let by: Vec<Value> = o["overtaken"]
        .as_array()
        .map(|a| a.iter().map(|x| x["by"].clone()).collect())
        .unwrap_or_default();
    assert_eq!(
        by,
        vec![
            json!({"lane": 1, "away": 0, "draw": 0, "unexplained": 0}),
            json!({"lane": 1, "away": 2, "draw": 0, "unexplained": 0}),
            json!({"lane": 1, "away": 0, "draw": 0, "unexplained": 0}),
        ],
        "g1, g2, g3 overtaken"
    );
    let s = &v["sessions"];
    assert_eq!(
        (
            s["admitted"].as_u64(),
            s["booked"].as_u64(),
            s["released"].as_u64()
        ),
        (Some(5), Some(1), Some(1)),
        "{s}"
    );
    let w = &v["waits"][0];
    assert_eq!(w["joined"], 5, "{w}");
    assert_eq!(
        v["eta"]["compared"], 5,
        "every place was shown an ETA at 5/s"
    );
    let nets = &v["networks"][0];
    assert_eq!(
        (
            nets["admissions"].as_u64(),
            nets["distinct_networks"].as_u64()
        ),
        (Some(5), Some(1)),
        "five browsers of one /24 (127.0.0.0): {nets}"
    );
    assert_eq!(nets["top1_share"], 1.0);

    // The CSV form: requested either way, parsed, every row as in the JSON.
    let csv_q = report(&stack, "lanes", "?format=csv").await?;
    assert!(csv_q.headers()["content-type"]
        .to_str()?
        .starts_with("text/csv"));
    let rows = csv_agrees(&csv_q.text().await?, &v)?;
    assert!(rows > 30, "{rows} rows");
    let csv_h = stack
        .http
        .get(format!(
            "{}/admin/queues/lanes/report",
            stack.dispatcher.url()
        ))
        .header("accept", "text/csv")
        .send()
        .await?;
    assert!(csv_agrees(&csv_h.text().await?, &v)? == rows);

    // The draw: every pre-queue stream ends, each browser resumes into the line.
    let mut drawn_conns = Vec::new();
    for (ticket, mut c) in pre {
        let end = c.next_event(Duration::from_secs(10)).await?;
        anyhow::ensure!(end.is_none(), "the draw ends the pre-queue stream: {end:?}");
        let mut again = client
            .open("/api/queues/drawn/stream", Some(ticket.as_str()))
            .await?;
        again.wait_for("waiting", T).await?;
        drawn_conns.push((ticket, again));
    }
    stack.put_queue("drawn", json!({"paused": false})).await?;
    for (_, c) in &mut drawn_conns {
        token(c).await?;
    }
    let d: Value = report(&stack, "drawn", "").await?.json().await?;
    // The known answer: the published order's inversions against the join order.
    let published: Value = reqwest::get(format!("{}/api/queues/drawn/draw", stack.gateway_url(0)))
        .await?
        .json()
        .await?;
    let rank: HashMap<String, usize> = published["entrants"]
        .as_array()
        .map(|a| {
            a.iter()
                .enumerate()
                .filter_map(|(i, h)| Some((h.as_str()?.to_owned(), i)))
                .collect()
        })
        .unwrap_or_default();
    let order: Vec<usize> = drawn_conns.iter().map(|(t, _)| rank[&entrant(t)]).collect();
    let mut expected = 0;
    for i in 0..order.len() {
        for j in i + 1..order.len() {
            expected += u64::from(order[i] > order[j]);
        }
    }
    let o = &d["order"];
    assert_eq!(o["admitted"], 4, "{d}");
    assert_eq!(
        o["explained"],
        json!({"lane": 0, "away": 0, "draw": expected, "unexplained": 0})
    );
    assert_eq!(o["inversions"], expected);
    assert_eq!(d["draw"]["status"], "done");
    assert_eq!(d["draw"]["seed"], published["seed"]);
    assert_eq!(d["draw"]["commitment"], published["commitment"]);
    assert!(d["draw"]["verify"]
        .as_str()
        .is_some_and(|s| s.contains("/api/queues/drawn/draw")));

    // A queue that did not record says so; an unknown queue is a 404 with a JSON error.
    stack.create_queue("plain", 10.0).await?;
    let p: Value = report(&stack, "plain", "").await?.json().await?;
    assert_eq!(p, json!({"queue": "plain", "recorded": false}));
    let missing = report(&stack, "nowhere", "").await?;
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await?;
    assert!(body["error"].is_string(), "{body}");
    Ok(())
}
