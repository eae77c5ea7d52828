//! usher-core: the model every usher process shares.
//!
//! * [`ids`] — validated queue ids and place ids.
//! * [`ticket`] — the signed, URL-safe ticket a browser holds for its place.
//! * [`challenge`] — the proof-of-work challenge: the setting, signed puzzles, solutions.
//! * [`draw`] — a scheduled sale's seed, commitment, entrant hashes and drawn order.
//! * [`messages`] — what the dispatcher writes to gateway streams and what browsers receive.
//! * [`page`] — a queue's waiting-room page settings (booking URL, embedding origin, title,
//!   logo) and their checks.
//! * [`policy`] — the adaptive rate and why a queue admits at its rate.
//! * [`position`] — turning a queue `state` snapshot into each browser's position.
//! * [`store`] — the only place that knows Redis key names and Lua scripts.
//!
//! Invariants kept here (see `ARCHITECTURE.md`): all keys of one queue share the hash tag
//! `{q:<id>}`, and every Lua script touches the keys of exactly one hash tag.

pub mod acl;
pub mod challenge;
pub mod draw;
pub mod ids;
pub mod keys;
pub mod messages;
pub mod page;
pub mod policy;
pub mod position;
pub mod secret;
pub mod store;
pub mod ticket;
pub mod time;

pub use ids::{PlaceId, QueueId};
