#!/usr/bin/env bash
# run-local.sh — the `make run` experience: a whole usher stack on this machine.
#
# Starts, as children of this script:
#   redis-server       127.0.0.1:$USHER_RUN_REDIS_PORT   (AOF on, data in a temp dir)
#   usher-dispatcher   127.0.0.1:$USHER_RUN_DISPATCHER_PORT  admin API + JWKS
#   usher-gateway gw-1 127.0.0.1:$USHER_RUN_GATEWAY1_PORT    SSE edge
#   usher-gateway gw-2 127.0.0.1:$USHER_RUN_GATEWAY2_PORT    SSE edge
#   usher-booking-demo 127.0.0.1:$USHER_RUN_BOOKING_PORT     verifies entry tokens
# then creates the queue `demo` (2 admissions per second, passthrough off so that joins wait
# in line), writes target/usher-run.env (the URLs and the admin token the README's tour reads)
# and prints how to try it.
# Ctrl-C (or any exit) stops every child and deletes the temp dir and target/usher-run.env.
#
# Environment (all optional):
#   USHER_RUN_REDIS_PORT        Redis port                          (default 6379)
#   USHER_RUN_DISPATCHER_PORT   dispatcher port                     (default 8081)
#   USHER_RUN_GATEWAY1_PORT     first gateway (gw-1) port           (default 8080)
#   USHER_RUN_GATEWAY2_PORT     second gateway (gw-2) port          (default 8090)
#   USHER_RUN_BOOKING_PORT      demo booking service port           (default 8082)
#   USHER_RUN_READY_TIMEOUT     seconds to wait for each /readyz    (default 30)
#   USHER_RUN_SMOKE=1           after startup, run a smoke check (join the line on both
#                               gateways, wait for admission, book with the entry token),
#                               print PASS/FAIL and exit 0/1 instead of waiting for Ctrl-C
#   USHER_RUN_KEEP_TMP=1        keep the temp dir (Redis data and logs) on exit
#   RUST_LOG                    log filter for the usher processes  (default info)
# The cleanup functions run only from the EXIT trap, which shellcheck cannot see.
# shellcheck disable=SC2317
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

REDIS_PORT="${USHER_RUN_REDIS_PORT:-6379}"
DISPATCHER_PORT="${USHER_RUN_DISPATCHER_PORT:-8081}"
GATEWAY1_PORT="${USHER_RUN_GATEWAY1_PORT:-8080}"
GATEWAY2_PORT="${USHER_RUN_GATEWAY2_PORT:-8090}"
BOOKING_PORT="${USHER_RUN_BOOKING_PORT:-8082}"
READY_TIMEOUT="${USHER_RUN_READY_TIMEOUT:-30}"
SMOKE="${USHER_RUN_SMOKE:-0}"
KEEP_TMP="${USHER_RUN_KEEP_TMP:-0}"

HOST=127.0.0.1
DISPATCHER_URL="http://$HOST:$DISPATCHER_PORT"
GATEWAY1_URL="http://$HOST:$GATEWAY1_PORT"
GATEWAY2_URL="http://$HOST:$GATEWAY2_PORT"
BOOKING_URL="http://$HOST:$BOOKING_PORT"
QUEUE=demo

log() { echo "run-local: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# --- Prerequisites -------------------------------------------------------------------------
for tool in cargo curl setsid; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is required but not on PATH"
done
bash scripts/ensure-redis.sh

# True when something accepts TCP connections on 127.0.0.1:$1 (bash's /dev/tcp, no extra tools).
port_in_use() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# Fail fast, before a long build, if any port we need is taken (e.g. a system Redis on 6379).
for spec in "redis:$REDIS_PORT:USHER_RUN_REDIS_PORT" \
    "dispatcher:$DISPATCHER_PORT:USHER_RUN_DISPATCHER_PORT" \
    "gateway gw-1:$GATEWAY1_PORT:USHER_RUN_GATEWAY1_PORT" \
    "gateway gw-2:$GATEWAY2_PORT:USHER_RUN_GATEWAY2_PORT" \
    "booking demo:$BOOKING_PORT:USHER_RUN_BOOKING_PORT"; do
    IFS=: read -r what port var <<<"$spec"
    if port_in_use "$port"; then
        hint=""
        if [ "$what" = redis ]; then
            hint=" (a system Redis service? 'service redis-server stop' or 'systemctl stop redis-server')"
        fi
        die "port $port (for $what) is already in use on $HOST. Stop whatever listens there$hint," \
            "or pick another port with $var=<port>."
    fi
done

# --- Build ---------------------------------------------------------------------------------
# The same command as `make build` and `make bench`: switching between them rebuilds nothing.
log "building release binaries (cargo build --release --workspace --bins)..."
cargo build --release --workspace --bins
BIN="${CARGO_TARGET_DIR:-target}/release"
for b in usher-dispatcher usher-gateway usher-booking-demo; do
    [ -x "$BIN/$b" ] || die "$BIN/$b was not built"
done

# --- Children and cleanup ------------------------------------------------------------------
TMP="$(mktemp -d "${TMPDIR:-/tmp}/usher-run.XXXXXX")"
# What the README's tour sources: always under ./target, wherever cargo builds.
RUN_ENV=target/usher-run.env
# name -> pid of every child we start, in start order.
NAMES=()
PIDS=()

# stop_pids PID...: TERM, up to 5 s for them to exit, then KILL; reaps them.
stop_pids() {
    local pid alive
    for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
    for _ in $(seq 1 50); do
        alive=0
        for pid in "$@"; do
            if kill -0 "$pid" 2>/dev/null; then alive=1; fi
        done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then
            log "pid $pid did not stop within 5 s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait "$pid" 2>/dev/null || true
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "${#PIDS[@]}" -gt 0 ]; then
        log "stopping ${NAMES[*]}..."
        # The usher servers first (gateways deregister from Redis as they stop), Redis last.
        local servers=() redis_pid=""
        local i
        for i in "${!PIDS[@]}"; do
            if [ "${NAMES[$i]}" = redis ]; then redis_pid="${PIDS[$i]}"; else servers+=("${PIDS[$i]}"); fi
        done
        [ "${#servers[@]}" -gt 0 ] && stop_pids "${servers[@]}"
        [ -n "$redis_pid" ] && stop_pids "$redis_pid"
    fi
    rm -f "$RUN_ENV"
    if [ "$KEEP_TMP" = 1 ]; then
        log "kept $TMP (Redis data and logs)"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
# A signal becomes an ordinary exit, which runs cleanup once.
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CMD [ARGS...]: runs CMD in the background with output to $TMP/NAME.log.
# Environment for CMD is passed with `env VAR=value` in front of it. NO_COLOR keeps ANSI
# colour codes out of the log files.
#
# `setsid` puts each child in a session of its own, so a Ctrl-C in the terminal reaches only
# this script (and make), not the children: cleanup then stops them in order (the usher
# servers while Redis is still up, so gateways can deregister; Redis last). setsid execs
# without forking here (a background child is never a process-group leader), so $! is the
# child's own pid.
start() {
    local name="$1"
    shift
    NO_COLOR=1 setsid "$@" >"$TMP/$name.log" 2>&1 </dev/null &
    NAMES+=("$name")
    PIDS+=("$!")
}

pid_of() {
    local i
    for i in "${!NAMES[@]}"; do
        [ "${NAMES[$i]}" = "$1" ] && echo "${PIDS[$i]}" && return 0
    done
    return 1
}

show_log() {
    log "last lines of $TMP/$1.log:"
    tail -n 30 "$TMP/$1.log" >&2 || true
}

# wait_ready NAME URL: until URL answers 200, NAME dies, or READY_TIMEOUT passes.
wait_ready() {
    local name="$1" url="$2" pid code deadline
    pid="$(pid_of "$name")"
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        code="$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url" || true)"
        [ "$code" = 200 ] && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            show_log "$name"
            die "$name exited during startup (see above)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            show_log "$name"
            die "$name not ready: $url answered ${code:-nothing} for ${READY_TIMEOUT}s"
        fi
        sleep 0.2
    done
}

log "logs and Redis data go to $TMP"

# --- Redis ---------------------------------------------------------------------------------
start redis redis-server --port "$REDIS_PORT" --bind "$HOST" --dir "$TMP" \
    --appendonly yes --appendfsync everysec --save ""
deadline=$((SECONDS + 10))
until [ "$(redis-cli -h "$HOST" -p "$REDIS_PORT" ping 2>/dev/null || true)" = PONG ]; do
    if ! kill -0 "$(pid_of redis)" 2>/dev/null; then
        show_log redis
        die "redis-server exited during startup (port $REDIS_PORT in use?)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
        show_log redis
        die "redis-server did not answer PING on port $REDIS_PORT within 10 s"
    fi
    sleep 0.1
done
log "redis     ready  redis://$HOST:$REDIS_PORT        log: $TMP/redis.log"
REDIS_URL="redis://$HOST:$REDIS_PORT"

# --- usher servers -------------------------------------------------------------------------
# Development mode: without USHER_ADMIN_TOKEN the dispatcher shares a generated admin token
# (48 hex digits) through Redis (usher:dev:admin-token) and logs it once; it is read back
# below. A USHER_ADMIN_TOKEN of your own needs at least 32 characters after any `label:`, or
# the dispatcher refuses to start (e.g. USHER_ADMIN_TOKEN=$(openssl rand -hex 32)).
if [ -n "${USHER_ADMIN_TOKEN:-}" ] && [ "${#USHER_ADMIN_TOKEN}" -lt 32 ]; then
    die "USHER_ADMIN_TOKEN is shorter than 32 characters: the dispatcher would refuse it"
fi
# Booking services' token (load and inventory reports, docs/sale-day.md#inventory): the one
# given, or a fresh one (48 hex digits), written to the env file below.
SERVICE_TOKEN="${USHER_SERVICE_TOKEN:-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')}"
[ "${#SERVICE_TOKEN}" -ge 32 ] || die "USHER_SERVICE_TOKEN is shorter than 32 characters"
start dispatcher env USHER_LISTEN="$HOST:$DISPATCHER_PORT" USHER_REDIS_URL="$REDIS_URL" \
    USHER_TICK_MS=1000 USHER_DEV=1 ${USHER_ADMIN_TOKEN:+USHER_ADMIN_TOKEN="$USHER_ADMIN_TOKEN"} \
    USHER_SERVICE_TOKEN="$SERVICE_TOKEN" "$BIN/usher-dispatcher"
wait_ready dispatcher "$DISPATCHER_URL/readyz"
log "dispatcher ready $DISPATCHER_URL    log: $TMP/dispatcher.log"

start gateway-1 env USHER_LISTEN="$HOST:$GATEWAY1_PORT" USHER_REDIS_URL="$REDIS_URL" \
    USHER_SERVER_ID=gw-1 "$BIN/usher-gateway"
start gateway-2 env USHER_LISTEN="$HOST:$GATEWAY2_PORT" USHER_REDIS_URL="$REDIS_URL" \
    USHER_SERVER_ID=gw-2 "$BIN/usher-gateway"
start booking-demo env USHER_LISTEN="$HOST:$BOOKING_PORT" \
    USHER_JWKS_URL="$DISPATCHER_URL/.well-known/jwks.json" USHER_DISPATCHER_URL="$DISPATCHER_URL" \
    "$BIN/usher-booking-demo"
wait_ready gateway-1 "$GATEWAY1_URL/readyz"
log "gateway-1 ready  $GATEWAY1_URL    log: $TMP/gateway-1.log"
wait_ready gateway-2 "$GATEWAY2_URL/readyz"
log "gateway-2 ready  $GATEWAY2_URL    log: $TMP/gateway-2.log"
wait_ready booking-demo "$BOOKING_URL/readyz"
log "booking   ready  $BOOKING_URL    log: $TMP/booking-demo.log"

# --- The demo queue ------------------------------------------------------------------------
# The admin API always needs a token: the one given, or the development token in Redis.
ADMIN_TOKEN="${USHER_ADMIN_TOKEN:-$(redis-cli -h "$HOST" -p "$REDIS_PORT" --raw GET usher:dev:admin-token)}"
[ -n "$ADMIN_TOKEN" ] || die "no development admin token in redis (see $TMP/dispatcher.log)"
curl -fsS -X PUT "$DISPATCHER_URL/admin/queues/$QUEUE" -H 'content-type: application/json' \
    -H "Authorization: Bearer $ADMIN_TOKEN" \
    -d "{\"admit_per_second\": 2, \"session_ttl_seconds\": 600, \"passthrough\": false, \"open\": true, \"title\": \"usher demo\", \"booking_url\": \"http://127.0.0.1:$BOOKING_PORT/entry\"}" >/dev/null ||
    die "could not create the queue '$QUEUE' (see $TMP/dispatcher.log)"
log "queue '$QUEUE' created: 2 admissions per second, sessions of 600 s, everyone waits in line"
# The tour in README.md starts with `source target/usher-run.env`. Keep in step with
# run_env() in crates/usher-testkit/tests/browsers/docs.rs, which runs the tour against these names.
mkdir -p target
cat >"$RUN_ENV" <<ENV
export DISPATCHER=$DISPATCHER_URL
export GATEWAY=$GATEWAY1_URL
export BOOKING=$BOOKING_URL
export USHER_ADMIN_TOKEN=$ADMIN_TOKEN
export USHER_SERVICE_TOKEN=$SERVICE_TOKEN
ENV
log "wrote $RUN_ENV (source it for the README's tour)"

# --- Smoke check (USHER_RUN_SMOKE=1) -------------------------------------------------------
if [ "$SMOKE" = 1 ]; then
    log "smoke check: joining the line on both gateways (up to 15 s)..."
    ok=1
    # Join through both gateways at once; each stream ends after `admitted`. curl's exit code
    # is ignored: it is 28 when the 15 s are up, and the transcript is what we check.
    curl -sN --max-time 15 "$GATEWAY1_URL/api/queues/$QUEUE/stream" >"$TMP/smoke-gw1.txt" 2>&1 &
    c1=$!
    curl -sN --max-time 15 "$GATEWAY2_URL/api/queues/$QUEUE/stream" >"$TMP/smoke-gw2.txt" 2>&1 &
    c2=$!
    wait "$c1" || true
    wait "$c2" || true
    for gw in gw1 gw2; do
        f="$TMP/smoke-$gw.txt"
        if grep -q '^event: waiting' "$f" && grep -q '^event: admitted' "$f"; then
            log "  PASS  $gw stream: event: waiting, then event: admitted"
        else
            log "  FAIL  $gw stream lacks event: waiting and/or event: admitted; it was:"
            sed 's/^/        | /' "$f" >&2
            ok=0
        fi
    done
    # The entry token is in the `data:` line that follows `event: admitted`.
    token="$(awk '/^event: admitted/{a=1} a && /^data:/{print; exit}' "$TMP/smoke-gw1.txt" |
        sed -n 's/.*"token":"\([^"]*\)".*/\1/p')"
    if [ -n "$token" ]; then
        code="$(curl -s -o "$TMP/smoke-booking.json" -w '%{http_code}' --max-time 10 \
            -X POST "$BOOKING_URL/api/bookings" -H "Authorization: Bearer $token" \
            -H 'content-type: application/json' -d "{\"queue\":\"$QUEUE\"}" || true)"
        if [ "$code" = 201 ]; then
            log "  PASS  booking with the entry token: 201 $(cat "$TMP/smoke-booking.json")"
        else
            log "  FAIL  booking with the entry token answered ${code:-nothing}: $(cat "$TMP/smoke-booking.json" 2>/dev/null)"
            ok=0
        fi
    else
        log "  FAIL  no entry token found in gw1's admitted event"
        ok=0
    fi
    if [ "$ok" = 1 ]; then
        echo "SMOKE PASS"
        exit 0
    fi
    for n in dispatcher gateway-1 gateway-2 booking-demo; do show_log "$n"; done
    echo "SMOKE FAIL"
    exit 1
fi

# --- Banner --------------------------------------------------------------------------------
cat <<EOF

  usher is running locally (logs in $TMP).

  The waiting-room page (admitted browsers land on the booking demo's /entry):
    $GATEWAY1_URL/q/$QUEUE      ($GATEWAY1_URL/q/$QUEUE?lang=ko in Korean)

  In another terminal, from this directory, the README's tour begins with:
    source $RUN_ENV     # DISPATCHER, GATEWAY, BOOKING, USHER_ADMIN_TOKEN, USHER_SERVICE_TOKEN

  Join the line (each open stream is one browser; it ends after 'admitted'):
    curl -N $GATEWAY1_URL/api/queues/$QUEUE/stream
    curl -N $GATEWAY2_URL/api/queues/$QUEUE/stream

  Admin:   $DISPATCHER_URL/admin/queues/$QUEUE    dashboard: $DISPATCHER_URL/admin/ui
           admin token (USHER_ADMIN_TOKEN): $ADMIN_TOKEN
             curl -X PUT $DISPATCHER_URL/admin/queues/$QUEUE -H "Authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' -d '{"admit_per_second": 5}'
  JWKS:    $DISPATCHER_URL/.well-known/jwks.json
  Booking: POST $BOOKING_URL/api/bookings   (TOKEN = the "token" of the admitted event)
             curl -X POST $BOOKING_URL/api/bookings -H "Authorization: Bearer \$TOKEN" -H 'content-type: application/json' -d '{"queue":"$QUEUE"}'

  Press Ctrl-C to stop.

EOF

# Wait until Ctrl-C, or until one of the children dies (then stop the rest).
set +e
wait -n "${PIDS[@]}"
rc=$?
set -e
for i in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
        log "${NAMES[$i]} exited unexpectedly (status $rc)"
        show_log "${NAMES[$i]}"
    fi
done
exit 1
