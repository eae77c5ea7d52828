//! The waiting-room page over HTTP: what the gateway serves at `/q/{queue}`, the page settings
//! of the admin API, and `closed: resumed_elsewhere` for a ticket resumed on the same gateway.
//! (What a browser does with the page: `browser.rs`.)

use serde_json::json;
use usher_testkit::answers::header;
use usher_testkit::line::PAUSED;
use usher_testkit::line::{data, join_watch, T};
use usher_testkit::stack::{Stack, StackOptions};
use usher_testkit::wait::eventually;
use usher_testkit::SseClient;

async fn get(url: &str, lang: Option<&str>) -> anyhow::Result<reqwest::Response> {
    let mut req = reqwest::Client::new().get(url);
    if let Some(l) = lang {
        req = req.header("accept-language", l);
    }
    Ok(req.send().await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_is_served_with_its_settings_and_a_strict_policy() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    let gw = stack.gateway_url(0);
    let unknown = get(&format!("{gw}/q/nope"), None).await?;
    assert_eq!(unknown.status(), 404, "no page for an unknown queue");
    stack.create_queue("tour", PAUSED).await?;

    let plain = get(&format!("{gw}/q/tour"), None).await?;
    assert_eq!(plain.status(), 200);
    assert_eq!(header(&plain, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&plain, "content-language"), "en");
    assert_eq!(header(&plain, "x-frame-options"), "DENY");
    assert_eq!(header(&plain, "referrer-policy"), "no-referrer");
    let csp = header(&plain, "content-security-policy");
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'none'",
    ] {
        assert!(csp.contains(part), "{csp} lacks {part}");
    }
    let html = plain.text().await?;
    assert!(html.contains("<html lang=\"en\">"));
    assert!(html.contains("\"stream\":\"/api/queues/tour/stream\""));
    assert!(
        !html.contains("<script>"),
        "no inline script (the CSP forbids it)"
    );

    stack
        .put_queue(
            "tour",
            json!({
                "title": "<World Tour>",
                "booking_url": "https://tickets.example/entry",
                "embed_origin": "https://shop.example",
                "logo_url": "https://cdn.example/logo.svg",
            }),
        )
        .await?;
    let view = stack.queue("tour").await?;
    assert_eq!(view["booking_url"], "https://tickets.example/entry");
    assert_eq!(view["embed_origin"], "https://shop.example");
    let ko = get(&format!("{gw}/q/tour"), Some("ko-KR,ko;q=0.9,en;q=0.5")).await?;
    assert_eq!(header(&ko, "content-language"), "ko");
    assert!(header(&ko, "x-frame-options").is_empty());
    let csp = header(&ko, "content-security-policy");
    assert!(
        csp.contains("frame-ancestors https://shop.example;"),
        "{csp}"
    );
    assert!(
        csp.contains("form-action https://tickets.example;"),
        "{csp}"
    );
    assert!(
        csp.contains("img-src 'self' data: https://cdn.example;"),
        "{csp}"
    );
    let html = ko.text().await?;
    assert!(
        html.contains("<title>&lt;World Tour&gt;</title>"),
        "the title is escaped"
    );
    assert!(html.contains("나의 대기 순번"), "Korean strings");
    let en = get(&format!("{gw}/q/tour?lang=en"), Some("ko")).await?;
    assert_eq!(header(&en, "content-language"), "en", "?lang= wins");

    // Assets: their own types and a long cache (the page names them with a version).
    for (name, ty) in [
        ("page.js", "text/javascript; charset=utf-8"),
        ("page.css", "text/css; charset=utf-8"),
    ] {
        let r = get(&format!("{gw}/q/assets/{name}"), None).await?;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "content-type"), ty);
        assert_eq!(header(&r, "cache-control"), "public, max-age=86400");
    }
    let missing = get(&format!("{gw}/q/assets/secret.txt"), None).await?;
    assert_eq!(missing.status(), 404);

    // "" unsets a setting.
    stack.put_queue("tour", json!({"embed_origin": ""})).await?;
    let r = get(&format!("{gw}/q/tour"), None).await?;
    assert!(header(&r, "content-security-policy").contains("frame-ancestors 'none'"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_settings_must_be_safe_urls() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("safe", PAUSED).await?;
    let http = usher_testkit::config::admin_client();
    for body in [
        json!({"booking_url": "http://tickets.example/entry"}),
        json!({"booking_url": "javascript:alert(1)"}),
        json!({"booking_url": "https://u:p@tickets.example/"}),
        json!({"logo_url": "data:image/svg+xml,<svg/>"}),
        json!({"embed_origin": "https://shop.example/path"}),
        json!({"embed_origin": "*"}),
        json!({"title": "line\nbreak"}),
    ] {
        let r = http
            .put(format!("{}/admin/queues/safe", stack.dispatcher.url()))
            .json(&body)
            .send()
            .await?;
        assert_eq!(r.status(), 400, "{body}");
        let e: serde_json::Value = r.json().await?;
        assert!(e["error"].is_string(), "JSON error: {e}");
    }
    let view = stack.queue("safe").await?;
    assert!(
        view.get("booking_url").is_none(),
        "nothing refused was stored"
    );
    stack
        .put_queue(
            "safe",
            json!({"booking_url": "http://127.0.0.1:8082/entry"}),
        )
        .await?;
    assert_eq!(
        stack.queue("safe").await?["booking_url"],
        "http://127.0.0.1:8082/entry",
        "plain http on a loopback host, for development"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_resumed_on_the_same_gateway_closes_the_old_stream_as_resumed_elsewhere(
) -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("tabs", PAUSED).await?;
    let client = SseClient::new(stack.gateway_url(0));
    let (ticket, pos, old) = join_watch(&client, "tabs").await?;
    let mut newer = client
        .open("/api/queues/tabs/stream", Some(&ticket))
        .await?;
    let w = newer.wait_for("waiting", T).await?;
    assert_eq!(data(&w)["position"], pos, "the same place");
    eventually("the older stream to end", async || old.has_ended()).await?;
    let closed = old
        .last("closed")
        .expect("the old stream hears why it ended");
    assert_eq!(data(&closed)["reason"], "resumed_elsewhere");
    assert_eq!(stack.queue("tabs").await?["waiting"], 1, "one place");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_directory_replaces_the_page() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    stack.create_queue("brand", PAUSED).await?;
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("i18n"))?;
    std::fs::write(
        dir.path().join("index.html"),
        "<html lang=\"{{lang}}\"><title>{{title}}</title><link href=\"/q/assets/brand.css?v={{v}}\">\
         <script type=\"application/json\" id=\"usher-config\">{{config}}</script>",
    )?;
    std::fs::write(dir.path().join("i18n/en.json"), r#"{"title": "Our line"}"#)?;
    std::fs::write(dir.path().join("i18n/ja.json"), r#"{"title": "行列"}"#)?;
    std::fs::write(dir.path().join("brand.css"), "h1{color:#000}")?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.page_dir = Some(dir.path().to_owned());
    let gw = usher_testkit::stack::gateway_with(cfg).await?;

    let r = get(&format!("{}/q/brand", gw.url()), Some("ja-JP")).await?;
    assert_eq!(
        header(&r, "content-language"),
        "ja",
        "any language the template has"
    );
    let html = r.text().await?;
    assert!(
        html.starts_with("<html lang=\"ja\"><title>行列</title>"),
        "{html}"
    );
    assert!(html.contains("\"queue\":\"brand\""), "{html}");
    let css = get(&format!("{}/q/assets/brand.css", gw.url()), None).await?;
    assert_eq!(header(&css, "content-type"), "text/css; charset=utf-8");
    assert_eq!(css.text().await?, "h1{color:#000}");
    let builtin = get(&format!("{}/q/assets/page.js", gw.url()), None).await?;
    assert_eq!(
        builtin.status(),
        404,
        "the built-in page is replaced, not merged"
    );

    // A directory that cannot be a page stops the gateway at startup, naming the file.
    std::fs::remove_file(dir.path().join("i18n/en.json"))?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.page_dir = Some(dir.path().to_owned());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let e = usher_gateway::run(cfg, listener, std::future::pending())
        .await
        .expect_err("no English strings");
    assert!(e.to_string().contains("i18n/en.json"), "{e}");
    Ok(())
}
