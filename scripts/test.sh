#!/usr/bin/env bash
# test.sh: ruff, then every test tier (fast, scx, bpf, lab). Extra args go to one pytest run as given
# (e.g. `./scripts/test.sh -m bpf` for one tier).
#
# With no args, three pytest runs. First the fast and scx tiers (pytest-xdist, a worker per CPU)
# beside the bpf tier, one test at a time: the bpf tests' ground truth must hold on a
# busy host anyway, and together the two take less wall time than one after the other
# (docs/layout.md "Tests"). Their lines are prefixed [fast] and [bpf]. Then the lab tier alone, one
# test at a time: it measures the guest's CPU, so it shares the host with no other test. Every run
# goes to the end; the script fails if any failed. At the end it repeats the first two runs' failures
# and counts, so the last lines of the output (all a CI log may show) say what failed where.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
if [[ $# -gt 0 ]]; then
    exec .venv/bin/python -m pytest "$@"
fi
workers=${THREADWISE_TEST_WORKERS:-$(nproc)}
output=$(mktemp)   # the first two runs' lines, for their [failed] lines (tests/conftest.py) and counts
tier() {  # tier LABEL PYTEST-ARGS...: one pytest run, its lines prefixed with the label
    local label=$1
    shift
    .venv/bin/python -m pytest "$@" 2>&1 | sed -u "s/^/[$label] /" | tee -a "$output"
    return "${PIPESTATUS[0]}"
}
tier fast -m "not bpf and not lab" -n "$workers" &
fast=$!
on_exit() {  # the output file goes; and if the script stopped early (a TERM to it alone), the fast
    # tier must not run on orphaned
    [[ -n "$fast" ]] && kill -TERM $(ps -o pid= --ppid "$fast") "$fast" 2>/dev/null || true
    rm -f "$output"
}
trap on_exit EXIT
status=0
tier bpf -m "bpf and not lab" || status=$?
wait "$fast" || status=$((status ? status : $?))
fast=
.venv/bin/python -m pytest -m lab || status=$((status ? status : $?))
echo "test.sh: the fast, scx and bpf tiers (the lab tier's counts are above):"
grep -E '^\[[a-z]+\] (\[failed\] |=+ .* in [0-9.]+s)' "$output" || true
exit "$status"
