//! Lanes end to end (issue 24, item 2): a real dispatcher and gateway, real SSE. A join's
//! lane is the `lane` claim of the shop's invitation (exchanged for a join code, as the page
//! does); a join without one waits in the default lane. Each stream hears its position in
//! its own lane, the default lane's events are as without lanes, the admin API
//! counts each lane and refuses to remove one with places.

use serde_json::{json, Value};
use usher_testkit::line::{data, PAUSED, T};
use usher_testkit::sse::SseConn;
use usher_testkit::stack::{dispatcher, gateway_with, Server};
use usher_testkit::wait::eventually;
use usher_testkit::{RedisServer, SseClient};

use crate::shop::Shop;

struct Lanes {
    _redis: RedisServer,
    dispatcher: Server,
    gateway: Server,
    http: reqwest::Client,
    shop: Shop,
}

impl Lanes {
    async fn start() -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let dispatcher = dispatcher(&redis.url(), 100).await?;
        let gateway = gateway_with(usher_testkit::config::gateway(&redis.url())).await?;
        Ok(Self {
            _redis: redis,
            dispatcher,
            gateway,
            http: usher_testkit::config::admin_client(),
            shop: Shop::new("shop-lanes"),
        })
    }

    /// Creates the paused queue `lanes` with lanes general (70 %, the default) and members
    /// (30 %), taking the shop's invitations.
    async fn create(&self) -> anyhow::Result<()> {
        let (status, v) = self
            .put(
                json!({"admit_per_second": PAUSED, "open": true, "passthrough": false,
                "invitations": "optional", "invitation_keys": [self.shop.jwk()],
                "lanes": [{"name": "general", "share": 70}, {"name": "members", "share": 30}]}),
            )
            .await?;
        anyhow::ensure!(status == 201, "creating the queue answered {status}: {v}");
        Ok(())
    }

    async fn put(&self, body: Value) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .put(format!("{}/admin/queues/lanes", self.dispatcher.url()))
            .json(&body)
            .send()
            .await?;
        Ok((r.status().as_u16(), r.json().await?))
    }

    async fn get(&self) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}/admin/queues/lanes", self.dispatcher.url()))
            .send()
            .await?
            .json()
            .await?)
    }

    /// A join code for an invitation of a new account to `lane`, as the page gets one.
    async fn code_for(&self, lane: &str) -> anyhow::Result<String> {
        let account = format!("acct-{:016x}", rand::random::<u64>());
        self.code_of(&account, lane).await
    }

    /// A join code for an invitation of `account` to `lane`.
    async fn code_of(&self, account: &str, lane: &str) -> anyhow::Result<String> {
        let invitation = self.shop.invite_to_lane(account, "lanes", lane);
        let r = reqwest::Client::new()
            .post(format!(
                "{}/api/queues/lanes/invitation",
                self.gateway.url()
            ))
            .bearer_auth(invitation)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "POST invitation answered {}", r.status());
        let body: Value = r.json().await?;
        Ok(body["join_code"].as_str().unwrap_or_default().to_owned())
    }

    /// Joins (in `lane` when given: with an invitation to it) and reads the first `waiting`
    /// event's data.
    async fn join(&self, lane: Option<&str>) -> anyhow::Result<(Value, SseConn)> {
        let path = match lane {
            Some(l) => format!("/api/queues/lanes/stream?join={}", self.code_for(l).await?),
            None => "/api/queues/lanes/stream".to_string(),
        };
        let mut conn = SseClient::new(self.gateway.url()).open(&path, None).await?;
        anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
        let e = conn
            .next_event(T)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no first event"))?;
        anyhow::ensure!(e.event == "waiting", "first event {e:?}");
        Ok((data(&e), conn))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_stream_hears_its_own_lane_and_the_admin_api_counts_lanes() -> anyhow::Result<()> {
    let s = Lanes::start().await?;
    s.create().await?;
    // Shares that do not add up to 100 are refused, with the reason.
    let (status, v) = s
        .put(json!({"lanes": [{"name": "general", "share": 70}, {"name": "members", "share": 20}]}))
        .await?;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("100")),
        "{v}"
    );

    // Interleaved: general, members, general, general, members.
    let mut conns = Vec::new();
    let mut first = Vec::new();
    for lane in [None, Some("members"), None, None, Some("members")] {
        let (d, c) = s.join(lane).await?;
        first.push(d);
        conns.push(c);
    }
    let pos = |d: &Value| (d["position"].as_u64(), d["lane"].as_str().map(String::from));
    assert_eq!(
        first.iter().map(pos).collect::<Vec<_>>(),
        [
            (Some(1), None),
            (Some(1), Some("members".into())),
            (Some(2), None),
            (Some(3), None),
            (Some(2), Some("members".into())),
        ],
        "positions count each lane alone; the default lane's events carry no lane"
    );
    assert_eq!(first[4]["waiting"], 2, "members' line is 2 long");

    // A lane the queue does not have: refused, no place taken.
    let vip = s.code_for("vip").await?;
    let conn = SseClient::new(s.gateway.url())
        .open(&format!("/api/queues/lanes/stream?join={vip}"), None)
        .await?;
    assert_eq!(conn.status, 409);

    let v = s.get().await?;
    assert_eq!(v["waiting"], 5, "{v}");
    assert_eq!(
        v["lanes"],
        json!([{"name": "general", "share": 70, "default": true, "waiting": 3},
               {"name": "members", "share": 30, "default": false, "waiting": 2}])
    );
    let (status, v) = s
        .put(json!({"lanes": [{"name": "general", "share": 100}]}))
        .await?;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("\"members\"")),
        "{v}"
    );

    // Admission: members' second place moves to position 1 of its lane (read off the lane's
    // own snapshot), then is admitted.
    let (status, v) = s.put(json!({"admit_per_second": 4})).await?;
    assert_eq!(status, 200, "{v}");
    let member = &mut conns[4];
    let mut saw_first = false;
    loop {
        let e = member
            .next_event(T)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the member's stream ended"))?;
        match e.event.as_str() {
            "waiting" => {
                let d = data(&e);
                assert_eq!(d["lane"], "members", "{d}");
                assert!(d["position"].as_u64().is_some_and(|p| p <= 2), "{d}");
                saw_first |= d["position"] == 1;
            }
            "admitted" => break,
            other => anyhow::bail!("unexpected {other}: {}", e.data),
        }
    }
    assert!(
        saw_first,
        "the member heard position 1 of its lane before admission"
    );
    eventually("everyone admitted", async || {
        s.get().await.is_ok_and(|v| v["waiting"] == 0)
    })
    .await?;
    // Metrics: each lane's admissions, labelled by lane.
    eventually("members' two admissions in /metrics", async || {
        s.lane_metric("usher_lane_admitted_total", "members").await == Some(2.0)
    })
    .await?;
    assert_eq!(
        s.lane_metric("usher_lane_admitted_total", "general").await,
        Some(3.0)
    );
    Ok(())
}

impl Lanes {
    /// The dispatcher's `name{lane="…",queue="lanes"}` sample, if rendered.
    async fn lane_metric(&self, name: &str, lane: &str) -> Option<f64> {
        let text = self
            .http
            .get(format!("{}/metrics", self.dispatcher.url()))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let series = format!("{name}{{");
        text.lines()
            .filter(|l| l.starts_with(&series))
            .filter(|l| l.contains(&format!("lane=\"{lane}\"")) && l.contains("queue=\"lanes\""))
            .find_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse().ok()))
    }
}

/// An account invited to a lane holds one place there, whatever number of devices it joins
/// from: the second device takes the first one's place over (same place, same lane position),
/// and the first stream hears `resumed_elsewhere` (`lua/account.lua` looks in the lane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_in_a_lane_holds_one_place_from_two_devices() -> anyhow::Result<()> {
    let s = Lanes::start().await?;
    s.create().await?;
    let (_, _other) = s.join(Some("members")).await?;
    let open = |code: String| {
        let url = s.gateway.url().to_owned();
        async move {
            let mut conn = SseClient::new(&url)
                .open(&format!("/api/queues/lanes/stream?join={code}"), None)
                .await?;
            anyhow::ensure!(conn.status == 200, "join answered {}", conn.status);
            let e = conn.wait_for("waiting", T).await?;
            anyhow::Ok((e.id.clone(), data(&e), conn))
        }
    };
    let (laptop_ticket, laptop, mut laptop_conn) =
        open(s.code_of("fan-1", "members").await?).await?;
    assert_eq!(
        (laptop["lane"].as_str(), laptop["position"].as_u64()),
        (Some("members"), Some(2))
    );
    let (phone_ticket, phone, _phone_conn) = open(s.code_of("fan-1", "members").await?).await?;
    let place = |t: &str| t.split('.').nth(1).unwrap_or_default().to_owned();
    assert_eq!(
        place(&phone_ticket),
        place(&laptop_ticket),
        "the phone holds the laptop's place"
    );
    assert_eq!(
        (phone["lane"].as_str(), phone["position"].as_u64()),
        (Some("members"), Some(2))
    );
    let closed = laptop_conn.wait_for("closed", T).await?;
    assert_eq!(data(&closed)["reason"], "resumed_elsewhere");
    let v = s.get().await?;
    assert_eq!(v["waiting"], 2, "two accounts, two places: {v}");
    Ok(())
}

/// Lanes follow the queue's settings' rules: a `PUT` with a stale `If-Match` changes no lane
/// (`412`, as for every other setting), and a `PUT` that lists the lanes without
/// `default_lane` keeps the default lane it had (only the shares change).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_edit_changes_no_lane_and_the_default_lane_is_kept() -> anyhow::Result<()> {
    let s = Lanes::start().await?;
    let (status, v) = s
        .put(json!({"admit_per_second": PAUSED, "open": true,
            "lanes": [{"name": "general", "share": 70}, {"name": "members", "share": 30}],
            "default_lane": "general"}))
        .await?;
    assert_eq!(status, 201, "{v}");
    let url = format!("{}/admin/queues/lanes", s.dispatcher.url());
    let etag = |r: &reqwest::Response| {
        r.headers()
            .get("etag")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let old = etag(&s.http.get(&url).send().await?);
    let (status, v) = s.put(json!({"paused": true})).await?;
    assert_eq!(status, 200, "{v}");
    // Stale: refused, and the lanes are as they were.
    let r = s
        .http
        .put(&url)
        .header("if-match", &old)
        .json(&json!({"lanes": [{"name": "general", "share": 50}, {"name": "vip", "share": 50}]}))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 412);
    let lanes = |v: &Value| {
        v["lanes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|l| {
                        (
                            l["name"].as_str().map(String::from),
                            l["share"].as_u64(),
                            l["default"].as_bool(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    let want = |g: u64, m: u64| {
        vec![
            (Some("general".to_owned()), Some(g), Some(true)),
            (Some("members".to_owned()), Some(m), Some(false)),
        ]
    };
    assert_eq!(
        lanes(&s.get().await?),
        want(70, 30),
        "the stale PUT changed nothing"
    );
    // Listed in another order without `default_lane`: general stays the default lane.
    let (status, v) = s
        .put(json!({"lanes": [{"name": "members", "share": 40}, {"name": "general", "share": 60}]}))
        .await?;
    assert_eq!(status, 200, "{v}");
    let got = lanes(&s.get().await?);
    assert!(
        got.contains(&(Some("general".to_owned()), Some(60), Some(true)))
            && got.contains(&(Some("members".to_owned()), Some(40), Some(false))),
        "{got:?}"
    );
    Ok(())
}
