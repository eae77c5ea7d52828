//! A TCP relay in front of a real `redis-server` that can hold back Redis's answers on one
//! connection, for tests of what a server does while one of its Redis calls is unanswered.
//!
//! Every command a client sends is passed on at once (so Redis runs it in the order it came)
//! and logged as its words (`["LRANGE", key, "0", "9"]`). When a command matches the rule
//! set with [`RedisRelay::hold_after`], the answers on that command's connection, its own
//! included, are kept from the client until [`RedisRelay::release`]: the command has run,
//! and the client is still waiting for it. Other connections (a pub/sub subscription) go on.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Decides, from each command's words in turn, whether to hold the answers from there on.
type Rule = Box<dyn FnMut(&[String]) -> bool + Send>;

#[derive(Default)]
struct State {
    /// Every command passed on so far, in order, by connection.
    commands: Vec<(usize, Vec<String>)>,
    rule: Option<Rule>,
    /// The connection whose answers are held, once the rule matched.
    held: Option<usize>,
    /// Answers kept back from that connection so far.
    kept: Vec<u8>,
}

/// The relay; dropped, it stops relaying (its connections close).
pub struct RedisRelay {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    /// Bumped to let the held answers go.
    released: watch::Sender<u64>,
    _tasks: JoinSet<()>,
}

impl RedisRelay {
    /// Relays connections to `127.0.0.1:upstream_port`.
    pub async fn start(upstream_port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (released, _) = watch::channel(0);
        let mut tasks = JoinSet::new();
        let (st, tx) = (state.clone(), released.clone());
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            let mut next = 0;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
                    continue;
                };
                next += 1;
                conns.spawn(relay(next, client, server, st.clone(), tx.subscribe()));
            }
        });
        Ok(Self {
            addr,
            state,
            released,
            _tasks: tasks,
        })
    }

    /// The URL clients connect to.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Holds the answers of the connection of the first command from now on for which `rule`
    /// says so (it sees every command's words, in order), that command's answer included.
    pub fn hold_after(&self, rule: impl FnMut(&[String]) -> bool + Send + 'static) {
        self.lock().rule = Some(Box::new(rule));
    }

    /// The answers kept back so far (empty until the rule matched and Redis answered).
    pub fn kept(&self) -> Vec<u8> {
        self.lock().kept.clone()
    }

    /// How many commands were passed on so far: a mark for [`RedisRelay::saw_since`].
    pub fn seen(&self) -> usize {
        self.lock().commands.len()
    }

    /// Whether a command for which `matches` holds was passed on after the first `mark`.
    pub fn saw_since(&self, mark: usize, matches: impl Fn(&[String]) -> bool) -> bool {
        let s = self.lock();
        s.commands.iter().skip(mark).any(|(_, c)| matches(c))
    }

    /// Lets the held answers go on to their client, and holds no more.
    pub fn release(&self) {
        {
            let mut s = self.lock();
            s.rule = None;
            s.held = None;
        }
        // Wakes every connection's answers, the held one's among them.
        self.released.send_modify(|n| *n += 1);
    }
}

/// (A panic elsewhere leaves the state as it was: still worth reading.)
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Takes the first whole command (a RESP array of bulk strings, as redis-rs sends every
/// command) off the front of `buf`: its words, or `None` while it is incomplete (or not such
/// an array: then nothing more is logged on that connection, and it is still relayed).
fn take_command(buf: &mut Vec<u8>) -> Option<Vec<String>> {
    let mut at = 0;
    let line = |at: &mut usize| -> Option<usize> {
        let end = buf[*at..].windows(2).position(|w| w == b"\r\n")? + *at;
        let n = std::str::from_utf8(buf.get(*at + 1..end)?)
            .ok()?
            .parse()
            .ok()?;
        *at = end + 2;
        Some(n)
    };
    let count = line(&mut at)?;
    let mut words = Vec::with_capacity(count);
    for _ in 0..count {
        let len = line(&mut at)?;
        let word = buf.get(at..at + len)?;
        words.push(String::from_utf8_lossy(word).into_owned());
        at += len + 2;
        if at > buf.len() {
            return None;
        }
    }
    buf.drain(..at);
    Some(words)
}

/// Relays one connection (`id`) both ways until either side closes it.
async fn relay(
    id: usize,
    client: TcpStream,
    server: TcpStream,
    state: Arc<Mutex<State>>,
    mut released: watch::Receiver<u64>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let st = state.clone();
    let requests = async move {
        let (mut buf, mut pending) = ([0u8; 16 * 1024], Vec::new());
        loop {
            let n = match from_client.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            pending.extend_from_slice(&buf[..n]);
            // Decided before the bytes go on, so no answer to a held command slips through.
            {
                let mut s = lock(&st);
                while let Some(words) = take_command(&mut pending) {
                    if s.held.is_none() && s.rule.as_mut().is_some_and(|r| r(&words)) {
                        s.held = Some(id);
                    }
                    s.commands.push((id, words));
                }
            }
            if to_server.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let answers = async move {
        let (mut buf, mut unsent) = ([0u8; 16 * 1024], Vec::new());
        loop {
            tokio::select! {
                read = from_server.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        unsent.extend_from_slice(&buf[..n]);
                        let mut s = lock(&state);
                        if s.held == Some(id) {
                            s.kept.extend_from_slice(&buf[..n]);
                            continue;
                        }
                    }
                },
                changed = released.changed() => if changed.is_err() { return },
            }
            if lock(&state).held == Some(id) {
                continue;
            }
            if !unsent.is_empty() && to_client.write_all(&unsent).await.is_err() {
                return;
            }
            unsent.clear();
        }
    };
    tokio::join!(requests, answers);
}
