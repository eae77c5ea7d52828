use anyhow::Context;
use clap::Parser;
use usher_booking_demo::Config;

fn main() -> anyhow::Result<()> {
    let cfg = Config::parse();
    // Declared before the runtime, so dropped after it: the last spans are flushed at exit,
    // and the exporter's blocking HTTP client is not dropped inside the runtime.
    let _traces = usher_runtime::init_tracing(cfg.log_format, "usher-booking-demo")
        .context("cannot set traces up")?;
    usher_runtime::raise_open_files_limit();
    let rt = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
    rt.block_on(async {
        let listener = usher_http::listen(cfg.listen)
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        usher_booking_demo::run(cfg, listener, usher_runtime::shutdown_signal()).await?;
        Ok(())
    })
}
