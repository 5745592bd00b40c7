#!/usr/bin/env bash
# setup.sh: everything threadwise needs on a fresh Debian bookworm machine, idempotent.
# Each step is its own script so it can be re-run alone; each is fast when already done.
set -euo pipefail
cd "$(dirname "$0")"
./setup-system.sh
./setup-python.sh
./setup-tracer.sh
for step in setup-scx.sh setup-lab.sh; do
    if [[ -x $step ]]; then ./$step; fi
done
