#!/usr/bin/env bash
# Issue 26's measurement on a bigger machine (16 cores), usher against its floors in the same
# run, from the release binaries that `../shared/tools/bench16/pack.sh` puts in .bench16/ (and
# `usher-dispatcher-base`, an older dispatcher, when there is one: the burst is then run with
# both, on the same gateways, for a before/after in one run). Three phases, each optional:
#
#   joins  JOIN_RATES (10,000 and 40,000/s) through GW gateways (16, one runtime thread each),
#          then through GW joins floors (`usher-joins-floor`), then through GW round-trip floors
#          (`usher-joins-floor --redis`: each stream answered after one PING to the same Redis),
#          then through GW join floors (`--join`: after usher's own join took it a place, one
#          place a call, on a paused queue of their own),
#          JOIN_SECS (5) of joins each, every stream held to the end (so GW gateways must hold
#          rate x JOIN_SECS);
#   admit  ADMIT (60,000) waiting, ADMIT_TICK (10,000) admitted per 1 s tick, through the same
#          gateways, with each dispatcher (DISPATCHERS names them, a name twice for two runs);
#          the unpause is sent UNPAUSE_LEAD_MS before a tick's admission time when set (inside
#          its lead: the sale-opening tick at its hardest; the summary says how long before
#          the tick its answer came), else wherever the joins ended;
#          then `usher-floor` (the bare burst, 4x4 threads);
#   hold   HOLD (1,000,000) streams over HOLD_GW (60) gateways, joined at HOLD_RATE, then the
#          line moves 50 places a second: position-update delay, memory, Redis commands/s.
#
# CPU by role (utime + stime from /proc) is printed beside each phase; a joins run's window ends
# when its load generator exits, so the servers' handling of its closes is partly left out
# (`make bench` reads once the servers are idle again), and it is divided by the joins asked for. Writes summary.txt and
# all.tgz (every report and log) to $OUT. Run from the folder holding .bench16/:
#   OUT=/tmp/out timeout 540 bash .bench16/bench16.sh
set -u
B=${DEVBENCH_DIR:-.bench16}
export PATH="$PWD/$B/bin:$PATH" LD_LIBRARY_PATH="$PWD/$B/lib"
OUT=${OUT:-/tmp/bench16-out}; mkdir -p "$OUT"
P=${BASE_PORT:-9000}
PHASES=" ${PHASES:-joins admit hold} "
JOIN_RATES=${JOIN_RATES:-"10000 40000"}; JOIN_SECS=${JOIN_SECS:-5}; GW=${GW:-16}
ADMIT_TICK=${ADMIT_TICK:-10000}; ADMIT=${ADMIT:-60000}
HOLD=${HOLD:-1000000}; HOLD_GW=${HOLD_GW:-60}; HOLD_RATE=${HOLD_RATE:-40000}; HOLD_SECS=${HOLD_SECS:-25}
# How long the hold phase waits for 99% of HOLD to be waiting (a 2-core machine joins a
# million at about 8,000/s: HOLD_WAIT=200, and HOLD_SECS long enough that the load generator
# outlives the slower joins).
HOLD_WAIT=${HOLD_WAIT:-120}
SRC=${SOURCE_IPS:-127.0.0.2-127.0.0.250}
# The machine's settings this raises, put back on exit (the machine may be this one).
TUNED="fs.nr_open fs.file-max net.ipv4.ip_local_port_range net.core.somaxconn net.ipv4.tcp_max_syn_backlog"
BEFORE=$(for k in $TUNED; do printf '%s=%s\n' "$k" "$(sysctl -n "$k" 2>/dev/null | tr '\t' ' ')"; done)
restore() { local kv; while IFS= read -r kv; do [ -n "${kv#*=}" ] && sysctl -qw "$kv" 2>/dev/null; done <<<"$BEFORE"; }
sysctl -qw fs.nr_open=2097152 2>/dev/null; sysctl -qw fs.file-max=8000000 2>/dev/null
ulimit -Hn 1048576 2>/dev/null; ulimit -Sn 1048576 2>/dev/null || ulimit -Sn "$(ulimit -Hn)"
NOF=$(ulimit -n); PER=$(( NOF - 1000 ))
sysctl -qw net.ipv4.ip_local_port_range="1024 65000" 2>/dev/null
sysctl -qw net.core.somaxconn=65535 2>/dev/null
sysctl -qw net.ipv4.tcp_max_syn_backlog=65535 2>/dev/null
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
say "bench16 $(date -u +%FT%TZ) cores $(nproc) $(grep MemTotal /proc/meminfo | tr -s ' ') nofile $NOF $(uname -r)"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; sleep 1; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "${RD:-}"; restore; }
trap cleanup EXIT
# CPU seconds (utime + stime) of the given processes, now.
cpu() { local t=0 p f; for p in "$@"; do read -r -a f < "/proc/$p/stat" 2>/dev/null || continue; t=$(( t + f[13] + f[14] )); done; echo "$t"; }
per() { python3 -c "import sys; print(round(($2 - $1) / $(getconf CLK_TCK) / $3 * 1e6, 1))" 2>/dev/null || echo "?"; }

RD=$(mktemp -d); RP=$(( P - 1 ))
redis-server --port $RP --bind 127.0.0.1 --dir "$RD" --save "" --appendonly yes --appendfsync everysec \
  --maxclients 100000 --daemonize no >"$OUT/redis.log" 2>&1 & RPID=$!; PIDS+=($RPID)
for _ in $(seq 50); do redis-cli -p $RP ping >/dev/null 2>&1 && break; sleep 0.1; done
export USHER_REDIS_URL="redis://127.0.0.1:$RP"
TOK="bench:bench-admin-token-0123456789abcdefghijklmn"; A="Authorization: Bearer ${TOK#bench:}"
D="http://127.0.0.1:$P"
ready() { for u in "$@"; do for _ in $(seq 100); do curl -fsS "$u/readyz" >/dev/null 2>&1 && break; sleep 0.1; done; done; }
TICK_MS=1000
dispatcher() {  # $1: binary name
  USHER_ADMIN_TOKEN="$TOK" USHER_LISTEN=127.0.0.1:$P USHER_TICK_MS=$TICK_MS RUST_LOG=${DISPATCHER_LOG:-info} \
    "$1" >>"$OUT/dispatcher-$1.log" 2>&1 & DPID=$!; PIDS+=($DPID); ready "$D"
}
GWS=""; FLS=""; GPIDS=(); FPIDS=()
gateways() {  # $1: count, $2: connections each, $3: log name
  GWS=""; GPIDS=()
  for i in $(seq "$1"); do
    USHER_LISTEN=127.0.0.1:$((P+100+i)) USHER_SERVER_ID=gw-$i USHER_MAX_CONNECTIONS=$2 \
    USHER_MAX_SOCKETS=$(( $2 + 1000 > NOF ? NOF : $2 + 1000 )) USHER_WORKER_THREADS=1 \
    USHER_IP_JOIN_RATE=0 USHER_IP_JOIN_BURST=0 USHER_IP_MAX_STREAMS=0 USHER_IP_MAX_PLACES=0 USHER_IP_MAX_SOCKETS=0 \
    USHER_TICKET_KEY=bench-ticket-key-0123456789abcdef0123 RUST_LOG=${GATEWAY_LOG:-info} usher-gateway >"$OUT/$3-$i.log" 2>&1 & PIDS+=($!); GPIDS+=($!)
    GWS="${GWS:+$GWS,}http://127.0.0.1:$((P+100+i))"
  done
  ready $(echo "$GWS" | tr , ' ')
}
floors() {
  FLS=""; FPIDS=(); RFLS=""; RFPIDS=(); JFLS=""; JFPIDS=()
  for i in $(seq "$1"); do
    usher-joins-floor --listen 127.0.0.1:$((P+300+i)) --worker-threads 1 >"$OUT/fl-$i.log" 2>&1 & PIDS+=($!); FPIDS+=($!)
    FLS="${FLS:+$FLS,}http://127.0.0.1:$((P+300+i))"
    usher-joins-floor --listen 127.0.0.1:$((P+500+i)) --worker-threads 1 --redis "redis://127.0.0.1:$RP" \
      >"$OUT/rfl-$i.log" 2>&1 & PIDS+=($!); RFPIDS+=($!)
    RFLS="${RFLS:+$RFLS,}http://127.0.0.1:$((P+500+i))"
    usher-joins-floor --listen 127.0.0.1:$((P+700+i)) --worker-threads 1 --join "redis://127.0.0.1:$RP" \
      >"$OUT/jfl-$i.log" 2>&1 & PIDS+=($!); JFPIDS+=($!)
    JFLS="${JFLS:+$JFLS,}http://127.0.0.1:$((P+700+i))"
  done
  ready $(echo "$FLS,$RFLS,$JFLS" | tr , ' ')
}
stop() { for p in "$@"; do kill "$p" 2>/dev/null; done; for p in "$@"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done; }
q() { curl -fsS -X PUT "$D/admin/queues/$1" -H "$A" -H 'content-type: application/json' -d "$2" >/dev/null; }
del() { curl -fsS -X DELETE "$D/admin/queues/$1" -H "$A" >/dev/null; }
fld() { curl -fsS "$D/admin/queues/$1" -H "$A" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
rss() { local t=0 p; for p in "${GPIDS[@]}"; do t=$((t + $(awk '/VmRSS/ {print $2}' /proc/$p/status))); done; echo $t; }
calls() { redis-cli -p $RP INFO commandstats | awk -F'calls=' '/calls=/ {split($2,a,","); s+=a[1]} END {print s}'; }
# The load generator with what every run shares. A run in the background is started as
# `"${LGEN[@]}" ... &`, not through LG: `$!` must be the load generator itself (not a
# subshell running the function), for the clean-up to stop it.
LGEN=(usher-loadgen --source-ips "$SRC" --quiet)
LG() { "${LGEN[@]}" "$@"; }
lines() { grep -E "$2" "$1" | tr -s ' ' | tr '\n' ';'; }
# Sleeps until $2 ms before a tick's admission time (the next one at least 50 ms beyond
# that), on the grid of the dispatcher's `tick planned` debug events in log $1 (the residue
# most of its last ten share: a tick that started late is stamped off the grid), and prints
# that admission time: the operator's unpause of a sale then lands inside that tick's lead
# (UNPAUSE_LEAD_MS), instead of wherever the join phase happened to end. Prints nothing (and
# says why on stderr) when the log has no such event: a dispatcher older than that event.
before_tick() {
  python3 - "$1" "$2" "$TICK_MS" <<'PY'
import collections, re, sys, time
seen = []
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r"tick planned.*admission_ms=(\d+)|admission_ms=(\d+).*tick planned", line)
    if m:
        seen.append(int(m.group(1) or m.group(2)))
if not seen:
    sys.exit("before_tick: no 'tick planned' event in " + sys.argv[1])
lead, tick = int(sys.argv[2]), int(sys.argv[3])
residue = collections.Counter(t % tick for t in seen[-10:]).most_common(1)[0][0]
now = time.time() * 1000
at = int(now) - int(now) % tick + residue
while at - lead - now < 50:
    at += tick
time.sleep((at - lead - time.time() * 1000) / 1000)
print(at)
PY
}

dispatcher usher-dispatcher
# As many streams as the open-files limit leaves room for (1,500 files for the rest).
if [[ $PHASES == *" joins "* || $PHASES == *" admit "* ]]; then gateways "$GW" $(( NOF - 1500 )) gw; fi
if [[ $PHASES == *" joins "* ]]; then
  floors "$GW"
  for r in $JOIN_RATES; do
    n=$(( r * JOIN_SECS )); W=$(( n / PER + 4 ))
    q "j$r" '{"admit_per_second": 1, "paused": true, "passthrough": false}'
    redis-cli -p $RP CONFIG RESETSTAT >/dev/null
    c0=$(cpu "${GPIDS[@]}"); r0=$(cpu $RPID)
    LG --gateways "$GWS" --queue "j$r" --connections $n --join-rate $r --workers $W --duration $(( JOIN_SECS + 3 )) --linger-ms 0 --report "$OUT/joins-$r.json" >"$OUT/joins-$r.txt" 2>&1
    c1=$(cpu "${GPIDS[@]}"); r1=$(cpu $RPID)
    redis-cli -p $RP INFO commandstats | tr -d '\r' >"$OUT/joins-$r-commandstats.txt"
    del "j$r"; sleep 2
    f0=$(cpu "${FPIDS[@]}")
    LG --gateways "$FLS" --queue "j$r" --connections $n --join-rate $r --workers $W --duration $(( JOIN_SECS + 3 )) --linger-ms 0 --report "$OUT/joins-$r-floor.json" >"$OUT/joins-$r-floor.txt" 2>&1
    f1=$(cpu "${FPIDS[@]}"); sleep 2
    t0=$(cpu "${RFPIDS[@]}"); rr0=$(cpu $RPID)
    LG --gateways "$RFLS" --queue "j$r" --connections $n --join-rate $r --workers $W --duration $(( JOIN_SECS + 3 )) --linger-ms 0 --report "$OUT/joins-$r-rfloor.json" >"$OUT/joins-$r-rfloor.txt" 2>&1
    t1=$(cpu "${RFPIDS[@]}"); rr1=$(cpu $RPID); sleep 2
    q "j$r-jf" '{"admit_per_second": 1, "paused": true, "passthrough": false}'
    j0=$(cpu "${JFPIDS[@]}"); jr0=$(cpu $RPID)
    LG --gateways "$JFLS" --queue "j$r-jf" --connections $n --join-rate $r --workers $W --duration $(( JOIN_SECS + 3 )) --linger-ms 0 --report "$OUT/joins-$r-jfloor.json" >"$OUT/joins-$r-jfloor.txt" 2>&1
    j1=$(cpu "${JFPIDS[@]}"); jr1=$(cpu $RPID)
    del "j$r-jf"; sleep 2
    say "joins $r usher: $(lines "$OUT/joins-$r.txt" '^join |^join rate|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
    say "joins $r floor: $(lines "$OUT/joins-$r-floor.txt" '^join |^join rate|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
    say "joins $r round-trip floor: $(lines "$OUT/joins-$r-rfloor.txt" '^join |^join rate|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
    say "joins $r join floor: $(lines "$OUT/joins-$r-jfloor.txt" '^join |^join rate|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
    say "joins $r cpu per join: gateways $(per $c0 $c1 $n) us, redis $(per $r0 $r1 $n) us, floors $(per $f0 $f1 $n) us, round-trip floors $(per $t0 $t1 $n) us + redis $(per $rr0 $rr1 $n) us, join floors $(per $j0 $j1 $n) us + redis $(per $jr0 $jr1 $n) us"
    # Redis's own time by command, per join (INFO commandstats over the usher run).
    say "joins $r redis per join: $(python3 - "$OUT/joins-$r-commandstats.txt" $n <<'PY'
import re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"cmdstat_(\S+):calls=(\d+),usec=(\d+)", line)
    if m:
        rows.append((int(m[3]), int(m[2]), m[1]))
n = int(sys.argv[2])
rows.sort(reverse=True)
print("; ".join(f"{c} {calls / n:.2f} calls {us / n:.1f} us" for us, calls, c in rows[:6]))
PY
)"
  done
  stop "${FPIDS[@]}" "${RFPIDS[@]}"
fi
if [[ $PHASES == *" admit "* ]]; then
  n=0
  for d in ${DISPATCHERS:-usher-dispatcher usher-dispatcher-base}; do
    command -v $d >/dev/null || continue
    stop $DPID; DISPATCHER_LOG=usher_dispatcher=debug dispatcher $d
    n=$((n + 1)); r="$d-$n"
    q "admit-$r" "{\"admit_per_second\": $ADMIT_TICK, \"paused\": true, \"passthrough\": false, \"session_ttl_seconds\": 600}"
    "${LGEN[@]}" --gateways "$GWS" --queue "admit-$r" --connections $ADMIT --join-rate 30000 --until-admitted --workers $(( ADMIT / PER + 4 )) --duration 60 --report "$OUT/admit-$r.json" >"$OUT/admit-$r.txt" 2>&1 & LGP=$!; PIDS+=($LGP)
    for _ in $(seq 60); do [ "$(fld "admit-$r" waiting 2>/dev/null || echo 0)" -ge $ADMIT ] && break; sleep 0.5; done
    at=""; [ -n "${UNPAUSE_LEAD_MS:-}" ] && at=$(before_tick "$OUT/dispatcher-$d.log" "$UNPAUSE_LEAD_MS")
    c0=$(cpu "${GPIDS[@]}"); r0=$(cpu $RPID); d0=$(cpu $DPID)
    q "admit-$r" '{"paused": false}'
    if [ -n "$at" ]; then say "admit $r: the unpause answered $(( at - $(date +%s%3N) )) ms before the tick at $at"
    elif [ -n "${UNPAUSE_LEAD_MS:-}" ]; then say "admit $r: no 'tick planned' event from $d: unpaused where the joins ended"; fi
    wait $LGP
    c1=$(cpu "${GPIDS[@]}"); r1=$(cpu $RPID); d1=$(cpu $DPID)
    del "admit-$r"
    say "admit $r: $(lines "$OUT/admit-$r.txt" '^admission|^correctness|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
    say "admit $r by tick: $(python3 -c "import json,sys; print([round(t['p99_ms'],1) for t in json.load(open(sys.argv[1]))['admission_by_tick']])" "$OUT/admit-$r.json" 2>/dev/null)"
    say "admit $r cpu per admission: gateways $(per $c0 $c1 $ADMIT) us, dispatcher $(per $d0 $d1 $ADMIT) us, redis $(per $r0 $r1 $ADMIT) us"
  done
  FC=$ADMIT_TICK; [ $(( FC * 2 + 500 )) -gt "$NOF" ] && FC=$(( (NOF - 500) / 2 ))
  usher-floor --connections $FC --senders 4 --receivers 4 >"$OUT/floor-4x4.json" 2>"$OUT/floor-4x4.err"
  say "admit floor ($FC pairs, 4x4 threads): $(grep overall "$OUT/floor-4x4.err" | tr -s ' ')"
  stop $DPID; dispatcher usher-dispatcher
fi
if [[ $PHASES == *" hold "* ]]; then
  stop "${GPIDS[@]}"
  gateways "$HOLD_GW" $(( HOLD / HOLD_GW + 2000 )) gwh
  base=$(rss)
  q hold '{"admit_per_second": 50, "paused": true, "passthrough": false}'
  HW=$(( HOLD / PER + 2 ))
  "${LGEN[@]}" --gateways "$GWS" --queue hold --connections "$HOLD" --join-rate "$HOLD_RATE" --workers $HW \
    --duration $(( HOLD / HOLD_RATE + 10 + HOLD_SECS )) --report "$OUT/hold.json" >"$OUT/hold.txt" 2>&1 & LGP=$!; PIDS+=($LGP)
  t0=$(date +%s)
  for _ in $(seq "$HOLD_WAIT"); do w=$(fld hold waiting 2>/dev/null || echo 0); [ "$w" -ge $(( HOLD * 99 / 100 )) ] && break; sleep 1; done
  say "hold: $w waiting after $(( $(date +%s) - t0 )) s"
  q hold '{"paused": false}'; sleep 4
  r1=$(rss); k0=$(calls); s0=$(date +%s.%N); g0=$(cpu "${GPIDS[@]}"); e0=$(cpu $RPID); sleep 15
  k1=$(calls); s1=$(date +%s.%N); g1=$(cpu "${GPIDS[@]}"); e1=$(cpu $RPID)
  say "hold: waiting $(fld hold waiting) gateway_rss_kb $r1 (base $base) per_conn_kib $(python3 -c "print(round(($r1-$base)/$w,2))") redis_cmds_per_s $(python3 -c "print(round(($k1-$k0)/($s1-$s0),1))") redis_mem $(redis-cli -p $RP INFO memory | grep used_memory_human | tr -d '\r')"
  say "hold: gateways' cpu $(python3 -c "print(round(($g1-$g0)/$(getconf CLK_TCK)/($s1-$s0),2))") cores, per position event $(per $g0 $g1 $(python3 -c "print(int($w*($s1-$s0)))")) us; redis $(python3 -c "print(round(($e1-$e0)/$(getconf CLK_TCK)/($s1-$s0),3))") cores"
  wait $LGP; del hold
  say "hold loadgen: $(lines "$OUT/hold.txt" '^join |^position|^admission|^connections|^errors|^load gen cpu|^cpu stalls|^machine|^warning')"
fi
mkdir -p /tmp/bench16-all; cp "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.log "$OUT"/*.err /tmp/bench16-all/ 2>/dev/null
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/*.err "$OUT"/joins-* "$OUT"/hold.txt "$OUT"/admit-*
tar czf "$OUT/all.tgz" -C /tmp bench16-all
