//! [`Builder`]: how a booking service configures its [`Admission`] handle (the dispatcher's
//! URL, the queues it sells, the JWKS refresh, the service token), checked when it is built.

use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::keys::{Keys, Refresh};
use crate::session::SessionApi;
use crate::{Admission, Audience, BuildError, Inner};

/// How long one HTTP call to the dispatcher (or the JWKS URL) may take, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Configures an [`Admission`]; from [`Admission::builder`].
pub struct Builder {
    dispatcher_url: String,
    jwks_url: Option<String>,
    audience: Option<Audience>,
    service_token: Option<String>,
    timeout: Duration,
    http: Option<reqwest::Client>,
    refresh: Refresh,
}

impl Builder {
    /// The JWKS URL; default `<dispatcher URL>/.well-known/jwks.json`.
    pub fn jwks_url(mut self, url: impl Into<String>) -> Self {
        self.jwks_url = Some(url.into());
        self
    }

    /// The queues whose tokens [`Admission::verify`] (and so the layer) accepts, and that the
    /// session calls ask about (`?queue=`). At least one: an empty list is
    /// [`BuildError::NoAudience`].
    pub fn audiences<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.audience = Some(Audience::Queues(
            queues.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Tokens of any queue of the dispatcher's: for a service that takes the queue per request and
    /// names it in [`Admission::verify_for`], [`Admission::check_for`], [`Admission::touch_for`]
    /// and [`Admission::consume_for`] (or the layer's [`AdmissionLayer::queue_from_query`]). The
    /// plain calls then accept any queue's token.
    ///
    /// [`AdmissionLayer::queue_from_query`]: crate::AdmissionLayer::queue_from_query
    pub fn any_queue(mut self) -> Self {
        self.audience = Some(Audience::Any);
        self
    }

    /// How often the JWKS is fetched: at most once per `min_gap` whatever the tokens' key ids (a
    /// request with an unknown kid waits for the next fetch, due `min_gap` after the last, and
    /// shared by every request waiting then), and again once the cached set is older than
    /// `max_age`, so a key removed from the set stops being accepted within `max_age`. Defaults:
    /// [`DEFAULT_JWKS_MIN_GAP`] and [`DEFAULT_JWKS_MAX_AGE`].
    ///
    /// [`DEFAULT_JWKS_MIN_GAP`]: crate::DEFAULT_JWKS_MIN_GAP
    /// [`DEFAULT_JWKS_MAX_AGE`]: crate::DEFAULT_JWKS_MAX_AGE
    pub fn jwks_refresh(mut self, min_gap: Duration, max_age: Duration) -> Self {
        self.refresh = Refresh { min_gap, max_age };
        self
    }

    /// The dispatcher's `USHER_SERVICE_TOKEN`, for [`Admission::report_load`].
    pub fn service_token(mut self, token: impl Into<String>) -> Self {
        self.service_token = Some(token.into());
        self
    }

    /// How long one HTTP call may take (default [`DEFAULT_TIMEOUT`]); ignored with
    /// [`Builder::http_client`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The HTTP client to use, e.g. one that trusts a private CA
    /// (`reqwest::ClientBuilder::add_root_certificate`). Give it a timeout.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    pub fn build(self) -> Result<Admission, BuildError> {
        let audience = match self.audience {
            Some(Audience::Queues(q)) if q.is_empty() => return Err(BuildError::NoAudience),
            Some(a) => a,
            None if self.service_token.is_some() => Audience::LoadOnly,
            None => return Err(BuildError::NoAudience),
        };
        let Refresh { min_gap, max_age } = self.refresh;
        if max_age < min_gap {
            return Err(BuildError::JwksRefresh { min_gap, max_age });
        }
        let mut base = http_url(&self.dispatcher_url)?;
        // A base URL: joined paths go below its path prefix, if any.
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let jwks = match self.jwks_url {
            Some(u) => http_url(&u)?,
            None => base
                .join(".well-known/jwks.json")
                .map_err(|source| BuildError::Url {
                    url: self.dispatcher_url.clone(),
                    source,
                })?,
        };
        let http = match self.http {
            Some(c) => c,
            None => reqwest::Client::builder().timeout(self.timeout).build()?,
        };
        let sessions = SessionApi::new(&base, http.clone()).map_err(|source| BuildError::Url {
            url: self.dispatcher_url.clone(),
            source,
        })?;
        Ok(Admission {
            inner: Arc::new(Inner {
                keys: Keys::new(jwks.to_string(), http, self.refresh),
                sessions,
                audience,
                service_token: self.service_token,
            }),
        })
    }
}

/// Parses an `http://` or `https://` URL.
fn http_url(s: &str) -> Result<Url, BuildError> {
    let url = Url::parse(s).map_err(|source| BuildError::Url {
        url: s.to_owned(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(BuildError::Scheme(s.to_owned()));
    }
    Ok(url)
}

impl Admission {
    /// Starts configuring a handle on the dispatcher at `dispatcher_url` (e.g.
    /// `http://usher-dispatcher:8081`).
    pub fn builder(dispatcher_url: impl Into<String>) -> Builder {
        Builder {
            dispatcher_url: dispatcher_url.into(),
            jwks_url: None,
            audience: None,
            service_token: None,
            timeout: DEFAULT_TIMEOUT,
            http: None,
            refresh: Refresh::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The session API's and the JWKS's URLs.
    fn urls(a: &Admission) -> (String, String) {
        (
            a.inner.sessions.session.to_string(),
            a.inner.keys.url.clone(),
        )
    }

    #[test]
    fn a_handle_names_its_queues_or_only_reports_load() {
        let b = || Admission::builder("http://d:8081");
        assert!(matches!(b().build(), Err(BuildError::NoAudience)));
        let none: [&str; 0] = [];
        assert!(matches!(
            b().audiences(none).build(),
            Err(BuildError::NoAudience)
        ));
        assert!(b().any_queue().build().is_ok());
        assert!(b().audiences(["show"]).build().is_ok());
        // A load reporter is unaffected: it builds, and judges no token.
        let reporter = b().service_token("t").build();
        assert!(reporter.is_ok_and(|a| a.inner.audience == Audience::LoadOnly));
        let gap = Duration::from_secs(10);
        assert!(matches!(
            b().any_queue().jwks_refresh(gap, gap / 2).build(),
            Err(BuildError::JwksRefresh { .. })
        ));
    }

    #[test]
    fn urls_keep_a_path_prefix_and_refuse_other_schemes() {
        let a = Admission::builder("http://d:8081/usher")
            .any_queue()
            .build();
        assert_eq!(
            a.as_ref().ok().map(urls),
            Some((
                "http://d:8081/usher/api/session".to_owned(),
                "http://d:8081/usher/.well-known/jwks.json".to_owned()
            ))
        );
        let jwks = Admission::builder("https://d")
            .audiences(["show"])
            .jwks_url("https://keys.example/jwks.json")
            .build();
        assert_eq!(
            jwks.as_ref().ok().map(|a| urls(a).1).as_deref(),
            Some("https://keys.example/jwks.json")
        );
        assert!(matches!(http_url("ftp://d/"), Err(BuildError::Scheme(_))));
        assert!(matches!(http_url("not a url"), Err(BuildError::Url { .. })));
    }
}
