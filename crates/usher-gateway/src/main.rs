use anyhow::Context;
use usher_gateway::Config;

/// mimalloc: fewer cycles per allocation than glibc malloc, which showed in profiles of the
/// join path, and less fragmentation with many small per-connection allocations.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let (mut cfg, caps_given) = Config::parse_noting_caps();
    // Declared before the runtime, so dropped after it: the last spans are flushed at exit.
    let _traces = usher_runtime::init_tracing(cfg.log_format, "usher-gateway")
        .context("cannot set traces up")?;
    usher_runtime::disable_transparent_huge_pages();
    usher_runtime::raise_open_files_limit();
    for lowered in cfg.fit_open_files(usher_runtime::open_files_limit(), caps_given)? {
        tracing::warn!("{lowered}");
    }
    let rt = usher_runtime::runtime(cfg.worker_threads).context("cannot start the runtime")?;
    rt.block_on(async {
        let listener = usher_http::listen(cfg.listen)
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        usher_gateway::run(cfg, listener, usher_runtime::shutdown_signal()).await?;
        Ok(())
    })
}
