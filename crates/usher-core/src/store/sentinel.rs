//! Redis behind Sentinel: the sentinels name the current master; commands go to it over one
//! multiplexed connection. When that connection breaks, or the node answers `READONLY` (it
//! was demoted), the connection is dropped and the next command asks the sentinels again, so
//! a failover is followed without a restart. A command that meets the failover fails like
//! any Redis error, and usher's callers already retry (the next tick, the browser's retry).
//!
//! URL: `redis+sentinel://[user:password@]host:port[,host:port…]/<master name>`; the
//! credentials are the master's (the sentinels are reached without them).
//! `rediss+sentinel://…` speaks TLS to the sentinels and to the master they name, both
//! verified against the same roots (`USHER_REDIS_CA_FILE`, else the system's) and shown the
//! same client certificate when one is configured: a deployment that encrypts one hop
//! encrypts the other (Redis' `tls-replication`), so one switch covers both.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, IntoConnectionInfo, Pipeline, RedisError,
    TlsCertificates, TlsMode, Value,
};

use super::Result;

const SCHEME: &str = "redis+sentinel://";
const TLS_SCHEME: &str = "rediss+sentinel://";

/// Whether a sentinel URL asks for TLS (`rediss+sentinel://`).
pub(super) fn wants_tls(url: &str) -> bool {
    url.starts_with(TLS_SCHEME)
}

/// A `redis+sentinel://` or `rediss+sentinel://` URL, taken apart.
#[derive(Debug, PartialEq, Eq)]
struct Parsed {
    /// `redis://host:port` or `rediss://host:port`, one per sentinel.
    sentinels: Vec<String>,
    master: String,
    /// `user:password` of the master, empty for none.
    creds: String,
}

/// The master's connection, found through the sentinels.
pub(super) struct SentinelConn {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
}

/// The parts of a sentinel URL: sentinel URLs (TLS or not, as the scheme says), master name,
/// master credentials.
fn parse(url: &str) -> std::result::Result<Parsed, &'static str> {
    let (rest, node_scheme) = match url.strip_prefix(TLS_SCHEME) {
        Some(rest) => (rest, "rediss://"),
        None => (
            url.strip_prefix(SCHEME).ok_or(
                "sentinel mode needs a redis+sentinel:// (or rediss+sentinel:// for TLS) URL",
            )?,
            "redis://",
        ),
    };
    let (hosts, master) = rest
        .split_once('/')
        .ok_or("the redis+sentinel:// URL ends with /<master name>")?;
    let (creds, hosts) = hosts.rsplit_once('@').unwrap_or(("", hosts));
    let master = master.trim_end_matches('/');
    if master.is_empty() || hosts.is_empty() {
        return Err("the redis+sentinel:// URL names sentinels and a master");
    }
    let sentinels = hosts
        .split(',')
        .map(|h| format!("{node_scheme}{h}"))
        .collect();
    Ok(Parsed {
        sentinels,
        master: master.to_owned(),
        creds: creds.to_owned(),
    })
}

/// The sentinel client for a parsed URL: TLS to the sentinels and the master when the URL's
/// sentinels are `rediss://`, with `certs` (private CA, client certificate) for both.
fn client(p: &Parsed, certs: Option<TlsCertificates>) -> Result<SentinelClient> {
    let mut addrs: Vec<ConnectionAddr> = Vec::with_capacity(p.sentinels.len());
    for s in &p.sentinels {
        addrs.push(s.as_str().into_connection_info()?.addr().clone());
    }
    let tls = matches!(addrs.first(), Some(ConnectionAddr::TcpTls { .. }));
    let mut b = SentinelClientBuilder::new(addrs, &p.master, SentinelServerType::Master)?;
    if !p.creds.is_empty() {
        // The master's user and password, read by redis-rs' own URL parser (which decodes
        // percent-escapes).
        let info = format!("redis://{}@localhost", p.creds).into_connection_info()?;
        let settings = info.redis_settings();
        if let Some(user) = settings.username() {
            b = b.set_client_to_redis_username(user);
        }
        if let Some(password) = settings.password() {
            b = b.set_client_to_redis_password(password);
        }
    }
    if tls {
        b = b
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_redis_tls_mode(TlsMode::Secure);
        if let Some(certs) = certs {
            b = b
                .set_client_to_sentinel_certificates(certs.clone())
                .set_client_to_redis_certificates(certs);
        }
    }
    Ok(b.build()?)
}

impl SentinelConn {
    /// Connects to the master the sentinels of `url` name; `certs` are used when the URL asks
    /// for TLS (`rediss+sentinel://`).
    pub(super) async fn open(
        url: &str,
        certs: Option<TlsCertificates>,
        config: AsyncConnectionConfig,
    ) -> Result<Arc<Self>> {
        let parsed =
            parse(url).map_err(|m| RedisError::from((redis::ErrorKind::InvalidClientConfig, m)))?;
        let client = client(&parsed, certs)?;
        let conn = Arc::new(Self {
            sentinel: tokio::sync::Mutex::new(client),
            current: RwLock::new(None),
            config,
        });
        // Fail at startup, not at the first command, when no master can be reached.
        conn.connection().await?;
        Ok(conn)
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.current.read().ok().and_then(|c| c.clone())
    }

    /// The connection to the current master, asking the sentinels when there is none.
    async fn connection(&self) -> redis::RedisResult<MultiplexedConnection> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let mut sentinel = self.sentinel.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let client = sentinel.async_get_client().await?;
        let c = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        if let Ok(mut current) = self.current.write() {
            *current = Some(c.clone());
        }
        Ok(c)
    }

    /// Drops the connection after an error that says the master moved or went away.
    fn check<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let Err(e) = &r {
            let demoted = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
            if demoted || e.is_connection_dropped() || e.is_io_error() || e.is_timeout() {
                if let Ok(mut current) = self.current.write() {
                    *current = None;
                }
            }
        }
        r
    }

    pub(super) async fn command(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        let mut c = self.connection().await?;
        let r = c.req_packed_command(cmd).await;
        self.check(r)
    }

    pub(super) async fn pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<Value>> {
        let mut c = self.connection().await?;
        let r = c.req_packed_commands(pipeline, offset, count).await;
        self.check(r)
    }
}

/// Connection settings for the master: the same timeouts as the other modes.
pub(super) fn config(connect: Duration, response: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response))
}

#[cfg(test)]
mod tests {
    use super::{client, parse};

    #[test]
    fn sentinel_urls_name_sentinels_a_master_and_credentials() {
        let p = parse("redis+sentinel://u:p@a:1,b:2/mymaster").expect("valid");
        assert_eq!(p.sentinels, ["redis://a:1", "redis://b:2"]);
        assert_eq!(p.master, "mymaster");
        assert_eq!(p.creds, "u:p");
        let p = parse("redis+sentinel://a:1/m").expect("valid");
        assert!(p.creds.is_empty());
        let p = parse("rediss+sentinel://u:p@a:1,b:2/m").expect("valid");
        assert_eq!(p.sentinels, ["rediss://a:1", "rediss://b:2"]);
        assert!(client(&p, None).is_ok(), "a TLS client builds");
        assert!(parse("redis://a:1/m").is_err());
        assert!(parse("redis+sentinel://a:1").is_err());
        assert!(parse("redis+sentinel://a:1/").is_err());
    }
}
