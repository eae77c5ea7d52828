//! The gateways a message can go to, and admissions cut into stream messages: shared by
//! staging, delivery and state publishing, so all three agree on who is alive and on how
//! many tokens one message carries.

use std::collections::HashMap;

use usher_core::ids::ServerId;
use usher_core::messages::{Admission, StreamMessage};
use usher_core::store::GatewayInfo;

/// Admissions per `admitted` or `staged` stream entry (each carries a token).
const ADMITTED_PER_MESSAGE: usize = 250;

/// The gateways of `gateways` alive at `now`, by index.
pub(super) fn live_at(gateways: &[GatewayInfo], now: u64) -> HashMap<u16, &ServerId> {
    gateways
        .iter()
        .filter(|g| g.is_alive(now))
        .map(|g| (g.index, &g.server_id))
        .collect()
}

/// Admissions in stream messages of [`ADMITTED_PER_MESSAGE`] each (`wrap` makes one).
pub(super) fn in_messages(
    items: &[Admission],
    wrap: impl Fn(Vec<Admission>) -> StreamMessage,
) -> Vec<StreamMessage> {
    items
        .chunks(ADMITTED_PER_MESSAGE)
        .map(|c| wrap(c.to_vec()))
        .collect()
}
