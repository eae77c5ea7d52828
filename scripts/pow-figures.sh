#!/usr/bin/env bash
# Proof-of-work cost figures on this machine (BENCHMARKS.md, "Proof of work"; docs/security.md,
# "Proof of work"): the page's solver in Chromium, unthrottled and with 4x CPU throttling
# (the phone estimate), then the Rust solver per core and the cost table at each difficulty.
# Figures only: nothing here is compared against a target.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
cargo build --workspace --bins
cargo test -p usher-testkit --test browsers pow_page:: -- --nocapture
cat target/pow-figures.txt
phone=$(awk '$1 == "js_main_thread_hashes_per_second_4x_throttled" { print $2 }' target/pow-figures.txt)
# The release build make build, make run and make bench use: nothing is compiled twice.
cargo build --release --workspace --bins
./target/release/usher-pow-bench --seconds 5 --phone-hashes-per-second "$phone"
