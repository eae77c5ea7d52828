use anyhow::Context;
use clap::Parser;
use usher_booking_demo::Config;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cfg = Config::parse();
    usher_runtime::init_tracing(cfg.log_format);
    let listener = usher_http::listen(cfg.listen)
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    usher_booking_demo::run(cfg, listener, usher_runtime::shutdown_signal()).await?;
    Ok(())
}
