#!/usr/bin/env bash
# Stop what deploy/local/ started: any TimescaleDB server of a test's own that is left, the
# TimescaleDB server (Debian 12: the one in the trixie root,
# then unmount its /proc; Debian 13: cluster 17/peakload) and a Redis that redis.sh started
# (one it found already running is left alone). Idempotent: stopping a stopped service is fine.
set -euo pipefail
STATE=${PEAKLOAD_STATE:-/var/lib/peakload}
ROOT=${PEAKLOAD_TRIXIE_ROOT:-$STATE/trixie-root}
REDIS_PORT=${PEAKLOAD_REDIS_PORT:-6379}
PGBIN=/usr/lib/postgresql/17/bin
die() { echo "stop.sh: error: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root"

DEBIAN_MAJOR=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo unknown)
# servers of a test's own (timescaledb.sh instance) that a killed test session left behind
INSTANCES=/var/lib/postgresql/peakload-instances
[ "$DEBIAN_MAJOR" = 12 ] && INSTANCES=$ROOT$INSTANCES
for d in "$INSTANCES"/*/; do
    [ -d "$d" ] || continue
    bash "$(dirname "${BASH_SOURCE[0]}")/timescaledb.sh" instance remove "$(basename "$d")" \
        || die "could not remove the test's TimescaleDB instance $(basename "$d")"
done
if [ "$DEBIAN_MAJOR" = 12 ]; then
    if [ -x "$ROOT$PGBIN/pg_ctl" ]; then
        PGCTL="$PGBIN/pg_ctl -D /var/lib/postgresql/17/main"
        if chroot "$ROOT" su postgres -c "$PGCTL status" >/dev/null 2>&1; then
            chroot "$ROOT" su postgres -c "$PGCTL -m fast -w stop" >&2 || die "pg_ctl stop failed"
        fi
        if mountpoint -q "$ROOT/proc"; then umount "$ROOT/proc" || die "umount $ROOT/proc failed"; fi
    fi
elif [ -d /etc/postgresql/17/peakload ]; then
    if pg_ctlcluster 17 peakload status >/dev/null 2>&1; then
        pg_ctlcluster 17 peakload stop >&2 || die "pg_ctlcluster 17 peakload stop failed"
    fi
fi

PIDFILE=/run/peakload-redis-$REDIS_PORT.pid
if [ -s "$PIDFILE" ]; then
    pid=$(cat "$PIDFILE")
    if kill -0 "$pid" 2>/dev/null && grep -q redis-server "/proc/$pid/cmdline" 2>/dev/null; then
        redis-cli -h 127.0.0.1 -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$pid"
    fi
    rm -f "$PIDFILE"
fi
echo "stop.sh: stopped" >&2
