#!/bin/sh
# fresh-mariadb: MariaDB's server on a fresh, private data directory, removed when the server stops.
#
# Usage: fresh-mariadb.sh MARIADBD --no-defaults [OPTION...]
#
# Runs `MARIADBD OPTION... --datadir=D --socket=D/mariadbd.sock --pid-file=D/mariadbd.pid` with D a
# new directory under ${TMPDIR:-/tmp} (the lab guests' /tmp is their own tmpfs; the host's shared
# root is read-only there) holding one empty database, `sbtest` (a MariaDB database is a
# directory; sysbench uses that one and does not create it). Give --skip-grant-tables: the data
# directory has no system tables (no mariadb-install-db, a Perl-free start that any guest can
# run), which mariadbd 10.11 starts without, warning once for each. SIGTERM, SIGINT and SIGHUP
# are passed on to the server (a ladder stops the service by its PID: this shell), and D is
# removed once the server has shut down. The server is named as an argument, not called from
# here, so the self-contained lab guest packs it (runtime/lab/carry.py reads arguments, not
# scripts). A Unix socket's path holds at most 107 bytes: where D's is longer (a deep TMPDIR, such
# as pytest-xdist's), the socket goes to a short private directory under /tmp instead, removed
# with D. POSIX sh: it runs under busybox ash too.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: fresh-mariadb.sh MARIADBD --no-defaults [OPTION...]" >&2
    exit 2
fi
datadir=$(mktemp -d "${TMPDIR:-/tmp}/threadwise-mariadb.XXXXXX")
mkdir "$datadir/sbtest"
socket="$datadir/mariadbd.sock"
sockdir=""
if [ ${#socket} -gt 100 ]; then
    sockdir=$(mktemp -d /tmp/tw-sock.XXXXXX)
    socket="$sockdir/mariadbd.sock"
fi
"$@" --datadir="$datadir" --socket="$socket" --pid-file="$datadir/mariadbd.pid" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null || true' TERM INT HUP
status=0
wait "$server" || status=$?
# a trapped signal ends `wait` early: wait on until the server has finished its shutdown
while kill -0 "$server" 2>/dev/null; do
    status=0
    wait "$server" || status=$?
done
rm -rf "$datadir" ${sockdir:+"$sockdir"}
exit "$status"
