#!/bin/sh
# fresh-postgres: PostgreSQL's server on a fresh, private data directory, removed when it stops.
#
# Usage: fresh-postgres.sh SETPRIV INITDB POSTGRES [SERVER OPTION...]
#
# Makes D, a new directory under ${TMPDIR:-/tmp} (the lab guests' /tmp is their own; the host's
# shared root is read-only there; /tmp itself where the user `postgres` cannot enter TMPDIR),
# owned by that user (the server refuses to run as root), says where on stderr, runs `INITDB -D D/data` as that user (trust authentication for connections from
# 127.0.0.1, the C locale and UTF8: no locale data needed, --no-sync: the data is thrown away)
# and then execs nothing: it starts `POSTGRES -D D/data SERVER OPTION...` as that user through
# SETPRIV and waits for it. SIGTERM, SIGINT and SIGHUP are passed on to the server as SIGINT
# (PostgreSQL's fast shutdown; a ladder stops the service by its PID: this shell), and D is
# removed once the server has shut down. The programs are named as arguments, not called from
# here, so the lab's packer carries them (runtime/lab/carry.py reads arguments, not scripts).
# POSIX sh.
set -eu
if [ $# -lt 3 ]; then
    echo "usage: fresh-postgres.sh SETPRIV INITDB POSTGRES [SERVER OPTION...]" >&2
    exit 2
fi
setpriv=$1 initdb=$2 postgres=$3
shift 3
if ! id postgres > /dev/null 2>&1; then
    echo "fresh-postgres: no user 'postgres' here (apt-get install postgresql-15 creates it)" >&2
    exit 1
fi
as_postgres() { "$setpriv" --reuid=postgres --regid=postgres --init-groups "$@"; }
base=${TMPDIR:-/tmp}
as_postgres test -x "$base" || base=/tmp
home=$(mktemp -d "$base/threadwise-postgres.XXXXXX")
chown postgres:postgres "$home"
chmod 700 "$home"
echo "fresh-postgres: data in $home" >&2
as_postgres "$initdb" -D "$home/data" -A trust -U postgres -E UTF8 --locale=C --no-sync > "$home/initdb.log" 2>&1 \
    || { cat "$home/initdb.log" >&2; rm -rf "$home"; exit 1; }
# a simple command, not the function: `$!` is then setpriv, which execs the postmaster
"$setpriv" --reuid=postgres --regid=postgres --init-groups \
    "$postgres" -D "$home/data" -c "unix_socket_directories=$home" "$@" &
server=$!
trap 'kill -INT "$server" 2>/dev/null || true' TERM INT HUP
status=0
wait "$server" || status=$?
# a trapped signal ends `wait` early: wait on until the server has finished its shutdown
while kill -0 "$server" 2>/dev/null; do
    status=0
    wait "$server" || status=$?
done
rm -rf "$home"
exit "$status"
