//! `usher-loadgen`: see `usher-loadgen --help` and loadtest/README.md.

use clap::Parser;
use usher_loadgen::cli::Args;

/// mimalloc: fewer cycles per allocation than glibc malloc, which showed in profiles of the
/// join path, and less fragmentation with many small per-connection allocations.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args = Args::parse();
    // Huge pages made the kernel zero 2 MiB at a time as connections came and went; the
    // workers inherit this across exec.
    usher_runtime::disable_transparent_huge_pages();
    let code = match usher_loadgen::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("usher-loadgen: error: {e:#}");
            1
        }
    };
    std::process::exit(code);
}
