//! A whole usher stack in this process: a real `redis-server` (or a real Redis Cluster), a
//! dispatcher, gateways and the demo booking service, each on a port-0 listener, each
//! stoppable.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use usher_core::store::RedisArgs;

use crate::redis_cluster::RedisCluster;
use crate::redis_server::RedisServer;

/// Where a stack's Redis runs: one `redis-server` ([`Stack::start`]) or a cluster
/// ([`Stack::launch`] with `Stack::<RedisCluster>`). A suite that must pass on both writes
/// its scenarios generic over this.
pub trait Backend: Sized + Send + 'static {
    /// Starts it, each `redis-server` with `server_args`.
    fn start(server_args: &[&str]) -> anyhow::Result<Self>;
    /// The Redis settings usher's servers are given.
    fn redis_args(&self) -> RedisArgs;
}

impl Backend for RedisServer {
    fn start(server_args: &[&str]) -> anyhow::Result<Self> {
        RedisServer::start_with(server_args)
    }
    fn redis_args(&self) -> RedisArgs {
        RedisArgs::standalone(self.url())
    }
}

impl Backend for RedisCluster {
    fn start(server_args: &[&str]) -> anyhow::Result<Self> {
        RedisCluster::start(server_args)
    }
    fn redis_args(&self) -> RedisArgs {
        RedisCluster::redis_args(self)
    }
}

/// One in-process server.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    handle: JoinHandle<anyhow::Result<()>>,
}

impl Server {
    /// Starts `run(listener, shutdown)` on 127.0.0.1:0.
    pub async fn spawn<F, Fut, E>(run: F) -> anyhow::Result<Self>
    where
        F: FnOnce(TcpListener, oneshot::Receiver<()>) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: std::error::Error + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let fut = run(listener, rx);
        let handle = tokio::spawn(async move { fut.await.map_err(anyhow::Error::from) });
        Ok(Self {
            addr,
            stop: Some(tx),
            handle,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Triggers shutdown and waits (at most 10 s) for the server to finish.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        // Generous: a task may still be waiting out a Redis timeout (a frozen master in the
        // failover tests) before it sees the shutdown.
        crate::wait::within(
            "the server to stop",
            Duration::from_secs(30),
            &mut self.handle,
        )
        .await??
    }
}

async fn shutdown(rx: oneshot::Receiver<()>) {
    let _ = rx.await;
}

/// Options for [`Stack::start`].
#[derive(Debug, Clone)]
pub struct StackOptions {
    pub gateways: usize,
    pub tick_ms: u64,
    pub booking: bool,
    /// Extra `redis-server` arguments (default: no persistence).
    pub redis_args: Vec<&'static str>,
    /// The dispatcher's queue lease, when a test needs other than its default (3 ticks).
    pub lease_ttl_ms: Option<u64>,
    /// The gateways' `USHER_TICKET_KEY`; `None` runs them in development mode (a key shared
    /// through Redis), as most tests do.
    pub ticket_key: Option<&'static str>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            gateways: 1,
            tick_ms: 100,
            booking: false,
            redis_args: vec!["--save", "", "--appendonly", "no"],
            lease_ttl_ms: None,
            ticket_key: None,
        }
    }
}

/// Redis + dispatcher + gateways (+ booking demo).
pub struct Stack<R = RedisServer> {
    pub redis: R,
    pub dispatcher: Server,
    pub gateways: Vec<Server>,
    pub booking: Option<Server>,
    /// Sends the test admin token ([`crate::config::admin_client`]).
    pub http: reqwest::Client,
}

/// Starts a gateway against `redis_url`.
pub async fn gateway(redis_url: &str) -> anyhow::Result<Server> {
    gateway_with(crate::config::gateway(redis_url)).await
}

/// Starts a gateway with `cfg` (e.g. [`crate::config::gateway`], then changed).
pub async fn gateway_with(cfg: usher_gateway::Config) -> anyhow::Result<Server> {
    Server::spawn(|l, rx| usher_gateway::run(cfg, l, shutdown(rx))).await
}

/// Starts a dispatcher against `redis_url`.
pub async fn dispatcher(redis_url: &str, tick_ms: u64) -> anyhow::Result<Server> {
    dispatcher_with(crate::config::dispatcher(redis_url, tick_ms)).await
}

/// Starts a dispatcher with `cfg` (e.g. [`crate::config::dispatcher`], then changed).
pub async fn dispatcher_with(cfg: usher_dispatcher::Config) -> anyhow::Result<Server> {
    Server::spawn(|l, rx| usher_dispatcher::run(cfg, l, shutdown(rx))).await
}

/// Starts the demo booking service against the dispatcher at `dispatcher_url` (its JWKS and
/// its session API).
pub async fn booking(dispatcher_url: &str) -> anyhow::Result<Server> {
    let cfg = crate::config::booking(dispatcher_url);
    Server::spawn(|l, rx| usher_booking_demo::run(cfg, l, shutdown(rx))).await
}

impl Stack<RedisServer> {
    /// A stack on one fresh `redis-server`.
    pub async fn start(opts: StackOptions) -> anyhow::Result<Self> {
        Self::launch(opts).await
    }
}

impl<R: Backend> Stack<R> {
    /// A stack on a fresh backend `R` (e.g. `Stack::<RedisCluster>::launch`).
    pub async fn launch(opts: StackOptions) -> anyhow::Result<Self> {
        init_logs();
        let redis = R::start(&opts.redis_args)?;
        let args = redis.redis_args();
        let mut d = crate::config::dispatcher(&args.url, opts.tick_ms);
        d.redis = args.clone();
        if let Some(ms) = opts.lease_ttl_ms {
            d.lease_ttl_ms = ms;
        }
        let dispatcher = dispatcher_with(d).await?;
        let mut gateways = Vec::new();
        for _ in 0..opts.gateways {
            let mut g = crate::config::gateway(&args.url);
            g.redis = args.clone();
            g.ticket_key = opts.ticket_key.map(str::to_owned);
            gateways.push(gateway_with(g).await?);
        }
        let booking = if opts.booking {
            Some(booking(&dispatcher.url()).await?)
        } else {
            None
        };
        let stack = Self {
            redis,
            dispatcher,
            gateways,
            booking,
            http: crate::config::admin_client(),
        };
        stack.wait_ready().await?;
        Ok(stack)
    }
}

impl<R> Stack<R> {
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let mut urls = vec![self.dispatcher.url()];
        urls.extend(self.gateways.iter().map(Server::url));
        for u in urls {
            // Generous: a debug build starting on a loaded machine; not what any test checks.
            crate::wait::eventually_within(
                &format!("{u} to answer /readyz"),
                Duration::from_secs(30),
                async || {
                    self.http
                        .get(format!("{u}/readyz"))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success())
                },
            )
            .await?;
        }
        Ok(())
    }

    pub fn gateway_url(&self, i: usize) -> String {
        self.gateways[i].url()
    }

    /// `PUT /admin/queues/{queue}` on the dispatcher (with the test admin token).
    /// How many places wait in `queue`, as the admin API counts them.
    pub async fn waiting(&self, queue: &str) -> anyhow::Result<u64> {
        let v = self.queue(queue).await?;
        v["waiting"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("no waiting count in {v}"))
    }

    pub async fn put_queue(&self, queue: &str, body: Value) -> anyhow::Result<Value> {
        let r = self
            .http
            .put(format!("{}/admin/queues/{queue}", self.dispatcher.url()))
            .json(&body)
            .send()
            .await?;
        let status = r.status();
        let v: Value = r.json().await?;
        anyhow::ensure!(status.is_success(), "PUT queue failed: {status} {v}");
        Ok(v)
    }

    /// Creates an open queue admitting `admit_per_second`, where everyone queues
    /// (`passthrough` off: these tests are about the line; passthrough's own tests turn it on).
    pub async fn create_queue(&self, queue: &str, admit_per_second: f64) -> anyhow::Result<Value> {
        self.put_queue(
            queue,
            json!({"admit_per_second": admit_per_second, "session_ttl_seconds": 600, "open": true,
                "passthrough": false}),
        )
        .await
    }

    /// `GET /admin/queues/{queue}`.
    pub async fn queue(&self, queue: &str) -> anyhow::Result<Value> {
        Ok(self
            .http
            .get(format!("{}/admin/queues/{queue}", self.dispatcher.url()))
            .send()
            .await?
            .json()
            .await?)
    }
}

/// Logs to the test output when `RUST_LOG` is set.
pub fn init_logs() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// Runs each scenario `name::<R: Backend>()` of a test file as a test `$module::name` on
/// backend `$backend` (`RedisServer` or `RedisCluster`). The test binaries call it through
/// their own `on_every_backend!`: `redis` as `standalone::name` on one `redis-server`,
/// `topologies` as `cluster::name` on a 3-master Redis Cluster, compiling the same files. A
/// suite written this way passes on both or fails.
#[macro_export]
macro_rules! on_backend {
    ($module:ident, $backend:ident, $($name:ident),+ $(,)?) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() -> anyhow::Result<()> {
                    super::$name::<$crate::$backend>().await
                }
            )+
        }
    };
}
