//! Redis behind Sentinel: the sentinels name the current master; commands go to it over one
//! multiplexed connection. When that connection breaks, or the node answers `READONLY` (it
//! was demoted), the connection is dropped and the next command asks the sentinels again, so
//! a failover is followed without a restart. A command that meets the failover fails like
//! any Redis error, and usher's callers already retry (the next tick, the browser's retry).
//!
//! URL: `redis+sentinel://[user:password@]host:port[,host:port…]/<master name>`; the
//! credentials are the master's (the sentinels are reached without them).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, IntoConnectionInfo, Pipeline, RedisError, Value};

use super::Result;

const SCHEME: &str = "redis+sentinel://";

/// The master's connection, found through the sentinels.
pub(super) struct SentinelConn {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: RwLock<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
}

/// The parts of a `redis+sentinel://` URL: sentinel URLs, master name, master credentials
/// (`user:password`, empty for none).
fn parse(url: &str) -> std::result::Result<(Vec<String>, String, String), &'static str> {
    let rest = url
        .strip_prefix(SCHEME)
        .ok_or("sentinel mode needs a redis+sentinel:// URL")?;
    let (hosts, master) = rest
        .split_once('/')
        .ok_or("the redis+sentinel:// URL ends with /<master name>")?;
    let (creds, hosts) = hosts.rsplit_once('@').unwrap_or(("", hosts));
    let master = master.trim_end_matches('/');
    if master.is_empty() || hosts.is_empty() {
        return Err("the redis+sentinel:// URL names sentinels and a master");
    }
    let sentinels = hosts.split(',').map(|h| format!("redis://{h}")).collect();
    Ok((sentinels, master.to_owned(), creds.to_owned()))
}

impl SentinelConn {
    pub(super) async fn open(url: &str, config: AsyncConnectionConfig) -> Result<Arc<Self>> {
        let (sentinels, master, creds) =
            parse(url).map_err(|m| RedisError::from((redis::ErrorKind::InvalidClientConfig, m)))?;
        let mut node = SentinelNodeConnectionInfo::default();
        if !creds.is_empty() {
            // The master's user and password, read by redis-rs' own URL parser.
            let info = format!("redis://{creds}@localhost").into_connection_info()?;
            node = node.set_redis_connection_info(info.redis_settings().clone());
        }
        let client =
            SentinelClient::build(sentinels, master, Some(node), SentinelServerType::Master)?;
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
    use super::parse;

    #[test]
    fn sentinel_urls_name_sentinels_a_master_and_credentials() {
        let (s, m, c) = parse("redis+sentinel://u:p@a:1,b:2/mymaster").expect("valid");
        assert_eq!(s, ["redis://a:1", "redis://b:2"]);
        assert_eq!(m, "mymaster");
        assert_eq!(c, "u:p");
        let (_, _, c) = parse("redis+sentinel://a:1/m").expect("valid");
        assert!(c.is_empty());
        assert!(parse("redis://a:1/m").is_err());
        assert!(parse("redis+sentinel://a:1").is_err());
        assert!(parse("redis+sentinel://a:1/").is_err());
    }
}
