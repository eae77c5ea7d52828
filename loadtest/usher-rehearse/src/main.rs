//! `usher-rehearse`: see `usher-rehearse --help` and docs/rehearsal.md.

use clap::Parser;
use usher_rehearse::cli::Args;

fn main() {
    let args = Args::parse();
    match usher_rehearse::run_blocking(&args) {
        Ok(summary) => println!("{summary}"),
        Err(e) => {
            eprintln!("usher-rehearse: error: {e:#}");
            std::process::exit(1);
        }
    }
}
