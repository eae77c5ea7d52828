//! usher-core: ids, messages, the Redis key schema, the Lua scripts, the store, and the types
//! the store itself reads and writes. Nothing here signs an entry token (that is
//! `usher-mint`'s, which a gateway cannot link) or serves HTTP.
//!
//! * [`ids`] — validated queue ids, place ids and server ids.
//! * [`messages`] — what the dispatcher writes to gateway streams and what browsers receive.
//! * [`keys`] — the Redis key schema: every key name of a queue, of a gateway, of the system.
//! * [`store`] — every Redis operation, over the scripts in `src/lua/`: the only code that
//!   knows key names and Lua.
//! * [`binding`] — a queue's `bind` setting, key thumbprints and why a proof of possession was
//!   refused (places and tokens bound to the browser's key).
//! * [`proof`] — checks a proof of possession of the browser's key (signature, request, token,
//!   time), for the gateway and the dispatcher's session API.
//! * [`challenge`] — a queue's proof-of-work setting, why a join was refused, and the checked
//!   proof the join script spends (the puzzles themselves are `usher-pow`'s).
//! * [`door`] — the open door: a queue's `on_outage` setting, door tokens carried in `state`,
//!   door periods.
//! * [`draw`] — a scheduled sale's seed, commitment, entrant hashes and drawn order.
//! * [`page_settings`] — a queue's waiting-room page settings (booking URL, embedding origin,
//!   title, logo) and their checks.
//! * [`invitation`] — a queue's invitation setting and keys; checks a shop's invitation (an
//!   Ed25519 JWT: signature, queue, time) and names why one was refused.
//! * [`lanes`] — lane names and a queue's lanes with guaranteed shares.
//! * [`policy`] — the adaptive rate and why a queue admits at its rate.
//! * [`inventory`] — what the booking service says is left, and what the line is told of it.
//! * [`time`] — wall-clock milliseconds and RFC 3339 text.
//!
//! Invariants kept here (see `ARCHITECTURE.md`): all keys of one queue share the hash tag
//! `{q:<id>}`, and every Lua script touches the keys of exactly one hash tag.

pub mod binding;
pub mod challenge;
pub mod door;
pub mod draw;
pub mod ids;
pub mod inventory;
pub mod invitation;
pub mod keys;
pub mod lanes;
pub mod messages;
pub mod page_settings;
pub mod policy;
pub mod proof;
pub mod record;
pub mod store;
pub mod time;

pub use ids::{PlaceId, QueueId};
