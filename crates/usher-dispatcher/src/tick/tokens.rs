//! The entry tokens of one tick's admissions: pre-minted ones where they match, the rest
//! minted at admission.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{OutboxEntry, Store, StoreError};
use usher_mint::token::SigningKey;

use super::premint::{keyed, mint_many, with_keys, Batches, Minting, Pre, Premint};

/// Pre-minted tokens for this tick: those received so far, and the rest still coming.
#[derive(Debug, Default)]
pub(super) struct TickTokens {
    at_ms: u64,
    exp_ms: u64,
    token_exp_ms: u64,
    tokens: HashMap<PlaceId, Pre>,
    /// Batches not received yet (`None`: all received, or nothing was pre-minted).
    pending: Option<(Batches, Minting)>,
    /// The highest place sequence number received so far: batches come in line order, so a
    /// place below it that has no token will not get one from this pre-mint.
    received_to: u64,
}

impl TickTokens {
    /// The tokens `premint` made for a tick admitting at `now`, if they were minted for this
    /// very admission time (those still being minted arrive as they are needed:
    /// [`TickTokens::cover`]).
    pub(super) fn from_premint(premint: Option<Premint>, now: u64) -> Self {
        match premint {
            Some(p) if p.at_ms == now => Self {
                at_ms: p.at_ms,
                exp_ms: p.exp_ms,
                token_exp_ms: p.token_exp_ms,
                tokens: HashMap::new(),
                pending: Some((p.batches, p.task)),
                received_to: 0,
            },
            Some(p) => {
                tracing::debug!(
                    minted_for = p.at_ms,
                    now,
                    "tokens minted ahead were for another admission time"
                );
                Self::default()
            }
            None => Self::default(),
        }
    }

    /// Stops the pre-mint: once everything is sent, batches this tick did not need are not
    /// minted (on every core) while gateways deliver.
    pub(super) fn stop_minting(&mut self) {
        self.pending = None;
    }

    /// The tokens of `entries`: pre-minted ones where they match, the rest minted now (on
    /// every core).
    pub(super) async fn take_for(
        &mut self,
        store: &Store,
        key: &Arc<SigningKey>,
        q: &QueueId,
        entries: &[OutboxEntry],
    ) -> Result<HashMap<PlaceId, Pre>, StoreError> {
        self.cover(entries).await;
        let mut out = HashMap::with_capacity(entries.len());
        let mut missing: HashMap<(u64, u64), Vec<PlaceId>> = HashMap::new();
        for e in entries {
            let pre = self
                .minted_for(e)
                .then(|| self.tokens.remove(&e.place))
                .flatten();
            match pre {
                Some(t) => {
                    out.insert(e.place, t);
                }
                None => missing
                    .entry((e.admitted_at_ms, e.token_exp_ms))
                    .or_default()
                    .push(e.place),
            }
        }
        // A token minted ahead without `cnf` serves only a place that still has no key: a
        // binding queue's place can gain its key between the pre-mint and the admission (put
        // back after a Redis data loss), and its token must then carry it. One call, and on a
        // queue that binds nothing an `EXISTS` (`Store::place_keys`).
        let keyless: Vec<PlaceId> = out
            .iter()
            .filter(|(_, pre)| !pre.keyed)
            .map(|(place, _)| *place)
            .collect();
        if !keyless.is_empty() {
            let keys = store.place_keys(q, &keyless).await?;
            let gained: HashSet<PlaceId> = keyless
                .into_iter()
                .zip(keys)
                .filter_map(|(place, key)| key.map(|_| place))
                .collect();
            for e in entries.iter().filter(|e| gained.contains(&e.place)) {
                out.remove(&e.place);
                missing
                    .entry((e.admitted_at_ms, e.token_exp_ms))
                    .or_default()
                    .push(e.place);
            }
        }
        tracing::debug!(
            queue = %q,
            ahead = out.len(),
            staged = out.values().filter(|p| p.staged_on.is_some()).count(),
            now = missing.values().map(Vec::len).sum::<usize>(),
            "tokens: minted ahead / minted now"
        );
        for ((at, exp), ids) in missing {
            // The browser keys of a binding queue's places (`cnf.jkt`), as the pre-mint read
            // them.
            let places = with_keys(store, q, ids).await?;
            let keyed = keyed(&places);
            let (key, q) = (key.clone(), q.clone());
            let minted = tokio::task::spawn_blocking(move || mint_many(&key, &q, &places, at, exp))
                .await
                .unwrap_or_default();
            out.extend(minted.into_iter().map(|(place, token)| {
                (
                    place,
                    Pre {
                        keyed: keyed.contains(&place),
                        token,
                        staged_on: None,
                    },
                )
            }));
        }
        Ok(out)
    }

    /// Whether this pre-mint was for `e`'s admission (its tokens are exactly `e`'s).
    fn minted_for(&self, e: &OutboxEntry) -> bool {
        e.admitted_at_ms == self.at_ms
            && e.expires_at_ms == self.exp_ms
            && e.token_exp_ms == self.token_exp_ms
    }

    /// Receives batches until every place of `wanted` admitted at this pre-mint's time has its
    /// token or cannot get one from it.
    async fn cover(&mut self, wanted: &[OutboxEntry]) {
        loop {
            let waiting_for = wanted.iter().any(|e| {
                self.minted_for(e)
                    && e.place.seq() > self.received_to
                    && !self.tokens.contains_key(&e.place)
            });
            let Some((rx, _)) = self.pending.as_mut().filter(|_| waiting_for) else {
                return;
            };
            match rx.recv().await {
                Some(batch) => {
                    let top = batch.iter().map(|(p, _)| p.seq()).max().unwrap_or(0);
                    self.received_to = self.received_to.max(top);
                    self.tokens.extend(batch);
                }
                None => self.pending = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn entry(place: u64, at: u64) -> OutboxEntry {
        OutboxEntry {
            place: PlaceId(place),
            gateway: 1,
            admitted_at_ms: at,
            expires_at_ms: at + 1000,
            token_exp_ms: at + 1000,
        }
    }

    fn batch(places: std::ops::RangeInclusive<u64>) -> Vec<(PlaceId, Pre)> {
        places
            .map(|p| {
                (
                    PlaceId(p),
                    Pre {
                        token: format!("t{p}"),
                        staged_on: None,
                        keyed: false,
                    },
                )
            })
            .collect()
    }

    /// A tick uses pre-minted tokens batch by batch: a call whose places are in the first
    /// batch does not wait for the rest; one that needs a later batch waits for it; a place
    /// the pre-mint skipped (below what was received) is not waited for.
    #[tokio::test]
    async fn a_tick_waits_only_for_the_pre_minted_batches_it_needs() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut ready = TickTokens {
            at_ms: 5000,
            exp_ms: 6000,
            token_exp_ms: 6000,
            tokens: HashMap::new(),
            pending: Some((rx, Minting(tokio::spawn(async {})))),
            received_to: 0,
        };
        tx.send(batch(1..=10)).await.expect("open");
        let first: Vec<_> = (1..=10).map(|p| entry(p, 5000)).collect();
        // The second batch is never sent here: covering the first must not wait for it.
        let waited = tokio::time::timeout(Duration::from_secs(5), ready.cover(&first)).await;
        assert!(waited.is_ok(), "waited for a batch it did not need");
        assert_eq!(ready.tokens.len(), 10);
        assert_eq!(ready.received_to, 10);

        // Place 3 skipped by the pre-mint (taken out), place 15 in the next batch.
        ready.tokens.remove(&PlaceId(3));
        let later = vec![entry(3, 5000), entry(15, 5000)];
        let send = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(batch(11..=20)).await.expect("open");
        };
        let ((), ()) = tokio::join!(ready.cover(&later), send);
        assert!(ready.tokens.contains_key(&PlaceId(15)));
        assert!(!ready.tokens.contains_key(&PlaceId(3)));

        // Entries of another admission time never wait; a closed channel ends the wait.
        let other = vec![entry(99, 7000)];
        ready.cover(&other).await;
        drop(tx);
        ready.cover(&[entry(99, 5000)]).await;
        assert!(ready.pending.is_none());
    }
}
