//! The waiting-room page on an invite-only queue (docs/sale-day.md, "Invitations"), in
//! Chromium driven by Playwright (`crates/usher-testkit/browser/invitations_page.py`), against
//! real processes: the page takes the invitation from the link's fragment, exchanges it for a
//! join code in a header (never in a URL) and joins; a second browser of the same account
//! takes the place over; a visit without an invitation, or with an expired one, is told so.

use std::time::Duration;

use usher_testkit::tools::{browser_venv, drive, PageStack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_joins_with_the_invitation_in_its_link() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let started = std::time::SystemTime::now();
    let venv = browser_venv()?;
    let stack = PageStack::start().await?;
    let driver =
        usher_testkit::tools::spawn_driver(&venv, "invitations_page.py", &stack.driver_env())?;
    let passed = drive(driver, &mut (), Duration::from_secs(120)).await?;
    assert_eq!(
        passed,
        [
            "an invitation in the link joins; it leaves neither the address bar nor a URL",
            "a second browser of the same account takes the place over",
            "no invitation on an invite-only queue: the page says so",
            "an expired invitation: the page says so",
            "the dashboard shows the queue's invitation setting",
        ]
    );
    // The gateway never wrote the invitation to its log.
    assert!(
        !stack.gateway.log_text().contains("eyJ"),
        "no JWT in the gateway's log"
    );
    for shot in ["invitation-waiting", "invitation-required"] {
        assert!(
            usher_testkit::tools::screenshot_since(shot, started),
            "screenshot {shot}.png of this run"
        );
    }
    Ok(())
}

/// The code blocks of docs/sale-day.md's "Invitations" section: (the Python recipe, the shell
/// example).
fn docs_blocks() -> anyhow::Result<(String, String)> {
    let doc = std::fs::read_to_string(usher_testkit::tools::workspace().join("docs/sale-day.md"))?;
    let start = doc
        .find("\n## Invitations\n")
        .ok_or_else(|| anyhow::anyhow!("no Invitations section"))?;
    let section = &doc[start + 1..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    let block = |lang: &str| -> anyhow::Result<String> {
        let open = format!("```{lang}\n");
        let from = section
            .find(&open)
            .ok_or_else(|| anyhow::anyhow!("no {lang} block"))?
            + open.len();
        let len = section[from..]
            .find("```")
            .ok_or_else(|| anyhow::anyhow!("an unclosed {lang} block"))?;
        Ok(section[from..from + len].to_owned())
    };
    Ok((block("python")?, block("sh")?))
}

/// The section's recipe works when pasted: its Python makes a key and signs an invitation
/// (PyJWT, as the docs say), its shell registers the key and joins with a join code, and the
/// stream's first event is `waiting` at position 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_recipe_works_when_pasted() -> anyhow::Result<()> {
    let venv = browser_venv()?;
    let (python, shell) = docs_blocks()?;
    let stack = usher_testkit::Stack::start(Default::default()).await?;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("shop_invite.py"), python)?;
    let path = format!(
        "{}:{}",
        venv.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(&shell)
        .current_dir(dir.path())
        .env("PATH", path)
        .env("DISPATCHER", stack.dispatcher.url())
        .env("GATEWAY", stack.gateway_url(0))
        .env("USHER_ADMIN_TOKEN", usher_testkit::config::ADMIN_TOKEN)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let seen = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains(r#""invitations":"required""#), "{seen}");
    assert!(stdout.contains(r#""expires_in":60"#), "{seen}");
    assert!(stdout.contains("#invitation=eyJ"), "the link: {seen}");
    assert!(stdout.contains("event: waiting"), "{seen}");
    assert!(stdout.contains(r#""position":1"#), "{seen}");
    assert!(!stdout.contains("invitation_refused"), "{seen}");
    let queue = stack.queue("presale").await?;
    assert_eq!(
        queue["waiting"].as_u64().unwrap_or(0) + queue["admitted_total"].as_u64().unwrap_or(0),
        1,
        "one place: {queue}"
    );
    Ok(())
}
