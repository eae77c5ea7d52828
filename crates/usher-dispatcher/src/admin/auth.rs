//! Who may use the admin API: every admin route needs a bearer token from
//! `USHER_ADMIN_TOKEN` (or, with `USHER_DEV=1`, the development token shared through Redis).
//! There is no exemption by address: a reverse proxy on the same host makes every client
//! look local, so "loopback only" meant "anyone".
//!
//! Each token has a label; the one a request used travels with it ([`AdminLabel`]) so the
//! audit trail can say who made a change.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use usher_http::ApiError;

/// The label of a token given without one.
pub const DEFAULT_LABEL: &str = "admin";
/// The label of the development token.
pub const DEV_LABEL: &str = "dev";

/// The shortest secret the dispatcher accepts, in characters: each admin token (the part
/// after `label:`) and `USHER_SERVICE_TOKEN`. A bearer secret is all that stands between the
/// internet and the admin API, so a guessable one (`a:x`) must not start at all.
/// (`session_trust::a_secret_shorter_than_32_characters_stops_the_dispatcher_naming_it`)
pub const MIN_SECRET_CHARS: usize = 32;

/// A `USHER_ADMIN_TOKEN` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenSpecError {
    #[error("entry {0} is empty (a stray comma?)")]
    Empty(usize),
    #[error("entry {0} has a label but no token after the ':'")]
    NoToken(usize),
    #[error("entry {0}: a label is 1 to 64 letters, digits, '.', '_' or '-'")]
    BadLabel(usize),
    #[error(
        "entry {entry}: the token has {chars} characters; at least {MIN_SECRET_CHARS} are \
         required (e.g. `openssl rand -hex 32`)"
    )]
    Short { entry: usize, chars: usize },
    #[error("the label {0:?} is used twice: the audit trail could not tell them apart")]
    DuplicateLabel(String),
    #[error("a token appears twice")]
    DuplicateToken,
}

/// The label of the token a request was let in with (a request extension).
#[derive(Debug, Clone)]
pub struct AdminLabel(pub Arc<str>);

struct Entry {
    label: Arc<str>,
    /// SHA-256 of the token: compared in constant time, and equal in length whatever the
    /// token's length.
    digest: [u8; 32],
}

/// The admin tokens this dispatcher accepts.
pub struct AdminTokens {
    entries: Vec<Entry>,
}

impl std::fmt::Debug for AdminTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let labels: Vec<&str> = self.entries.iter().map(|e| &*e.label).collect();
        f.debug_struct("AdminTokens")
            .field("labels", &labels)
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn valid_label(l: &str) -> bool {
    (1..=64).contains(&l.len())
        && l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl AdminTokens {
    /// Parses `label:token[,label:token…]`; an entry without `:` is a token labelled
    /// [`DEFAULT_LABEL`]. Spaces around entries are ignored.
    pub fn parse(spec: &str) -> Result<Self, TokenSpecError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, raw) in spec.split(',').enumerate() {
            let n = i + 1;
            let raw = raw.trim();
            if raw.is_empty() {
                return Err(TokenSpecError::Empty(n));
            }
            let (label, token) = raw.split_once(':').unwrap_or((DEFAULT_LABEL, raw));
            if token.is_empty() {
                return Err(TokenSpecError::NoToken(n));
            }
            if !valid_label(label) {
                return Err(TokenSpecError::BadLabel(n));
            }
            let chars = token.chars().count();
            if chars < MIN_SECRET_CHARS {
                return Err(TokenSpecError::Short { entry: n, chars });
            }
            let d = digest(token);
            if entries.iter().any(|e| &*e.label == label) {
                return Err(TokenSpecError::DuplicateLabel(label.to_owned()));
            }
            if entries.iter().any(|e| e.digest == d) {
                return Err(TokenSpecError::DuplicateToken);
            }
            entries.push(Entry {
                label: Arc::from(label),
                digest: d,
            });
        }
        Ok(Self { entries })
    }

    /// The development token, labelled [`DEV_LABEL`].
    pub fn dev(token: &str) -> Self {
        Self {
            entries: vec![Entry {
                label: Arc::from(DEV_LABEL),
                digest: digest(token),
            }],
        }
    }

    /// The label of `given` when it is one of the tokens. Every entry is compared, in
    /// constant time, whichever matches.
    pub fn check(&self, given: &str) -> Option<Arc<str>> {
        let g = digest(given);
        let mut found = None;
        for e in &self.entries {
            if bool::from(g.ct_eq(&e.digest)) {
                found = Some(e.label.clone());
            }
        }
        found
    }
}

/// Lets a request through only with one of the admin tokens; records the token's label.
pub(crate) async fn authorize(
    State(tokens): State<Arc<AdminTokens>>,
    mut req: Request,
    next: Next,
) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match tokens.check(given) {
        Some(label) => {
            req.extensions_mut().insert(AdminLabel(label));
            next.run(req).await
        }
        None => ApiError::unauthorized("missing or wrong admin bearer token").into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 32 characters: appended to a test token, it passes the length rule.
    const PAD: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn labels_and_tokens_parse_and_match() -> Result<(), TokenSpecError> {
        let t = AdminTokens::parse(&format!(
            "alice:tok-a{PAD}, deploy-bot:tok:b{PAD} ,plain{PAD}"
        ))?;
        assert_eq!(t.check(&format!("tok-a{PAD}")).as_deref(), Some("alice"));
        // Only the first ':' separates: a token may contain ':'.
        assert_eq!(
            t.check(&format!("tok:b{PAD}")).as_deref(),
            Some("deploy-bot")
        );
        assert_eq!(
            t.check(&format!("plain{PAD}")).as_deref(),
            Some(DEFAULT_LABEL)
        );
        assert_eq!(t.check(""), None);
        assert_eq!(t.check("tok-"), None);
        Ok(())
    }

    #[test]
    fn unusable_specs_are_refused() {
        for bad in ["a:x,", "a:", "a b:x", "a:x,a:y", "a:x,b:x", ":x"] {
            let bad = bad.replace('x', PAD).replace('y', &format!("y{PAD}"));
            assert!(AdminTokens::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_shorter_than_32_characters_are_refused() {
        let short = &PAD[1..];
        assert!(matches!(
            AdminTokens::parse(&format!("a:{PAD},b:{short}")),
            Err(TokenSpecError::Short {
                entry: 2,
                chars: 31
            })
        ));
        assert!(AdminTokens::parse(PAD).is_ok());
        // Characters, not bytes: 31 two-byte characters are still too short.
        assert!(AdminTokens::parse(&"é".repeat(31)).is_err());
    }
}
