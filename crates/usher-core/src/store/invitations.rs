//! Invitations in Redis (docs/sale-day.md, "Invitations"): the queue's setting as a gateway
//! reads it, the one-use join codes invitations are exchanged for, and the one place each
//! invited account holds.
//!
//! The gateway checks an invitation ([`crate::invitation::verify`], no Redis) and stores a
//! join code for it ([`Store::put_join_code`]); the page opens its stream with the code, which
//! the join takes ([`Store::take_join_code`], `GETDEL`: one use across every gateway). Before
//! it takes a new place, the join asks whether the account holds one
//! ([`Store::account_place`]): if so the new device resumes that place (the older stream hears
//! `resumed_elsewhere`); if not, the place it takes is recorded for the account
//! ([`Store::record_account`]).

use redis::Value;

use super::decode::{array, text};
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::binding::{Bind, Thumbprint};
use crate::ids::{PlaceId, QueueId};
use crate::invitation::{InvitationKey, InvitationMode, Invitee};
use crate::keys::QueueKeys;

/// How long an account's place record lasts after its last join or takeover. A record
/// naming a place that is over is harmless (the account joins anew); one that outlives it
/// by a day costs a few dozen bytes.
pub const ACCOUNT_TTL_SECS: u64 = 24 * 3600;

/// A queue's invitation setting, as a gateway reads it (one `HMGET`).
#[derive(Debug, Clone, PartialEq)]
pub struct InvitationSetting {
    pub mode: InvitationMode,
    pub keys: Vec<InvitationKey>,
    /// Whether the queue binds places to the browser's key: a takeover rebinds the place.
    pub bind: Bind,
}

/// What an invited account holds in a queue: see `lua/account.lua`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountPlace {
    /// Nothing live: the join takes a new place.
    None,
    /// A place in line or in the pre-queue (its id as recorded: a pre-queue ticket's id);
    /// on a binding queue it is bound to the new device's key already.
    Live(PlaceId),
    /// A place admitted, its session not over yet.
    Admitted(PlaceId),
}

impl Store {
    /// `q`'s invitation setting; `None` for a queue never configured.
    pub async fn invitation_setting(&self, q: &QueueId) -> Result<Option<InvitationSetting>> {
        let k = QueueKeys::of(q);
        let (open, mode, keys, bind): (
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        ) = redis::cmd("HMGET")
            .arg(&k.meta)
            .arg("open")
            .arg("invitations")
            .arg("invitation_keys")
            .arg("bind")
            .query_async(&mut self.c())
            .await?;
        Ok(open.map(|_| InvitationSetting {
            mode: mode.and_then(|m| m.parse().ok()).unwrap_or_default(),
            keys: keys
                .and_then(|k| serde_json::from_str(&k).ok())
                .unwrap_or_default(),
            bind: bind.and_then(|b| b.parse().ok()).unwrap_or_default(),
        }))
    }

    /// Stores join code `code` for `invitee`, good for `ttl_ms`. `false` when the code exists
    /// already (drawn twice: draw another).
    pub async fn put_join_code(
        &self,
        q: &QueueId,
        code: &str,
        invitee: &Invitee,
        ttl_ms: u64,
    ) -> Result<bool> {
        let k = QueueKeys::of(q);
        let value = format!(
            "{}\n{}",
            invitee.account,
            invitee.lane.as_deref().unwrap_or("")
        );
        let set: Option<String> = redis::cmd("SET")
            .arg(k.join_code(code))
            .arg(value)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .arg("NX")
            .query_async(&mut self.c())
            .await?;
        Ok(set.is_some())
    }

    /// Takes join code `code` (it is gone afterwards, for every gateway): whom it invites, or
    /// `None` when it is unknown, used or expired.
    pub async fn take_join_code(&self, q: &QueueId, code: &str) -> Result<Option<Invitee>> {
        let k = QueueKeys::of(q);
        let v: Option<String> = redis::cmd("GETDEL")
            .arg(k.join_code(code))
            .query_async(&mut self.c())
            .await?;
        Ok(v.and_then(|v| {
            let (account, lane) = v.split_once('\n')?;
            Some(Invitee {
                account: account.to_owned(),
                lane: (!lane.is_empty()).then(|| lane.to_owned()),
            })
        }))
    }

    /// What `account` holds in `q`; a live place is bound to `key` in the same call on a
    /// binding queue (`lua/account.lua`).
    pub async fn account_place(
        &self,
        q: &QueueId,
        account: &str,
        key: Option<&Thumbprint>,
    ) -> Result<AccountPlace> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .account
            .key(k.account(account))
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.parked)
            .key(&k.pre)
            .key(&k.drawn)
            .key(&k.active)
            .key(&k.bound)
            .lane_keys(&k)
            .arg(key.map_or("", Thumbprint::as_str))
            .arg(crate::time::now_ms())
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        let place = || {
            a.get(1)
                .and_then(text)
                .and_then(|p| p.parse().ok())
                .map(PlaceId)
                .ok_or_else(|| protocol(format!("account reply {a:?}")))
        };
        match a.first().and_then(text).as_deref() {
            Some("none") => Ok(AccountPlace::None),
            Some("live") => Ok(AccountPlace::Live(place()?)),
            Some("admitted") => Ok(AccountPlace::Admitted(place()?)),
            _ => Err(protocol(format!("account reply {a:?}"))),
        }
    }

    /// Takes `account`'s join lock for `ttl_ms` (`SET NX PX`): `false` while another join of
    /// the account holds it.
    pub async fn lock_account(&self, q: &QueueId, account: &str, ttl_ms: u64) -> Result<bool> {
        let k = QueueKeys::of(q);
        let set: Option<String> = redis::cmd("SET")
            .arg(k.account_lock(account))
            .arg(1)
            .arg("PX")
            .arg(ttl_ms.max(1))
            .arg("NX")
            .query_async(&mut self.c())
            .await?;
        Ok(set.is_some())
    }

    /// Gives `account`'s join lock back.
    pub async fn unlock_account(&self, q: &QueueId, account: &str) -> Result<()> {
        let k = QueueKeys::of(q);
        let _: () = redis::cmd("DEL")
            .arg(k.account_lock(account))
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Records that `account` holds `place` (for [`ACCOUNT_TTL_SECS`]); returns the place
    /// it held before, when another. One `SET … GET`: of two joins of one account that raced
    /// past [`Store::account_place`], the later record returns the earlier place, which the
    /// caller removes, so the account ends with one place.
    pub async fn record_account(
        &self,
        q: &QueueId,
        account: &str,
        place: PlaceId,
    ) -> Result<Option<PlaceId>> {
        let k = QueueKeys::of(q);
        let before: Option<String> = redis::cmd("SET")
            .arg(k.account(account))
            .arg(place.0)
            .arg("EX")
            .arg(ACCOUNT_TTL_SECS)
            .arg("GET")
            .query_async(&mut self.c())
            .await?;
        Ok(before
            .and_then(|b| b.parse().ok())
            .map(PlaceId)
            .filter(|b| *b != place))
    }
}
