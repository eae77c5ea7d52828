//! A queue's waiting-room page settings: where an admitted browser goes, which site may
//! frame the page, and the title and logo it shows.
//!
//! Every URL here ends up in a browser, in a `Content-Security-Policy` or as a form's target,
//! so each is checked once, here, for both the dispatcher (which stores them) and the gateway
//! (which serves them): `https`, or plain `http` on a loopback host only (local development),
//! never with credentials. An origin is a scheme, a host and a port, nothing else.

use serde::{Deserialize, Serialize};
use url::{Host, Url};

/// Longest accepted page title, in characters.
pub const MAX_TITLE_CHARS: usize = 120;
/// Longest accepted URL, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// The page settings of one queue. Each is optional: without `booking_url` the page shows the
/// admission itself, without `embed_origin` no site may frame it, without `title` it shows
/// the queue id, without `logo_url` it shows no logo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PageSettings {
    /// Where the page POSTs the entry token on `admitted` (an auto-submitted form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub booking_url: Option<String>,
    /// The one origin that may frame the page (`frame-ancestors`) and receives its
    /// `postMessage` on `admitted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub embed_origin: Option<String>,
    /// Shown as the page's heading and `<title>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// An image shown above the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logo_url: Option<String>,
}

/// A page setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageSettingError {
    #[error("{field} is not a URL: {reason}")]
    NotAUrl { field: &'static str, reason: String },
    #[error("{field} must be https (or http on a loopback host such as 127.0.0.1)")]
    Insecure { field: &'static str },
    #[error("{field} must not carry a user name or password")]
    Credentials { field: &'static str },
    #[error("{field} must be an origin (scheme://host[:port]), without a path, query or fragment")]
    NotAnOrigin { field: &'static str },
    #[error("{field} must not carry a fragment")]
    Fragment { field: &'static str },
    #[error("{field} is longer than {max} bytes")]
    TooLong { field: &'static str, max: usize },
    #[error("title must be 1 to {MAX_TITLE_CHARS} characters without control characters")]
    BadTitle,
}

impl PageSettings {
    /// Checks every setting present (see the module documentation for the rules).
    pub fn check(&self) -> Result<(), PageSettingError> {
        if let Some(u) = &self.booking_url {
            web_url("booking_url", u)?;
        }
        if let Some(o) = &self.embed_origin {
            origin("embed_origin", o)?;
        }
        if let Some(u) = &self.logo_url {
            web_url("logo_url", u)?;
        }
        if let Some(t) = &self.title {
            check_title(t)?;
        }
        Ok(())
    }

    /// The origin of `booking_url` (`scheme://host[:port]`), for the page's `form-action`.
    pub fn booking_origin(&self) -> Option<String> {
        self.booking_url.as_deref().and_then(origin_of)
    }

    /// The origin of `logo_url`, for the page's `img-src`.
    pub fn logo_origin(&self) -> Option<String> {
        self.logo_url.as_deref().and_then(origin_of)
    }
}

/// An absolute `https` URL (or `http` on a loopback host), without credentials or fragment.
fn web_url(field: &'static str, raw: &str) -> Result<Url, PageSettingError> {
    if raw.len() > MAX_URL_LEN {
        return Err(PageSettingError::TooLong {
            field,
            max: MAX_URL_LEN,
        });
    }
    let url = Url::parse(raw).map_err(|e| PageSettingError::NotAUrl {
        field,
        reason: e.to_string(),
    })?;
    let loopback = match url.host() {
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => {}
        "http" if loopback => {}
        _ => return Err(PageSettingError::Insecure { field }),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(PageSettingError::Credentials { field });
    }
    if url.fragment().is_some() {
        return Err(PageSettingError::Fragment { field });
    }
    Ok(url)
}

/// An origin exactly as a browser writes it: `scheme://host[:port]`, nothing after it.
fn origin(field: &'static str, raw: &str) -> Result<(), PageSettingError> {
    let url = web_url(field, raw)?;
    if origin_of(raw).as_deref() != Some(raw) || url.query().is_some() {
        return Err(PageSettingError::NotAnOrigin { field });
    }
    Ok(())
}

/// `scheme://host[:port]` of a URL (the default port left out, as browsers write origins).
fn origin_of(raw: &str) -> Option<String> {
    let url = Url::parse(raw).ok()?;
    match url.origin() {
        url::Origin::Tuple(..) => Some(url.origin().ascii_serialization()),
        url::Origin::Opaque(_) => None,
    }
}

fn check_title(t: &str) -> Result<(), PageSettingError> {
    let n = t.chars().count();
    if n == 0 || n > MAX_TITLE_CHARS || t.chars().any(char::is_control) {
        return Err(PageSettingError::BadTitle);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut PageSettings)) -> Result<(), PageSettingError> {
        let mut s = PageSettings::default();
        f(&mut s);
        s.check()
    }

    #[test]
    fn https_and_loopback_http_are_accepted() {
        for u in [
            "https://tickets.example/book",
            "https://tickets.example:8443/book?show=1",
            "http://127.0.0.1:8082/book",
            "http://localhost/book",
            "http://[::1]:9000/",
        ] {
            assert_eq!(with(|s| s.booking_url = Some(u.into())), Ok(()), "{u}");
        }
    }

    #[test]
    fn other_urls_are_refused() {
        for u in [
            "http://tickets.example/book",
            "http://10.0.0.1/book",
            "javascript:alert(1)",
            "data:text/html,hi",
            "ftp://example.com/",
            "https://user:pw@tickets.example/",
            "https://tickets.example/#frag",
            "/relative",
            "",
        ] {
            assert!(with(|s| s.booking_url = Some(u.into())).is_err(), "{u}");
            assert!(with(|s| s.logo_url = Some(u.into())).is_err(), "{u}");
        }
    }

    #[test]
    fn an_embedding_origin_is_an_origin_only() {
        assert_eq!(
            with(|s| s.embed_origin = Some("https://shop.example".into())),
            Ok(())
        );
        assert_eq!(
            with(|s| s.embed_origin = Some("http://127.0.0.1:9000".into())),
            Ok(())
        );
        for o in [
            "https://shop.example/",
            "https://shop.example/page",
            "https://shop.example:443",
            "https://SHOP.example",
            "http://shop.example",
            "*",
        ] {
            assert!(
                with(|s| s.embed_origin = Some(o.into())).is_err(),
                "{o} is not an origin as browsers write it"
            );
        }
    }

    #[test]
    fn titles_are_short_plain_text() {
        assert_eq!(with(|s| s.title = Some("콘서트 — Seoul".into())), Ok(()));
        assert!(with(|s| s.title = Some(String::new())).is_err());
        assert!(with(|s| s.title = Some("a\nb".into())).is_err());
        assert!(with(|s| s.title = Some("x".repeat(MAX_TITLE_CHARS + 1))).is_err());
    }

    #[test]
    fn origins_for_the_content_security_policy() {
        let s = PageSettings {
            booking_url: Some("https://tickets.example:8443/book?x=1".into()),
            logo_url: Some("https://cdn.example/logo.png".into()),
            ..Default::default()
        };
        assert_eq!(
            s.booking_origin().as_deref(),
            Some("https://tickets.example:8443")
        );
        assert_eq!(s.logo_origin().as_deref(), Some("https://cdn.example"));
    }
}
