//! Every Redis call's latency and failures, measured in one place: the connection every
//! store operation runs on wraps the real one and times each command and pipeline.
//!
//! The series are recorded through the [`metrics`] facade: a process that installs a
//! recorder (the servers' `/metrics`) exports them, any other records into nothing. The
//! `command` label is a closed set (the commands the store sends, `pipeline`, or `other`),
//! so the series count does not grow with traffic.

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// Latency of one Redis command or pipeline, by `command` (histogram; the buckets are
/// `usher_http::metrics::REDIS_BUCKETS`, 100 µs to 5 s: a blocking `XREADGROUP` waits up
/// to 5 s by design, so dashboards look at it apart from the others).
pub const REDIS_COMMAND_DURATION: &str = "usher_redis_command_duration_seconds";
/// Redis commands or pipelines that failed (connection lost, timeout, or an error reply the
/// store does not expect), by `command`.
pub const REDIS_COMMAND_ERRORS: &str = "usher_redis_command_errors_total";

/// The commands the store sends, as `command` label values.
const COMMANDS: &[&str] = &[
    "EVALSHA",
    "EVAL",
    "SCRIPT",
    "XREADGROUP",
    "XADD",
    "XACK",
    "XDEL",
    "XGROUP",
    "XINFO",
    "XPENDING",
    "PEXPIRE",
    "PING",
    "SET",
    "GET",
    "HSET",
    "HDEL",
    "HGET",
    "HGETALL",
    "HMGET",
    "SADD",
    "SMEMBERS",
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZRANGE",
    "ZRANGEBYSCORE",
    "ZREM",
    "ZREMRANGEBYSCORE",
    "LRANGE",
];

/// Registers the help text of the series (once per process is enough).
pub fn describe_redis_metrics() {
    metrics::describe_histogram!(
        REDIS_COMMAND_DURATION,
        metrics::Unit::Seconds,
        "Latency of Redis commands and pipelines, by command (XREADGROUP blocks by design)."
    );
    metrics::describe_counter!(
        REDIS_COMMAND_ERRORS,
        "Redis commands and pipelines that failed, by command."
    );
}

/// A connection whose every call is timed.
#[derive(Clone)]
pub(super) struct Timed<C>(pub(super) C);

/// The label of a command: its name when it is one the store sends, else `other`.
fn label(cmd: &Cmd) -> &'static str {
    let Some(redis::Arg::Simple(name)) = cmd.args_iter().next() else {
        return "other";
    };
    COMMANDS
        .iter()
        .find(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .copied()
        .unwrap_or("other")
}

/// Error replies the store handles as answers, not failures (a stream group that exists
/// already, or one to recreate).
fn expected(e: &RedisError) -> bool {
    matches!(e.code(), Some("BUSYGROUP" | "NOGROUP"))
}

fn observe<T>(command: &'static str, started: Instant, r: &Result<T, RedisError>) {
    metrics::histogram!(REDIS_COMMAND_DURATION, "command" => command)
        .record(started.elapsed().as_secs_f64());
    if let Err(e) = r {
        if !expected(e) {
            metrics::counter!(REDIS_COMMAND_ERRORS, "command" => command).increment(1);
        }
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Timed<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let started = Instant::now();
            let r = self.0.req_packed_command(cmd).await;
            observe(label(cmd), started, &r);
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let started = Instant::now();
            let r = self.0.req_packed_commands(pipeline, offset, count).await;
            observe("pipeline", started, &r);
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_a_closed_set() {
        assert_eq!(label(&redis::cmd("XADD")), "XADD");
        assert_eq!(label(&redis::cmd("evalsha")), "EVALSHA");
        assert_eq!(label(&redis::cmd("FLUSHALL")), "other");
        assert_eq!(label(&redis::Cmd::new()), "other");
    }
}
