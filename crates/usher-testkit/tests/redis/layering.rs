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
