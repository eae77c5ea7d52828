//! Places and entry tokens bound to the browser's key (`bind: "browser_key"`), and what the
//! page keeps after admission (issue 23, finding 10), on real processes:
//!
//! * a client that is not a browser makes its own key and ES256 proofs with PyJWT
//!   (`crates/usher-testkit/browser/bind_client.py`): joins and resumes need a fresh proof by
//!   the place's key, status polls too, and the entry token carries the key's thumbprint;
//! * the waiting-room page in Chromium (`bind_page.py`): a ticket copied into a second browser
//!   cannot resume, the same browser after a reload can, and after admission and the booking
//!   POST nothing in `localStorage` can replay the entry (with and without `bind`).

use std::time::Duration;

use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_testkit::redis_server::cli;
use usher_testkit::tools::{browser_venv, drive, spawn_driver, PageStack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_proves_its_key_with_pyjwt() -> anyhow::Result<()> {
    let venv = browser_venv()?;
    let s = PageStack::start().await?;
    let mut env = s.driver_env();
    // To watch the pruning of its queue's keys: `redis-cli` and the key (only usher-core
    // names keys).
    env.push((
        "USHER_TEST_REDIS_CLI",
        format!("{} -h 127.0.0.1 -p {}", cli(), s.redis.port()),
    ));
    env.push((
        "USHER_TEST_BOUND_KEY",
        QueueKeys::new(&QueueId::new("bound-client")?).bound,
    ));
    let driver = spawn_driver(&venv, "bind_client.py", &env)?;
    let passed = drive(driver, &mut (), Duration::from_secs(120)).await?;
    assert_eq!(
        passed,
        [
            "a join without a proof takes no place",
            "a join with a proof takes a place bound to the key",
            "a resume needs a fresh proof by the same key",
            "the status route answers only with a proof by the key",
            "a copied ticket cannot make its owner leave",
            "admitted: the token carries the key's thumbprint, shown only with a proof",
            "the booking site takes the token only with a proof by the key, once; \
             its ended place's key is forgotten",
            "a scheduled sale: the drawn place's token carries the key's thumbprint",
            "the docs' client example joins as printed",
        ],
        "every scenario ran and passed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_binds_its_place_and_forgets_the_ticket_in_chromium() -> anyhow::Result<()> {
    let _chromium = usher_testkit::solo::chromium_slot().await;
    let venv = browser_venv()?;
    let s = PageStack::start().await?;
    let env = s.driver_env();
    let driver = spawn_driver(&venv, "bind_page.py", &env)?;
    let passed = drive(driver, &mut (), Duration::from_secs(240)).await?;
    assert_eq!(
        passed,
        [
            "a bind queue: the page joins with a key it keeps in IndexedDB",
            "a ticket copied into a second browser cannot resume",
            "the same browser after a reload resumes its place",
            "bind: admitted, the form carries a proof, the page forgets the ticket",
            "no bind: after admission and the booking POST nothing is left to replay",
        ],
        "every scenario ran and passed"
    );
    Ok(())
}
