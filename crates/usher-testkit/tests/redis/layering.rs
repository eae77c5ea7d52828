//! The workspace's layering rules, checked on the source itself.
//!
//! - Only `usher-core` knows Redis key names and Lua scripts: every other crate (tests and
//!   benchmarks included) names keys through `usher_core::keys` and runs scripts through
//!   `usher_core::store`, so the schema can change in one place and the Cluster slot rule
//!   (one hash tag per script) is kept where the scripts are.
//! - The shipped binaries (`crates/*/src/main.rs`) are thin: a `main.rs` parses its
//!   configuration, sets the process up and hands a listener to its crate's `run`; anything
//!   longer belongs in the library, where tests reach it. (The load tools under `loadtest/` are
//!   measuring instruments, not services, and are not held to this.)
//! - A gateway never mints: no path in the crate graph leads from `usher-gateway` to
//!   `usher-mint` (entry tokens and their signing keys) or to a crate that signs with Ed25519
//!   or makes JWTs. The graph read is `Cargo.lock`'s, which lists every dependency of every
//!   package for every target (a gateway's dev-dependencies included): a superset of what the
//!   gateway binary links, so a path absent there is absent from the binary.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Text that only `usher-core` may contain: key-name literals and script loading.
const CORE_ONLY: &[&str] = &["\"usher:", "usher:{", "Script::new", ".lua\")"];

/// The longest a binary's `main.rs` may be.
const MAIN_MAX_LINES: usize = 40;

fn workspace_root() -> PathBuf {
    // This crate lives at crates/usher-testkit.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn only_usher_core_names_redis_keys_and_main_files_stay_thin() -> anyhow::Result<()> {
    let root = workspace_root();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files)?;
    rust_files(&root.join("loadtest"), &mut files)?;
    let core = root.join("crates/usher-core");
    let this_file = Path::new(file!())
        .file_name()
        .ok_or_else(|| anyhow::anyhow!("file name"))?;

    let mut violations = Vec::new();
    let mut mains = 0;
    for path in &files {
        let text = std::fs::read_to_string(path)?;
        if !path.starts_with(&core) && path.file_name() != Some(this_file) {
            for (n, line) in text.lines().enumerate() {
                if let Some(p) = CORE_ONLY.iter().find(|p| line.contains(*p)) {
                    violations.push(format!("{}:{}: {p}", path.display(), n + 1));
                }
            }
        }
        // A binary's `src/main.rs` (a test binary's `tests/<name>/main.rs` only lists modules).
        let shipped_main = path.starts_with(root.join("crates"))
            && path.file_name().is_some_and(|n| n == "main.rs")
            && path
                .parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "src");
        if shipped_main {
            mains += 1;
            let lines = text.lines().count();
            if lines > MAIN_MAX_LINES {
                violations.push(format!(
                    "{}: {lines} lines (a main.rs stays under {MAIN_MAX_LINES})",
                    path.display()
                ));
            }
        }
    }
    assert!(files.len() > 50, "the scan found the sources");
    assert!(mains >= 3, "the scan found the binaries' main.rs files");
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    Ok(())
}

/// Crates a gateway must not reach: usher's minting crate and what signs entry tokens.
/// (`ring`, which rustls uses for TLS to Redis, can sign too, but knows nothing of usher's
/// keys; the key formats and the minting code are in these.)
const MINTING: &[&str] = &["usher-mint", "ed25519-dalek", "ed25519", "jsonwebtoken"];

/// `Cargo.lock`'s graph: each package's name and the names of the packages it depends on.
fn lock_graph(lock: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut name = None;
    let mut in_deps = false;
    for line in lock.lines().map(str::trim) {
        if line == "[[package]]" {
            name = None;
            in_deps = false;
        } else if let Some(n) = line.strip_prefix("name = ") {
            let n = n.trim_matches('"').to_owned();
            graph.entry(n.clone()).or_default();
            name = Some(n);
        } else if line.starts_with("dependencies = [") {
            in_deps = !line.ends_with(']');
        } else if in_deps && line == "]" {
            in_deps = false;
        } else if in_deps {
            // `"name"` or `"name version"` (when two versions of a crate are locked).
            let dep = line.trim_end_matches(',').trim_matches('"');
            let dep = dep.split(' ').next().unwrap_or(dep).to_owned();
            if let Some(n) = &name {
                graph.entry(n.clone()).or_default().insert(dep);
            }
        }
    }
    graph
}

/// The packages `from` reaches, each with the path that reaches it.
fn reachable(graph: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeMap<String, String> {
    let mut seen = BTreeMap::from([(from.to_owned(), from.to_owned())]);
    let mut todo = vec![from.to_owned()];
    while let Some(p) = todo.pop() {
        let path = seen[&p].clone();
        for d in graph.get(&p).into_iter().flatten() {
            if !seen.contains_key(d) {
                seen.insert(d.clone(), format!("{path} -> {d}"));
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn gateway_cannot_link_minting_code() -> anyhow::Result<()> {
    let lock = std::fs::read_to_string(workspace_root().join("Cargo.lock"))?;
    let graph = lock_graph(&lock);
    let gateway = reachable(&graph, "usher-gateway");
    assert!(
        gateway.contains_key("usher-core") && gateway.contains_key("redis"),
        "the graph was read: the gateway reaches usher-core and redis"
    );
    let dispatcher = reachable(&graph, "usher-dispatcher");
    assert!(
        dispatcher.contains_key("usher-mint") && dispatcher.contains_key("ed25519-dalek"),
        "the dispatcher mints, through usher-mint"
    );
    let paths: Vec<&String> = MINTING.iter().filter_map(|c| gateway.get(*c)).collect();
    assert!(
        paths.is_empty(),
        "usher-gateway can link minting code:\n{}",
        paths
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}
