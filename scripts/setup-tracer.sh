#!/usr/bin/env bash
# setup-tracer.sh: build the libbpf tracer (observe/tracers/sched.*) and threadwise-layer-of (layerof.c,
# the lab's reader of scx_layered's placement) into the cache (idempotent).
#
# Cached by a hash of its sources in ~/.cache/threadwise/tracer-<hash>/ (or THREADWISE_CACHE);
# about a second to build, nothing to do when the sources did not change. Needs clang-19, bpftool,
# libbpf-dev, libelf-dev, zlib1g-dev and gcc (scripts/setup-system.sh installs them); a missing one
# is named with the package to install.
set -euo pipefail
cd "$(dirname "$0")/.."
path=$(.venv/bin/python -m threadwise.observe.tracer_build)
echo "setup-tracer: $path"
