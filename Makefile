# usher — common developer tasks. `make` (or `make help`) lists them.
#
# Every target is a thin wrapper: the real work lives in cargo and scripts/, so CI (.ci/run)
# and developers run exactly the same commands.

SHELL := /bin/bash
CARGO ?= cargo

.DEFAULT_GOAL := help
.PHONY: help run test test-tools test-build test-fast lint docs build profiling bench pow-figures

# The one release build: `make run` (scripts/run-local.sh), `make build` and `make bench`
# (scripts/bench.sh) all run exactly this command, so switching between them rebuilds nothing
# (building only some packages unifies dependencies' features differently, and cargo then
# compiles those dependencies again). The scripts spell it out too, as they run on their own.
RELEASE_BUILD := $(CARGO) build --release --workspace --bins

help: ## List the targets
	@echo "usher make targets:"
	@grep -E '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  make %-9s %s\n", $$1, $$2}'

run: ## Run a local stack (Redis, dispatcher, 2 gateways, booking demo); USHER_RUN_SMOKE=1 for a smoke check
	bash scripts/run-local.sh

# The debug binaries are built first: tests in usher-testkit run usher-dispatcher and
# usher-gateway as child processes from target/debug, and `cargo test` alone does not build
# the binaries of other packages.
#
# The integration tests are three binaries of usher-testkit, by what they need: `redis` (a
# plain redis-server: most of them), `topologies` (Cluster, Sentinel, TLS) and `browsers`
# (Chromium, k6, nginx). One test: `cargo test -p usher-testkit --test redis flow::`.
# Most tests wait on sockets and child processes, not on the CPU: TEST_THREADS runs that many
# at once in each binary. On 2 cores the `redis` binary used 0.86 of a core at 4 threads and
# its tests that must run alone (`usher_testkit::solo`) take ~105 s one after another, so 6
# threads bring its wall time from ~160 s to ~125 s without starving anyone; Chromium tests
# take one of two slots whatever this says. USHER_TEST_PATIENCE=2 doubles every wait's limit
# on a slow machine.
TEST_THREADS ?= 6

test: ## Validate deploy/, install redis-server, chromium, Playwright and k6 if missing, build, run every test (docs' links and examples too)
	$(MAKE) --no-print-directory -j2 --output-sync=target test-tools test-build
	$(CARGO) test --workspace --all-targets -- --test-threads $(TEST_THREADS)

# The two halves of `make test`'s preparation, run side by side: the tools the tests need
# beside the code (downloads and dpkg: mostly waiting on the network) while cargo compiles
# (the CPU). On a fresh machine that hides most of the installing behind the build. Each
# half's output is printed whole when it ends (--output-sync).
test-tools:
	bash scripts/validate-deploy.sh
	bash scripts/ensure-redis.sh
	bash scripts/ensure-browser.sh >/dev/null

test-build:
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --all-targets --no-run

test-fast: ## Unit tests and the integration tests that need only redis-server (no browsers, no Cluster)
	bash scripts/ensure-redis.sh
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --lib --bins -- --test-threads $(TEST_THREADS)
	$(CARGO) test --workspace --test redis -- --test-threads $(TEST_THREADS)

lint: ## cargo fmt --check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The configuration reference is rendered from the binaries' clap definitions; `make test`
# fails while the committed page differs from what they render (tests/browsers/docs.rs).
# usher-size's worked example is its output on this tree's BENCHMARKS.md: `make bench`
# changes it, and `make test` fails until it is written again.
docs: ## Regenerate docs/configuration.md from the binaries' flags, usher-size's example in docs/deploying.md and usher-rehearse's in docs/rehearsal.md
	USHER_BLESS=1 $(CARGO) test -p usher-testkit --test browsers docs::config_reference
	USHER_BLESS=1 $(CARGO) test -p usher-size --test size the_worked_example
	USHER_BLESS=1 $(CARGO) test -p usher-rehearse --test rehearse the_worked_example

build: ## Release build of every binary (the same build make run and make bench use)
	$(RELEASE_BUILD)

profiling: ## Release build with line tables for perf, in target/profiling/
	$(CARGO) build --profile profiling --workspace --bins

pow-figures: ## Proof-of-work cost figures: the page's solver in Chromium (also as a phone) and the Rust solver
	bash scripts/pow-figures.sh

bench: ## Benchmarks: runs scripts/bench.sh when present
	@if [ -f scripts/bench.sh ]; then \
		bash scripts/bench.sh; \
	else \
		echo "make bench: not implemented yet (issue 4)"; \
		exit 1; \
	fi
