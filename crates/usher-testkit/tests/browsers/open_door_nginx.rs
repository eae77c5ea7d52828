//! The open door behind nginx (deploy/nginx/booking-auth.conf, unchanged): while Redis is
//! stopped, a door token in its window passes the `auth_request` locations (the dispatcher
//! judges it offline), and a door token of an ended window or another queue does not.

use std::sync::{Arc, Mutex, PoisonError};

use axum::routing::any;
use axum::{Json, Router};
use serde_json::{json, Value};
use usher_core::time::now_ms;
use usher_mint::door::DoorClaims;
use usher_testkit::answers::json_error;
use usher_testkit::line::dispatcher_key;
use usher_testkit::nginx::{deploy_config, substitute, Nginx};
use usher_testkit::procs::free_addr;
use usher_testkit::stack::{Server, Stack, StackOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_lets_a_door_token_through_while_redis_is_stopped() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack
        .put_queue(
            "show",
            json!({"on_outage": "open", "door_after_seconds": 1}),
        )
        .await?;
    stack.create_queue("quiet", 1.0).await?;
    let key = dispatcher_key(&stack).await?;
    // A real upstream that counts what reaches it.
    let reached = Arc::new(Mutex::new(0_usize));
    let count = reached.clone();
    let app = Router::new().fallback(any(move || {
        let count = count.clone();
        async move {
            *count.lock().unwrap_or_else(PoisonError::into_inner) += 1;
            Json(json!({"booked": true}))
        }
    }));
    let upstream = Server::spawn(|l, rx| async move {
        axum::serve(l, app)
            .with_graceful_shutdown(async move {
                let _ = rx.await;
            })
            .await
    })
    .await?;
    let listen = free_addr()?;
    let conf = deploy_config("booking-auth.conf")?;
    let conf = substitute(
        &conf,
        "server 127.0.0.1:8081;",
        &format!("server {};", stack.dispatcher.addr),
    )?;
    let conf = substitute(
        &conf,
        "server 127.0.0.1:8082;",
        &format!("server {};", upstream.addr),
    )?;
    let conf = substitute(&conf, "listen 8090;", &format!("listen {listen};"))?;
    let conf = substitute(&conf, "worker_processes auto;", "worker_processes 1;")?;
    let nginx = Nginx::start(&conf, listen).await?;

    let now = now_ms() / 1000;
    let start = now - now % 600;
    let door = |q: &str, from: u64| key.mint_door(&DoorClaims::new(q, from, from + 600, now, 30));
    let (current, ended, quiet) = (
        door("show", start),
        door("show", start - 1200),
        door("quiet", start),
    );
    // Redis stops (SIGSTOP): the dispatcher can read nothing.
    let pid = stack.redis.pid().to_string();
    let signal = |sig: &str| {
        tokio::task::block_in_place(|| {
            std::process::Command::new("kill")
                .args([sig, pid.as_str()])
                .status()
        })
    };
    anyhow::ensure!(signal("-STOP")?.success(), "kill -STOP");
    let http = reqwest::Client::new();
    let book = |token: &str| {
        http.post(format!("{}/api/bookings", nginx.url()))
            .bearer_auth(token)
            .json(&json!({"queue": "show", "seat": "A1"}))
            .send()
    };
    let seats = |token: &str| {
        http.get(format!("{}/api/seats", nginx.url()))
            .bearer_auth(token)
            .send()
    };
    let outcome = async {
        assert_eq!(seats(&current).await?.status(), 200, "{}", nginx.log());
        // A bearer pass for its window: the single-use location lets it through each time.
        for _ in 0..2 {
            let r = book(&current).await?;
            assert_eq!(r.status(), 200, "{}", nginx.log());
            assert_eq!(r.json::<Value>().await?["booked"], true);
        }
        json_error(book(&ended).await?, 403).await?;
        json_error(book(&quiet).await?, 403).await?;
        json_error(seats(&ended).await?, 403).await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    anyhow::ensure!(signal("-CONT")?.success(), "kill -CONT");
    outcome?;
    assert_eq!(
        *reached.lock().unwrap_or_else(PoisonError::into_inner),
        3,
        "only the door token in its window reached the booking service"
    );
    drop(nginx);
    upstream.stop().await
}
