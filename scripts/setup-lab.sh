#!/usr/bin/env bash
# setup-lab.sh: what the sched_ext lab VM needs beyond apt (idempotent, fast the second time).
#
# - virtiofsd (the Rust one; vng refuses the C one bookworm's qemu ships, and
#   trixie's .deb needs glibc 2.39): `cargo install --locked` into a versioned
#   cache, then copied to /usr/libexec/virtiofsd where vng looks for it.
# - virtme-ng in the project venv, at the version pinned in requirements.lock.
# - the lab kernel: `threadwise lab kernel` (a Debian 7.x kernel with sched_ext,
#   read from trixie-backports' Packages index over HTTP; apt sources untouched).
# qemu 10 (bookworm-backports) and kmod come from scripts/setup-system.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

VIRTIOFSD_VERSION=${VIRTIOFSD_VERSION:-1.14.0}
CACHE=${THREADWISE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/threadwise}  # as threadwise.paths.cache_dir
VENV=.venv

# 1. virtiofsd
vfs_root=$CACHE/virtiofsd-$VIRTIOFSD_VERSION
vfs_bin=$vfs_root/bin/virtiofsd
if [[ ! -x $vfs_bin ]]; then
    command -v cargo >/dev/null || { echo "setup-lab: cargo not found (install Rust via rustup)" >&2; exit 1; }
    echo "setup-lab: building virtiofsd $VIRTIOFSD_VERSION into $vfs_root (about a minute)"
    mkdir -p "$CACHE"
    scratch=$(mktemp -d "$CACHE/.virtiofsd-build.XXXXXX")
    trap 'rm -rf "$scratch"' EXIT
    cargo install virtiofsd --version "$VIRTIOFSD_VERSION" --locked --root "$scratch" --quiet
    mkdir -p "$vfs_root/bin"
    mv "$scratch/bin/virtiofsd" "$vfs_bin"
fi
if ! cmp -s "$vfs_bin" /usr/libexec/virtiofsd; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "setup-lab: must run as root to install /usr/libexec/virtiofsd" >&2; exit 1
    fi
    install -D -m 0755 "$vfs_bin" /usr/libexec/virtiofsd
    echo "setup-lab: installed /usr/libexec/virtiofsd ($VIRTIOFSD_VERSION)"
fi

# 2. virtme-ng, at the pinned version
pin=$(grep -E '^virtme-ng==' requirements.lock || true)
[[ -n $pin ]] || { echo "setup-lab: virtme-ng is not pinned in requirements.lock" >&2; exit 1; }
want=${pin#virtme-ng==}
have=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("virtme-ng"))' 2>/dev/null || true)
if [[ $have != "$want" ]]; then
    echo "setup-lab: installing $pin into $VENV"
    "$VENV/bin/pip" install -q --cache-dir "$CACHE/pip" "$pin"
fi

# 3. the lab kernel (cached; no network access when present)
"$VENV/bin/threadwise" lab kernel
echo "setup-lab: ok (virtiofsd $VIRTIOFSD_VERSION, virtme-ng $want)"
