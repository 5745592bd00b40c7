"""threadwise.runtime: apply profiles with the real scx_layered, and the sched_ext lab VM.

- `scx`: the bundled scx_layered (where it is, its version) and sched_ext sysfs.
- `launcher`, `supervisor`, `stats`: apply / status / stop.
- `debian`, `kernel`: the lab kernel from the Debian archive.
- `lab`: boot that kernel under virtme-ng (TCG) and run a command inside.
"""
