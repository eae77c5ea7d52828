//! Tests that must not share the machine with each other.
//!
//! The integration tests of a binary run several at a time (`--test-threads`): most of them
//! wait on sockets and child processes, so that is safe and fast. Two kinds are not: tests
//! that load the machine on purpose (thousands of simulated browsers, processes killed over
//! and over) and tests that measure time (a rate within 2%, a keepalive period). Each takes
//! [`solo`] first, so none of them runs beside another; they still run beside light tests,
//! as each did beside the other tests of its own file when every file was its own binary.

/// Held for the whole of a heavy or timing test; see the module's documentation.
pub type Solo = tokio::sync::MutexGuard<'static, ()>;

/// Waits until no other heavy or timing test runs, and holds that until the guard drops.
pub async fn solo() -> Solo {
    static SOLO: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SOLO.lock().await
}

/// Held for the whole of a test that runs Chromium (Playwright or k6's browser module).
pub type ChromiumSlot = tokio::sync::SemaphorePermit<'static>;

/// Waits for one of two Chromium slots: at most two browser-driving tests run at once (as
/// when `browser.rs` was its own binary run two tests at a time), since each Chromium takes
/// a core of its own and their pages have deadlines.
pub async fn chromium_slot() -> ChromiumSlot {
    static SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
    // The semaphore is never closed.
    SLOTS
        .acquire()
        .await
        .expect("the Chromium slots are never closed")
}
