"""Carrying a ladder guest to a bigger machine: the packed initramfs, the lab kernel, a run.sh
and (optionally) qemu with its own libraries and firmware, in one folder.

A ladder run directory (plan.sh rendered with attach_mode=direct) is packed as the lab packs it
(initramfs.pack); run.sh boots it the way the lab does (q35, multi-threaded TCG, the serial
console) and unpacks the raw results the agent sends back, so the host's ingest reads them as
after a lab run. glibc is not carried: the target's is newer (docs/lab.md "Carrying it to a
bigger machine").

    python -m threadwise.runtime.lab.bundle bundle RUN_DIR DEST [--no-qemu]
"""

from __future__ import annotations

import re
import shutil
import sys
import tarfile
from pathlib import Path

from threadwise.errors import ThreadwiseError
from threadwise.runtime.lab.carry import shared_libraries
from threadwise.runtime.lab.initramfs import QEMU_APPEND, find_qemu, pack
from threadwise.runtime.lab.kernel import find_lab_kernel

# qemu's own libraries go along; glibc does not (the target's is newer, shared/biglab).
GLIBC = re.compile(r"/(libc|libm|libpthread|libdl|librt|libresolv)\.so|/ld-linux")
FIRMWARE = ("/usr/share/seabios/bios-256k.bin", "/usr/share/qemu/linuxboot_dma.bin",
            "/usr/share/qemu/kvmvapic.bin")

RUN_SH = r"""#!/bin/sh
# run.sh CPUS [MEMORY]: boot this packed threadwise ladder guest (written by threadwise.runtime.lab.bundle)
# and unpack its raw results into ./results (or $RESULTS). Needs only qemu-system-x86_64, or the
# q.tar.xz beside this file (qemu 10 with its libraries and firmware), plus sh, awk, base64, tar.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
CPUS=${1:?usage: run.sh CPUS [MEMORY]}; MEM=${2:-4G}; RES=${RESULTS:-$HERE/results}
QEMU=qemu-system-x86_64; FW=""
if [ -f "$HERE/q.tar.xz" ]; then
    [ -d "$HERE/q" ] || tar -C "$HERE" -xJf "$HERE/q.tar.xz"
    QEMU="$HERE/q/bin/qemu-system-x86_64"; FW="-L $HERE/q/share"
    LD_LIBRARY_PATH="$HERE/q/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; export LD_LIBRARY_PATH
fi
mkdir -p "$RES"
DISK=""; [ -f "$HERE/disk.ext4" ] && DISK="-drive file=$HERE/disk.ext4,if=virtio,format=raw,readonly=on"
# TCG runs each vCPU on a host thread: keep CPUS at or below half this machine's cores.
"$QEMU" $FW -machine q35 -accel tcg,thread=multi -cpu max -smp "$CPUS" -m "$MEM" \
    -kernel "$HERE/vmlinuz" -initrd "$HERE/initrd.gz" -append "@APPEND@" \
    -display none -serial stdio -nodefaults -no-reboot $DISK < /dev/null \
    | tr -d '\r' | tee "$RES/console.log" | grep -a --line-buffered -E '^TW(INIT|AGENT|STATUS): ' || true
# every payload in order (finished cells first, the whole results directory last)
awk -v dir="$RES" '/^TW(CELL|ARCHIVE)-BEGIN/ {n++; f=sprintf("%s/.payload.%04d", dir, n); p=1; next}
     /^TW(CELL|ARCHIVE)-END/ {p=0; close(f); next} p {print > f}' "$RES/console.log"
for f in "$RES"/.payload.*; do
    [ -f "$f" ] || continue
    base64 -d "$f" | tar -xzf - -C "$RES" || echo "run.sh: $f did not decode (damaged on the console)" >&2
    rm -f "$f"
done
if [ -f "$RES/finished" ]; then echo "run.sh: finished; raw results in $RES"
else echo "run.sh: the guest stopped early; what came back is in $RES (see console.log)" >&2; exit 1; fi
"""


def bundle(out: Path, dest: Path, *, with_qemu: bool = True) -> list[Path]:
    """dest/: initrd.gz, vmlinuz, run.sh and (with_qemu) q.tar.xz: a ladder for another machine."""
    dest.mkdir(parents=True, exist_ok=True)
    packed = pack(out, dest=dest)
    written = [packed.initrd]
    if packed.disk is not None:
        shutil.copyfile(packed.disk, dest / "disk.ext4")
        written.append(dest / "disk.ext4")
    vmlinuz = dest / "vmlinuz"
    shutil.copyfile(find_lab_kernel().vmlinuz, vmlinuz)
    run_sh = dest / "run.sh"
    run_sh.write_text(RUN_SH.replace("@APPEND@", QEMU_APPEND))
    run_sh.chmod(0o755)
    written += [vmlinuz, run_sh]
    if with_qemu:
        qemu = find_qemu().resolve()
        archive = dest / "q.tar.xz"
        with tarfile.open(archive, "w:xz") as tar:
            tar.add(qemu, arcname="q/bin/qemu-system-x86_64")
            for lib in shared_libraries(qemu):
                if not GLIBC.search(lib):
                    tar.add(Path(lib).resolve(), arcname=f"q/lib/{Path(lib).name}")
            for firmware in FIRMWARE:
                tar.add(Path(firmware).resolve(), arcname=f"q/share/{Path(firmware).name}")
        written.append(archive)
    return written


def main(argv: list[str] | None = None) -> int:
    """python -m threadwise.runtime.lab.bundle bundle RUN_DIR DEST [--no-qemu]"""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m threadwise.runtime.lab.bundle",
                                     description="Pack a ladder run directory (plan.sh rendered with "
                                                 "attach_mode=direct) for a machine with qemu.")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("bundle", help="initrd.gz, vmlinuz, run.sh (and q.tar.xz) in DEST")
    make.add_argument("run_dir", type=Path)
    make.add_argument("dest", type=Path)
    make.add_argument("--no-qemu", action="store_true", help="the target has qemu-system-x86_64")
    args = parser.parse_args(argv)
    try:
        for path in bundle(args.run_dir, args.dest, with_qemu=not args.no_qemu):
            print(f"{path}  {path.stat().st_size / 1e6:.1f} MB")
    except ThreadwiseError as error:
        print(f"error: {error.message}" + (f"\nhint: {error.hint}" if error.hint else ""), file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
