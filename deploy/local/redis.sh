#!/usr/bin/env bash
# Make a Redis answer on 127.0.0.1:$PEAKLOAD_REDIS_PORT (default 6379), as root, idempotently:
# reuse one that already answers PONG, else install redis-server if missing and start it
# daemonized, bound to 127.0.0.1, with no persistence (a broker for tests, not a database).
# Prints the URL.
set -euo pipefail
PORT=${PEAKLOAD_REDIS_PORT:-6379}
URL="redis://127.0.0.1:${PORT}/0"
die() { echo "redis.sh: error: $*" >&2; exit 1; }

if command -v redis-cli >/dev/null && [ "$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" = PONG ]; then
    echo "$URL"
    exit 0
fi
[ "$(id -u)" = 0 ] || die "no Redis answers on 127.0.0.1:$PORT, and installing one needs root"
if ! command -v redis-server >/dev/null; then
    echo "redis.sh: installing redis-server" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server >&2 \
        || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y redis-server >&2; } \
        || die "apt-get install redis-server failed"
fi
redis-server --daemonize yes --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no \
    --pidfile "/run/peakload-redis-$PORT.pid" --logfile "/var/log/peakload-redis-$PORT.log" >&2 \
    || die "redis-server failed to start (see /var/log/peakload-redis-$PORT.log)"
for _ in $(seq 1 50); do
    [ "$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null)" = PONG ] && { echo "$URL"; exit 0; }
    sleep 0.1
done
die "redis-server started but 127.0.0.1:$PORT does not answer PONG after 5 s"
