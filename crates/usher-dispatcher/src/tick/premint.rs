//! Entry tokens minted, and staged on the gateways, ahead of the tick that admits their places.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use usher_core::binding::Thumbprint;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{Admission, StreamMessage};
use usher_core::store::{GatewayInfo, Store, MAX_ADMIT_PER_TICK};
use usher_core::time::SharedClock;
use usher_mint::token::{BoundClaims, Claims, Confirmation, SigningKey};

use super::gateways::{in_messages, live_at};
use super::timing::sleep_until_ms;

/// Entry tokens minted between ticks for the places expected at the head of the line at the
/// next tick, so admission does not wait for Ed25519 signing. A token depends only on the
/// place, the admission time and the expiry, so a pre-minted token is exactly the one minting
/// at admission would give; places not pre-minted (the line changed) are minted then.
///
/// The tokens are also *staged*: sent ahead to the gateways holding those places, so that at
/// the tick the admission message names places only, instead of carrying ~350 bytes of token
/// each on the busiest path. A gateway never shows a staged token before the admission.
///
/// Tokens come in batches of [`PREMINT_BATCH`] places, head of the line first, so a tick that
/// comes before all are ready (a queue unpaused just before it) waits only for the batch its
/// first script call admits, not for all of them.
#[derive(Debug)]
pub(super) struct Premint {
    /// Admissions expected at `at_ms`: the rate's expectation, lowered to the line's length
    /// once the head is read.
    pub(super) expected: Arc<AtomicU64>,
    pub(super) at_ms: u64,
    pub(super) exp_ms: u64,
    pub(super) token_exp_ms: u64,
    pub(super) batches: Batches,
    pub(super) task: Minting,
}

/// Pre-minted tokens as they are minted: (place, token) in line order.
pub(super) type Batches = tokio::sync::mpsc::Receiver<Vec<(PlaceId, Pre)>>;

/// Places minted (and staged) per pre-mint batch.
const PREMINT_BATCH: usize = 1_000;

/// The background task minting (and staging) tokens; aborted when dropped, so a replaced or
/// forgotten pre-mint (an operator's second change, a queue handed over) stops instead of
/// minting and staging on every core for nothing. (A mint already running on the blocking
/// pool finishes its batch; its result is dropped.)
#[derive(Debug)]
pub(super) struct Minting(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Minting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A token minted ahead, and the gateway it was staged on, if any.
#[derive(Debug)]
pub(super) struct Pre {
    pub(super) token: String,
    pub(super) staged_on: Option<u16>,
    /// Minted with the place's browser key (`cnf.jkt`).
    pub(super) keyed: bool,
}

/// What to mint ahead for one queue.
pub(super) struct PremintPlan<'a> {
    pub(super) q: &'a QueueId,
    /// Admissions expected at `at_ms` (a margin is added).
    pub(super) expected: u64,
    pub(super) at_ms: u64,
    /// The session's expiry at admission (what the `admitted` event shows).
    pub(super) exp_ms: u64,
    /// The tokens' `exp` (ms): the session's hard cap.
    pub(super) token_exp_ms: u64,
    /// When to read the head of the line (wall clock); `None`: now.
    pub(super) read_at_ms: Option<u64>,
}

/// At `read_at_ms` (wall clock; `None`: now, for an operator's change), reads the first
/// `expected` (plus a margin) places of the line, mints their tokens for admission at `at_ms`
/// on the blocking pool, and stages them on the gateways.
pub(super) fn spawn_premint(
    store: &Store,
    key: &Arc<SigningKey>,
    gateways: &Arc<Vec<GatewayInfo>>,
    clock: &SharedClock,
    plan: PremintPlan<'_>,
) -> Premint {
    let PremintPlan {
        q,
        expected,
        at_ms,
        exp_ms,
        token_exp_ms,
        read_at_ms,
    } = plan;
    let want = (expected + expected / 8 + 8).min(MAX_ADMIT_PER_TICK) as usize;
    let (store, key, gateways, q) = (store.clone(), key.clone(), gateways.clone(), q.clone());
    let clock = clock.clone();
    let expected_at = Arc::new(AtomicU64::new(expected));
    let expected_now = expected_at.clone();
    let (tx, batches) = tokio::sync::mpsc::channel(MAX_ADMIT_PER_TICK as usize / PREMINT_BATCH + 1);
    let task = tokio::spawn(async move {
        if let Some(t) = read_at_ms {
            // Never longer than from the read time to the admission time: a wall clock stepped
            // back must not hold the tick that waits for these tokens.
            sleep_until_ms(&*clock, t, at_ms.saturating_sub(t)).await;
        }
        let head = match store.head(&q, want).await {
            Ok(p) => p,
            Err(_) => return,
        };
        expected_now.store(expected.min(head.len() as u64), Ordering::Relaxed);
        // The browser keys of the whole head in one call (a place's key never changes once it
        // has one): each batch is then minting and staging alone.
        let started = std::time::Instant::now();
        let ids: Vec<PlaceId> = head.iter().map(|h| PlaceId(h.0)).collect();
        let places = match with_keys(&store, &q, ids).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(queue = %q, error = %e, "pre-mint: no browser keys read; the tick mints at admission");
                return;
            }
        };
        tracing::debug!(
            queue = %q,
            places = places.len(),
            keys_us = started.elapsed().as_micros() as u64,
            "pre-mint: keys read"
        );
        let head: Vec<(ToMint, u16)> = places.into_iter().zip(head.iter().map(|h| h.1)).collect();
        // A two-step pipeline: batch i is staged (its writes to the gateways' streams) while
        // batch i + 1's tokens are minted, and each batch goes to the tick as soon as it is
        // staged. A tick that waits for its tokens (a queue unpaused within its lead) waits
        // for the slower step of each batch, not for both.
        let mut minted: Option<MintedPart> = None;
        let mut parts = head.chunks(PREMINT_BATCH);
        loop {
            let part = parts.next();
            let stage_and_send = async {
                let Some(m) = minted.take() else {
                    return true;
                };
                let batch = stage_part(&store, &gateways, &q, m, (at_ms, exp_ms), &clock).await;
                tx.send(batch).await.is_ok()
            };
            let mint_next = async {
                match part {
                    Some(part) => Some(mint_part(&key, &q, part, (at_ms, token_exp_ms)).await),
                    None => None,
                }
            };
            let (sent, next) = tokio::join!(stage_and_send, mint_next);
            match next {
                Some(m) if sent => minted = Some(m),
                // The tick stopped waiting (the task is aborted with it too), or the line
                // ended.
                _ => return,
            }
        }
    });
    Premint {
        expected: expected_at,
        at_ms,
        exp_ms,
        token_exp_ms,
        batches,
        task: Minting(task),
    }
}

/// One batch's tokens, minted and not staged yet.
struct MintedPart {
    minted: Vec<(PlaceId, String)>,
    /// The places minted with a browser key (`cnf.jkt`).
    keyed: HashSet<PlaceId>,
    /// The gateway holding each place.
    gateway_of: HashMap<PlaceId, u16>,
    /// When its minting started, and how long it took (the debug log).
    started: std::time::Instant,
    mint_us: u64,
}

/// Mints the tokens of `part` (places with their browser keys, and the gateways holding
/// them, in line order), admitted at `at_ms` and expiring at `token_exp_ms`, on every core.
async fn mint_part(
    key: &Arc<SigningKey>,
    q: &QueueId,
    part: &[(ToMint, u16)],
    (at_ms, token_exp_ms): (u64, u64),
) -> MintedPart {
    let started = std::time::Instant::now();
    let places: Vec<ToMint> = part.iter().map(|(p, _)| p.clone()).collect();
    let keyed = keyed(&places);
    let (key, q) = (key.clone(), q.clone());
    let minted =
        tokio::task::spawn_blocking(move || mint_many(&key, &q, &places, at_ms, token_exp_ms))
            .await
            .unwrap_or_default();
    MintedPart {
        minted,
        keyed,
        gateway_of: part.iter().map(|((p, _), gw)| (*p, *gw)).collect(),
        started,
        mint_us: started.elapsed().as_micros() as u64,
    }
}

/// Stages a minted batch on the gateways holding its places and returns it as the tick takes
/// it: each token with the gateway it was staged on, if any.
async fn stage_part(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    m: MintedPart,
    (at_ms, exp_ms): (u64, u64),
    clock: &SharedClock,
) -> Vec<(PlaceId, Pre)> {
    let stage_started = std::time::Instant::now();
    let staged = stage(
        store,
        gateways,
        q,
        &m.minted,
        &m.gateway_of,
        (at_ms, exp_ms),
        clock.now_ms(),
    )
    .await;
    // Each step's time: what a tick that waited for its tokens waited on.
    tracing::debug!(
        queue = %q,
        places = m.minted.len(),
        mint_us = m.mint_us,
        stage_us = stage_started.elapsed().as_micros() as u64,
        batch_us = m.started.elapsed().as_micros() as u64,
        since_admission_ms = clock.now_ms() as i64 - at_ms as i64,
        "pre-mint batch"
    );
    let MintedPart {
        minted,
        keyed,
        gateway_of,
        ..
    } = m;
    minted
        .into_iter()
        .map(|(place, token)| {
            let staged_on = gateway_of
                .get(&place)
                .copied()
                .filter(|g| staged.contains(g));
            let keyed = keyed.contains(&place);
            (
                place,
                Pre {
                    token,
                    staged_on,
                    keyed,
                },
            )
        })
        .collect()
}

/// A place to mint for, with the thumbprint of the browser key it joined with (a binding
/// queue's place: its token carries `cnf.jkt`).
pub(super) type ToMint = (PlaceId, Option<Thumbprint>);

/// `ids` with the browser key each joined with (a binding queue's; `None` elsewhere), read
/// in one call. A place's key never changes once it has one, so a token minted ahead with a
/// key is the one minting at admission would give; one minted without is checked again at
/// admission (`TickTokens::take_for`).
pub(super) async fn with_keys(
    store: &Store,
    q: &QueueId,
    ids: Vec<PlaceId>,
) -> Result<Vec<ToMint>, usher_core::store::StoreError> {
    let keys = store.place_keys(q, &ids).await?;
    Ok(ids.into_iter().zip(keys).collect())
}

/// The places of `places` that have a browser key (their tokens carry `cnf`).
pub(super) fn keyed(places: &[ToMint]) -> HashSet<PlaceId> {
    places
        .iter()
        .filter_map(|(p, k)| k.as_ref().map(|_| *p))
        .collect()
}

/// Mints tokens for `places` admitted at `at_ms` (tokens expiring at `exp_ms`), on every core.
pub(super) fn mint_many(
    key: &SigningKey,
    q: &QueueId,
    places: &[ToMint],
    at_ms: u64,
    exp_ms: u64,
) -> Vec<(PlaceId, String)> {
    crate::metrics::tokens_minted(places.len());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = places.len().div_ceil(threads).max(64);
    std::thread::scope(|scope| {
        let handles: Vec<_> = places
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|(p, jkt)| {
                            let c = claims(q, *p, at_ms, exp_ms);
                            let token = match jkt {
                                None => key.mint(&c),
                                Some(jkt) => key.mint(&BoundClaims {
                                    claims: c,
                                    cnf: Confirmation {
                                        jkt: jkt.to_string(),
                                    },
                                }),
                            };
                            (*p, token)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// The claims of the entry token of `place`, admitted at `at_ms`.
fn claims(q: &QueueId, place: PlaceId, at_ms: u64, exp_ms: u64) -> Claims {
    Claims {
        sub: place.to_string(),
        aud: q.to_string(),
        iat: at_ms / 1000,
        exp: exp_ms / 1000,
        jti: format!("{q}.{place}"),
    }
}

/// Sends pre-minted tokens to the live gateways (of the last tick's registry) holding those
/// places; returns the gateways that have them. A failure only means the tokens travel with
/// the admission instead.
async fn stage(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    minted: &[(PlaceId, String)],
    gateway_of: &HashMap<PlaceId, u16>,
    (at_ms, exp_ms): (u64, u64),
    now_ms: u64,
) -> HashSet<u16> {
    let live = live_at(gateways, now_ms);
    let mut by_gateway: HashMap<u16, Vec<Admission>> = HashMap::new();
    for (place, token) in minted {
        let Some(gw) = gateway_of.get(place).filter(|g| live.contains_key(g)) else {
            continue;
        };
        by_gateway.entry(*gw).or_default().push(Admission {
            place: *place,
            token: token.clone(),
            admitted_at_ms: at_ms,
            expires_at_ms: exp_ms,
        });
    }
    let batches: Vec<_> = by_gateway
        .iter()
        .filter_map(|(gw, items)| {
            let msgs = in_messages(items, |items| StreamMessage::Staged {
                queue: q.clone(),
                items,
            });
            Some(((*live.get(gw)?).clone(), msgs))
        })
        .collect();
    match store.send(&batches).await {
        Ok(()) => by_gateway.into_keys().collect(),
        Err(e) => {
            tracing::debug!(queue = %q, error = %e, "could not stage tokens; they go with the admissions");
            Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pre-minted token is exactly the one minting at admission gives: the claims depend on
    /// the place, the queue and the times only.
    #[test]
    fn claims_name_the_place_and_the_queue() {
        let q = QueueId::new("gig").expect("valid");
        let c = claims(&q, PlaceId(42), 5_500, 65_500);
        assert_eq!(
            (c.sub.as_str(), c.aud.as_str(), c.iat, c.exp, c.jti.as_str()),
            ("42", "gig", 5, 65, "gig.42")
        );
    }
}
