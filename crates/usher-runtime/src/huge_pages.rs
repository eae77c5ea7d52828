//! Transparent huge pages, turned off per process.

/// Turns transparent huge pages off for this process (Linux; elsewhere a no-op).
///
/// mimalloc asks the kernel for huge pages, and the kernel zeroes a whole 2 MiB page on the
/// first touch of any byte in it, and again when a range mimalloc gave back is touched anew.
/// A gateway's memory churns with its connections, so under a join burst the kernel spends
/// much of the gateway's CPU zeroing pages (`clear_page_erms`; BENCHMARKS.md). Call it in
/// `main` once logging is set up, before the runtime allocates; children inherit it. A
/// failure (an old kernel) is logged and otherwise ignored: huge pages cost time, not
/// correctness.
pub fn disable_transparent_huge_pages() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::info!(error = %e, "cannot turn transparent huge pages off for this process");
    }
}
