#!/usr/bin/env bash
# ensure-redis.sh — make sure `redis-server` and `redis-cli` are on PATH.
#
# usher's tests start their own redis-server children on free ports, and `make run`
# (scripts/run-local.sh) starts its own on 6379, so all we need is the binaries.
#
# * Already installed: does nothing and prints nothing (idempotent, cheap enough to run
#   before every `make test`).
# * Missing: installs Debian's `redis-server` package (which pulls in `redis-tools`, the
#   package holding `redis-cli`) with apt-get, through sudo when not root.
# * Debian's package may start a system service on 127.0.0.1:6379 as part of the install.
#   A stray instance there would break `make run`, so if the install left one running it
#   is stopped again (and disabled under systemd so that it does not return at boot).
#
# Exit status: 0 when the binaries are available afterwards, 1 otherwise.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

if have redis-server && have redis-cli; then
    exit 0
fi

say() { echo "ensure-redis: $*" >&2; }

if ! have apt-get; then
    say "error: redis-server is not on PATH and apt-get is not available to install it."
    say "Install Redis (>= 6.2) yourself so that redis-server and redis-cli are on PATH."
    exit 1
fi

# Run as root directly, else through sudo (non-interactively, so CI never hangs on a prompt).
SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then
        SUDO=(sudo -n)
    else
        say "error: redis-server is missing, and installing it needs root (no sudo available)."
        say "Run as root: apt-get update && apt-get install -y redis-server"
        exit 1
    fi
fi

# Was a system redis-server already running before we touched anything? (Only possible if the
# binary is somewhere off PATH.) If so, it is not ours to stop.
PIDFILE=/run/redis/redis-server.pid
pid_alive() { [ -r "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE" 2>/dev/null)" 2>/dev/null; }
was_running=no
if pid_alive; then
    was_running=yes
fi

say "redis-server not found; installing it with apt-get (this happens once)..."
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends redis-server >/dev/null
say "installed $(redis-server --version 2>/dev/null | head -n1)"

# --- Do not leave a system service behind -------------------------------------------------
stop_system_service() {
    if [ -d /run/systemd/system ] && have systemctl; then
        # A systemd-booted machine: stop it now and keep it from starting at boot.
        "${SUDO[@]}" systemctl stop redis-server >/dev/null 2>&1 || true
        "${SUDO[@]}" systemctl disable redis-server >/dev/null 2>&1 || true
    elif have service; then
        # SysV init / containers: Debian ships /etc/init.d/redis-server.
        "${SUDO[@]}" service redis-server stop >/dev/null 2>&1 || true
    fi
    # Whatever is left (no init system at all, or the above failed): the pidfile.
    if pid_alive; then
        local pid
        pid="$(cat "$PIDFILE")"
        "${SUDO[@]}" kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do # up to 5 s
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        if kill -0 "$pid" 2>/dev/null; then
            "${SUDO[@]}" kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
}

if [ "$was_running" = no ]; then
    # Give a service started by the package's postinst a moment to write its pidfile.
    sleep 0.5
    if pid_alive || { [ -d /run/systemd/system ] && have systemctl && systemctl is-active --quiet redis-server 2>/dev/null; }; then
        say "stopping the redis-server system service the package started (usher runs its own)"
    fi
    stop_system_service
    if pid_alive; then
        say "warning: could not stop the system redis-server (pid $(cat "$PIDFILE")); port 6379 may be taken"
    fi
fi

if ! have redis-server || ! have redis-cli; then
    say "error: redis-server / redis-cli still not on PATH after installing (PATH=$PATH)"
    exit 1
fi
