//! The documentation, checked against the code:
//!
//! - `docs/configuration.md` is exactly what the binaries' clap definitions render
//!   (`make docs`, which runs `config_reference` with `USHER_BLESS=1`, writes it again);
//! - every relative link and anchor of every Markdown file in the repository resolves;
//! - the README's tour, pasted into bash, works against a real stack set up as `make run` sets
//!   it up;
//! - every other `curl` example of the docs asks for a route and method the servers' OpenAPI
//!   documents describe, with the credentials the route needs, and with a JSON body that says
//!   so (`content-type: application/json`) and validates against the route's request schema.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use usher_testkit::docs::{
    check_curl, configuration_reference, curl_examples, link_problems, Checked, CurlExample,
};
use usher_testkit::openapi::{document, validate_requests};
use usher_testkit::procs::Proc;
use usher_testkit::tools::workspace;
use usher_testkit::RedisServer;

const REFERENCE: &str = "docs/configuration.md";

#[test]
fn config_reference_is_current() -> anyhow::Result<()> {
    let path = workspace().join(REFERENCE);
    let generated = configuration_reference();
    if std::env::var_os("USHER_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &generated)?;
        return Ok(());
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{REFERENCE} is stale: the binaries' flags changed. Regenerate it with `make docs` \
         (the config_reference test with USHER_BLESS=1) and commit it"
    );
    Ok(())
}

/// The Markdown files of the repository: tracked, or new and not ignored.
fn markdown_files() -> anyhow::Result<Vec<PathBuf>> {
    let out = std::process::Command::new("git")
        .args([
            "ls-files",
            "--cached",
            "--others",
            "--exclude-standard",
            "*.md",
        ])
        .current_dir(workspace())
        .output()
        .context("git ls-files")?;
    anyhow::ensure!(out.status.success(), "git ls-files failed");
    Ok(String::from_utf8(out.stdout)?
        .lines()
        .map(PathBuf::from)
        .filter(|p| workspace().join(p).exists())
        .collect())
}

#[test]
fn every_relative_link_and_anchor_resolves() -> anyhow::Result<()> {
    let files = markdown_files()?;
    assert!(files.iter().any(|f| f == &PathBuf::from("README.md")));
    let problems = link_problems(&workspace(), &files);
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
    Ok(())
}

/// The tour: the first `sh` block under the README's heading "A 60-second tour".
fn readme_tour() -> anyhow::Result<String> {
    let readme = std::fs::read_to_string(workspace().join("README.md"))?;
    let start = readme
        .find("## A 60-second tour")
        .context("README.md has no heading \"A 60-second tour\"")?;
    let rest = &readme[start..];
    let open = rest.find("```sh\n").context("the tour has no sh block")? + "```sh\n".len();
    let len = rest[open..]
        .find("\n```")
        .context("the tour's block does not end")?;
    Ok(rest[open..open + len].to_owned())
}

/// The line of the tour that reads what `make run` wrote (scripts/run-local.sh).
const RUN_ENV_LINE: &str = "source target/usher-run.env";

#[tokio::test]
async fn the_readme_tour_works_when_pasted() -> anyhow::Result<()> {
    let tour = readme_tour()?;
    assert!(
        tour.lines()
            .next()
            .is_some_and(|l| l.starts_with(RUN_ENV_LINE)),
        "the tour must begin with `{RUN_ENV_LINE}` (what make run writes):\n{tour}"
    );
    // The stack `make run` starts: development mode (the admin token shared through Redis),
    // two gateways, the booking demo, and the demo queue as scripts/run-local.sh creates it.
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_DEV", "1".into()),
            ("USHER_TICK_MS", "1000".into()),
        ],
    )
    .await?;
    let gateway = Proc::start("usher-gateway", &[("USHER_REDIS_URL", redis.url())]).await?;
    let booking = usher_testkit::tools::booking_demo(&dispatcher).await?;
    let mut conn = redis::Client::open(redis.url())?
        .get_multiplexed_async_connection()
        .await?;
    let token: Option<String> = redis::cmd("GET")
        .arg(usher_core::keys::DEV_ADMIN_TOKEN)
        .query_async(&mut conn)
        .await?;
    let token = token.context("no development admin token in Redis")?;
    let created = reqwest::Client::new()
        .put(format!("{}/admin/queues/demo", dispatcher.url()))
        .bearer_auth(&token)
        .json(&run_local_demo_queue(&booking.url()))
        .send()
        .await?;
    anyhow::ensure!(created.status() == 201, "demo queue: {}", created.status());

    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("usher-run.env");
    std::fs::write(
        &env_file,
        run_env(&dispatcher.url(), &gateway.url(), &booking.url(), &token),
    )?;
    let script = tour.replacen(RUN_ENV_LINE, &format!("source {}", env_file.display()), 1);
    std::fs::create_dir(dir.path().join("target"))?;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new("bash")
            .args(["-e", "-o", "pipefail", "-c", &script])
            .current_dir(dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .context("the tour did not finish within 60 s")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let transcript = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the tour failed:\n{transcript}");
    eprintln!("the tour's output:\n{transcript}");
    for expected in [
        "\"rate_reason\"",
        "event: waiting",
        "event: admitted",
        "\"booking_id\"",
        "\"admit_per_second\":5",
    ] {
        assert!(
            stdout.contains(expected),
            "the tour's output lacks {expected}:\n{transcript}"
        );
    }
    // The second booking with the same token is refused: the first consumed the session.
    assert!(
        stdout.contains("403"),
        "a second booking was not refused:\n{transcript}"
    );
    Ok(())
}

/// The demo queue of scripts/run-local.sh: keep the two alike.
fn run_local_demo_queue(booking: &str) -> Value {
    json!({
        "admit_per_second": 2, "session_ttl_seconds": 600, "passthrough": false, "open": true,
        "title": "usher demo", "booking_url": format!("{booking}/entry"),
    })
}

/// What scripts/run-local.sh writes to target/usher-run.env: keep the two alike.
fn run_env(dispatcher: &str, gateway: &str, booking: &str, token: &str) -> String {
    format!(
        "export DISPATCHER={dispatcher}\nexport GATEWAY={gateway}\nexport BOOKING={booking}\n\
         export USHER_ADMIN_TOKEN={token}\n"
    )
}

#[tokio::test]
async fn every_curl_example_matches_the_served_api() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start("usher-dispatcher", &[("USHER_REDIS_URL", redis.url())]).await?;
    let gateway = Proc::start("usher-gateway", &[("USHER_REDIS_URL", redis.url())]).await?;
    let documents = json!({
        "dispatcher": document(&dispatcher.url()).await?,
        "gateway": document(&gateway.url()).await?,
    });

    let mut examples: Vec<CurlExample> = Vec::new();
    for file in markdown_files()? {
        let text = std::fs::read_to_string(workspace().join(&file))?;
        examples.extend(curl_examples(&file.display().to_string(), &text));
    }
    assert!(
        examples.len() > 20,
        "too few curl examples found: {}",
        examples.len()
    );
    let mut problems = Vec::new();
    let mut requests = Vec::new();
    let mut checked = 0;
    for ex in &examples {
        match check_curl(ex, &documents) {
            Ok(Checked::NotUsher) => {}
            Ok(Checked::Fine(body)) => {
                checked += 1;
                requests.extend(body);
            }
            Err(p) => problems.extend(p),
        }
    }
    assert!(
        problems.is_empty(),
        "curl examples that would not work when pasted:\n{}",
        problems.join("\n")
    );
    eprintln!(
        "checked {checked} curl examples of {} found",
        examples.len()
    );
    validate_requests(documents, requests).await
}

/// The checker itself: examples that fail when pasted are caught, and one that works is not.
#[tokio::test]
async fn the_curl_checker_refuses_what_fails_when_pasted() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start("usher-dispatcher", &[("USHER_REDIS_URL", redis.url())]).await?;
    let documents = json!({"dispatcher": document(&dispatcher.url()).await?, "gateway": {}});
    let markdown = r#"
```sh
curl -X PUT "$DISPATCHER/admin/queues/a" -H "Authorization: Bearer $USHER_ADMIN_TOKEN" -d '{"paused": true}'
curl -X PUT "$DISPATCHER/admin/queues/a" -H 'content-type: application/json' -d '{"paused": true}'
curl -X PUT "$DISPATCHER/admin/queues/a" -H "Authorization: Bearer $NOT_SET" \
  -H 'content-type: application/json' -d '{"paused": true}'
curl -X PATCH "$DISPATCHER/admin/queues/a" -H "Authorization: Bearer $USHER_ADMIN_TOKEN"
curl "$DISPATCHER/admin/nothing" -H "Authorization: Bearer $USHER_ADMIN_TOKEN"
curl -X PUT "$DISPATCHER/admin/queues/a" -H "Authorization: Bearer $USHER_ADMIN_TOKEN" \
  -H 'content-type: application/json' -d '{"paused": tru}'
curl -X PUT "$DISPATCHER/admin/queues/a" -H "Authorization: Bearer $USHER_ADMIN_TOKEN" \
  -H 'content-type: application/json' -d '{"paused": true}'
```
"#;
    let examples = curl_examples("test.md", markdown);
    assert_eq!(examples.len(), 7, "{examples:?}");
    let results: Vec<_> = examples.iter().map(|e| check_curl(e, &documents)).collect();
    let why = |i: usize| match &results[i] {
        Err(p) => p.join("; "),
        Ok(_) => String::new(),
    };
    assert!(why(0).contains("content-type"), "{}", why(0));
    assert!(why(1).contains("Authorization"), "{}", why(1));
    assert!(why(2).contains("NOT_SET"), "{}", why(2));
    assert!(why(3).contains("PATCH"), "{}", why(3));
    assert!(why(4).contains("no path"), "{}", why(4));
    assert!(why(5).contains("not JSON"), "{}", why(5));
    assert!(
        matches!(&results[6], Ok(Checked::Fine(Some(_)))),
        "{:?}",
        why(6)
    );
    // The validator takes the right body and refuses one the route's schema refuses.
    let only = json!({"dispatcher": documents["dispatcher"]});
    let body = |paused: Value| {
        json!({"document": "dispatcher", "path": "/admin/queues/{queue}", "method": "put",
            "at": "test.md", "body": {"paused": paused}})
    };
    validate_requests(only.clone(), vec![body(json!(true))]).await?;
    let refused = validate_requests(only, vec![body(json!("yes"))]).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("paused")),
        "{refused:?}"
    );
    Ok(())
}

/// The link checker itself: GitHub's anchors, and a broken file or anchor is reported.
#[test]
fn the_link_checker_reports_broken_links_and_anchors() -> anyhow::Result<()> {
    use usher_testkit::docs::{anchor, anchors};
    assert_eq!(anchor("Capacity: `max_active`"), "capacity-max_active");
    assert_eq!(
        anchor("Scheduled sale and the draw"),
        "scheduled-sale-and-the-draw"
    );
    assert_eq!(
        anchor("Rust: `crates/usher-admission`"),
        "rust-cratesusher-admission"
    );
    let offered = anchors("# A\n## Notes\n```sh\n# not a heading\n```\n## Notes\n");
    assert!(offered.contains("notes") && offered.contains("notes-1"));
    assert!(!offered.contains("not-a-heading"));

    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("docs"))?;
    std::fs::write(dir.path().join("docs/b.md"), "# B\n## Part two\n")?;
    std::fs::write(
        dir.path().join("a.md"),
        "[ok](docs/b.md#part-two) [gone](docs/c.md) [bad](docs/b.md#part-three) \
         [self](#a) [web](https://example.com/x#y) `[code](nowhere.md)`\n# A\n",
    )?;
    let problems = link_problems(dir.path(), &[PathBuf::from("a.md")]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("docs/c.md does not exist"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("no anchor #part-three"),
        "{problems:?}"
    );
    Ok(())
}
