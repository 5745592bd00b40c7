#!/usr/bin/env bash
# setup-system.sh [build|demo|all]: install the Debian packages threadwise needs (idempotent).
#
# The sets are cumulative: `build` is what compiles scx_layered and the libbpf tracer (setup.sh
# starts the scx_layered build as soon as it is in, while the rest installs); `demo` adds what the
# demo's lab needs (qemu 10, busybox); `all` (the default) adds the test workloads, bpftrace, the
# JDK, virtiofsd's build deps and the benchmarks' tools.
#
# bookworm + bookworm-backports only (never trixie/sid: adding trixie once replaced
# bookworm's libc; docs/lab.md, `threadwise lab kernel`).
# qemu comes from bookworm-backports (10.x) because bookworm's 7.2 crashes
# under multi-threaded TCG about one boot in five.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
    echo "setup-system: must run as root (apt-get, tracefs mount)" >&2
    exit 1
fi

SET=${1:-all}
BUILD_PACKAGES=(
    clang-19 llvm-19 libelf-dev zlib1g-dev pkg-config  # scx_layered (its BPF code needs clang >= 18)
    libbpf-dev bpftool gcc make  # the libbpf C tracer (and bpftool: the lab's tid -> layer map dump)
)
DEMO_PACKAGES=(
    busybox-static      # the self-contained initramfs lab guest (runtime/lab/initramfs.py)
    xz-utils ca-certificates
)
ALL_PACKAGES=(
    bpftrace            # observe: the bpftrace backend
    redis-server redis-tools   # a real workload for tests
    memcached           # a bundled workload (refine/workloads/memcached.toml; its load is ours, mcload.c)
    nginx               # a multi-process service whose roles show only in process titles (tests)
    postgresql-15 postgresql-contrib   # roles by process title under one user (postgres: checkpointer; pgbench from contrib)
    stress-ng rt-tests  # background spinners, hackbench, cyclictest (a bundled workload)
    sysbench            # a load generator with a metrics parser (refine/measure/metrics.py); the mariadb workload's load
    mariadb-server      # a bundled workload (refine/workloads/mariadb.toml: mariadbd under sysbench oltp_read_write)
    libseccomp-dev libcap-ng-dev  # virtiofsd (the vng lab)
    kmod                # depmod, needed by virtme-ng
    e2fsprogs           # mkfs.ext4 -d: the lab guest's runtime disk (runtime/lab/runtimes.py)
    openjdk-17-jdk-headless  # the bundled JVM workload (refine/workloads/poolservice.toml); Spark (fleet engine)
    hyperfine linux-perf  # benchmarks (perf sched record: the tracer's peer)
    procps              # ps: scripts/test.sh stops the fast tier it runs in the background
)
case $SET in
    build) APT_PACKAGES=("${BUILD_PACKAGES[@]}");;
    demo) APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}");;
    all) APT_PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}" "${ALL_PACKAGES[@]}");;
    *) echo "setup-system: unknown set '$SET' (build, demo or all)" >&2; exit 2;;
esac
BACKPORTS_PACKAGES=(qemu-system-x86)

backports_list=/etc/apt/sources.list.d/threadwise-bookworm-backports.list
need_update=0
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "deb http://deb.debian.org/debian bookworm-backports main" > "$backports_list"
    need_update=1
fi

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
qemu_ok=0
[[ $SET == build ]] && qemu_ok=1   # the build set needs no qemu
if [[ $qemu_ok -eq 0 ]] && command -v qemu-system-x86_64 >/dev/null; then
    qemu_major=$(qemu-system-x86_64 --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
    [[ ${qemu_major:-0} -ge 10 ]] && qemu_ok=1
fi

if [[ ${#missing[@]} -gt 0 || $qemu_ok -eq 0 ]]; then
    # A stale package list makes installs fail with 404s: refresh when we must install, unless
    # the lists (backports' among them) were refreshed in the last half hour (setup.sh installs
    # its sets one after the other).
    fresh=$(find /var/lib/apt/lists -maxdepth 1 -name '*bookworm-backports_main_binary-amd64_Packages*' \
        -mmin -30 2>/dev/null | head -1)
    [[ -n $fresh ]] || need_update=1
fi
if [[ $need_update -eq 1 ]]; then
    echo "setup-system: apt-get update"
    apt-get update -qq
fi
export DEBIAN_FRONTEND=noninteractive
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "setup-system: installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ $qemu_ok -eq 0 ]]; then
    echo "setup-system: installing qemu-system-x86 from bookworm-backports"
    apt-get install -y -qq --no-install-recommends -t bookworm-backports "${BACKPORTS_PACKAGES[@]}" >/dev/null
fi

# The tests and ladders start their own redis-server, memcached, mariadbd (on their own ports and,
# for mariadbd, a fresh data directory) and nginx; the Debian services are not needed.
for service in redis-server memcached mariadb nginx; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
        systemctl stop "$service" || true
    fi
done

# bpftrace needs tracefs; some machines boot with it unmounted.
if [[ -z "$(ls -A /sys/kernel/tracing 2>/dev/null)" ]]; then
    mount -t tracefs nodev /sys/kernel/tracing
fi
versions=()
command -v bpftrace >/dev/null && versions+=("$(bpftrace --version)")
command -v qemu-system-x86_64 >/dev/null && versions+=("$(qemu-system-x86_64 --version | head -1)")
echo "setup-system: ok ($SET set${versions:+; ${versions[*]}})"
