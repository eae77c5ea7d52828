//! The open door's tokens (`usher_core::door`): for a queue with `on_outage: "open"`, the
//! replica driving it signs one door token per window for the current and the coming window,
//! and every `state` it publishes carries them, with the rate share each gateway may let
//! through while it cannot reach Redis. Signed once per window and kept here: a tick signs
//! nothing new unless a window turned.

use usher_core::door::{
    window_start_ms, DoorPass, DoorToken, OnOutage, DOOR_SKEW_SECONDS, DOOR_WINDOWS_AHEAD,
    DOOR_WINDOW_SECONDS,
};
use usher_core::ids::QueueId;
use usher_core::store::Store;
use usher_mint::door::DoorClaims;
use usher_mint::token::SigningKey;

/// How often the queue's door setting is read again (ms): a change reaches the gateways
/// within this and a tick.
const SETTING_EVERY_MS: u64 = 1_000;

/// What a tick's snapshot says of the door: the rate the gateways share, how many they are,
/// and how long an admission's token lasts (a door token lasts that much past its window).
#[derive(Debug, Clone, Copy)]
pub(super) struct DoorShare {
    pub(super) rate: f64,
    pub(super) gateways: u64,
    pub(super) session_s: u64,
}

/// What the replica driving a queue remembers of its door.
#[derive(Debug, Default)]
pub(super) struct DoorCache {
    /// When the setting was last read (ms).
    read_ms: u64,
    /// `door_after_seconds` in ms while the queue's door is `open`; `None` for `hold`.
    after_ms: Option<u64>,
    /// The signed windows, oldest first.
    tokens: Vec<DoorToken>,
}

impl DoorCache {
    /// The door tokens and threshold to send with `q`'s state at `now` (`None` for a `hold`
    /// queue), signing the windows not signed yet. `share` is the snapshot's.
    pub(super) async fn pass(
        &mut self,
        store: &Store,
        key: &SigningKey,
        q: &QueueId,
        now: u64,
        share: DoorShare,
    ) -> Option<DoorPass> {
        let DoorShare {
            rate,
            gateways,
            session_s,
        } = share;
        if self.read_ms == 0 || now >= self.read_ms + SETTING_EVERY_MS {
            match store.door_setting(q).await {
                Ok((on, after_ms)) => {
                    self.read_ms = now;
                    self.after_ms = (on == OnOutage::Open).then_some(after_ms);
                }
                // Keep what was read last: the door must not close because of one failed
                // read (the outage it is for starts with failed reads).
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "could not read the door setting")
                }
            }
        }
        let after_ms = self.after_ms?;
        let window_ms = DOOR_WINDOW_SECONDS * 1000;
        let first = window_start_ms(now, DOOR_WINDOW_SECONDS);
        self.tokens.retain(|t| t.until_ms > now);
        for i in 0..DOOR_WINDOWS_AHEAD {
            let from_ms = first + i * window_ms;
            if self.tokens.iter().any(|t| t.from_ms == from_ms) {
                continue;
            }
            let claims = DoorClaims::new(
                q.as_str(),
                from_ms / 1000,
                (from_ms + window_ms) / 1000,
                now / 1000,
                DOOR_SKEW_SECONDS,
            )
            .lasting(session_s);
            self.tokens.push(DoorToken {
                from_ms,
                until_ms: from_ms + window_ms,
                token: key.mint_door(&claims),
            });
            crate::metrics::door_token_signed(q);
            tracing::debug!(queue = %q, window = from_ms / 1000, "door token signed");
        }
        self.tokens.sort_by_key(|t| t.from_ms);
        Some(DoorPass {
            after_ms,
            rate,
            gateways: gateways.max(1),
            tokens: self.tokens.clone(),
        })
    }
}
