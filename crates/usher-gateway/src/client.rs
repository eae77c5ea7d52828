//! Who a client is: its IP address, from the socket, from a PROXY protocol header, or from
//! `X-Forwarded-For` across a known number of trusted proxies, and the key its per-IP limits
//! are counted under ([`IpKey`]).
//!
//! The rule: an address is believed only when a party we trust wrote it. The socket's peer is
//! the nearest hop; a PROXY protocol header is written by the load balancer that opened the
//! connection (only when `--proxy-protocol` says one always does); in `X-Forwarded-For`, each
//! trusted proxy appends the address it saw, so with `n` trusted proxies the client is the
//! `n`-th entry from the right. Entries further left were written by the client itself and are
//! never believed (a spoofed left-most entry would otherwise pick any client's limits).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Longest PROXY protocol header read: a v1 header is at most 107 bytes, and a v2 header from
/// a load balancer carries its addresses and a few small TLVs (AWS NLB: a VPC endpoint id).
pub(crate) const MAX_PROXY_HEADER: usize = 4096;

/// The address a limit is counted under: an IPv4 address, or an IPv6 prefix of
/// `--ipv6-prefix` bits. One subscriber is given a whole prefix, usually a /56 (often a /48 or
/// a /64) and can use any address in it, so counting IPv6 by address, or by a /64 inside a
/// /48, would let one subscriber be 2^64 (or 65,536) clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum IpKey {
    V4([u8; 4]),
    /// The address with every bit past the prefix cleared, and the prefix's length.
    V6Prefix([u8; 16], u8),
}

/// The IPv6 prefix length clients are grouped by when none is configured.
pub(crate) const DEFAULT_IPV6_PREFIX: u8 = 56;

impl IpKey {
    /// The key of `ip`, an IPv6 address grouped by its first `v6_prefix` bits (at most 128).
    pub(crate) fn of(ip: IpAddr, v6_prefix: u8) -> Self {
        match normalise(ip) {
            IpAddr::V4(v4) => IpKey::V4(v4.octets()),
            IpAddr::V6(v6) => {
                let bits = v6_prefix.min(128);
                let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                IpKey::V6Prefix((u128::from(v6) & mask).to_be_bytes(), bits)
            }
        }
    }
}

impl IpKey {
    /// An address in the client's network, for the fairness record's network hash
    /// (`usher_core::record::NetworkHash` keeps its /24 or /48: an IPv6 prefix configured
    /// shorter than /48 groups as that prefix).
    pub(crate) fn network_address(&self) -> IpAddr {
        match self {
            IpKey::V4(o) => IpAddr::from(*o),
            IpKey::V6Prefix(o, _) => IpAddr::from(*o),
        }
    }
}

impl std::fmt::Display for IpKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpKey::V4(o) => write!(f, "{}", std::net::Ipv4Addr::from(*o)),
            IpKey::V6Prefix(o, bits) => write!(f, "{}/{bits}", Ipv6Addr::from(*o)),
        }
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`, as a dual-stack `[::]` listener sees
/// IPv4 clients) is that IPv4 address.
pub(crate) fn normalise(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// The client's address for a request that arrived from `peer` with these
/// `X-Forwarded-For` header values (in the order received), behind `hops` trusted proxies.
///
/// With no trusted hops, the peer. Otherwise the entry `hops` from the right across all the
/// values. When there are fewer entries than hops, or that entry is not an IP address, the
/// request did not come the way the proxies are set up to send it, and the peer is used: a
/// client cannot choose its identity by leaving the header out or garbling it.
pub(crate) fn forwarded_for<'a>(
    peer: IpAddr,
    hops: usize,
    values: impl Iterator<Item = &'a [u8]>,
) -> IpAddr {
    if hops == 0 {
        return normalise(peer);
    }
    let mut entries: Vec<&[u8]> = Vec::new();
    for v in values {
        entries.extend(v.split(|&b| b == b',').map(<[u8]>::trim_ascii));
    }
    let Some(idx) = entries.len().checked_sub(hops) else {
        return normalise(peer);
    };
    std::str::from_utf8(entries[idx])
        .ok()
        .and_then(parse_entry)
        .map_or(normalise(peer), normalise)
}

/// An `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5678`,
/// `[2001:db8::1]:5678`), as some proxies write them.
fn parse_entry(s: &str) -> Option<IpAddr> {
    s.parse::<IpAddr>()
        .ok()
        .or_else(|| s.parse::<SocketAddr>().ok().map(|a| a.ip()))
}

/// What a PROXY protocol header says about a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProxyHeader {
    /// The header is complete and `len` bytes long; the client is `source`, or the peer when
    /// the header names none (v1 `UNKNOWN`, v2 `LOCAL`: the balancer's own health checks).
    Complete { len: usize, source: Option<IpAddr> },
    /// More bytes are needed.
    Partial,
    /// Not a PROXY protocol header: the connection is closed.
    Invalid,
}

/// Parses a PROXY protocol v1 or v2 header at the start of `buf`.
pub(crate) fn proxy_header(buf: &[u8]) -> ProxyHeader {
    use ppp::{v1, v2, HeaderResult, PartialResult};
    let parsed = HeaderResult::parse(buf);
    if parsed.is_incomplete() {
        return if buf.len() >= MAX_PROXY_HEADER {
            ProxyHeader::Invalid
        } else {
            ProxyHeader::Partial
        };
    }
    match parsed {
        HeaderResult::V1(Ok(h)) => {
            let source = match h.addresses {
                v1::Addresses::Tcp4(a) => Some(IpAddr::V4(a.source_address)),
                v1::Addresses::Tcp6(a) => Some(IpAddr::V6(a.source_address)),
                v1::Addresses::Unknown => None,
            };
            ProxyHeader::Complete {
                len: h.header.len(),
                source,
            }
        }
        HeaderResult::V2(Ok(h)) => {
            let source = match (h.command, h.addresses) {
                (v2::Command::Proxy, v2::Addresses::IPv4(a)) => Some(IpAddr::V4(a.source_address)),
                (v2::Command::Proxy, v2::Addresses::IPv6(a)) => Some(IpAddr::V6(a.source_address)),
                _ => None,
            };
            ProxyHeader::Complete {
                len: h.len(),
                source,
            }
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => ProxyHeader::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn mapped_ipv4_is_ipv4_and_ipv6_is_grouped_by_its_prefix() {
        let p = DEFAULT_IPV6_PREFIX;
        assert_eq!(normalise(ip("::ffff:10.1.2.3")), ip("10.1.2.3"));
        assert_eq!(
            IpKey::of(ip("::ffff:10.1.2.3"), p),
            IpKey::of(ip("10.1.2.3"), p)
        );
        // The default /56: the 256 /64s of one subscriber's /56 are one client...
        assert_eq!(
            IpKey::of(ip("2001:db8:1:200::1"), p),
            IpKey::of(ip("2001:db8:1:2ff:ffff::9"), p)
        );
        // ... and the next /56 is another.
        assert_ne!(
            IpKey::of(ip("2001:db8:1:200::1"), p),
            IpKey::of(ip("2001:db8:1:300::1"), p)
        );
        assert_eq!(
            IpKey::of(ip("2001:db8:1:2ab::1"), p).to_string(),
            "2001:db8:1:200::/56"
        );
        // Other lengths, as configured: a /48, a /64, a single address.
        assert_eq!(
            IpKey::of(ip("2001:db8:1:ffff::1"), 48),
            IpKey::of(ip("2001:db8:1::2"), 48)
        );
        assert_ne!(
            IpKey::of(ip("2001:db8:1:2::1"), 64),
            IpKey::of(ip("2001:db8:1:3::1"), 64)
        );
        assert_ne!(
            IpKey::of(ip("2001:db8::1"), 128),
            IpKey::of(ip("2001:db8::2"), 128)
        );
        assert_eq!(IpKey::of(ip("2001:db8::1"), 0), IpKey::of(ip("::1"), 0));
    }

    #[test]
    fn forwarded_for_takes_the_entry_hops_from_the_right() {
        let peer = ip("10.0.0.1");
        let values: [&[u8]; 2] = [b"6.6.6.6, 1.1.1.1", b"2.2.2.2"];
        assert_eq!(forwarded_for(peer, 0, values.into_iter()), peer);
        assert_eq!(forwarded_for(peer, 1, values.into_iter()), ip("2.2.2.2"));
        assert_eq!(forwarded_for(peer, 2, values.into_iter()), ip("1.1.1.1"));
        assert_eq!(forwarded_for(peer, 3, values.into_iter()), ip("6.6.6.6"));
        // Fewer entries than hops, garbage, no header: the peer.
        assert_eq!(forwarded_for(peer, 4, values.into_iter()), peer);
        assert_eq!(forwarded_for(peer, 1, [&b"nonsense"[..]].into_iter()), peer);
        assert_eq!(forwarded_for(peer, 1, std::iter::empty()), peer);
        // Ports and mapped addresses.
        assert_eq!(
            forwarded_for(peer, 1, [&b"[::ffff:1.2.3.4]:80"[..]].into_iter()),
            ip("1.2.3.4")
        );
    }

    #[test]
    fn proxy_headers_v1_and_v2() {
        let v1 = b"PROXY TCP4 192.0.2.7 10.0.0.1 5555 80\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            proxy_header(v1),
            ProxyHeader::Complete {
                len: 39,
                source: Some(ip("192.0.2.7"))
            }
        );
        assert_eq!(proxy_header(&v1[..10]), ProxyHeader::Partial);
        assert_eq!(
            proxy_header(b"GET / HTTP/1.1\r\n\r\n"),
            ProxyHeader::Invalid
        );
        let v2 = ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            (
                "[2001:db8::5]:4000".parse::<SocketAddr>().expect("addr"),
                "[2001:db8::1]:80".parse::<SocketAddr>().expect("addr"),
            ),
        )
        .build()
        .expect("a v2 header");
        assert_eq!(
            proxy_header(&v2),
            ProxyHeader::Complete {
                len: v2.len(),
                source: Some(ip("2001:db8::5"))
            }
        );
        assert_eq!(proxy_header(&v2[..20]), ProxyHeader::Partial);
    }
}
