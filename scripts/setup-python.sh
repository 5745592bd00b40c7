#!/usr/bin/env bash
# setup-python.sh: create .venv with the pinned dependencies and threadwise (editable).
#
# Idempotent and fast the second time: the venv records the SHA256 of
# requirements.lock + pyproject.toml and is only touched when they change.
# pip's download cache lives outside the repository, in ~/.cache/threadwise/pip.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${THREADWISE_PYTHON:-python3}
VENV=.venv
CACHE=${THREADWISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwise}  # as threadwise.paths.cache_dir
stamp_want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
stamp_file=$VENV/.threadwise-stamp

if [[ -x $VENV/bin/python && -f $stamp_file && $(cat "$stamp_file") == "$stamp_want" ]]; then
    echo "setup-python: .venv up to date"
    exit 0
fi
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' || {
    echo "setup-python: need Python >= 3.11 (set THREADWISE_PYTHON)" >&2; exit 1; }
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
mkdir -p "$CACHE/pip"
echo "setup-python: installing pinned dependencies into .venv"
$VENV/bin/pip install -q --cache-dir "$CACHE/pip" --upgrade pip
$VENV/bin/pip install -q --cache-dir "$CACHE/pip" -r requirements.lock
# The editable build's one remaining notice ("Editable installation.": beware of folders named like
# the package) is setuptools' note on every mapped layout, and ./threadwise IS the package: quiet it.
PYTHONWARNINGS="ignore:Editable installation" \
    $VENV/bin/pip install -q --cache-dir "$CACHE/pip" --no-deps -e .
# Build matplotlib's font cache now: the first report plot would pause and warn about it mid-train.
$VENV/bin/python -c 'import matplotlib.font_manager' 2>/dev/null || true
echo "$stamp_want" > "$stamp_file"
echo "setup-python: ok ($($VENV/bin/python --version))"
