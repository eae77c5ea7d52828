//! HTTP plumbing shared by usher's servers: JSON errors, health and metrics routes, listening sockets and
//! serving a router until shutdown. Process set-up (runtime, logging, signals) lives in
//! `usher-runtime`; this crate knows only HTTP.
//!
//! Layout: `error` (`ApiError`), `health` (`/healthz`, `/readyz`), `metrics` (the Prometheus
//! recorder and `/metrics`), `serve` (`listen`, `serve`).

mod error;
mod health;
pub mod metrics;
mod serve;

pub use error::ApiError;
pub use health::{health_routes, Readiness};
pub use serve::{listen, serve};
