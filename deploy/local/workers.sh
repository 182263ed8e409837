#!/usr/bin/env bash
# Start, stop or list peakload's Celery processes natively, for development and CI:
#   deploy/local/workers.sh start [REGION[=TARGET_URL]]...   (default: one region "local")
#   deploy/local/workers.sh regions TARGET_URL   (three regions on one machine, see below)
#   deploy/local/workers.sh stop | status
# `start` runs, in the background, one worker per region (`peakload worker --region R`, prefork,
# PEAKLOAD_WORKER_CONCURRENCY processes each), one control worker (scheduled runs) and one beat
# (schedules, stale-lease reaping). REGION=URL gives that region's workers a target override:
# the base URL they reach the target through, e.g. a latency proxy standing in for the region's
# network path (`eu=http://127.0.0.1:9101/v1`). Environment read: PEAKLOAD_REDIS_URL,
# PEAKLOAD_DATABASE_URL (both required: workers never fall back to an embedded store),
# PEAKLOAD_WORKER_CONCURRENCY (1), PEAKLOAD_RUN_DIR (/tmp/peakload-workers: pid and log files).
# `regions TARGET_URL` starts three latency proxies (tests/support/tcpproxy.py) in front of the
# target, adding 2, 40 and 120 ms of round trip on ports PEAKLOAD_PROXY_BASE_PORT (9101)..+2,
# then workers for regions near, mid and far, each reaching the target through its proxy: submit
# a spec whose [[regions]] are near, mid and far.
# Idempotent: a process whose pid file names a live process is left running.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
RUN_DIR=${PEAKLOAD_RUN_DIR:-/tmp/peakload-workers}
CONCURRENCY=${PEAKLOAD_WORKER_CONCURRENCY:-1}
PEAKLOAD=${PEAKLOAD_BIN:-$(command -v peakload || echo "$REPO/.venv/bin/peakload")}
die() { echo "workers.sh: error: $*" >&2; exit 1; }

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

launch() {  # name, then the peakload arguments
    local name=$1; shift
    local pidf="$RUN_DIR/$name.pid"
    if alive "$pidf"; then echo "$name: already running (pid $(cat "$pidf"))"; return; fi
    nohup "$PEAKLOAD" worker "$@" >"$RUN_DIR/$name.log" 2>&1 &
    echo $! >"$pidf"
    echo "$name: started (pid $!, log $RUN_DIR/$name.log)"
}

start() {
    [ -n "${PEAKLOAD_REDIS_URL:-}" ] || die "PEAKLOAD_REDIS_URL is not set (deploy/local/redis.sh prints one)"
    [ -n "${PEAKLOAD_DATABASE_URL:-}" ] || die "PEAKLOAD_DATABASE_URL is not set (deploy/local/timescaledb.sh prints one)"
    [ -x "$PEAKLOAD" ] || die "peakload not found (set PEAKLOAD_BIN or pip install -e .)"
    mkdir -p "$RUN_DIR"
    "$PEAKLOAD" db migrate >/dev/null || die "peakload db migrate failed"
    local regions=("$@")
    [ ${#regions[@]} -gt 0 ] || regions=(local)
    for item in "${regions[@]}"; do
        local region=${item%%=*} url=""
        [[ "$item" == *=* ]] && url=${item#*=}
        [[ "$region" =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "not a region name: '$region'"
        if [ -n "$url" ]; then
            launch "worker-$region" --region "$region" --concurrency "$CONCURRENCY" --target-override "$url"
        else
            launch "worker-$region" --region "$region" --concurrency "$CONCURRENCY"
        fi
    done
    launch control --control --concurrency 1
    launch beat --beat
}

regions() {
    local target=${1:-}
    [[ "$target" =~ ^http://[^/]+ ]] || die "usage: workers.sh regions http://HOST:PORT/v1"
    mkdir -p "$RUN_DIR"
    local base=${PEAKLOAD_PROXY_BASE_PORT:-9101}
    local pidf="$RUN_DIR/proxies.pid"
    if ! alive "$pidf"; then
        PYTHONPATH="$REPO" nohup "$REPO/.venv/bin/python" - "$target" "$base" \
            >"$RUN_DIR/proxies.log" 2>&1 <<'PY' &
import signal
import sys
from urllib.parse import urlsplit

from tests.support.tcpproxy import TcpProxy

url, base = urlsplit(sys.argv[1]), int(sys.argv[2])
host, port = url.hostname or "127.0.0.1", url.port or 80
proxies = [
    TcpProxy(host, port, listen_port=base + i, latency_ms=rtt / 2).start()
    for i, rtt in enumerate((2.0, 40.0, 120.0))
]
print("proxies on", [p.port for p in proxies], flush=True)
signal.sigwait({signal.SIGTERM, signal.SIGINT})
for p in proxies:
    p.stop()
PY
        echo $! >"$pidf"
        echo "proxies: started (pid $!, ports $base..$((base + 2)))"
    fi
    local path; path=$(echo "$target" | sed -E 's#^http://[^/]+##')
    # the workers check --target-override against the target policy: these proxies are ours,
    # on loopback, so the workers started here may send to loopback
    export PEAKLOAD_TARGET_ALLOWLIST="${PEAKLOAD_TARGET_ALLOWLIST:+$PEAKLOAD_TARGET_ALLOWLIST,}127.0.0.1/32"
    start "near=http://127.0.0.1:$base$path" "mid=http://127.0.0.1:$((base + 1))$path" \
        "far=http://127.0.0.1:$((base + 2))$path"
}

stop() {
    [ -d "$RUN_DIR" ] || { echo "nothing started"; return; }
    for pidf in "$RUN_DIR"/*.pid; do
        [ -e "$pidf" ] || continue
        local name; name=$(basename "$pidf" .pid)
        if alive "$pidf"; then
            local pid; pid=$(cat "$pidf")
            kill -TERM "$pid"
            for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; echo "$name: killed"; else echo "$name: stopped"; fi
        fi
        rm -f "$pidf"
    done
}

status() {
    [ -d "$RUN_DIR" ] || { echo "nothing started"; return; }
    for pidf in "$RUN_DIR"/*.pid; do
        [ -e "$pidf" ] || continue
        local name; name=$(basename "$pidf" .pid)
        if alive "$pidf"; then echo "$name: running (pid $(cat "$pidf"))"; else echo "$name: dead"; fi
    done
}

cmd=${1:-}
shift || true
case "$cmd" in
    start) start "$@" ;;
    regions) regions "$@" ;;
    stop) stop ;;
    status) status ;;
    *) die "usage: workers.sh start [REGION[=TARGET_URL]]... | regions TARGET_URL | stop | status" ;;
esac
