//! Redis over TLS, as a managed service offers it: the real binaries reach a real
//! `redis-server --tls-port` through `rediss://`, trusting a private CA generated in the test
//! (`USHER_REDIS_CA_FILE`), and show a client certificate when the server requires one
//! (`USHER_REDIS_CLIENT_CERT`/`USHER_REDIS_CLIENT_KEY`). Only the TLS port is given to usher,
//! so a plain-text connection could not have worked.

use usher_testkit::line::join_and_admit;
use usher_testkit::procs::Proc;
use usher_testkit::tls::TestPki;
use usher_testkit::RedisServer;

fn path(p: std::path::PathBuf) -> String {
    p.to_string_lossy().into_owned()
}

/// Starts the dispatcher and a gateway with `env`; runs join → admitted → verified token.
async fn flow(env: &[(&str, String)], queue: &str) -> anyhow::Result<()> {
    let dispatcher = Proc::start("usher-dispatcher", env).await?;
    let gateway = Proc::start("usher-gateway", env).await?;
    let http = usher_testkit::config::admin_client();
    let admitted = join_and_admit(&http, &dispatcher.url(), &gateway.url(), queue).await?;
    assert_eq!(admitted.claims["aud"], queue);
    Ok(())
}

/// Starting `name` with `env` fails, and its log says why in words about TLS.
async fn refused(name: &str, env: &[(&str, String)]) -> anyhow::Result<String> {
    let err = match Proc::start(name, env).await {
        Ok(_) => anyhow::bail!("{name} started without a trusted TLS connection"),
        Err(e) => format!("{e:#}").to_lowercase(),
    };
    Ok(err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_runs_the_whole_flow() -> anyhow::Result<()> {
    let pki = TestPki::generate()?;
    let redis = RedisServer::start_tls(&pki, false)?;
    let env = [
        ("USHER_REDIS_URL", redis.tls_url()),
        ("USHER_REDIS_CA_FILE", path(pki.ca())),
    ];
    flow(&env, "tls-show").await?;

    // Without the private CA the server's certificate is not trusted: a clean startup error,
    // not a silent plain-text fallback.
    let err = refused("usher-dispatcher", &[("USHER_REDIS_URL", redis.tls_url())]).await?;
    assert!(
        err.contains("certificate") || err.contains("issuer"),
        "names the untrusted certificate: {err}"
    );
    // A CA file with a plain redis:// URL is a configuration mistake, said at startup.
    let err = refused(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_REDIS_CA_FILE", path(pki.ca())),
        ],
    )
    .await?;
    assert!(err.contains("rediss://"), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_works_with_the_client_certificate_and_fails_cleanly_without(
) -> anyhow::Result<()> {
    let pki = TestPki::generate()?;
    let redis = RedisServer::start_tls(&pki, true)?;
    let trust = [
        ("USHER_REDIS_URL", redis.tls_url()),
        ("USHER_REDIS_CA_FILE", path(pki.ca())),
    ];
    let mut with_cert = trust.to_vec();
    with_cert.push(("USHER_REDIS_CLIENT_CERT", path(pki.client_cert())));
    with_cert.push(("USHER_REDIS_CLIENT_KEY", path(pki.client_key())));
    flow(&with_cert, "mtls-show").await?;

    for name in ["usher-dispatcher", "usher-gateway"] {
        let err = refused(name, &trust).await?;
        // The server's alert (`CertificateRequired`), after the component's name.
        assert!(
            err.contains("redis") && err.contains("certificate"),
            "{name} says why: {err}"
        );
    }
    // A certificate without its key is refused by the flags themselves.
    let mut half = trust.to_vec();
    half.push(("USHER_REDIS_CLIENT_CERT", path(pki.client_cert())));
    let err = refused("usher-dispatcher", &half).await?;
    assert!(err.contains("redis-client-key"), "{err}");
    // A client key that does not belong to the certificate fails at startup too.
    let mut wrong = trust.to_vec();
    wrong.push(("USHER_REDIS_CLIENT_CERT", path(pki.client_cert())));
    wrong.push(("USHER_REDIS_CLIENT_KEY", path(pki.server_key())));
    refused("usher-gateway", &wrong).await?;
    Ok(())
}

/// Both binaries document every Redis flag in `--help`, under one heading.
#[test]
fn help_documents_the_redis_flags() -> anyhow::Result<()> {
    for name in ["usher-dispatcher", "usher-gateway"] {
        let out = std::process::Command::new(usher_testkit::procs::binary(name)?)
            .arg("--help")
            .output()?;
        assert!(out.status.success(), "{name} --help exits 0");
        let help = String::from_utf8_lossy(&out.stdout);
        for var in [
            "Redis:",
            "USHER_REDIS_URL",
            "USHER_REDIS_MODE",
            "standalone",
            "cluster",
            "USHER_REDIS_CA_FILE",
            "USHER_REDIS_CLIENT_CERT",
            "USHER_REDIS_CLIENT_KEY",
        ] {
            assert!(help.contains(var), "{name} --help lacks {var}:\n{help}");
        }
    }
    Ok(())
}
