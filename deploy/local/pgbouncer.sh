#!/usr/bin/env bash
# A PgBouncer in transaction mode in front of peakload's store, so a fleet's connections reach
# the database through a pool of a fixed size whatever the number of shards:
#   deploy/local/pgbouncer.sh start DATABASE_URL [PORT]   (prints the URL to use instead)
#   deploy/local/pgbouncer.sh stop [PORT]
#   deploy/local/pgbouncer.sh install
# Every worker and command then takes the printed URL as PEAKLOAD_DATABASE_URL (same user,
# password and database; PgBouncer's port, default 6432). Every peakload connection works through
# transaction pooling (no prepared statements, nothing kept in the session past a transaction:
# loadgen/results/storeformat.py). Settings read:
#   PEAKLOAD_PGBOUNCER_POOL  server connections per database and user (20): the most the
#                            database sees from the fleet at once
#   PEAKLOAD_PGBOUNCER_DIR   where its configuration, password file, log and pid file live
#                            (/var/lib/peakload/pgbouncer-PORT; made readable only by its user)
# PgBouncer does not run as root: started by root it runs as the `postgres` user Debian's
# package creates. Idempotent: a PgBouncer already answering on PORT is left running.
set -euo pipefail
die() { echo "pgbouncer.sh: error: $*" >&2; exit 1; }
cmd=${1:-}

install_pgbouncer() {
    command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] && return 0
    [ "$(id -u)" = 0 ] || die "pgbouncer is not installed, and installing it needs root"
    echo "pgbouncer.sh: installing pgbouncer" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2 \
        || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2; } \
        || die "apt-get install pgbouncer failed"
}

pgb_dir() { echo "${PEAKLOAD_PGBOUNCER_DIR:-/var/lib/peakload/pgbouncer-$1}"; }
answering() {  # something accepts TCP connections on 127.0.0.1:$1
    python3 -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $1)))"
}

start() {
    local url=${1:-} port=${2:-6432}
    [ -n "$url" ] || die "usage: pgbouncer.sh start DATABASE_URL [PORT]"
    [[ "$port" =~ ^[0-9]+$ ]] || die "not a port: '$port'"
    install_pgbouncer
    local dir pool=${PEAKLOAD_PGBOUNCER_POOL:-20}
    [[ "$pool" =~ ^[1-9][0-9]*$ ]] || die "PEAKLOAD_PGBOUNCER_POOL must be a positive integer, not '$pool'"
    dir=$(pgb_dir "$port")
    mkdir -p "$dir"
    chmod 700 "$dir"
    # the URL's parts, its password only into the 0600 password file
    local out
    out=$(PGB_URL="$url" PGB_PORT="$port" PGB_DIR="$dir" PGB_POOL="$pool" python3 - <<'EOF'
import os, sys
from urllib.parse import unquote, urlsplit

u = urlsplit(os.environ["PGB_URL"])
if u.scheme not in ("postgres", "postgresql") or not u.hostname or not u.username:
    sys.exit("DATABASE_URL must be postgresql://USER:PASSWORD@HOST:PORT/DBNAME")
user, password = unquote(u.username), unquote(u.password or "")
d, port, pool = os.environ["PGB_DIR"], os.environ["PGB_PORT"], os.environ["PGB_POOL"]
fd = os.open(f"{d}/userlist.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "w") as f:
    quoted = password.replace('"', '""')
    f.write(f'"{user}" "{quoted}"\n')
ini = f"""[databases]
* = host={u.hostname} port={u.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {d}/userlist.txt
pool_mode = transaction
default_pool_size = {pool}
max_db_connections = {pool}
reserve_pool_size = 0
max_client_conn = 10000
server_reset_query =
server_login_retry = 1
ignore_startup_parameters = extra_float_digits
logfile = {d}/pgbouncer.log
pidfile = {d}/pgbouncer.pid
"""
with open(f"{d}/pgbouncer.ini", "w") as f:
    f.write(ini)
netloc = f"{u.username}:{u.password}@127.0.0.1:{port}" if u.password else f"{u.username}@127.0.0.1:{port}"
print(u._replace(netloc=netloc).geturl())
EOF
) || die "cannot write its configuration"
    if answering "$port"; then
        [ -s "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null \
            || die "127.0.0.1:$port is taken by something that is not this PgBouncer"
        echo "$out"
        return
    fi
    local exe
    exe=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres: "$dir"
        runuser -u postgres -- test -w "$dir" \
            || die "$dir is not reachable by the postgres user PgBouncer runs as (a parent directory is closed to it): set PEAKLOAD_PGBOUNCER_DIR elsewhere"
        "$exe" -d -u postgres "$dir/pgbouncer.ini" >&2 || die "pgbouncer failed to start (see $dir/pgbouncer.log)"
    else
        "$exe" -d "$dir/pgbouncer.ini" >&2 || die "pgbouncer failed to start (see $dir/pgbouncer.log)"
    fi
    for _ in $(seq 1 50); do
        if answering "$port"; then
            echo "$out"
            return
        fi
        sleep 0.1
    done
    die "pgbouncer started but 127.0.0.1:$port does not answer after 5 s (see $dir/pgbouncer.log)"
}

stop() {
    local port=${1:-6432} dir
    dir=$(pgb_dir "$port")
    if [ -s "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; then
        kill "$(cat "$dir/pgbouncer.pid")"
        echo "pgbouncer on $port: stopped"
    else
        echo "pgbouncer on $port: not running"
    fi
}

case "$cmd" in
    start) shift; start "$@" ;;
    stop) shift; stop "$@" ;;
    install) install_pgbouncer ;;
    *) die "usage: pgbouncer.sh start DATABASE_URL [PORT] | stop [PORT] | install" ;;
esac
