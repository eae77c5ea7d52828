//! How a process reaches Redis: the flags every binary shares ([`RedisArgs`]), the deployment
//! shape ([`RedisMode`]) and the one connection type the store runs its commands on
//! ([`RedisConn`]), whichever the shape.
//!
//! * Standalone: one `ConnectionManager` (multiplexed, reconnects by itself).
//! * Cluster: one redis-rs cluster-async connection: it routes each command by its key's slot,
//!   follows `MOVED`/`ASK`, refreshes the slot map after a failover or a migration, and answers
//!   `NOSCRIPT` by loading the script (`SCRIPT LOAD` goes to every node) and retrying.
//! * Sentinel: the master the sentinels name, found again after a failover (`super::sentinel`).
//!
//! TLS is chosen by the URL (`rediss://`); a private CA and a client certificate (mutual TLS)
//! come from PEM files. The credentials of an ACL user ride in the URL (`user:pass@`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{ClientTlsConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

use super::sentinel::{self, SentinelConn};
use super::{Result, StoreError};

/// How Redis is deployed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisMode {
    /// One Redis server (or a managed endpoint that hides its replicas behind one address).
    #[default]
    Standalone,
    /// Redis Cluster: the URL names one or more seed nodes; the client discovers the rest.
    Cluster,
    /// Redis Sentinel: the URL (`redis+sentinel://host:port[,host:port…]/<master name>`) names
    /// the sentinels and the master; usher follows the master across failovers.
    Sentinel,
}

/// The Redis flags every usher binary takes (flattened into each one's configuration).
/// `Debug` hides the URL's password.
#[derive(Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: `redis://[user:password@]host:port[/db]`, or `rediss://…` for TLS. In
    /// cluster mode, one seed node or a comma-separated list of them
    /// (`redis://10.0.0.1:6379,redis://10.0.0.2:6379`); the other nodes are discovered. In
    /// sentinel mode, `redis+sentinel://[user:password@]host:26379[,host:26379…]/<master name>`
    /// (the credentials are the master's), or `rediss+sentinel://…` for TLS to the sentinels
    /// and the master. An ACL user's name and password go in the URL (docs/managed-redis.md lists the
    /// commands and keys each binary needs).
    #[arg(
        help_heading = "Redis",
        id = "redis_url",
        value_name = "URL",
        long = "redis-url",
        env = "USHER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub url: String,

    /// How Redis is deployed: `standalone` (one server or one managed endpoint), `cluster`
    /// (Redis Cluster, e.g. ElastiCache/MemoryDB with cluster mode enabled; every usher key of
    /// one queue shares a hash slot, so queues spread over the cluster's masters) or `sentinel`
    /// (a master and replicas watched by Redis Sentinel; TLS with `rediss+sentinel://`).
    #[arg(
        help_heading = "Redis",
        id = "redis_mode",
        value_name = "MODE",
        long = "redis-mode",
        env = "USHER_REDIS_MODE",
        value_enum,
        default_value_t
    )]
    pub mode: RedisMode,

    /// PEM file of the certificate authority (or authorities) that signed the Redis server's
    /// certificate, for a private CA. Without it, a `rediss://` URL is verified against the
    /// system's trusted roots. Needs a `rediss://` URL (`rediss+sentinel://` in sentinel mode,
    /// where it checks the sentinels and the masters).
    #[arg(
        help_heading = "Redis",
        id = "redis_ca_file",
        value_name = "FILE",
        long = "redis-ca-file",
        env = "USHER_REDIS_CA_FILE"
    )]
    pub ca_file: Option<PathBuf>,

    /// PEM file of this client's certificate (chain), for a Redis server that requires mutual
    /// TLS (`tls-auth-clients yes`). Needs `USHER_REDIS_CLIENT_KEY` and a `rediss://` (or
    /// `rediss+sentinel://`) URL.
    #[arg(
        help_heading = "Redis",
        id = "redis_client_cert",
        value_name = "FILE",
        long = "redis-client-cert",
        env = "USHER_REDIS_CLIENT_CERT",
        requires = "redis_client_key"
    )]
    pub client_cert: Option<PathBuf>,

    /// PEM file of the private key of `USHER_REDIS_CLIENT_CERT` (PKCS#8, PKCS#1 or SEC1).
    #[arg(
        help_heading = "Redis",
        id = "redis_client_key",
        value_name = "FILE",
        long = "redis-client-key",
        env = "USHER_REDIS_CLIENT_KEY",
        requires = "redis_client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl std::fmt::Debug for RedisArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisArgs")
            .field("url", &redact(&self.url))
            .field("mode", &self.mode)
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .field("client_key", &self.client_key)
            .finish()
    }
}

/// Each URL of a comma-separated list with the password of its `user:password@` replaced.
fn redact(urls: &str) -> String {
    urls.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(s), Some(at)) if at > s => {
                let creds = &u[s + 3..at];
                let user = creds.split_once(':').map_or(creds, |(user, _)| user);
                format!("{}{user}:***{}", &u[..s + 3], &u[at..])
            }
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl RedisArgs {
    /// Plain standalone settings for `url` (no private CA, no client certificate).
    pub fn standalone(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            mode: RedisMode::Standalone,
            ca_file: None,
            client_cert: None,
            client_key: None,
        }
    }

    /// Cluster settings for these seed nodes.
    pub fn cluster(seeds: &[String]) -> Self {
        Self {
            mode: RedisMode::Cluster,
            ..Self::standalone(seeds.join(","))
        }
    }

    /// The private CA and client certificate, read from their files; `None` when neither is
    /// configured (TLS, if the URL asks for it, then trusts the system's roots).
    fn certificates(&self) -> Result<Option<TlsCertificates>> {
        let root_cert = self.ca_file.as_deref().map(read_pem).transpose()?;
        let client_tls = match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: read_pem(cert)?,
                client_key: read_pem(key)?,
            }),
            (None, None) => None,
            _ => {
                return Err(config(
                    "USHER_REDIS_CLIENT_CERT and USHER_REDIS_CLIENT_KEY go together",
                ))
            }
        };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// The URLs of the seed nodes (one in standalone mode).
    fn urls(&self) -> Result<Vec<&str>> {
        let urls: Vec<&str> = self.url.split(',').map(str::trim).collect();
        if urls.iter().any(|u| u.is_empty()) {
            return Err(config("USHER_REDIS_URL has an empty entry"));
        }
        if self.mode == RedisMode::Sentinel {
            let files = self.ca_file.is_some() || self.client_cert.is_some();
            if files && !sentinel::wants_tls(self.url.trim()) {
                return Err(config(
                    "USHER_REDIS_CA_FILE and USHER_REDIS_CLIENT_CERT need a rediss+sentinel:// URL",
                ));
            }
            return Ok(vec![self.url.trim()]);
        }
        if self.mode == RedisMode::Standalone && urls.len() > 1 {
            return Err(config(
                "USHER_REDIS_URL lists several nodes: set USHER_REDIS_MODE=cluster",
            ));
        }
        let plain = urls.iter().any(|u| !u.starts_with("rediss://"));
        if plain && (self.ca_file.is_some() || self.client_cert.is_some()) {
            return Err(config(
                "USHER_REDIS_CA_FILE and USHER_REDIS_CLIENT_CERT need a rediss:// URL",
            ));
        }
        Ok(urls)
    }
}

impl RedisArgs {
    /// A plain client for one node, for pub/sub (the passthrough wake channel). In cluster mode
    /// the first seed node: Redis Cluster forwards `PUBLISH` to every node, so subscribing on
    /// any one hears every wake. Sentinel mode has none yet (the caller falls back to polling).
    pub(super) fn pubsub_client(&self) -> Result<redis::Client> {
        install_crypto_provider();
        if self.mode == RedisMode::Sentinel {
            return Err(config("wake signals are not subscribed in sentinel mode"));
        }
        let urls = self.urls()?;
        Ok(match self.certificates()? {
            Some(certs) => redis::Client::build_with_tls(urls[0], certs)?,
            None => redis::Client::open(urls[0])?,
        })
    }
}

fn config(msg: &'static str) -> StoreError {
    StoreError::Redis(redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        msg,
    )))
}

fn read_pem(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        StoreError::Redis(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "cannot read a TLS file",
            format!("{}: {e}", path.display()),
        )))
    })
}

/// redis-rs builds rustls without choosing a crypto provider; usher uses ring. Installed once
/// per process, before the first TLS handshake (an application that installed its own keeps
/// it).
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A connection to Redis, standalone or cluster. Cheap to clone: clones share the
/// underlying sockets.
#[derive(Clone)]
pub(super) enum RedisConn {
    Standalone(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(Arc<SentinelConn>),
}

impl RedisConn {
    /// Connects; every command must be answered within `response_timeout`.
    pub(super) async fn open(args: &RedisArgs, response_timeout: Duration) -> Result<Self> {
        const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
        install_crypto_provider();
        let urls = args.urls()?;
        let certs = args.certificates()?;
        match args.mode {
            RedisMode::Standalone => {
                let client = match certs {
                    Some(certs) => redis::Client::build_with_tls(urls[0], certs)?,
                    None => redis::Client::open(urls[0])?,
                };
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(response_timeout))
                    .set_number_of_retries(3)
                    .set_max_delay(Duration::from_secs(2));
                Ok(Self::Standalone(
                    client.get_connection_manager_with_config(cfg).await?,
                ))
            }
            RedisMode::Cluster => {
                let mut builder = ClusterClient::builder(urls)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(response_timeout);
                if let Some(certs) = certs {
                    builder = builder.certs(certs);
                }
                let client = builder.build()?;
                Ok(Self::Cluster(client.get_async_connection().await?))
            }
            RedisMode::Sentinel => Ok(Self::Sentinel(
                SentinelConn::open(
                    urls[0],
                    certs,
                    sentinel::config(CONNECT_TIMEOUT, response_timeout),
                )
                .await?,
            )),
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Standalone(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
            Self::Sentinel(s) => Box::pin(s.command(cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(s) => Box::pin(s.pipeline(pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Standalone(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
            Self::Sentinel(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_nodes_need_cluster_mode() {
        let mut a = RedisArgs::standalone("redis://a:1,redis://b:2");
        assert!(a.urls().is_err());
        a.mode = RedisMode::Cluster;
        assert_eq!(a.urls().expect("cluster"), ["redis://a:1", "redis://b:2"]);
        assert!(RedisArgs::standalone("redis://a:1,").urls().is_err());
    }

    #[test]
    fn debug_hides_passwords() {
        let a = RedisArgs::cluster(&[
            "redis://app:s3cret@a:1".to_owned(),
            "rediss://:s3cret@b:2".to_owned(),
            "redis://c:3".to_owned(),
        ]);
        let shown = format!("{a:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("redis://app:***@a:1,rediss://:***@b:2,redis://c:3"),
            "{shown}"
        );
    }

    #[test]
    fn certificates_need_tls_urls() {
        let mut a = RedisArgs::standalone("redis://a:1");
        a.ca_file = Some("/ca.pem".into());
        assert!(a.urls().is_err());
        a.url = "rediss://a:1".into();
        assert!(a.urls().is_ok());
        // Sentinel mode: the TLS files need the TLS sentinel scheme.
        a.mode = RedisMode::Sentinel;
        a.url = "redis+sentinel://a:1/m".into();
        assert!(a.urls().is_err());
        a.url = "rediss+sentinel://a:1/m".into();
        assert!(a.urls().is_ok());
        // An unreadable file is a clean error, not a panic.
        assert!(a.certificates().is_err());
    }
}
