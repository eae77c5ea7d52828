//! Each gateway's connection counts, reported with its heartbeat so the dispatcher's admin API
//! (and its dashboard) can show them. Kept apart from the registry script: a count is a
//! report, not a liveness signal, and a missed report only leaves an older figure.

use std::collections::HashMap;

use super::{Result, Store};
use crate::keys;

/// What a gateway last reported about its client connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayConnections {
    /// Event streams it serves.
    pub streams: u64,
    /// Client connections open, streams or not.
    pub sockets: u64,
}

impl Store {
    /// Records gateway `index`'s connection counts (one `HSET`, overwriting the last report).
    pub async fn report_gateway_connections(
        &self,
        index: u16,
        counts: GatewayConnections,
    ) -> Result<()> {
        let _: () = redis::cmd("HSET")
            .arg(keys::GW_CONNECTIONS)
            .arg(index)
            .arg(format!("{}|{}", counts.streams, counts.sockets))
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Every gateway's last report, by index (a malformed entry is left out).
    pub async fn gateway_connections(&self) -> Result<HashMap<u16, GatewayConnections>> {
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys::GW_CONNECTIONS)
            .query_async(&mut self.c())
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(index, v)| {
                let (streams, sockets) = v.split_once('|')?;
                let counts = GatewayConnections {
                    streams: streams.parse().ok()?,
                    sockets: sockets.parse().ok()?,
                };
                Some((index.parse().ok()?, counts))
            })
            .collect())
    }
}
