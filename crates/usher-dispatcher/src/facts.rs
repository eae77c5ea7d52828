//! What this replica reports about itself for the readiness report (`GET /admin/readiness`,
//! which any replica may answer): its open-files limit and need, whether it signs with the
//! development key, and its clock's offset from Redis'. Reported every [`REPORT_EVERY`], kept
//! [`KEPT_FOR`]: a replica that stops leaves nothing behind.

use std::time::Duration;

use tokio_util::sync::CancellationToken;
use usher_core::store::{DispatcherFacts, Store};

/// How often the facts are reported.
pub const REPORT_EVERY: Duration = Duration::from_secs(2);
/// How long a report is kept without a newer one.
pub const KEPT_FOR: Duration = Duration::from_secs(10);
/// Files a dispatcher holds besides its client sockets: Redis connections, listener, logs.
pub(crate) const OWN_FILES: u64 = 64;

/// This replica's facts now (its clock measured against Redis').
pub(crate) async fn measure(
    store: &Store,
    max_sockets: u64,
    dev_signing_key: bool,
) -> Result<DispatcherFacts, usher_core::store::StoreError> {
    Ok(DispatcherFacts {
        open_files: usher_runtime::open_files_limit(),
        open_files_needed: max_sockets + OWN_FILES,
        dev_signing_key,
        clock_offset_ms: store.clock_offset_ms().await?,
    })
}

/// Reports replica `id`'s facts until `cancel` (a failed report is retried at the next one).
pub(crate) async fn report(
    store: Store,
    id: String,
    max_sockets: u64,
    dev_signing_key: bool,
    cancel: CancellationToken,
) {
    loop {
        let reported = match measure(&store, max_sockets, dev_signing_key).await {
            Ok(f) => store.report_dispatcher_facts(&id, &f, KEPT_FOR).await,
            Err(e) => Err(e),
        };
        if let Err(e) = reported {
            tracing::debug!(error = %e, "could not report this replica's facts for the readiness report");
        }
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(REPORT_EVERY) => {}
        }
    }
}
