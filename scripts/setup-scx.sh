#!/usr/bin/env bash
# setup-scx.sh: build the pinned scx_layered into a versioned cache (idempotent).
#
# cargo install --locked with clang-19 for its BPF code (it needs clang >= 18). About 3-5
# minutes on 2 cores the first time; afterwards the cached binary is reused.
set -euo pipefail
SCX_VERSION=${SCX_LAYERED_VERSION:-1.1.4}
CACHE=${THREADWISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwise}  # as threadwise.paths.cache_dir
ROOT=$CACHE/scx_layered-$SCX_VERSION
BIN=$ROOT/bin/scx_layered

if [[ -x $BIN ]] && "$BIN" --version 2>/dev/null | grep -q "$SCX_VERSION"; then
    echo "setup-scx: scx_layered $SCX_VERSION cached at $BIN"
    exit 0
fi
command -v cargo >/dev/null || { echo "setup-scx: cargo not found (install Rust via rustup)" >&2; exit 1; }
command -v clang-19 >/dev/null || { echo "setup-scx: clang-19 missing (run scripts/setup-system.sh)" >&2; exit 1; }
echo "setup-scx: building scx_layered $SCX_VERSION into $ROOT (3-5 minutes on 2 cores the first time)"
mkdir -p "$ROOT"
# Build in a scratch root, then move: an interrupted build never looks cached.
scratch=$(mktemp -d "$CACHE/.scx-build.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
BPF_CLANG=clang-19 cargo install scx_layered --version "$SCX_VERSION" --locked \
    --root "$scratch" --quiet
mkdir -p "$ROOT/bin"
mv "$scratch/bin/scx_layered" "$BIN"
echo "setup-scx: ok ($("$BIN" --version | head -1))"
