//! The process itself: the tokio runtime every usher binary runs on, transparent huge pages
//! off, the open-files limit raised, and shutdown on SIGINT or SIGTERM.

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

/// Raises this process's soft limit on open files to its hard limit (Linux; elsewhere a
/// no-op), and logs both.
///
/// Every socket is a file: a server holding 18,000 browsers needs 18,000 descriptors, but a
/// container's soft limit is often 1,024 (the hard limit 524,288 or more), and a server that
/// kept it would refuse connections far below its caps. Raising the soft limit to the hard one
/// needs no privilege. Call it in `main` once logging is set up. A failure is logged and
/// otherwise ignored: the caps (`--max-sockets`) still hold, below whatever limit is left.
pub fn raise_open_files_limit() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
        let shown = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        let was = getrlimit(Resource::Nofile);
        let (soft, hard) = (shown(was.current), shown(was.maximum));
        if was.current == was.maximum {
            tracing::info!(soft = %soft, hard = %hard, "open files limit: the soft limit is the hard limit already");
            return;
        }
        let raised = Rlimit {
            current: was.maximum,
            maximum: was.maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => {
                tracing::info!(soft_was = %soft, soft = %hard, hard = %hard, "open files limit: soft limit raised to the hard limit")
            }
            Err(e) => {
                tracing::warn!(soft = %soft, hard = %hard, error = %e, "open files limit: cannot raise the soft limit")
            }
        }
    }
}

/// This process's soft limit on open files (`None`: unlimited, or not known on this system),
/// for the dispatcher's readiness report.
pub fn open_files_limit() -> Option<u64> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        None
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}
