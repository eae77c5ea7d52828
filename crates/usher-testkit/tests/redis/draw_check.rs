//! The draw record's independent checks, shared by the draw suites: a ticket's entrant
//! hash, the drawn order recomputed with `sha2`/`hmac` straight from their crates (not
//! `usher_core::draw`), and the Python check of docs/policies.md run on a record.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of a ticket: its entry in the record.
pub fn entrant(ticket: &str) -> String {
    hex::encode(Sha256::digest(ticket.as_bytes()))
}

/// The drawn order of `entrants` under `key` (the seed's bytes, then a beacon's), as the
/// docs/policies.md defines it: ascending HMAC-SHA256(key, the hash's hex text), ties by the hash.
pub fn drawn_order(mac_key: &[u8], mut entrants: Vec<String>) -> Vec<String> {
    let key = |h: &String| {
        let mut m = Hmac::<Sha256>::new_from_slice(mac_key).expect("any key length");
        m.update(h.as_bytes());
        (m.finalize().into_bytes().to_vec(), h.clone())
    };
    entrants.sort_by_key(key);
    entrants
}

/// The Python check of a draw record in docs/policies.md, run on `record`: its output.
pub fn python_check(record: &Value) -> anyhow::Result<String> {
    let readme = include_str!("../../../../docs/policies.md");
    let section = readme
        .split("## Scheduled sale and the draw")
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("docs/policies.md has no draw section"))?;
    let code = section
        .split("```python\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .ok_or_else(|| anyhow::anyhow!("docs/policies.md's draw section has no Python block"))?;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(code)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(record.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(
        out.status.success(),
        "the docs' check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}
