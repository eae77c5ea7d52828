//! `usher-rehearse` run as a real process on a real redis-server: a constant line whose
//! answer is worked out by hand, bad input refused with a message and a non-zero exit, and
//! the worked example of docs/rehearsal.md reproduced exactly (its plots included).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{ensure, Context};
use serde_json::Value;
use usher_testkit::RedisServer;

/// The binary with `args`, run in the workspace root, none of its variables inherited.
fn rehearse(args: &[&str]) -> anyhow::Result<Output> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-rehearse"));
    cmd.args(args).current_dir(workspace());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("USHER_REHEARSE_") {
            cmd.env_remove(k);
        }
    }
    cmd.output().context("cannot run usher-rehearse")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn file(text: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let f = tempfile::NamedTempFile::new()?;
    std::fs::write(f.path(), text)?;
    Ok(f)
}

fn utf8(p: &Path) -> anyhow::Result<&str> {
    p.to_str().context("a UTF-8 temporary path")
}

/// Tags balance: every element opened is closed, in order (HTML's void elements aside).
/// Enough to catch a truncated or mis-nested document; attribute values never hold `<`/`>`
/// here (text is escaped).
fn well_formed(doc: &str) -> Result<(), String> {
    let mut open: Vec<&str> = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find('<') {
        let end = rest[i..].find('>').ok_or("a tag is not closed")? + i;
        let tag = &rest[i + 1..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') || tag.starts_with('?') || tag.ends_with('/') {
            continue;
        }
        let name = tag
            .trim_start_matches('/')
            .split(|c: char| c.is_whitespace())
            .next()
            .unwrap_or("");
        if ["meta", "br", "hr", "img", "link", "input"].contains(&name) {
            continue;
        }
        if tag.starts_with('/') {
            match open.pop() {
                Some(o) if o == name => {}
                other => return Err(format!("</{name}> closes {other:?}")),
            }
        } else {
            open.push(name);
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("left open: {open:?}"))
    }
}

/// 200 people, 10 joining at the start of each of 20 seconds; 5 admitted a second, one
/// tick a second, the first tick at second 0 after its joins. Place i (0-based, in join
/// order) joins at second ⌊i/10⌋ and is admitted at tick ⌊i/5⌋: the line empties at
/// ⌊199/5⌋ = 39 s, and the median wait is the 100th smallest of ⌊i/5⌋ − ⌊i/10⌋.
#[test]
fn a_constant_line_has_the_answer_worked_out_by_hand() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let settings = file(r#"{"admit_per_second": 5}"#)?;
    let out = tempfile::tempdir()?;
    let run = rehearse(&[
        "--redis",
        &redis.url(),
        "--settings",
        utf8(settings.path())?,
        "--crowd",
        "200",
        "--duration",
        "20",
        "--booking-seconds",
        "5",
        "--out",
        utf8(out.path())?,
    ])?;
    ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(out.path().join("rehearsal.json"))?)?;
    let s = &report["summary"];
    // By hand: person i arrives at i/10 s (a second's 10 joins spread evenly across it).
    // The tick at second k has admitted 5(k+1) people in all (the rate counts from the
    // first admission), but only those present: i is admitted at tick max(floor(i/5),
    // ceil(i/10)), and waits that less i/10 s.
    let mut waits_ms: Vec<u64> = (0..200u64)
        .map(|i| (i / 5).max(i.div_ceil(10)) * 1000 - i * 100)
        .collect();
    waits_ms.sort_unstable();
    let (median, max) = (waits_ms[99] as f64 / 1000.0, waits_ms[199] as f64 / 1000.0);
    assert_eq!((median, max), (9.5, 19.5), "the arithmetic above");
    assert_eq!(s["joined"], 200);
    assert_eq!(s["admitted"], 200);
    assert_eq!(s["still_waiting"], 0);
    assert_eq!(s["booked"], 200, "everyone arrives and books: no no-shows");
    assert_eq!(s["line_empty_at_s"].as_f64(), Some(39.0));
    assert_eq!(s["wait_s"]["p50"].as_f64(), Some(median));
    assert_eq!(s["wait_s"]["max"].as_f64(), Some(max));
    // Tick 0 finds one person (the rest of second 0 arrive after it), tick 1 catches up to
    // 10 in all: 9 in second 1, then 5 a second.
    assert_eq!(s["peak_admitted_per_second"], 9);
    // The ETA shown at join (position ÷ 5 a second) is within a tick of the actual wait.
    let eta = s["eta_error_s"]["max"].as_f64().context("an ETA error")?;
    assert!(eta.abs() <= 1.0, "ETA error {eta}");
    // Each arrival minute, here one, has its percentiles; Redis was sampled.
    assert_eq!(report["by_arrival_minute"][0]["joined"], 200);
    assert!(s["peak_redis_memory_bytes"].as_u64().is_some_and(|m| m > 0));
    assert!(s["redis_commands"].as_u64().is_some_and(|c| c > 200));
    let seconds = report["seconds"].as_array().context("seconds")?;
    // Each second is sampled at its tick: second 0 has person 0; second 1 the next ten.
    let per_second: Vec<(u64, u64)> = seconds[..3]
        .iter()
        .map(|x| {
            (
                x["joined"].as_u64().unwrap_or(0),
                x["admitted"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(per_second, [(1, 1), (10, 9), (10, 5)]);
    for name in ["waits.svg", "timeline.svg", "index.html"] {
        let text = std::fs::read_to_string(out.path().join(name))?;
        well_formed(&text).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        ensure!(text.contains("<svg"), "{name} has no SVG");
    }
    let page = std::fs::read_to_string(out.path().join("index.html"))?;
    ensure!(
        page.contains("<td>39.0 s</td>"),
        "the page shows when the line empties"
    );
    // The same seed and inputs, the same rehearsal (wall time and Redis' counters aside).
    let again = tempfile::tempdir()?;
    let redis2 = RedisServer::start()?;
    let args2 = [
        "--redis",
        &redis2.url(),
        "--settings",
        utf8(settings.path())?,
        "--crowd",
        "200",
        "--duration",
        "20",
        "--booking-seconds",
        "5",
        "--out",
        utf8(again.path())?,
    ];
    ensure!(rehearse(&args2)?.status.success());
    for name in ["waits.svg", "timeline.svg"] {
        assert_eq!(
            std::fs::read_to_string(out.path().join(name))?,
            std::fs::read_to_string(again.path().join(name))?,
            "{name} differs between two runs of one seed"
        );
    }
    Ok(())
}

/// A scheduled sale (`opens_at` 20 s after second 0): 100 people join its pre-queue over
/// 10 s, the dispatcher's draw runs at the opening on the virtual clock, each entrant resumes
/// its drawn place, and 10 a second are admitted from then: the line empties by the tick of
/// second 29, and nobody waits less than from second 9 to the opening.
#[test]
fn a_scheduled_sale_is_drawn_and_admitted_on_the_virtual_clock() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let settings = file(r#"{"admit_per_second": 10, "opens_at": "2030-01-01T00:00:20Z"}"#)?;
    let out = tempfile::tempdir()?;
    let run = rehearse(&[
        "--redis",
        &redis.url(),
        "--settings",
        utf8(settings.path())?,
        "--crowd",
        "100",
        "--duration",
        "10",
        "--booking-seconds",
        "1",
        "--start",
        "2030-01-01T00:00:00Z",
        "--out",
        utf8(out.path())?,
    ])?;
    ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(out.path().join("rehearsal.json"))?)?;
    let s = &report["summary"];
    assert_eq!(s["admitted"], 100, "{s}");
    assert_eq!(s["admitted_without_a_join"], 0, "{s}");
    // 10 a second from the opening: empty by second 29 (the bucket may lend the first tick
    // after the draw a burst, so it can be sooner), never before the opening.
    let empty = s["line_empty_at_s"].as_f64().context("the line emptied")?;
    assert!((20.0..=29.0).contains(&empty), "{s}");
    let shortest = report["by_arrival_minute"][0]["wait_s"]["p50"]
        .as_f64()
        .context("a median")?;
    assert!(shortest >= 11.0, "{s}");
    Ok(())
}

#[test]
fn the_well_formedness_check_catches_broken_documents() {
    assert!(well_formed("<svg><g><text>a</text></g></svg>").is_ok());
    assert!(well_formed("<svg><g></svg>").is_err());
    assert!(well_formed("<svg><text>").is_err());
}

/// Bad inputs stop the binary before it touches Redis (the URL here answers nothing), with a
/// message naming what is wrong and a non-zero exit.
#[test]
fn bad_input_is_refused_with_what_is_wrong() -> anyhow::Result<()> {
    let good = file(r#"{"admit_per_second": 5}"#)?;
    let out = tempfile::tempdir()?;
    let refused = |extra: &[&str], expected: &str| -> anyhow::Result<()> {
        let mut args = vec!["--redis", "redis://127.0.0.1:1", "--out", utf8(out.path())?];
        args.extend_from_slice(extra);
        let run = rehearse(&args)?;
        let err = String::from_utf8_lossy(&run.stderr);
        ensure!(!run.status.success(), "{extra:?} was accepted");
        ensure!(
            err.contains(expected),
            "{extra:?}: {err:?} does not say {expected:?}"
        );
        Ok(())
    };
    let g = utf8(good.path())?;
    let bad_csv = file("second,joins\n0,10\n1;5\n")?;
    refused(
        &["--settings", g, "--arrivals", utf8(bad_csv.path())?],
        "line 3: expected `second,joins`",
    )?;
    let backwards = file("5,1\n3,2\n")?;
    refused(
        &["--settings", g, "--arrivals", utf8(backwards.path())?],
        "seconds must increase",
    )?;
    refused(
        &["--settings", g, "--crowd", "10", "--shape", "wave"],
        "invalid value 'wave' for '--shape",
    )?;
    refused(&["--settings", g], "--crowd")?;
    refused(
        &["--settings", "/nonexistent/s.json", "--crowd", "10"],
        "cannot read --settings /nonexistent/s.json",
    )?;
    let zero = file(r#"{"admit_per_second": 0}"#)?;
    refused(
        &["--settings", utf8(zero.path())?, "--crowd", "10"],
        "admit_per_second must be > 0",
    )?;
    let unknown = file(r#"{"admit_per_secnd": 5}"#)?;
    refused(
        &["--settings", utf8(unknown.path())?, "--crowd", "10"],
        "admit_per_secnd",
    )?;
    let not_json = file("admit_per_second: 5")?;
    refused(
        &["--settings", utf8(not_json.path())?, "--crowd", "10"],
        "not a JSON object",
    )?;
    let adaptive = file(
        r#"{"adaptive": {"backend": "shop", "load_low": 0.5, "load_high": 0.9, "min_per_second": 1, "max_per_second": 50, "stale_after_seconds": 30}}"#,
    )?;
    refused(
        &["--settings", utf8(adaptive.path())?, "--crowd", "10"],
        "--backend-capacity",
    )?;
    refused(
        &["--settings", g, "--crowd", "10", "--no-show", "1.5"],
        "--no-show must be a share from 0 to 1",
    )?;
    refused(
        &["--settings", g, "--crowd", "10", "--booking-seconds", "3-1"],
        "--booking-seconds",
    )?;
    refused(
        &["--settings", g, "--crowd", "10", "--start", "tomorrow"],
        "--start must be an RFC 3339 time",
    )?;
    Ok(())
}

/// docs/rehearsal.md shows a command and, between the `usher-rehearse:begin`/`end` markers,
/// the first line it prints; docs/rehearsal/waits.svg and timeline.svg are its plots. The
/// command is run as written (its `target/release/usher-rehearse` is this build's binary, its
/// Redis this test's, its --out a temporary directory), and must print that line and draw
/// those plots. `USHER_BLESS=1` writes them into the docs instead.
#[test]
fn the_worked_example_in_the_docs_is_what_the_command_prints() -> anyhow::Result<()> {
    const BEGIN: &str = "<!-- usher-rehearse:begin -->\n```text\n";
    const END: &str = "```\n<!-- usher-rehearse:end -->";
    const COMMAND: &str = "target/release/usher-rehearse ";
    const DOC_REDIS: &str = "redis://127.0.0.1:6390";
    let docs = workspace().join("docs");
    let page = docs.join("rehearsal.md");
    let text = std::fs::read_to_string(&page)?;
    let command = text
        .lines()
        .find_map(|l| l.strip_prefix(COMMAND))
        .context("docs/rehearsal.md has no `target/release/usher-rehearse` command")?;
    ensure!(
        !command.contains(['\'', '"', '\\', '$']),
        "the example is split on spaces: keep quotes and variables out of it: {command}"
    );
    let redis = RedisServer::start()?;
    let out = tempfile::tempdir()?;
    let url = redis.url();
    let mut args: Vec<&str> = command.split_whitespace().collect();
    for a in args.iter_mut() {
        if *a == DOC_REDIS {
            *a = &url;
        }
    }
    let at = args
        .iter()
        .position(|a| *a == "--out")
        .context("the example names its --out")?;
    args[at + 1] = utf8(out.path())?;
    ensure!(
        args.contains(&url.as_str()),
        "the example rehearses on {DOC_REDIS}"
    );
    let run = rehearse(&args)?;
    ensure!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let printed = String::from_utf8(run.stdout)?;
    let first = printed.lines().next().context("nothing printed")?;
    let start = text.find(BEGIN).context("no begin marker")? + BEGIN.len();
    let end = text.find(END).context("no end marker")?;
    let plots = ["waits.svg", "timeline.svg"];
    if std::env::var_os("USHER_BLESS").is_some() {
        let blessed = format!("{}{first}\n{}", &text[..start], &text[end..]);
        std::fs::write(&page, blessed)?;
        for name in plots {
            std::fs::copy(out.path().join(name), docs.join("rehearsal").join(name))?;
        }
        return Ok(());
    }
    let stale = "docs/rehearsal.md's example is stale: run `USHER_BLESS=1 cargo test -p usher-rehearse --test rehearse the_worked_example`";
    assert_eq!(&text[start..end], format!("{first}\n"), "{stale}");
    for name in plots {
        assert_eq!(
            std::fs::read_to_string(docs.join("rehearsal").join(name))?,
            std::fs::read_to_string(out.path().join(name))?,
            "docs/rehearsal/{name}: {stale}"
        );
    }
    Ok(())
}

/// Four consecutive free loopback ports (the agreement script takes a base port and the
/// next three).
fn four_free_ports() -> anyhow::Result<u16> {
    for _ in 0..50 {
        let base = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        if base > 65_000 {
            continue;
        }
        let all_free = (0..4).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if all_free {
            return Ok(base);
        }
    }
    anyhow::bail!("no four consecutive free ports")
}

/// The rehearsal's promise, checked in `make test` at a small scale (`make bench` checks it
/// at 3,000 browsers): `scripts/bench-rehearsal.sh` runs one constant line through a real
/// stack (redis-server, dispatcher, gateway, usher-loadgen over real SSE) and through
/// usher-rehearse on its virtual clock, and fails unless the two agree within 10% on the
/// median wait and on when the line empties. 200 browsers join at 50 a second and are
/// admitted at 25 a second with a 100 ms tick: by hand, the median wait is 2 s and the line
/// empties at 8 s, so 10% is two ticks.
#[test]
fn a_rehearsal_agrees_with_a_real_run_of_the_same_line() -> anyhow::Result<()> {
    let bin = Path::new(env!("CARGO_BIN_EXE_usher-rehearse"))
        .parent()
        .context("the binaries' folder")?
        .to_path_buf();
    for other in ["usher-dispatcher", "usher-gateway", "usher-loadgen"] {
        ensure!(
            bin.join(other).exists(),
            "{other} is not built in {}: run `cargo build --workspace --bins` first",
            bin.display()
        );
    }
    let out = tempfile::tempdir()?;
    let run = Command::new("bash")
        .arg("scripts/bench-rehearsal.sh")
        .current_dir(workspace())
        .env("USHER_BENCH_OUT", out.path())
        .env("USHER_BENCH_BIN", &bin)
        .env("USHER_BENCH_REHEARSE_CROWD", "200")
        .env("USHER_BENCH_REHEARSE_JOIN_RATE", "50")
        .env("USHER_BENCH_REHEARSE_RATE", "25")
        .env("USHER_BENCH_REHEARSE_TICK_MS", "100")
        .env("USHER_BENCH_REHEARSE_PORT", four_free_ports()?.to_string())
        .output()
        .context("cannot run scripts/bench-rehearsal.sh")?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    let check: Value = serde_json::from_slice(
        &std::fs::read(out.path().join("rehearsal-check.json"))
            .with_context(|| format!("no comparison written: {said}"))?,
    )?;
    ensure!(
        check["admitted_real"] == 200 && check["admitted_rehearsed"] == 200,
        "everyone admitted in both: {check}"
    );
    let rows = check["rows"].as_array().context("rows")?;
    ensure!(rows.len() == 2, "{check}");
    for row in rows {
        ensure!(row["within_10_percent"] == true, "{row} ({said})");
    }
    let median = rows[0]["real"].as_f64().context("the real median")?;
    ensure!(
        (1.5..=2.5).contains(&median),
        "the real median wait is near the 2 s worked out by hand: {check}"
    );
    ensure!(run.status.success(), "{said}");
    Ok(())
}
