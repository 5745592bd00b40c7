"""The lab in one place: where refine's ladder cells run when this host has no sched_ext.

Two guests, both booted on the lab kernel (`kernel.py`, a Debian kernel with sched_ext, chosen by
`debian.py` and cached) under TCG:
- `vng.py`: the vng lab, which shares this host's root filesystem with the guest (read-only) and
  one results directory; `labtee.py` keeps the guest command's stdout and stderr apart, in order.
- `initramfs.py`: a self-contained guest booted by plain qemu, so a ladder runs on any x86-64
  machine with qemu; `carry.py` packs what the plan runs into its image, `runtimes.py` the JVM
  and Python trees onto a read-only runtime disk, and `hostload.py` samples what the host took
  from the vCPU threads meanwhile.
Both run the same agent (`guest/agent.sh`, POSIX sh; `guest/init` is the initramfs guest's
PID 1), and both hand back an `Execution` (`agent.py`). The agent only runs commands and writes
raw files; refine parses, judges and stores them, so refine imports the lab and never the
other way round.

Nothing is imported here: each caller names the module it uses (docs/interfaces.md), and the
guest side (`labtee.py`, run by file path inside the guest) loads no more than it needs.
"""
