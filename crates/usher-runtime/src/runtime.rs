//! The tokio runtime every usher binary runs on.

/// The tokio runtime for a binary: `threads` worker threads (0 = one per core). One thread is
/// best when several usher processes share a few cores: no cross-thread wake-ups.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
    }
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if threads > 1 {
        b.worker_threads(threads);
    }
    b.enable_all().build()
}
