"""The sched_ext lab: run a command inside a VM booted on the lab kernel.

Problem: the host kernel has no sched_ext, KVM does not work here (nested
virtualization fails), and virtme-ng's stdout carries nothing of the guest
command without a terminal (it even exits 255 on success, LAB.md). The guest
also needs `/boot/config-<release>` for libbpf, and the host's `/boot` must
not be touched.

Approach: boot the cached lab kernel with `vng --run VMLINUZ --disable-kvm`
(TCG), the host's root filesystem shared read-only, and one `--rwdir` results
directory. vng executes a generated wrapper script from that directory. vng's
own writable overlays fail on this kernel (overlayfs is a module, and vng
loads modules only through an initramfs that needs busybox), so the wrapper
insmods the cached `overlay.ko`, mounts guest-only overlays on `/tmp` and
`/boot` (upper layers on the guest's tmpfs; the host's directories are never
written), copies the kernel config to `/boot/config-<release>`, runs the
command with its stdout/stderr redirected into the results directory and
writes its exit status there last. The host reads those files; vng's own
output (with `--verbose`, the console) goes to `console.log`, kept when the
command fails or never reports. vng runs in its own session so a timeout can
end exactly the processes we started (vng, qemu, virtiofsd) by process group.
`--threads-per-core 2` adds `-smp N,sockets=1,cores=N/2,threads=2` so the
guest sees SMT siblings.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from threadwise import termination
from threadwise.errors import GuestCommandFailed, LabError, LabTimeout, MissingTool, UsageError
from threadwise.givenclock import Deadline
from threadwise.runtime.lab import labtee
from threadwise.runtime.lab.agent import TCG_PATCHING_OOPS, emulation_failure
from threadwise.runtime.lab.hostpriority import HostClaim
from threadwise.runtime.lab.kernel import GUEST_KERNEL_ARGS, LabKernel, find_lab_kernel
from threadwise.runtime.lab.turns import take_turn

VIRTIOFSD_PATHS = ("/usr/libexec/virtiofsd",)
SETUP_HINT = "run scripts/setup-lab.sh (virtiofsd, virtme-ng, the lab kernel)"
STATUS_FILE = "status"
STREAM_FILE = labtee.STREAM   # the command's output, lines tagged "O " (stdout) or "E " (stderr)
POLL_S = 0.2
PROBE = ".probe"
NOT_MOUNTED = "threadwise-lab: the results directory is not mounted"
# Boots that failed for reasons of the emulation, not of the command, are retried:
# - vng waits ~3 s for virtiofsd to start and then falls back to 9p, which this
#   kernel lacks (on a busy host);
# - multi-threaded TCG has a code-patching race: the kernel's int3-based text
#   patching (static keys flip when sched_ext enables) can oops with `int3`,
#   seen with 4 vCPUs on 2 host cores (LAB.md saw it with qemu 7.2 at boot).
# - vng exited 255 mid-way through the guest kernel's PCI enumeration (1.8 s of guest time, 6 s
#   after the start), its console cut mid-line with no message, 4 vCPUs on 2 host cores
#   (2026-11-28, in a fresh clone's make test; the same test passed when run again, and the
#   cause is not known): a boot that ends before the guest runs the command has run nothing.
TRANSIENT = ("fallback to 9p", NOT_MOUNTED, TCG_PATCHING_OOPS)
BOOT_ATTEMPTS = 3
# --timeout counts host time given to the VM (threadwise.givenclock); in wall time a run may take
# at most this many times as long (beside a second lab each gets about half the host)
LAB_CAP_FACTOR = 3.0


def retry_reason(console_text: str, returncode: int, came_up: bool) -> str | None:
    """Why a boot that reported no exit status is worth one more try, or None: a known failure
    of the emulation in its console, or vng's failure before the guest ran the command."""
    known = emulation_failure(console_text, TRANSIENT)
    if known is not None:
        return repr(known)
    if not came_up and returncode != 0:
        return f"vng exited {returncode} before the guest came up"
    return None


__all__ = ["GuestCommandFailed", "LabError", "LabResult", "LabTimeout", "run_in_lab"]


@dataclass(frozen=True)
class LabResult:
    """What came back from one VM run."""

    status: int  # the guest command's exit status
    out_dir: Path
    stdout: str
    stderr: str
    console_log: Path | None  # kept only when the command failed
    wall_s: float
    release: str
    host_priority: str = ""  # what the lab claimed of the host (hostpriority.py)

    @property
    def ok(self) -> bool:
        return self.status == 0


def _venv_bin() -> Path:
    return Path(sys.executable).parent


def find_vng() -> Path:
    for candidate in (_venv_bin() / "vng", shutil.which("vng")):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise MissingTool("virtme-ng (vng) not found", hint=SETUP_HINT)


def find_virtiofsd() -> Path:
    on_path = shutil.which("virtiofsd")
    for candidate in (*VIRTIOFSD_PATHS, on_path):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise MissingTool("virtiofsd (the Rust one) not found", hint=SETUP_HINT)


def qemu_smp_opts(cpus: int, threads_per_core: int) -> list[str]:
    """Extra vng arguments for the guest CPU topology."""
    if threads_per_core not in (1, 2):
        raise UsageError("--threads-per-core must be 1 or 2", hint="2 gives the guest SMT sibling pairs")
    if cpus < 1 or cpus % threads_per_core:
        raise UsageError(f"--cpus {cpus} is not a multiple of --threads-per-core {threads_per_core}",
                         hint="give --cpus 1 or more, a multiple of --threads-per-core (e.g. --cpus 2)")
    if threads_per_core == 1:
        return []
    cores = cpus // threads_per_core
    return ["--qemu-opts", f"-smp {cpus},sockets=1,cores={cores},threads={threads_per_core}"]


def guest_script(command: list[str], *, out_dir: Path, kernel: LabKernel, cwd: Path) -> str:
    """The wrapper vng executes inside the guest."""
    q = shlex.quote
    path = os.pathsep.join([str(_venv_bin()), os.environ.get("PATH", "/usr/bin:/bin")])
    return f"""#!/bin/bash
# Generated by `threadwise lab run`; runs inside the lab VM as root.
out={q(str(out_dir))}
if ! : > "$out/{PROBE}" 2>/dev/null; then
    echo "{NOT_MOUNTED}" > /dev/console; exit 99
fi
rel=$(uname -r)
echo "$rel" > "$out/guest-release"
# The shared root is read-only and overlayfs is a module of this kernel, which
# vng cannot load without an initramfs: load it, then give /tmp and /boot
# guest-only overlays (upper layers on the guest's tmpfs /run). The results
# directory is a mount of its own, moved aside while /tmp is overlaid.
grep -qw overlay /proc/filesystems || insmod {q(str(kernel.overlay_module))}
mkdir -p /run/twlab/out
mount --move "$out" /run/twlab/out
for dir in /tmp /boot; do
    mkdir -p "/run/twlab/upper$dir" "/run/twlab/work$dir"
    mount -t overlay overlay \
        -o "lowerdir=$dir,upperdir=/run/twlab/upper$dir,workdir=/run/twlab/work$dir" "$dir" \
        || mount -t tmpfs tmpfs "$dir"
done
mkdir -p "$out"
mount --move /run/twlab/out "$out"
# libbpf reads /boot/config-<release> (guest-only: /boot is an overlay).
[ -e "/boot/config-$rel" ] || cp {q(str(kernel.config))} "/boot/config-$rel"
[ -e /sys/kernel/tracing/trace ] || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null
ulimit -l unlimited 2>/dev/null
export PATH={q(path)} THREADWISE_LAB_OUT="$out" THREADWISE_IN_LAB=1
cd {q(str(cwd))} || exit 97
# stdout and stderr land in their own files and, line by line as they are written and in
# order, in one stream tagged "O " / "E " (runtime/lab/labtee.py), which the host prints as it grows.
{q(sys.executable)} -P {q(str(Path(labtee.__file__)))} "$out" -- {shlex.join(command)}
echo $? > "$out/{STATUS_FILE}.tmp" && mv "$out/{STATUS_FILE}.tmp" "$out/{STATUS_FILE}"
sync
"""


def _end_group(process: subprocess.Popen, grace_s: float = 5.0) -> None:
    """End vng and everything it started (its own session), TERM then KILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


Output = Callable[[str, str], None]   # (stream "stdout" | "stderr", one line with its newline)


class _Follower:
    """Follows the guest's tagged output stream (STREAM_FILE) and its start, as they grow."""

    def __init__(self, out: Path, on_output: Output | None, progress: Callable[[str], None],
                 started: float) -> None:
        self.out, self.on_output, self.progress, self.started = out, on_output, progress, started
        self.offset = 0
        self.partial = b""
        self.up = False

    def poll(self) -> None:
        if not self.up and (self.out / "guest-release").is_file():
            release = (self.out / "guest-release").read_text().strip()
            if release:
                self.up = True
                self.progress(f"lab: guest up ({release}) after {time.monotonic() - self.started:.1f} s; "
                              "running the command")
        if self.on_output is None:
            return
        try:
            with (self.out / STREAM_FILE).open("rb") as stream:
                stream.seek(self.offset)
                data = stream.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        for line in lines:
            self._emit(line + b"\n")

    def finish(self) -> None:
        self.poll()
        if self.partial:
            self._emit(self.partial)
            self.partial = b""

    def _emit(self, raw: bytes) -> None:
        assert self.on_output is not None
        tag, text = raw[:2], raw[2:].decode(errors="replace")
        self.on_output("stderr" if tag == b"E " else "stdout", text if tag in (b"O ", b"E ") else
                       raw.decode(errors="replace"))


def _boot(argv: list[str], env: dict[str, str], cwd: Path, console: Path, timeout_s: float, *,
          follower: _Follower | None = None, host_priority: bool = True) -> tuple[int, str]:
    """One vng run, its output in `console`: (vng's exit status, what host priority was applied);
    stopped (whole session) on timeout. The session (vng, qemu, virtiofsd) claims the host while
    it runs (hostpriority.py)."""
    with console.open("wb") as log:
        log.write(("$ " + shlex.join(argv) + "\n").encode())
        log.flush()
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=cwd, start_new_session=True,
        )  # fmt: skip
        # host time given to the session (its most-delayed thread: a vCPU), at most LAB_CAP_FACTOR
        # times as long in wall time: beside another lab the two share the host (givenclock)
        deadline = Deadline.start(process.pid, timeout_s, LAB_CAP_FACTOR)
        claim = HostClaim(process.pid, enabled=host_priority)
        try:
            with claim:
                if follower is not None:
                    follower.progress(f"lab: host priority: {claim.applied}")
                while True:
                    try:
                        code = process.wait(timeout=POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        if follower is not None:
                            follower.poll()
                        termination.COMMAND.check()   # a SIGTERM whose exception was lost (termination.py)
                        if deadline.passed():
                            raise
            if follower is not None:
                follower.finish()
            return code, claim.applied
        except subprocess.TimeoutExpired:
            _end_group(process)
            if follower is not None:
                follower.finish()
            raise LabTimeout(
                f"the lab VM did not finish within {timeout_s:.0f} s of host time (--timeout; "
                f"{deadline.describe()}); stopped it",
                hint=f"console log: {console}; raise --timeout (TCG is slow: a boot takes 20-60 s)",
            ) from None
        except BaseException:
            _end_group(process)
            raise


def run_in_lab(
    command: list[str],
    *,
    cpus: int = 2,
    threads_per_core: int = 1,
    memory: str = "2G",
    timeout_s: float = 600.0,
    out_dir: Path | None = None,
    cwd: Path | None = None,
    keep_console: bool = False,
    on_output: Output | None = None,
    progress: Callable[[str], None] | None = None,
    host_priority: bool = True,
) -> LabResult:
    """Boot the lab kernel, run `command` inside, and return what it left behind.

    With `on_output`, each line the command writes is passed on as it is written
    (stdout and stderr in their order); `progress` gets `lab:` lines (boot, guest up).
    """
    if not command:
        raise UsageError("no command to run in the lab", hint="threadwise lab run -- uname -r")
    kernel, vng = _lab_tools()
    smp = qemu_smp_opts(cpus, threads_per_core)
    out = _fresh_out_dir(out_dir)
    workdir = (cwd or Path.cwd()).resolve()
    wrapper = out / ".guest.sh"
    wrapper.write_text(guest_script(command, out_dir=out, kernel=kernel, cwd=workdir))
    wrapper.chmod(0o755)
    argv = [
        str(vng), "--run", str(kernel.vmlinuz), "--disable-kvm",
        "--cpus", str(cpus), "--memory", memory,
        "--rwdir", str(out),
        "--cwd", str(workdir), "--verbose", *smp,
        *(arg for boot_arg in GUEST_KERNEL_ARGS for arg in ("--append", boot_arg)),
        "--exec", str(wrapper),
    ]  # fmt: skip
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(_venv_bin()), env.get("PATH", "/usr/bin:/bin")])
    say = progress or (lambda _line: None)
    # one lab at a time where their vCPUs outnumber the host's cores (turns.py); the timeout and
    # the wall time count from the turn
    with take_turn(cpus, say):
        started = time.monotonic()
        say(f"lab: booting {kernel.release} under qemu TCG ({cpus} vCPUs, {memory}; a boot takes 20-60 s); "
            f"results in {out}")
        priority = _boot_until_status(argv, env, workdir, out, started=started, timeout_s=timeout_s,
                                      on_output=on_output, say=say, host_priority=host_priority)
        wall = time.monotonic() - started
    return _lab_result(out, wall_s=wall, host_priority=priority, keep_console=keep_console)


def _lab_tools() -> tuple[LabKernel, Path]:
    """The lab kernel and vng, once every tool a lab boot needs (virtiofsd, qemu) is found."""
    kernel = find_lab_kernel()
    vng = find_vng()
    find_virtiofsd()
    if shutil.which("qemu-system-x86_64") is None:
        raise MissingTool("qemu-system-x86_64 not found", hint="run scripts/setup-system.sh")
    return kernel, vng


def _fresh_out_dir(out_dir: Path | None) -> Path:
    """The results folder (a new temporary one unless given), without a previous run's results."""
    out = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="threadwise-lab-"))
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in (STATUS_FILE, "stdout", "stderr", "guest-release", "console.log", STREAM_FILE):
        (out / stale).unlink(missing_ok=True)
    return out


def _boot_until_status(argv: list[str], env: dict[str, str], workdir: Path, out: Path, *, started: float,
                       timeout_s: float, on_output: Output | None, say: Callable[[str], None],
                       host_priority: bool) -> str:
    """Boot until the command reports its exit status (STATUS_FILE), booting again after a failure
    `retry_reason` names (at most BOOT_ATTEMPTS boots, within `timeout_s` from `started`); returns
    what host priority was applied. A boot that never reports, and is not retried, is a LabError."""
    console = out / "console.log"
    for attempt in range(1, BOOT_ATTEMPTS + 1):
        for stale in (STREAM_FILE, "guest-release"):
            (out / stale).unlink(missing_ok=True)
        follower = _Follower(out, on_output, say, started)
        returncode, priority = _boot(argv, env, workdir, console,
                                     max(timeout_s - (time.monotonic() - started), 1.0),
                                     follower=follower, host_priority=host_priority)
        if (out / STATUS_FILE).is_file():
            return priority
        text = console.read_text(errors="replace")
        why = retry_reason(text, returncode, (out / "guest-release").is_file())
        if attempt < BOOT_ATTEMPTS and why is not None:
            print(f"lab: boot {attempt} failed ({why}); retrying; its console is "
                  f"kept as console-attempt{attempt}.log", file=sys.stderr)
            (out / f"console-attempt{attempt}.log").write_text(text)
            continue
        tail = text.strip().splitlines()[-15:]
        raise LabError(
            f"the command never reported an exit status (vng exited {returncode}); "
            "last console lines:\n  " + "\n  ".join(tail),
            hint=f"full console log: {console}",
        )
    raise AssertionError("unreachable: the last boot attempt returns or raises")


def _lab_result(out: Path, *, wall_s: float, host_priority: str, keep_console: bool) -> LabResult:
    """What the command left in `out`; the console log is kept only on failure or when asked."""
    status = int((out / STATUS_FILE).read_text().strip() or "255")
    console: Path | None = out / "console.log"
    if status == 0 and not keep_console:
        console.unlink()
        console = None
    return LabResult(
        status=status,
        out_dir=out,
        stdout=(out / "stdout").read_text(errors="replace"),
        stderr=(out / "stderr").read_text(errors="replace"),
        console_log=console,
        wall_s=wall_s,
        release=(out / "guest-release").read_text().strip(),
        host_priority=host_priority,
    )
