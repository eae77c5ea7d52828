//! Log output of the real binaries when it is not a terminal (a file, a collector): text
//! without ANSI colour codes, and JSON lines with `--log-format json`.

use usher_testkit::procs::Proc;
use usher_testkit::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_carry_no_colour_codes() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    for bin in ["usher-gateway", "usher-dispatcher"] {
        // Proc sends stdout and stderr to a file.
        let p = Proc::start(bin, &[("USHER_REDIS_URL", redis.url())]).await?;
        let text = p.log_tail();
        assert!(
            text.contains("INFO"),
            "{bin} logged its start in text: {text}"
        );
        assert!(
            !text.contains("\x1b["),
            "{bin} wrote ANSI codes to a file: {text:?}"
        );

        let p = Proc::start(
            bin,
            &[
                ("USHER_REDIS_URL", redis.url()),
                ("USHER_LOG_FORMAT", "json".to_owned()),
            ],
        )
        .await?;
        let text = p.log_tail();
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert!(!lines.is_empty(), "{bin} logged in json");
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| anyhow::anyhow!("{bin}: not a JSON line ({e}): {line}"))?;
            assert!(v["level"].is_string(), "{bin}: a level in {line}");
            assert!(!line.contains("\x1b["), "{bin}: ANSI codes in {line:?}");
        }
    }
    Ok(())
}
