//! usher-mint: entry tokens, and the keys that sign and verify them.
//!
//! * [`token`] — Ed25519 entry tokens (JWT, `alg: EdDSA`), their claims and their keys' ids.
//! * [`door`] — door tokens: a queue's bearer pass for one window, handed out by a gateway's
//!   open door while Redis is unreachable (signed ahead here, never by a gateway).
//! * [`keyring`] — the signing key and the verify-only keys, and the JWKS document.
//!
//! Only the dispatcher mints, so only the dispatcher (and the test harness) links this crate.
//! A gateway must never be able to mint an entry token, not even by a bug: `usher-gateway`
//! does not depend on this crate, and the test `gateway_cannot_link_minting_code` in
//! `crates/usher-testkit/tests/redis/layering.rs` fails if any path in the crate graph leads from
//! the gateway to it or to an Ed25519 signing crate.

pub mod door;
pub mod keyring;
pub mod token;
