//! `usher-size`: see `usher-size --help` and docs/deploying.md, "Planning a sale's size".

use clap::Parser;
use usher_size::cli::{run, Args};

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(out) => print!("{out}"),
        Err(e) => {
            eprintln!("usher-size: error: {e:#}");
            std::process::exit(1);
        }
    }
}
