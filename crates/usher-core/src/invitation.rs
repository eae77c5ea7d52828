//! Invitations (docs/sale-day.md, "Invitations"): a queue may take, or require, an invitation
//! the shop signed for one of its accounts. This module holds the queue's setting (the mode
//! and the shop's public keys), checks an invitation (signature, queue, time: no Redis), and
//! names why one was refused. The join code an invitation is exchanged for, and the account's
//! one place, are the store's (`store::invitations`).
//!
//! An invitation is a compact JWS (a JWT) signed with Ed25519:
//!
//! * header: `{"alg":"EdDSA","kid":"<one of the queue's invitation_keys>"}` (`typ` ignored);
//! * payload: `{"sub":"<the shop's account id>","aud":"<queue id>","exp":<seconds>}`, and
//!   optionally `"lane":"<lane name>"` and `"nbf"`.
//!
//! Only `EdDSA` is accepted, whatever the header says (`none`, `HS256` and every other `alg`
//! are refused before any key is looked at), and only by a key registered for this queue, by
//! its `kid`: a key registered for another queue, or a token signed for another queue (`aud`),
//! takes no place here.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::signature::{UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};

use crate::ids::QueueId;

/// Most invitation keys a queue registers (a key being rotated in and out, a few shops).
pub const MAX_INVITATION_KEYS: usize = 8;
/// Longest invitation accepted (an Ed25519 JWT is a few hundred characters).
pub const MAX_INVITATION_LEN: usize = 4096;
/// Longest account id (`sub`); it is hashed into a key name, never stored in one as is.
pub const MAX_ACCOUNT_LEN: usize = 128;
/// Longest lane name (`lane`), as `usher_core::lanes::LaneName` bounds it.
pub const MAX_LANE_LEN: usize = 32;
/// Seconds of clock difference allowed between the shop and the gateway (`exp`, `nbf`).
pub const LEEWAY_SECS: u64 = 30;
/// Longest `kid`.
const MAX_KID_LEN: usize = 64;

/// Whether a queue takes invitations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvitationMode {
    /// No invitations (the default, and queues stored before the setting existed).
    #[default]
    None,
    /// Anyone may join; an invitation gives its account one place (a second device takes it
    /// over) and its lane.
    Optional,
    /// Only invited accounts join: a join without an invitation hears
    /// `event: invitation_refused` with `reason` `required`.
    Required,
}

impl InvitationMode {
    pub fn as_str(self) -> &'static str {
        match self {
            InvitationMode::None => "none",
            InvitationMode::Optional => "optional",
            InvitationMode::Required => "required",
        }
    }

    /// Whether the queue takes invitations at all.
    pub fn takes(self) -> bool {
        self != InvitationMode::None
    }
}

impl std::str::FromStr for InvitationMode {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "none" => Ok(InvitationMode::None),
            "optional" => Ok(InvitationMode::Optional),
            "required" => Ok(InvitationMode::Required),
            _ => Err(()),
        }
    }
}

/// One of the shop's public keys, as a JWK (RFC 8037): `{"kty":"OKP","crv":"Ed25519","x":…,
/// "kid":…}`. `alg` and `use` may be given (`EdDSA`, `sig`); nothing else is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InvitationKey {
    /// `OKP`.
    pub kty: String,
    /// `Ed25519`.
    pub crv: String,
    /// The public key: 32 bytes, base64url without padding.
    pub x: String,
    /// The key's id (1 to 64 characters of `[A-Za-z0-9._-]`), named by each invitation's
    /// header; unique within the queue.
    pub kid: String,
    /// `EdDSA` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    /// `sig` when given.
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub use_: Option<String>,
}

impl InvitationKey {
    /// The public key's 32 bytes, or why this JWK is not an Ed25519 public key. (Checked with
    /// ring, as rustls links it: the gateway links no Ed25519 or JWT crate, which could mint.)
    pub fn public_key(&self) -> Result<[u8; 32], String> {
        if self.kty != "OKP" || self.crv != "Ed25519" {
            return Err(format!(
                "invitation key {:?}: kty must be \"OKP\" and crv \"Ed25519\"",
                self.kid
            ));
        }
        if self.alg.as_deref().is_some_and(|a| a != "EdDSA")
            || self.use_.as_deref().is_some_and(|u| u != "sig")
        {
            return Err(format!(
                "invitation key {:?}: alg must be \"EdDSA\" and use \"sig\" when given",
                self.kid
            ));
        }
        URL_SAFE_NO_PAD
            .decode(&self.x)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                format!(
                    "invitation key {:?}: x must be 32 bytes, base64url without padding",
                    self.kid
                )
            })
    }
}

/// Checks a queue's keys as the admin API must before storing them: each an Ed25519 JWK with
/// a well-formed `kid`, the `kid`s unique, at most [`MAX_INVITATION_KEYS`]; a mode other than
/// `none` needs at least one. The error is the `400`'s message.
pub fn check_keys(mode: InvitationMode, keys: &[InvitationKey]) -> Result<(), String> {
    if keys.len() > MAX_INVITATION_KEYS {
        return Err(format!(
            "invitation_keys: at most {MAX_INVITATION_KEYS} keys per queue, not {}",
            keys.len()
        ));
    }
    if mode.takes() && keys.is_empty() {
        return Err(format!(
            "invitations: \"{}\" needs at least one of invitation_keys",
            mode.as_str()
        ));
    }
    for (i, k) in keys.iter().enumerate() {
        if !kid_ok(&k.kid) {
            return Err(format!(
                "invitation_keys: kid {:?} must be 1 to {MAX_KID_LEN} characters of [A-Za-z0-9._-]",
                k.kid
            ));
        }
        if keys[..i].iter().any(|o| o.kid == k.kid) {
            return Err(format!("invitation_keys: kid {:?} given twice", k.kid));
        }
        k.public_key()?;
    }
    Ok(())
}

fn kid_ok(kid: &str) -> bool {
    (1..=MAX_KID_LEN).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Why an invitation (or the join code it was exchanged for) took no place. The browser hears
/// it as `event: invitation_refused`; the invitation route answers it as an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InvitationRefusal {
    /// The queue takes only invited accounts, and the join brought no join code.
    Required,
    /// Not an Ed25519 JWT (malformed, `alg` other than `EdDSA`, claims missing or out of
    /// bounds).
    Invalid,
    /// Signed by no key of this queue (an unknown `kid`, or a bad signature).
    Forged,
    /// Past its `exp` (or before its `nbf`), beyond the allowed clock difference.
    Expired,
    /// Made for another queue (`aud`).
    OtherQueue,
    /// The join code is unknown, used already or expired: post the invitation again.
    JoinCode,
    /// The account's place was admitted already, on a queue that binds it to the browser's
    /// key: its entry token belongs to the device that held it.
    AdmittedElsewhere,
}

impl InvitationRefusal {
    /// Its name, as the event and the error answers write it.
    pub fn as_str(self) -> &'static str {
        match self {
            InvitationRefusal::Required => "required",
            InvitationRefusal::Invalid => "invalid",
            InvitationRefusal::Forged => "forged",
            InvitationRefusal::Expired => "expired",
            InvitationRefusal::OtherQueue => "other_queue",
            InvitationRefusal::JoinCode => "join_code",
            InvitationRefusal::AdmittedElsewhere => "admitted_elsewhere",
        }
    }
}

/// The payload of `event: invitation_refused`: the join took no place (`reason`), and the
/// stream ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InvitationRefusedEvent {
    pub queue: QueueId,
    pub reason: InvitationRefusal,
}

/// A good invitation: whom it invites, and to which lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitee {
    /// The shop's account id (`sub`): 1 to [`MAX_ACCOUNT_LEN`] characters, no control
    /// characters.
    pub account: String,
    /// The `lane` claim, checked for length and characters only (1 to [`MAX_LANE_LEN`] of
    /// `[a-z0-9_-]`): the lanes feature decides what it means.
    pub lane: Option<String>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
}

/// `aud`: one audience or a list (RFC 7519).
#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct Claims {
    sub: String,
    aud: Audience,
    exp: u64,
    #[serde(default)]
    nbf: Option<u64>,
    #[serde(default)]
    lane: Option<String>,
}

/// Checks `invitation` for queue `q` against the queue's `keys` at `now_secs`.
pub fn verify(
    invitation: &str,
    q: &QueueId,
    keys: &[InvitationKey],
    now_secs: u64,
) -> Result<Invitee, InvitationRefusal> {
    use InvitationRefusal::{Expired, Forged, Invalid, OtherQueue};
    if invitation.len() > MAX_INVITATION_LEN {
        return Err(Invalid);
    }
    let mut parts = invitation.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Invalid);
    };
    let header: Header = decode_json(h).ok_or(Invalid)?;
    // The algorithm is fixed here, not taken from the token: `none`, `HS256` (a public key
    // used as an HMAC secret) and the rest never reach a key.
    if header.alg != "EdDSA" {
        return Err(Invalid);
    }
    let kid = header.kid.ok_or(Invalid)?;
    let key = keys.iter().find(|k| k.kid == kid).ok_or(Forged)?;
    let key = key.public_key().map_err(|_| Forged)?;
    let sig = URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .filter(|b| b.len() == 64)
        .ok_or(Invalid)?;
    let signed = &invitation[..h.len() + 1 + c.len()];
    UnparsedPublicKey::new(&ED25519, key)
        .verify(signed.as_bytes(), &sig)
        .map_err(|_| Forged)?;
    let claims: Claims = decode_json(c).ok_or(Invalid)?;
    let ours = match &claims.aud {
        Audience::One(a) => a == q.as_str(),
        Audience::Many(list) => list.iter().any(|a| a == q.as_str()),
    };
    if !ours {
        return Err(OtherQueue);
    }
    if claims.exp + LEEWAY_SECS <= now_secs
        || claims.nbf.is_some_and(|nbf| nbf > now_secs + LEEWAY_SECS)
    {
        return Err(Expired);
    }
    if !account_ok(&claims.sub) || claims.lane.as_deref().is_some_and(|l| !lane_ok(l)) {
        return Err(Invalid);
    }
    Ok(Invitee {
        account: claims.sub,
        lane: claims.lane,
    })
}

/// An account id as stored with a join code: bounded, no control characters (the code's
/// record separates fields with a line feed).
pub fn account_ok(a: &str) -> bool {
    (1..=MAX_ACCOUNT_LEN).contains(&a.chars().count()) && !a.chars().any(char::is_control)
}

/// A lane claim's shape (what `usher_core::lanes::LaneName` accepts).
pub fn lane_ok(l: &str) -> bool {
    (1..=MAX_LANE_LEN).contains(&l.len())
        && l.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-'))
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Option<T> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    type SigningKey = Ed25519KeyPair;

    fn key(seed: u8) -> SigningKey {
        Ed25519KeyPair::from_seed_unchecked(&[seed; 32]).expect("a seed makes a key")
    }

    fn jwk(key: &SigningKey, kid: &str) -> InvitationKey {
        InvitationKey {
            kty: "OKP".into(),
            crv: "Ed25519".into(),
            x: URL_SAFE_NO_PAD.encode(key.public_key().as_ref()),
            kid: kid.into(),
            alg: Some("EdDSA".into()),
            use_: None,
        }
    }

    fn sign(key: &SigningKey, header: serde_json::Value, claims: serde_json::Value) -> String {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = key.sign(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    /// A good invitation names its account and lane; one by another key, for another queue,
    /// expired, or with another `alg` is refused, each for its own reason.
    #[test]
    fn invitations_are_checked_before_redis() {
        let (shop, other) = (key(7), key(8));
        let keys = [jwk(&shop, "shop-1")];
        let q = QueueId::new("presale").expect("id");
        let h = serde_json::json!({"alg": "EdDSA", "kid": "shop-1"});
        let claims = |aud: &str, exp: u64| serde_json::json!({"sub": "acct-42", "aud": aud, "exp": exp, "lane": "members"});
        let good = sign(&shop, h.clone(), claims("presale", 2000));
        assert_eq!(
            verify(&good, &q, &keys, 1000),
            Ok(Invitee {
                account: "acct-42".into(),
                lane: Some("members".into())
            })
        );
        let forged = sign(&other, h.clone(), claims("presale", 2000));
        assert_eq!(
            verify(&forged, &q, &keys, 1000),
            Err(InvitationRefusal::Forged)
        );
        let unknown_kid = sign(
            &shop,
            serde_json::json!({"alg": "EdDSA", "kid": "x"}),
            claims("presale", 2000),
        );
        assert_eq!(
            verify(&unknown_kid, &q, &keys, 1000),
            Err(InvitationRefusal::Forged)
        );
        let elsewhere = sign(&shop, h.clone(), claims("another", 2000));
        assert_eq!(
            verify(&elsewhere, &q, &keys, 1000),
            Err(InvitationRefusal::OtherQueue)
        );
        assert_eq!(
            verify(&good, &q, &keys, 2000 + LEEWAY_SECS),
            Err(InvitationRefusal::Expired)
        );
        assert!(
            verify(&good, &q, &keys, 2000 + LEEWAY_SECS - 1).is_ok(),
            "within the leeway"
        );
        let none = format!(
            "{}.{}.",
            URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"shop-1"}"#),
            URL_SAFE_NO_PAD.encode(claims("presale", 2000).to_string())
        );
        assert_eq!(
            verify(&none, &q, &keys, 1000),
            Err(InvitationRefusal::Invalid)
        );
        let hs = sign(
            &shop,
            serde_json::json!({"alg": "HS256", "kid": "shop-1"}),
            claims("presale", 2000),
        );
        assert_eq!(
            verify(&hs, &q, &keys, 1000),
            Err(InvitationRefusal::Invalid)
        );
        let mut tampered = good.clone();
        tampered.insert(good.len() - 5, 'A');
        assert!(verify(&tampered, &q, &keys, 1000).is_err());
        let long_sub = sign(
            &shop,
            h.clone(),
            serde_json::json!({"sub": "a".repeat(129), "aud": "presale", "exp": 2000}),
        );
        assert_eq!(
            verify(&long_sub, &q, &keys, 1000),
            Err(InvitationRefusal::Invalid)
        );
        let bad_lane = sign(
            &shop,
            h,
            serde_json::json!({"sub": "a", "aud": ["x", "presale"], "exp": 2000, "lane": "Members!"}),
        );
        assert_eq!(
            verify(&bad_lane, &q, &keys, 1000),
            Err(InvitationRefusal::Invalid)
        );
    }

    #[test]
    fn keys_are_checked_before_they_are_stored() {
        let shop = key(7);
        let k = jwk(&shop, "k1");
        assert!(check_keys(InvitationMode::Required, std::slice::from_ref(&k)).is_ok());
        assert!(
            check_keys(InvitationMode::Required, &[]).is_err(),
            "required needs a key"
        );
        assert!(check_keys(InvitationMode::None, &[]).is_ok());
        assert!(
            check_keys(InvitationMode::Optional, &[k.clone(), k.clone()]).is_err(),
            "kid twice"
        );
        let mut ec = k.clone();
        ec.kty = "EC".into();
        assert!(check_keys(InvitationMode::Optional, &[ec]).is_err());
        let mut short = k.clone();
        short.x = "AAAA".into();
        assert!(check_keys(InvitationMode::Optional, &[short]).is_err());
        let mut kid = k.clone();
        kid.kid = "a b".into();
        assert!(check_keys(InvitationMode::Optional, &[kid]).is_err());
        let many: Vec<_> = (0..9).map(|i| jwk(&shop, &format!("k{i}"))).collect();
        assert!(check_keys(InvitationMode::Optional, &many).is_err());
        for r in [
            InvitationRefusal::Required,
            InvitationRefusal::OtherQueue,
            InvitationRefusal::AdmittedElsewhere,
        ] {
            assert_eq!(serde_json::to_value(r).ok(), Some(r.as_str().into()));
        }
    }
}
