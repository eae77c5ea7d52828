//! Checks of HTTP answers that several test areas make the same way.

use serde_json::Value;

/// Asserts that `r` is a refusal with `status` and a JSON body `{"error": "..."}` with a
/// non-empty message (the shape every usher server and the admission layer refuse with);
/// returns the message.
///
/// # Panics
/// When the answer is not that refusal: it is an assertion.
pub async fn json_error(r: reqwest::Response, status: u16) -> anyhow::Result<String> {
    assert_eq!(r.status(), status);
    assert_eq!(r.headers()["content-type"], "application/json");
    let e: Value = r.json().await?;
    let msg = e["error"].as_str().unwrap_or_default().to_owned();
    assert!(!msg.is_empty(), "{e}");
    Ok(msg)
}

/// The value of header `name` of `r` as text; empty when it is missing or not text.
pub fn header(r: &reqwest::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}
