//! The Lua scripts, loaded once per process. Each runs as the status constants of
//! [`super::reply`], then `lua/lanes.lua` and `lua/prelude.lua` (shared helpers), then its own `lua/<name>.lua`:
//! of the shared part, only the definitions it uses ([`super::script_text`]).

use std::sync::LazyLock;

use super::invocation::{Invocation, LuaScript};

use super::reply;
use super::script_text::compose;

const PRELUDE: &str = include_str!("../lua/prelude.lua");
/// Lanes (`lua/lanes.lua`): before the prelude, whose `place_live` asks it.
const LANES: &str = include_str!("../lua/lanes.lua");
/// The fairness report's record (`lua/record.lua`): after the lanes (it finds its key after
/// theirs), before the prelude (whose no-show helper records).
const RECORD: &str = include_str!("../lua/record.lua");

/// Every definition a script may use, in order: the status constants, the lanes, the record,
/// the prelude (each script takes the ones it uses: [`compose`]).
pub(super) fn shared_text() -> String {
    format!("{}{LANES}{RECORD}{PRELUDE}", reply::lua_constants())
}

/// Defines [`Scripts`] (one field per script, named as its file) and [`SOURCES`] from one list.
macro_rules! scripts {
    ($($name:ident),+ $(,)?) => {
        pub(super) struct Scripts {
            $(pub $name: LuaScript,)+
        }

        /// Every Lua file's name and text, the prelude included (for the tests).
        #[cfg_attr(not(test), allow(dead_code))]
        pub(super) const SOURCES: &[(&str, &str)] = &[
            ("prelude.lua", PRELUDE),
            ("lanes.lua", LANES),
            ("record.lua", RECORD),
            $((
                concat!(stringify!($name), ".lua"),
                include_str!(concat!("../lua/", stringify!($name), ".lua")),
            ),)+
        ];

        pub(super) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
            let shared = shared_text();
            Scripts {
                $($name: LuaScript::new(&compose(
                    &shared,
                    include_str!(concat!("../lua/", stringify!($name), ".lua")),
                )),)+
            }
        });
    };
}

scripts!(
    join,
    resume,
    status,
    leave,
    away,
    pre_away,
    back,
    tick,
    complete,
    trim_outbox,
    acquire,
    release,
    close,
    register_gateway,
    heartbeat_gateway,
    restore,
    restore_pre,
    gateways,
    session,
    touch_session,
    end_session,
    schedule,
    draw_begin,
    draw_step,
    draw,
    beacon,
    place_key,
    prune_bound,
    put_settings,
    inventory,
    account,
    put_lanes,
    // >>> door
    door,
    // <<< door
);

/// Appends a queue's lane keys ([`crate::keys::QueueKeys::lane_keys`]) to a lane-aware
/// script's `KEYS`, after its own (each such script sets `lane_keys_at` to where they start).
pub(super) trait WithLaneKeys {
    fn lane_keys(&mut self, k: &crate::keys::QueueKeys) -> &mut Self;
}

impl WithLaneKeys for Invocation<'_> {
    fn lane_keys(&mut self, k: &crate::keys::QueueKeys) -> &mut Self {
        for key in k.lane_keys() {
            self.key(key);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::SOURCES;

    /// Redis Cluster rule: a script may touch only keys passed in `KEYS`, all in one slot. No
    /// script builds a key name itself (every usher key starts with `usher:`), so the keys a
    /// script touches are exactly the ones the Rust side passes; those always share a hash
    /// tag (keys.rs), and the `topologies` tests (`cluster::`, and the contract and positions
    /// suites on a cluster) would see Redis refuse any call that crossed slots.
    #[test]
    fn no_script_names_a_key_of_its_own() {
        for (file, source) in SOURCES {
            assert!(
                !source.contains("usher:"),
                "{file} builds a key name: pass it in KEYS instead"
            );
        }
    }
}
