//! Calling one of the Lua scripts: `EVALSHA` with its keys and arguments, loading the script
//! first when Redis does not have it (`NOSCRIPT`: a restarted or failed-over Redis).
//!
//! What redis-rs's `ScriptInvocation` does, with one difference: keys and arguments are
//! written into two byte buffers as they are added, where `ScriptInvocation` keeps each in a
//! `Vec` of its own. A join call passes 28 keys and 8 arguments, so that was some forty
//! allocations per call on a gateway's hottest path (BENCHMARKS.md, "Where the time goes").

use redis::{
    Arg, Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs,
};

/// One of the store's scripts (its text and SHA-1), called through [`Invocation`].
pub(super) struct LuaScript(Script);

impl LuaScript {
    pub(super) fn new(code: &str) -> Self {
        Self(Script::new(code))
    }

    /// An invocation with its first key.
    pub(super) fn key<T: ToRedisArgs>(&self, key: T) -> Invocation<'_> {
        let mut inv = self.prepare_invoke();
        inv.key(key);
        inv
    }

    /// An invocation with no keys or arguments yet.
    pub(super) fn prepare_invoke(&self) -> Invocation<'_> {
        // Room for a join call's keys and arguments (the largest of the common calls), so
        // they go in without growing the buffers: four allocations for them (and two for the
        // command they make), where growing them one value at a time took a dozen or more.
        Invocation {
            script: &self.0,
            keys: Cmd::with_capacity(32, 1024),
            args: Cmd::with_capacity(16, 256),
        }
    }
}

/// A prepared call of a [`LuaScript`]. `Cmd` serves as the buffer of each list: it appends
/// every value's bytes to one `Vec` (and its end offset to another), whatever the value.
pub(super) struct Invocation<'a> {
    script: &'a Script,
    keys: Cmd,
    args: Cmd,
}

impl Invocation<'_> {
    /// Adds a key: the script's next `KEYS[i]`.
    pub(super) fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        self.keys.arg(key);
        self
    }

    /// Adds an argument: the script's next `ARGV[i]`.
    pub(super) fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        self.args.arg(arg);
        self
    }

    /// Runs the script, loading it first if Redis does not know it.
    pub(super) async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        let eval = self.eval_cmd();
        match eval.query_async(con).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(con).await?;
                eval.query_async(con).await
            }
            other => other,
        }
    }

    /// `EVALSHA <sha1> <number of keys> <keys…> <arguments…>`.
    fn eval_cmd(&self) -> Cmd {
        let keys = self.keys.args_iter();
        let args = self.args.args_iter();
        let hash = self.script.get_hash();
        let bytes: usize = keys.clone().chain(args.clone()).map(arg_len).sum();
        let mut cmd = Cmd::with_capacity(3 + keys.len() + args.len(), 16 + hash.len() + bytes);
        cmd.arg("EVALSHA").arg(hash).arg(keys.len());
        for a in keys.chain(args) {
            if let Arg::Simple(bytes) = a {
                cmd.arg(bytes);
            }
        }
        cmd
    }
}

/// A value's length in bytes (a cursor, which no script takes, has none).
fn arg_len(a: Arg<&[u8]>) -> usize {
    match a {
        Arg::Simple(b) => b.len(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command is what redis-rs's own invocation sends: `EVALSHA`, the hash, the number of
    /// keys, the keys in order, the arguments in order, each value (a list's each element) as
    /// its own argument, keys and arguments added in any order.
    #[test]
    fn the_command_is_evalsha_with_the_keys_then_the_arguments() {
        let script = LuaScript::new("return {KEYS[1], ARGV[1]}");
        let mut ours = script.key("usher:{q:a}:meta");
        ours.arg(7u16)
            .key(&["k2", "k3"][..])
            .arg("x")
            .arg(&b"\x00\xff"[..]);
        let expected = redis::cmd("EVALSHA")
            .arg(script.0.get_hash())
            .arg(3)
            .arg("usher:{q:a}:meta")
            .arg("k2")
            .arg("k3")
            .arg(7u16)
            .arg("x")
            .arg(&b"\x00\xff"[..])
            .get_packed_command();
        assert_eq!(ours.eval_cmd().get_packed_command(), expected);
        assert_eq!(script.prepare_invoke().eval_cmd().get_packed_command(), {
            redis::cmd("EVALSHA")
                .arg(script.0.get_hash())
                .arg(0)
                .get_packed_command()
        });
    }
}
