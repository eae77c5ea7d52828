//! Test support: a real `redis-server` per test, in-process usher servers on port 0, and an
//! SSE client that reads streams the way a browser's `EventSource` does.

pub mod browser;
pub mod procs;
pub mod redis_server;
pub mod sse;
pub mod stack;

pub use redis_server::RedisServer;
pub use sse::SseClient;
pub use stack::Stack;
