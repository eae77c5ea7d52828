//! HTTP plumbing shared by usher's servers: JSON errors, health and metrics routes, listening sockets and
//! serving a router until shutdown. Process set-up (runtime, logging, signals) lives in
//! `usher-runtime`; this crate knows only HTTP.
//!
//! Layout: `bucket` (token buckets: a rate per client or per key), `error` (`ApiError`), `health` (`/healthz`, `/readyz`), `metrics` (the Prometheus
//! recorder and `/metrics`), `serve` (`listen`, `serve`), `limits` (`ServeLimits`: deadlines and connection caps,
//! the whole-body deadline), `openapi` (what every server's API description shares: the error
//! body, the security schemes, the health routes' descriptions, `GET /openapi.json`).

pub mod bucket;
mod error;
mod health;
mod limits;
pub mod metrics;
pub mod openapi;
mod serve;

pub use error::{json_errors, ApiError, PageForPeople};
pub use health::{health_routes, Readiness};
pub use limits::{body_deadline, ServeLimits, MAX_BODY};
pub use serve::{listen, serve, WRITE_TIMEOUT};
