#!/usr/bin/env bash
# test.sh: ruff, then every test tier (fast, scx, bpf, lab). Extra args go to one pytest run as given
# (e.g. `./scripts/test.sh -m bpf` for one tier).
#
# With no args, two pytest runs: the fast and scx tiers on every CPU (pytest-xdist: 4 min 11 s on
# this 2-CPU host, 2026-12-05), then the bpf and lab tiers one test at a time: they trace or boot the
# whole host's CPUs and measure what they see, so they must not share it with each other. Both
# runs go to the end; the script fails if either failed.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
if [[ $# -gt 0 ]]; then
    exec .venv/bin/python -m pytest "$@"
fi
status=0
.venv/bin/python -m pytest -m "not bpf and not lab" -n "${THREADWISE_TEST_WORKERS:-$(nproc)}" || status=$?
.venv/bin/python -m pytest -m "bpf or lab" || status=$((status ? status : $?))
exit "$status"
