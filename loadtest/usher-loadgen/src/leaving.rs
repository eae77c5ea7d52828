//! Browsers that give up (`--leave-per-minute`): each connection's patience is drawn from the
//! seed and its index, so a run is reproducible, and a browser still waiting when it runs out
//! leaves as the page does, `DELETE /api/queues/{queue}/tickets/{ticket}`.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::plan::Gateway;

/// A number in [0, 1) from `seed` and `index` (SplitMix64).
fn uniform(seed: u64, index: u64) -> f64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// How long connection `index` waits before it leaves, when `per_minute` of those waiting
/// leave in each minute (an exponential time of rate −ln(1 − per_minute) a minute, as
/// usher-rehearse draws it); `None` when nobody leaves.
pub fn patience(seed: u64, index: u64, per_minute: f64) -> Option<Duration> {
    if per_minute <= 0.0 {
        return None;
    }
    if per_minute >= 1.0 {
        return Some(Duration::ZERO);
    }
    let rate = -(1.0 - per_minute).ln();
    let minutes = -(1.0 - uniform(seed, index)).ln() / rate;
    Some(Duration::from_secs_f64((minutes * 60.0).min(1e9)))
}

/// Sends the leave of `ticket` to `gw` over `s`, a connection of its own (the caller opens
/// it, so this module needs nothing of `conn`); the response's status.
pub async fn leave(
    mut s: TcpStream,
    gw: &Gateway,
    queue: &str,
    ticket: &str,
    timeout: Duration,
) -> Option<u16> {
    let send = async {
        let request = format!(
            "DELETE /api/queues/{queue}/tickets/{ticket} HTTP/1.1\r\nHost: {}\r\n\
             User-Agent: usher-loadgen\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            gw.host
        );
        s.write_all(request.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 4096];
        let mut filled = 0;
        loop {
            let n = s.read(&mut buf[filled..]).await.ok()?;
            if n == 0 {
                return None;
            }
            filled += n;
            if let Ok(Some(head)) = crate::http::parse_head(&buf[..filled]) {
                return Some(head.status);
            }
            if filled == buf.len() {
                return None;
            }
        }
    };
    tokio::time::timeout(timeout, send).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patience_follows_the_share_and_the_seed() {
        assert_eq!(patience(1, 5, 0.0), None);
        assert_eq!(patience(1, 5, 1.0), Some(Duration::ZERO));
        assert_eq!(patience(1, 5, 0.1), patience(1, 5, 0.1));
        assert_ne!(patience(1, 5, 0.1), patience(2, 5, 0.1));
        // 10% a minute: about 10% run out within their first minute.
        let first_minute = (0..10_000)
            .filter(|i| patience(7, *i, 0.1).is_some_and(|d| d < Duration::from_secs(60)))
            .count();
        assert!((900..1_100).contains(&first_minute), "{first_minute}");
    }
}
