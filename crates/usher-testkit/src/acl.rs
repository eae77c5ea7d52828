//! The least a Redis ACL user must be allowed for each usher binary: the commands its store
//! operations send (Lua scripts included: Redis checks every command a script calls against
//! the user running it) and the key patterns they touch. docs/managed-redis.md ("ACL users")
//! prints these lists; the `redis` test `redis_acl::` runs each binary as a user restricted to exactly
//! its list and checks Redis denied nothing.
//!
//! Read together with [`usher_core::keys`]: a new command in the store belongs here too, and a
//! new key in `keys::DISPATCHER_ACL_KEYS` or `keys::GATEWAY_ACL_KEYS`.

use usher_core::keys;

/// A binary that talks to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Dispatcher,
    Gateway,
}

impl Component {
    pub const ALL: [Component; 2] = [Component::Dispatcher, Component::Gateway];

    pub fn name(self) -> &'static str {
        match self {
            Component::Dispatcher => "usher-dispatcher",
            Component::Gateway => "usher-gateway",
        }
    }

    /// Its ACL rules, in `ACL SETUSER` syntax: commands (`+cmd`, `+cmd|subcommand`), then
    /// key patterns (`~pattern`) and channels (`&channel`), which `usher_core::keys` lists
    /// (only `usher-core` names keys).
    pub fn rules(self) -> Vec<&'static str> {
        let (commands, keys) = match self {
            Component::Dispatcher => (DISPATCHER, keys::DISPATCHER_ACL_KEYS),
            Component::Gateway => (GATEWAY, keys::GATEWAY_ACL_KEYS),
        };
        commands.iter().chain(keys).copied().collect()
    }

    /// The whole `ACL SETUSER` line for user `user` with password `password`.
    pub fn setuser(self, user: &str, password: &str) -> String {
        format!(
            "ACL SETUSER {user} on >{password} resetkeys resetchannels -@all {}",
            self.rules().join(" ")
        )
    }
}

/// Needed in cluster mode only, by every binary: the client reads the slot map.
pub const CLUSTER_EXTRA: &[&str] = &["+cluster|slots"];

/// The dispatcher: admission ticks, leases, the registry of replicas, queue settings, session
/// API, sends to every gateway's stream; reads and prunes the gateway registry.
const DISPATCHER: &[&str] = &[
    "+ping",
    // The readiness report: persistence, memory and clock (`GET /admin/readiness`).
    "+info",
    "+time",
    "+evalsha",
    "+script|load",
    "+multi",
    "+exec",
    "+get",
    "+getrange",
    "+set",
    "+append",
    "+strlen",
    "+rename",
    "+incrby",
    "+del",
    "+unlink",
    "+exists",
    "+hget",
    "+hmget",
    "+hgetall",
    "+hscan",
    "+hset",
    "+hsetnx",
    "+hdel",
    "+hincrby",
    "+sadd",
    "+smembers",
    "+smismember",
    "+srem",
    "+zadd",
    "+zrem",
    "+zcard",
    "+zcount",
    "+zscore",
    "+zmscore",
    "+zrange",
    "+zrangebyscore",
    "+zremrangebyscore",
    "+zpopmin",
    "+llen",
    "+rpush",
    "+lrange",
    "+ltrim",
    "+pexpire",
    "+xadd",
    "+xrevrange",
    "+subscribe",
    // The fairness report's record (`lua/record.lua`): written in place, read in slices.
    "+setrange",
    "+pttl",
];

/// The gateway: joins, resumes, status, leaves, away marks, its own registry entry and
/// stream, interest in queues; relays to other gateways' streams. It never reads the
/// dispatchers' keys (the development signing key included).
const GATEWAY: &[&str] = &[
    "+ping",
    // Its clock's offset from Redis', for the readiness report.
    "+time",
    "+evalsha",
    "+script|load",
    "+get",
    "+set",
    "+incr",
    "+incrby",
    "+hget",
    "+hmget",
    "+hgetall",
    "+hset",
    "+hdel",
    "+zadd",
    "+zrem",
    "+zcard",
    "+zrank",
    "+zscore",
    "+zrange",
    "+zrangebyscore",
    "+pexpire",
    "+xgroup|create",
    "+xreadgroup",
    "+xack",
    "+xdel",
    "+xadd",
    "+publish",
    "+hexists",
    "+hincrby",
    "+rpush",
    "+zcount",
    "+exists",
    "+xinfo|groups",
    "+xlen",
    "+zremrangebyscore",
    "+sadd",
    "+srem",
    // Invitations: a join code is taken once (`GETDEL`); an account's join lock is given back.
    "+getdel",
    "+del",
    // >>> door
    // The open door's record (`lua/door.lua`): the periods' list.
    "+lpush",
    "+ltrim",
    // <<< door
    // The fairness report's record (`lua/record.lua`): a join writes its places' entries.
    "+setrange",
];
