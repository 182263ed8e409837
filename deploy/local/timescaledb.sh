#!/usr/bin/env bash
# Start a TimescaleDB (PostgreSQL 17 + timescaledb, Apache build) on 127.0.0.1:5433 for
# development and tests, as root, idempotently. Prints the URL of the `peakload_test` database.
#   Debian 13: apt packages postgresql-17 + postgresql-17-timescaledb, a dedicated cluster
#              "17/peakload" on port 5433.
#   Debian 12: no TimescaleDB package; a Debian 13 root made once with debootstrap (kept at
#              $PEAKLOAD_TRIXIE_ROOT, default /var/lib/peakload/trixie-root) runs the server.
# Authentication: scram-sha-256 (a password) for user postgres over TCP on 127.0.0.1 only; peer
# on the local socket (inside the root / cluster) for this script's own admin commands. The
# password is generated once and kept in $PEAKLOAD_STATE/timescaledb.password (mode 0600).
# When the server already answers with the password, the script only prints the URL (< 1 s).
#
# A server of a test's own, beside the shared one (same binaries, configuration and password),
# which the test may stop and start as it likes (a real restart under load):
#   timescaledb.sh instance start NAME PORT   create it once (initdb), start it, print its URL
#   timescaledb.sh instance halt NAME         stop it (fast shutdown), keep its data
#   timescaledb.sh instance remove NAME       stop it and delete its data
# Run the plain form once first: it builds what the instances run on.
set -euo pipefail

STATE=${PEAKLOAD_STATE:-/var/lib/peakload}
ROOT=${PEAKLOAD_TRIXIE_ROOT:-$STATE/trixie-root}
PORT=${PEAKLOAD_TS_PORT:-5433}
DB=peakload_test
PWFILE=$STATE/timescaledb.password
PGBIN=/usr/lib/postgresql/17/bin

die() { echo "timescaledb.sh: error: $*" >&2; exit 1; }
log() { echo "timescaledb.sh: $*" >&2; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts a server)"
mkdir -p "$STATE"
chmod 0755 "$STATE"
if [ ! -s "$PWFILE" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$PWFILE")
fi
PASSWORD=$(cat "$PWFILE")
URL="postgresql://postgres:${PASSWORD}@127.0.0.1:${PORT}/${DB}"

ready() {
    # The server answers on TCP with the password and timescaledb is in peakload_test.
    PGPASSWORD=$PASSWORD PGCONNECT_TIMEOUT=2 psql -h 127.0.0.1 -p "$PORT" -U postgres -d "$DB" \
        -Atqc "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'" 2>/dev/null \
        | grep -q .
}

command -v psql >/dev/null || { apt-get install -y postgresql-client >&2 \
    || die "psql is missing and apt-get install postgresql-client failed"; }
if [ "${1:-}" != instance ] && ready; then
    echo "$URL"
    exit 0
fi

DEBIAN_MAJOR=$(cut -d. -f1 /etc/debian_version 2>/dev/null || echo unknown)
CONF_BODY="# written by peakload deploy/local/timescaledb.sh
shared_preload_libraries = 'timescaledb'
port = $PORT
listen_addresses = '127.0.0.1'
dynamic_shared_memory_type = mmap
password_encryption = 'scram-sha-256'
timescaledb.telemetry_level = off
max_connections = 200
"
HBA_BODY="# written by peakload deploy/local/timescaledb.sh: peer on the socket, a password on TCP
local   all   all                     peer
host    all   all   127.0.0.1/32      scram-sha-256
"

# ---------------------------------------------------------------- a test's own instance
instance() {  # start NAME PORT | halt NAME | remove NAME
    local verb=${1:-} name=${2:-} port=${3:-}
    [[ "$name" =~ ^[a-z0-9_-]+$ ]] || die "instance: a NAME of a-z, 0-9, _ or - is needed"
    local dir=/var/lib/postgresql/peakload-instances/$name run=() under=""
    if [ "$DEBIAN_MAJOR" -ge 13 ] 2>/dev/null; then
        run=(su postgres -c)
    elif [ "$DEBIAN_MAJOR" = 12 ]; then
        under=" under $ROOT"
        [ -x "$ROOT$PGBIN/initdb" ] || die "instance: no Debian 13 root at $ROOT: run $0 once first"
        mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc" \
            || die "mount -t proc proc $ROOT/proc failed"
        run=(chroot "$ROOT" su postgres -c)
    else
        die "unsupported system: /etc/debian_version says '$DEBIAN_MAJOR'"
    fi
    local pgctl="$PGBIN/pg_ctl -D $dir -l $dir/server.log"
    case "$verb" in
    start)
        [[ "$port" =~ ^[0-9]+$ ]] || die "instance start: a PORT is needed"
        if ! "${run[@]}" "test -f $dir/PG_VERSION"; then
            local pw=/run/peakload-$name.pw pw_host=/run/peakload-$name.pw owner=(chown)
            if [ "$DEBIAN_MAJOR" = 12 ]; then pw_host=$ROOT$pw; owner=(chroot "$ROOT" chown); fi
            install -m 0600 "$PWFILE" "$pw_host" && "${owner[@]}" postgres "$pw" \
                || die "cannot hand the password file to postgres"
            "${run[@]}" "mkdir -p $dir && $PGBIN/initdb -D $dir -U postgres --pwfile=$pw \
                --auth-local=peer --auth-host=scram-sha-256 -E UTF8 --no-sync >/dev/null" \
                || { rm -f "$pw_host"; die "initdb of instance $name failed"; }
            rm -f "$pw_host"
            "${run[@]}" "printf '%s' \"$CONF_BODY\" | sed 's/^port = .*/port = $port/' \
                >> $dir/postgresql.conf && printf '%s' \"$HBA_BODY\" > $dir/pg_hba.conf" \
                || die "cannot configure instance $name"
        fi
        "${run[@]}" "$pgctl status" >/dev/null 2>&1 \
            || "${run[@]}" "$pgctl -w -t 60 start" >&2 || die "instance $name did not start \
(see $dir/server.log$under)"
        "${run[@]}" "psql -p $port -Atq -d postgres -c \"SELECT 1 FROM pg_database \
WHERE datname = '$DB'\" | grep -q 1 || createdb -p $port $DB" \
            || die "CREATE DATABASE $DB failed in instance $name"
        "${run[@]}" "PGOPTIONS=--client-min-messages=warning psql -p $port -Atq -d $DB \
-c 'CREATE EXTENSION IF NOT EXISTS timescaledb'" >/dev/null \
            || die "CREATE EXTENSION timescaledb failed in instance $name"
        echo "postgresql://postgres:${PASSWORD}@127.0.0.1:${port}/${DB}"
        ;;
    halt)
        "${run[@]}" "$pgctl status" >/dev/null 2>&1 || return 0
        "${run[@]}" "$pgctl -m fast -w stop" >&2 || die "instance $name did not stop"
        ;;
    remove)
        "${run[@]}" "test -d $dir" || return 0
        "${run[@]}" "$pgctl status" >/dev/null 2>&1 && { "${run[@]}" "$pgctl -m immediate -w stop" >&2 \
            || die "instance $name did not stop"; }
        "${run[@]}" "rm -rf $dir" || die "cannot delete instance $name's data"
        ;;
    *) die "instance: start NAME PORT | halt NAME | remove NAME" ;;
    esac
}

if [ "${1:-}" = instance ]; then
    instance "${@:2}"
    exit 0
fi

write_if_changed() {  # path content
    if [ ! -f "$1" ] || [ "$(cat "$1")" != "$2" ]; then
        printf '%s' "$2" >"$1" || die "cannot write $1"
        return 0
    fi
    return 1
}

if [ "$DEBIAN_MAJOR" -ge 13 ] 2>/dev/null; then
    # ---------------------------------------------------------------- Debian 13: native
    CLUSTER=peakload
    if ! dpkg -s postgresql-17-timescaledb >/dev/null 2>&1; then
        log "installing postgresql-17 and postgresql-17-timescaledb"
        apt-get update >&2 || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql-17 postgresql-17-timescaledb \
            >&2 || die "apt-get install postgresql-17 postgresql-17-timescaledb failed"
    fi
    if [ ! -d /etc/postgresql/17/$CLUSTER ]; then
        pg_createcluster 17 $CLUSTER -p "$PORT" --start-conf=manual >&2 \
            || die "pg_createcluster 17 $CLUSTER failed"
    fi
    CONFDIR=/etc/postgresql/17/$CLUSTER
    changed=0
    write_if_changed "$CONFDIR/conf.d/peakload.conf" "$CONF_BODY" && changed=1
    write_if_changed "$CONFDIR/pg_hba.conf" "$HBA_BODY" && changed=1
    if pg_ctlcluster 17 $CLUSTER status >/dev/null 2>&1; then
        [ $changed = 1 ] && { pg_ctlcluster 17 $CLUSTER restart >&2 || die "restart failed"; }
    else
        pg_ctlcluster 17 $CLUSTER start >&2 || die "pg_ctlcluster 17 $CLUSTER start failed \
(see /var/log/postgresql/postgresql-17-$CLUSTER.log)"
    fi
    as_pg() { su postgres -c "PGOPTIONS=--client-min-messages=warning psql -p $PORT -v ON_ERROR_STOP=1 -Atq $*"; }
elif [ "$DEBIAN_MAJOR" = 12 ]; then
    # ---------------------------------------------------------------- Debian 12: a trixie root
    good_root() {
        [ -x "$ROOT$PGBIN/postgres" ] && [ -x "$ROOT$PGBIN/pg_ctl" ] \
            && [ -f "$ROOT/usr/share/postgresql/17/extension/timescaledb.control" ] \
            && [ -f "$ROOT/var/lib/postgresql/17/main/PG_VERSION" ] \
            && [ -d "$ROOT/etc/postgresql/17/main/conf.d" ]
    }
    if ! good_root; then
        [ -e "$ROOT" ] && die "$ROOT exists but is not a complete Debian 13 root with \
postgresql-17 and timescaledb; move it away and rerun (building takes ~100 s, ~700 MB)"
        command -v debootstrap >/dev/null || apt-get install -y debootstrap >&2 \
            || die "apt-get install debootstrap failed"
        log "building a Debian 13 root at $ROOT (once; about 100 s)"
        rm -rf "$ROOT.partial"
        debootstrap --variant=minbase --include=postgresql-17,postgresql-17-timescaledb \
            trixie "$ROOT.partial" >&2 || die "debootstrap of trixie into $ROOT.partial failed"
        mv "$ROOT.partial" "$ROOT"
        good_root || die "debootstrap finished but $ROOT lacks postgresql-17/timescaledb"
    fi
    mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc" \
        || die "mount -t proc proc $ROOT/proc failed"
    CONFDIR=$ROOT/etc/postgresql/17/main
    changed=0
    write_if_changed "$CONFDIR/conf.d/peakload.conf" "$CONF_BODY" && changed=1
    write_if_changed "$CONFDIR/pg_hba.conf" "$HBA_BODY" && changed=1
    chroot "$ROOT" sh -c "mkdir -p /var/run/postgresql && chown postgres:postgres /var/run/postgresql" \
        || die "cannot prepare /var/run/postgresql inside $ROOT"
    PGCTL="$PGBIN/pg_ctl -D /var/lib/postgresql/17/main \
-o '-c config_file=/etc/postgresql/17/main/postgresql.conf' -l /var/log/postgresql/peakload.log"
    if chroot "$ROOT" su postgres -c "$PGCTL status" >/dev/null 2>&1; then
        if [ $changed = 1 ]; then
            log "configuration changed: restarting"
            chroot "$ROOT" su postgres -c "$PGCTL -m fast -w restart" >&2 \
                || die "restart failed (see $ROOT/var/log/postgresql/peakload.log)"
        fi
    else
        log "starting PostgreSQL 17 in $ROOT on 127.0.0.1:$PORT"
        chroot "$ROOT" su postgres -c "$PGCTL -w -t 60 start" >&2 \
            || die "pg_ctl start failed (see $ROOT/var/log/postgresql/peakload.log)"
    fi
    as_pg() { chroot "$ROOT" su postgres -c "PGOPTIONS=--client-min-messages=warning psql -p $PORT -v ON_ERROR_STOP=1 -Atq $*"; }
else
    die "unsupported system: /etc/debian_version says '$DEBIAN_MAJOR' (need Debian 12 or 13)"
fi

# The password (scram) for TCP, the test database and the extension: each idempotent.
# The password is read by psql from a root-only file, so it never appears on a command line.
if [ "$DEBIAN_MAJOR" = 12 ]; then PWCOPY=$ROOT/run/peakload.pw; else PWCOPY=/run/peakload.pw; fi
install -m 0600 "$PWFILE" "$PWCOPY" || die "cannot copy the password file to $PWCOPY"
if [ "$DEBIAN_MAJOR" = 12 ]; then chroot "$ROOT" chown postgres /run/peakload.pw; else
    chown postgres /run/peakload.pw; fi
as_pg "-d postgres" >/dev/null <<'SQL' || { rm -f "$PWCOPY"; die "setting the postgres password failed"; }
\set pw `cat /run/peakload.pw`
ALTER ROLE postgres PASSWORD :'pw';
SQL
rm -f "$PWCOPY"
exists=$(as_pg "-d postgres -c \"SELECT 1 FROM pg_database WHERE datname = '$DB'\"" </dev/null) \
    || die "cannot query pg_database"
[ "$exists" = 1 ] || as_pg "-d postgres -c 'CREATE DATABASE $DB'" </dev/null >/dev/null \
    || die "CREATE DATABASE $DB failed"
as_pg "-d $DB -c 'CREATE EXTENSION IF NOT EXISTS timescaledb'" </dev/null >/dev/null \
    || die "CREATE EXTENSION timescaledb failed in $DB (is shared_preload_libraries set?)"
ready || die "the server runs but 127.0.0.1:$PORT does not accept the password for $DB"
echo "$URL"
