#!/usr/bin/env bash
# setup-python.sh [demo|all]: create .venv with the pinned dependencies and threadwise (editable).
#
# `all` (the default) installs everything requirements.lock pins (tests, notebooks, the vng lab);
# `demo` only what threadwise itself depends on (pyproject's dependencies), at the versions the
# lock pins (pip's -c): no Jupyter, no test tools, half the packages.
# Idempotent and fast the second time: the venv records the SHA256 of
# requirements.lock + pyproject.toml (per set) and is only touched when they change; a venv set
# up with `all` serves `demo` too.
# pip's download cache lives outside the repository, in ~/.cache/threadwise/pip.
set -euo pipefail
cd "$(dirname "$0")/.."

SET=${1:-all}
case $SET in demo|all) ;; *) echo "setup-python: unknown set '$SET' (demo or all)" >&2; exit 2;; esac
PYTHON=${THREADWISE_PYTHON:-python3}
VENV=.venv
CACHE=${THREADWISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwise}  # as threadwise.paths.cache_dir
stamp_want=$(cat requirements.lock pyproject.toml | sha256sum | cut -d' ' -f1)
stamp_file=$VENV/.threadwise-stamp        # the full set
core_stamp=$VENV/.threadwise-stamp-demo    # threadwise's own dependencies only

up_to_date() { [[ -x $VENV/bin/python && -f $1 && $(cat "$1") == "$stamp_want" ]]; }
# threadwise's own bytecode, written even where PYTHONDONTWRITEBYTECODE is set (pip compiles the
# dependencies anyway): without it every command compiles ~60 modules again, and the lab guest, which
# sees this checkout read-only, always does. `threadwise stop` in an idle guest under TCG: 9.7 s from
# source, 6.6 s from bytecode (docs/layout.md "How long"). Only stale files are compiled again.
compile_bytecode() { $VENV/bin/python -m compileall -q -j0 threadwise observe analyze synthesize refine runtime >/dev/null; }
if up_to_date "$stamp_file" || { [[ $SET == demo ]] && up_to_date "$core_stamp"; }; then
    compile_bytecode
    echo "setup-python: .venv up to date"
    exit 0
fi
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' || {
    echo "setup-python: need Python >= 3.11 (set THREADWISE_PYTHON)" >&2; exit 1; }
# a venv whose creation was cut off (Ctrl-C while ensurepip ran) has python but no pip: start over
if [[ ! -x $VENV/bin/python || ! -x $VENV/bin/pip ]]; then
    [[ -e $VENV ]] && echo "setup-python: .venv is incomplete (no pip: its creation was cut off?); creating it again"
    "$PYTHON" -m venv --clear "$VENV"
fi
mkdir -p "$CACHE/pip"
echo "setup-python: installing pinned dependencies into .venv ($SET set)"
$VENV/bin/pip install -q --cache-dir "$CACHE/pip" --upgrade pip
# The editable build's one remaining notice ("Editable installation.": beware of folders named like
# the package) is setuptools' note on every mapped layout, and ./threadwise IS the package: quiet it.
if [[ $SET == all ]]; then
    $VENV/bin/pip install -q --cache-dir "$CACHE/pip" -r requirements.lock
    PYTHONWARNINGS="ignore:Editable installation" \
        $VENV/bin/pip install -q --cache-dir "$CACHE/pip" --no-deps -e .
else
    PYTHONWARNINGS="ignore:Editable installation" \
        $VENV/bin/pip install -q --cache-dir "$CACHE/pip" -c requirements.lock -e .
    stamp_file=$core_stamp
fi
# Build matplotlib's font cache now: the first report plot would pause and warn about it mid-train.
$VENV/bin/python -c 'import matplotlib.font_manager' 2>/dev/null || true
compile_bytecode
echo "$stamp_want" > "$stamp_file"
echo "setup-python: ok ($($VENV/bin/python --version))"
