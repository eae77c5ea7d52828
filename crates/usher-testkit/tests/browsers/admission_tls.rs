//! `usher-admission` over `https://`: the JWKS and the session API behind TLS (the real nginx
//! terminating it with a certificate of a CA made for the test), with rustls.

use usher_admission::{Admission, Error, SessionStatus, VerifyError};
use usher_testkit::line::{admitted, T};
use usher_testkit::nginx::Nginx;
use usher_testkit::procs::free_addr;
use usher_testkit::stack::{Stack, StackOptions};

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &std::path::Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A throw-away CA and a server certificate it signed for 127.0.0.1, in `dir`:
/// `ca.pem`, `server.pem`, `server.key`.
fn test_ca(dir: &std::path::Path) -> anyhow::Result<()> {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let ca = ["req", "-x509", "-days", "1", "-subj", "/CN=usher test CA"];
    let ca_out = ["-keyout", "ca.key", "-out", "ca.pem"];
    openssl(dir, &[&ca[..], &ec[..], &ca_out[..]].concat())?;
    let csr = [
        "req",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    openssl(dir, &[&csr[..], &ec[..]].concat())?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_sessions_are_fetched_over_https() -> anyhow::Result<()> {
    let stack = Stack::start(StackOptions::default()).await?;
    stack.create_queue("show", 50.0).await?;
    let (_, token) = admitted(&stack, "show").await?;
    // The real nginx terminates TLS in front of the dispatcher, with a certificate of a CA
    // made for this test.
    let dir = tempfile::tempdir()?;
    test_ca(dir.path())?;
    let listen = free_addr()?;
    let d = dir.path().display();
    let conf = format!(
        "worker_processes 1;\nevents {{}}\nhttp {{ access_log off; server {{\n\
         listen {listen} ssl;\n\
         ssl_certificate {d}/server.pem; ssl_certificate_key {d}/server.key;\n\
         location / {{ proxy_pass {}; }}\n}} }}\n",
        stack.dispatcher.url()
    );
    let tls = Nginx::start(&conf, listen).await?;
    let base = format!("https://{listen}");

    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.path().join("ca.pem"))?)?;
    let trusting = reqwest::Client::builder()
        .add_root_certificate(ca)
        .timeout(T)
        .build()?;
    let a = Admission::builder(&base)
        .audiences(["show"])
        .http_client(trusting)
        .build()?;
    let c = a
        .verify(&token)
        .await
        .map_err(|e| anyhow::anyhow!("{e}: {}", tls.log()))?;
    assert_eq!(c.aud, "show");
    assert!(matches!(a.check(&token).await?, SessionStatus::Active(_)));

    // The certificate is really checked: without the test CA, the keys cannot be fetched.
    let untrusting = Admission::builder(&base).audiences(["show"]).build()?;
    let e = untrusting.verify(&token).await.err();
    assert!(e.as_ref().is_some_and(VerifyError::is_unavailable), "{e:?}");
    assert!(matches!(
        untrusting.check(&token).await,
        Err(Error::Unreachable(_))
    ));
    Ok(())
}
