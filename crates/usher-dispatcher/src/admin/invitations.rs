//! The invitation settings of `PUT /admin/queues/{q}` (`invitations`, `invitation_keys`):
//! checked and applied here, stored with the other settings, read by the gateways, which check
//! invitations and hold one place per invited account (docs/sale-day.md, "Invitations").

use usher_core::invitation::{check_keys, InvitationKey, InvitationMode};
use usher_core::store::QueueConfig;
use usher_http::ApiError;

/// What a `PUT` body says of invitations: absent fields keep their value.
pub(super) struct InvitationChange<'a> {
    pub invitations: Option<InvitationMode>,
    pub invitation_keys: Option<&'a [InvitationKey]>,
}

/// Applies `change` to `cfg`, refusing (`400`) keys that are not Ed25519 public JWKs with a
/// unique `kid`, more than 8 keys, and a mode that takes invitations without a key to check
/// them with.
pub(super) fn apply(cfg: &mut QueueConfig, change: InvitationChange<'_>) -> Result<(), ApiError> {
    if let Some(m) = change.invitations {
        cfg.invitations = m;
    }
    if let Some(k) = change.invitation_keys {
        cfg.invitation_keys = k.to_vec();
    }
    check_keys(cfg.invitations, &cfg.invitation_keys).map_err(ApiError::bad_request)
}
