//! HTTP plumbing shared by usher's servers: JSON errors, health routes, listening sockets and
//! serving a router until shutdown. Process set-up (runtime, logging, signals) lives in
//! `usher-runtime`; this crate knows only HTTP.
//!
//! Layout: `error` (`ApiError`), `health` (`/healthz`, `/readyz`), `serve` (`listen`, `serve`).

mod error;
mod health;
mod serve;

pub use error::ApiError;
pub use health::{health_routes, Readiness};
pub use serve::{listen, serve};
