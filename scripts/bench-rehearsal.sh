#!/usr/bin/env bash
# The rehearsal against a real run (`make bench`'s `rehearse` scenario; docs/rehearsal.md):
# one constant-rate scenario run twice, and the two must agree within 10% on the median wait
# and on when the line empties.
#   real       — a redis-server, a dispatcher (tick 1 s) and a gateway; usher-loadgen opens the
#                connections of a constant arrival curve (--arrivals: $JOIN_RATE a second), each
#                waiting until admitted (`wait` in its report: arrival to admitted_at, and the
#                last admission)
#   rehearsal  — usher-rehearse with the same curve and settings on a scratch redis-server, on
#                its virtual clock
# Writes $OUT/rehearsal-real.json, $OUT/rehearsal/ and $OUT/rehearsal-check.json, prints the
# comparison, and exits 1 when a figure is more than 10% off the real run's.
#
# Knobs (env): USHER_BENCH_OUT (target/bench), USHER_BENCH_BIN (target/release: binaries built
# by bench.sh; target/debug for a quick check), USHER_BENCH_REHEARSE_CROWD (3000),
# USHER_BENCH_REHEARSE_JOIN_RATE (50 a second), USHER_BENCH_REHEARSE_RATE (25 admitted a second),
# USHER_BENCH_REHEARSE_PORT (65300: it uses this port and the next three; above the ephemeral ports, as bench.sh says),
# USHER_BENCH_REHEARSE_TICK_MS (1000: the dispatcher's tick, and the rehearsal's).
# Every process it starts is stopped by PID on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${USHER_BENCH_OUT:-target/bench}
BIN=${USHER_BENCH_BIN:-target/release}
CROWD=${USHER_BENCH_REHEARSE_CROWD:-3000}
JOIN_RATE=${USHER_BENCH_REHEARSE_JOIN_RATE:-50}
RATE=${USHER_BENCH_REHEARSE_RATE:-25}
BASE=${USHER_BENCH_REHEARSE_PORT:-65300}
TICK_MS=${USHER_BENCH_REHEARSE_TICK_MS:-1000}
REDIS_PORT=$BASE
SCRATCH_PORT=$((BASE + 1))
DISPATCHER="http://127.0.0.1:$((BASE + 2))"
GATEWAY="http://127.0.0.1:$((BASE + 3))"
QUEUE=rehearsed
log() { echo "bench-rehearsal: $*" >&2; }
mkdir -p "$OUT"

PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    sleep 1
    for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

for port in "$REDIS_PORT" "$SCRATCH_PORT"; do
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
        >"$OUT/rehearsal-redis-$port.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done

TOKEN="bench:$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
USHER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT" USHER_ADMIN_TOKEN="$TOKEN" USHER_LISTEN="${DISPATCHER#http://}" \
    USHER_TICK_MS="$TICK_MS" "$BIN/usher-dispatcher" >"$OUT/rehearsal-dispatcher.log" 2>&1 &
PIDS+=($!)
USHER_REDIS_URL="redis://127.0.0.1:$REDIS_PORT" USHER_LISTEN="${GATEWAY#http://}" USHER_SERVER_ID=rehearsal-bench-gw \
    USHER_IP_JOIN_RATE=0 USHER_IP_JOIN_BURST=0 USHER_IP_MAX_STREAMS=0 USHER_IP_MAX_PLACES=0 USHER_IP_MAX_SOCKETS=0 \
    USHER_TICKET_KEY="bench-ticket-key-0123456789abcdef0123" "$BIN/usher-gateway" >"$OUT/rehearsal-gateway.log" 2>&1 &
PIDS+=($!)
for url in "$DISPATCHER" "$GATEWAY"; do
    for _ in $(seq 100); do curl -fsS "$url/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -fsS "$url/readyz" >/dev/null || { log "$url not ready"; exit 1; }
done

SETTINGS="$OUT/rehearsal-settings.json"
echo "{\"admit_per_second\": $RATE}" >"$SETTINGS"
curl -fsS -X PUT "$DISPATCHER/admin/queues/$QUEUE" -H "Authorization: Bearer ${TOKEN#bench:}" \
    -H 'content-type: application/json' --data-binary "@$SETTINGS" >/dev/null

# One arrival curve for both: $JOIN_RATE joins a second until the crowd is in.
CSV="$OUT/rehearsal-arrivals.csv"
python3 -c "
import sys
crowd, rate = int(sys.argv[1]), int(sys.argv[2])
print('second,joins')
s = 0
while crowd > 0:
    print(f'{s},{min(rate, crowd)}'); crowd -= rate; s += 1
" "$CROWD" "$JOIN_RATE" >"$CSV"
LIMIT=$(( CROWD / RATE * 2 + 60 ))
log "real: $CROWD browsers at $JOIN_RATE/s (usher-loadgen --arrivals), admitted at $RATE/s (at most $LIMIT s)"
"$BIN/usher-loadgen" --gateways "$GATEWAY" --queue "$QUEUE" --arrivals "$CSV" \
    --until-admitted --duration "$LIMIT" --linger-ms 0 --quiet --report "$OUT/rehearsal-real.json" >/dev/null

log "rehearsal: the same curve and settings on a virtual clock"
"$BIN/usher-rehearse" --redis "redis://127.0.0.1:$SCRATCH_PORT" --settings "$SETTINGS" --queue "$QUEUE" \
    --arrivals "$CSV" --booking-seconds 0 --tick-ms "$TICK_MS" --out "$OUT/rehearsal" >&2

python3 - "$OUT/rehearsal-real.json" "$OUT/rehearsal/rehearsal.json" "$OUT/rehearsal-check.json" <<'PY'
import json, sys
real = json.load(open(sys.argv[1]))
rehearsed = json.load(open(sys.argv[2]))["summary"]
wait = real.get("wait") or {}
rows = [
    ("median wait (s)", wait.get("p50_s"), rehearsed["wait_s"]["p50"]),
    ("line empty at (s)", wait.get("line_empty_at_s"), rehearsed["line_empty_at_s"]),
]
check = {"admitted_real": wait.get("count"), "admitted_rehearsed": rehearsed["admitted"], "rows": []}
ok = wait.get("count") == rehearsed["admitted"]
for name, r, s in rows:
    off = None if not r or s is None else abs(s - r) / r
    good = off is not None and off <= 0.10
    ok &= good
    check["rows"].append({"figure": name, "real": r, "rehearsal": s, "off": off, "within_10_percent": good})
    print(f"{name:20} real {r}  rehearsal {s}  off {'-' if off is None else f'{off:.1%}'}  {'ok' if good else 'FAIL'}")
check["ok"] = ok
json.dump(check, open(sys.argv[3], "w"), indent=2)
sys.exit(0 if ok else 1)
PY
