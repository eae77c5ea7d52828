//! Development secrets (the entry-token key and the admin token when none is configured) are
//! shared through Redis: the first process stores one (`SET NX`), every one reads it back.
//! Redis can lose them (restarted empty, flushed) while processes run with them: each process
//! writes its own back every [`KEEP_EVERY`] (again `SET NX`), so a process started after the
//! loss reads the one the running processes use. One started before any running process wrote
//! it back stores a new one, and the two disagree: that is logged, and only a restart of one
//! side mends it (development only; production configures its secrets).

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use usher_core::store::{DevSecret, Store};

/// How often the secrets are written back.
pub const KEEP_EVERY: Duration = Duration::from_secs(1);

/// Writes `secrets` back until `cancel`.
pub(crate) async fn keep(
    store: Store,
    secrets: Vec<(DevSecret, String)>,
    cancel: CancellationToken,
) {
    let mut warned = false;
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(KEEP_EVERY) => {}
        }
        for (which, mine) in &secrets {
            match store.shared_dev_secret(*which, mine.clone()).await {
                Ok(stored) if stored != *mine && !warned => {
                    warned = true;
                    tracing::warn!(secret = ?which, "the development secret in redis is not this process's (redis lost it and another process stored a new one); restart this process to use it");
                }
                _ => {}
            }
        }
    }
}
