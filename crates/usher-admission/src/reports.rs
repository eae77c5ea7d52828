//! The service-token calls: what the booking service reports to the dispatcher, its load (for
//! the adaptive admission rate) and what is left of a queue's inventory.

use crate::{Admission, Error};

impl Admission {
    /// Reports this service's load to the dispatcher, for the queues whose adaptive rate
    /// follows `backend` (`PUT /api/backends/{backend}/load` with the service token). Report
    /// regularly: a backend with no fresh report is read as down, and its queues stop admitting.
    pub async fn report_load(&self, backend: &str, load: f64) -> Result<(), Error> {
        let token = self
            .inner
            .service_token
            .as_deref()
            .ok_or(Error::NoServiceToken)?;
        self.inner.sessions.report_load(token, backend, load).await
    }

    /// Reports what is left of `queue`'s inventory (`PUT /api/queues/{queue}/inventory` with
    /// the service token): usher admits only while `remaining`, less a basket per session
    /// consumed since and per active session, is above 0, and tells each waiting browser
    /// whether its place is likely to get something. Report after each sale, or whenever
    /// carts return items; a report older than the queue's `inventory_stale_after_seconds`
    /// leaves browsers told `unknown`.
    pub async fn report_inventory(&self, queue: &str, remaining: u64) -> Result<(), Error> {
        let token = self
            .inner
            .service_token
            .as_deref()
            .ok_or(Error::NoServiceToken)?;
        self.inner
            .sessions
            .report_inventory(token, queue, remaining)
            .await
    }
}
