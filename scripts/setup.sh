#!/usr/bin/env bash
# setup.sh [demo|all]: everything threadwise needs on a fresh Debian bookworm machine, idempotent.
# Each step is its own script so it can be re-run alone; each is fast when already done.
#
# `demo` (make demo) sets up what the demo runs: the build tools, scx_layered, the libbpf tracer,
# qemu and the lab kernel, and the Python packages threadwise itself needs. `all` (make test, the
# default) adds the test workloads, bpftrace, the JDK, the vng lab (virtiofsd, virtme-ng) and the
# development tools. scx_layered's build (cargo, minutes on 2 cores) starts as soon as its build
# tools are in and runs while the rest installs; its output goes to a log, printed if it fails.
set -euo pipefail
cd "$(dirname "$0")"
SET=${1:-all}
case $SET in demo|all) ;; *) echo "setup: unknown set '$SET' (demo or all)" >&2; exit 2;; esac
CACHE=${THREADWISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwise}  # as threadwise.paths.cache_dir
mkdir -p "$CACHE"

./setup-system.sh build
scx_log=$CACHE/setup-scx.log
# its own process group (setsid), so a failure or Ctrl-C here stops cargo and rustc too, by that group
setsid ./setup-scx.sh > "$scx_log" 2>&1 &
scx_pid=$!
trap 'kill -- "-$scx_pid" 2>/dev/null || true' EXIT
./setup-system.sh "$SET"
./setup-python.sh "$SET"
./setup-tracer.sh
if [[ $SET == all ]]; then
    ./setup-lab.sh
else
    ../.venv/bin/threadwise lab kernel
fi
if ! wait "$scx_pid"; then
    cat "$scx_log" >&2
    echo "setup: scx_layered's build failed (log above, also in $scx_log)" >&2
    exit 1
fi
trap - EXIT
cat "$scx_log"
