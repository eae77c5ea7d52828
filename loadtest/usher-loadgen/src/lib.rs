//! usher-loadgen: real SSE load on usher gateways.
//!
//! The binary's coordinator ([`coordinator`]) starts worker processes of itself ([`worker`]);
//! each worker runs thousands of browser-like connections ([`conn`]) over bare HTTP/1.1
//! ([`http`]) and reports JSON lines ([`proto`]). The coordinator merges them into a
//! [`report::Report`], checks fairness ([`checks`]) and draws a [`plot`].
//!
//! [`joins_floor`] is the other side: the server of `usher-joins-floor`, a stand-in gateway
//! that answers every stream alike, for measuring what joins cost without usher.

pub mod checks;
pub mod cli;
pub mod conn;
pub mod coordinator;
pub mod http;
pub mod joins_floor;
pub mod limits;
pub mod plan;
pub mod plot;
pub mod proto;
pub mod report;
pub mod stalls;
pub mod stats;
pub mod worker;
