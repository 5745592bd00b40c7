#!/usr/bin/env bash
# test.sh: ruff, then every test tier (fast, bpf, lab). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
