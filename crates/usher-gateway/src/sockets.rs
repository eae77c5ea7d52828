//! The gateway's client sockets, counted against its caps: all of them (`--max-sockets`, the
//! last few kept for health checks), those of one client address (`--ip-max-sockets`), and
//! the streams (`--max-connections`).
//!
//! When sockets run short (a new connection lands in the health-check reserve or past the
//! cap, or more sockets are open than streams are allowed), the sockets that hold nothing a
//! browser is waiting on give way, so that descriptors go to streams:
//! * idle keep-alive connections, between requests, close at once;
//! * connections whose request head has been arriving for [`HEAD_SHED_AGE`] or longer close
//!   too. A browser sends its head in one packet; a head still unfinished after a second is
//!   a slow client's or an attacker's, who would otherwise hold the socket until the head
//!   timeout (10 s by default, and renewable by reconnecting). Behind `--proxy-protocol` a
//!   new connection's first head includes its PROXY header: one still waiting for the header
//!   a second after the connection's start closes the same way. (Such sockets are not counted
//!   per address while they wait: their peer is the load balancer, which may open
//!   connections before its clients send anything.)
//!
//! Both are told through a counter and a wake-up ([`Sockets::shed`]): a connection registers
//! for the wake-up before it reads the counter, so one that was not yet waiting when the
//! wake-up went out still sees the counter moved. Whether it closes never depends on how far
//! its task had got.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::client::IpKey;

/// How long a request head may have been arriving before it gives way when sockets run
/// short (see the module's documentation).
pub(crate) const HEAD_SHED_AGE: Duration = Duration::from_secs(1);

/// Where a new connection falls against `--max-sockets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zone {
    Normal,
    /// In the sockets kept for health checks.
    Reserve,
    /// Past the cap: closed at once.
    Over,
}

/// The client connections open, against the caps on sockets and on streams.
pub(crate) struct Sockets {
    /// Shared with the gateway, which reports it on `/metrics`.
    open: Arc<AtomicU64>,
    /// `--max-connections`: streams.
    max_streams: u64,
    /// `--max-sockets`.
    max: u64,
    /// Past this many open sockets, a new one is in the health-check reserve.
    reserve_from: u64,
    /// How many times sockets were told to give way (see [`Sockets::shed`]).
    sheds: AtomicU64,
    /// Wakes idle keep-alive connections and old unfinished heads to close.
    shed_wakeup: Notify,
    /// `--ip-max-sockets` (`0`: off), and the sockets each address holds.
    per_address: u32,
    addresses: Mutex<HashMap<IpKey, u32>>,
}

impl Sockets {
    pub(crate) fn new(
        open: Arc<AtomicU64>,
        max_streams: u64,
        max: u64,
        health_reserve: u64,
        per_address: u32,
    ) -> Self {
        Self {
            open,
            max_streams,
            max,
            reserve_from: max.saturating_sub(health_reserve),
            sheds: AtomicU64::new(0),
            shed_wakeup: Notify::new(),
            per_address,
            addresses: Mutex::default(),
        }
    }

    /// Tells every connection that is idle now, or that turns idle after the request it is
    /// serving, and every one whose head has been arriving for [`HEAD_SHED_AGE`], to close.
    /// The count goes up before the wake-up (see the module's documentation).
    pub(crate) fn shed(&self) {
        self.sheds.fetch_add(1, Ordering::SeqCst);
        self.shed_wakeup.notify_waiters();
    }

    pub(crate) fn sheds(&self) -> u64 {
        self.sheds.load(Ordering::SeqCst)
    }

    /// Resolves on the next [`Sockets::shed`] (`enable` it before reading [`Sockets::sheds`]).
    pub(crate) fn shed_wakeup(&self) -> tokio::sync::futures::Notified<'_> {
        self.shed_wakeup.notified()
    }

    /// Whether more connections are open than the stream cap allows (a new one counted). Then
    /// the new connection tells the idle ones to close ([`Sockets::shed`]), so idle keep-alive
    /// connections never keep descriptors from streams.
    pub(crate) fn over_stream_cap(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.max_streams
    }

    /// Where the newest connection (counted) falls against the socket cap.
    pub(crate) fn zone(&self) -> Zone {
        let open = self.open.load(Ordering::Relaxed);
        if open > self.max {
            Zone::Over
        } else if open > self.reserve_from {
            Zone::Reserve
        } else {
            Zone::Normal
        }
    }

    /// Counts a socket of `ip` against `--ip-max-sockets`: `None` when the address holds as
    /// many as it may (the socket is then closed), else the count, released on drop.
    pub(crate) fn of_address(self: &Arc<Self>, ip: IpKey) -> Option<AddressSocket> {
        if self.per_address > 0 {
            let mut a = self.addresses.lock().unwrap_or_else(|p| p.into_inner());
            let n = a.entry(ip).or_insert(0);
            if *n >= self.per_address {
                return None;
            }
            *n += 1;
        }
        Some(AddressSocket {
            sockets: self.clone(),
            ip,
        })
    }
}

/// Counts an open client connection for as long as it lives.
pub(crate) struct OpenSocket(Arc<Sockets>);

impl OpenSocket {
    pub(crate) fn new(sockets: &Arc<Sockets>) -> Self {
        sockets.open.fetch_add(1, Ordering::Relaxed);
        Self(sockets.clone())
    }
}

impl Drop for OpenSocket {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A socket counted for its client address; the entry goes when the address holds none.
pub(crate) struct AddressSocket {
    sockets: Arc<Sockets>,
    ip: IpKey,
}

impl Drop for AddressSocket {
    fn drop(&mut self) {
        if self.sockets.per_address == 0 {
            return;
        }
        let mut a = self
            .sockets
            .addresses
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = a.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                a.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_sockets_and_gets_them_back() {
        let s = Arc::new(Sockets::new(Arc::default(), 10, 10, 2, 2));
        let (a, b) = (IpKey::V4([192, 0, 2, 1]), IpKey::V4([192, 0, 2, 2]));
        let first = s.of_address(a);
        let second = s.of_address(a);
        assert!(first.is_some() && second.is_some());
        assert!(s.of_address(a).is_none(), "a third socket of one address");
        assert!(s.of_address(b).is_some(), "another address");
        drop(first);
        assert!(s.of_address(a).is_some());
        drop(second);
        let left = s.addresses.lock().map(|m| m.len()).unwrap_or_default();
        assert_eq!(left, 0, "addresses holding nothing are forgotten");
    }
}
