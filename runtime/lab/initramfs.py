"""A self-contained ladder guest: the lab kernel plus one initramfs, booted by plain qemu.

Problem: the vng lab shares the host's root filesystem with the guest, so the
ladder's plan can name anything on the host (the venv's `threadwise`, bpftool,
scx_layered, the bundled binaries) and it is simply there. That ties the lab to
this machine and its 2 cores. A ladder at `--cpus 8` needs a bigger x86-64
machine that has qemu and nothing else of ours (LAB.md, "An 8-vCPU lab on a
bigger machine"): the guest must carry everything the plan runs, and the
results must come back without a shared filesystem.

Approach: `pack` reads the run directory's `plan.sh` (rendered with
`attach_mode="direct"`: the agent starts scx_layered itself, no Python in the
guest) and collects every executable its functions (`service_cmd`, `load_cmd`,
`ready_cmd`) and variables (`SPIN`, `SCX`, `TRACER`, `LAYER_OF`) name, plus bpftool (the agent dumps
scx_layered's tid -> layer map with it). Each goes into the image at the SAME
absolute path with the shared libraries `ldd` lists and the host's
`ld.so.cache`, so plan.sh runs unchanged. Busybox provides the shell and the
applets agent.sh uses; `guest/init` mounts what scx_layered needs, copies the
kernel config to `/boot/config-<release>` (libbpf reads it), runs `agent.sh
/out` and talks to the host only over the serial console: agent.log lines as
they are written, each finished cell as a checksummed base64 tar.gz as soon as
it is done, the agent's status, then the whole `/out`. The image is a newc cpio
(carry.py: the image and the packer), gzipped. A JVM's or Python's tree goes on
a read-only ext4 runtime disk instead (runtimes.py, cached by content hash;
qemu attaches it as a virtio-blk drive and init bind-mounts its trees); other
interpreters with a library tree (Perl, Ruby, ...) are refused by name, and so
is a path under /tmp (init mounts a fresh tmpfs there); `threadwise workload
check` runs the same packer on the workload's commands before anything runs
(refine/measure/preflight.py).

`run_initramfs` boots it like `shared/biglab` (q35, multi-threaded TCG,
`-serial stdio`), streams the agent's lines to `progress`, stops qemu (by its
PID) when its watchdog fires (watchdog.py: the agent silent too long, or the
run's cap), and unpacks what came back into the run directory, so
refine's `ingest.py` reads the same raw files as after a vng run. A guest that dies
mid-ladder still leaves every cell it sent and an agent.log rebuilt from the
console; the error says where it stopped.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.errors import InitramfsError, LabError, MissingTool, ThreadwiseError
from threadwise.runtime.lab import hostload
from threadwise.runtime.lab.agent import (
    TCG_PATCHING_OOPS,
    Execution,
    agent_path,
    emulation_failure,
    init_path,
)

# What the image carries and how it is packed live in carry.py; these names stay importable here.
from threadwise.runtime.lab.carry import (  # noqa: F401
    GUEST_PATH,
    PLAN_FUNCTIONS,
    PLAN_VARIABLES,
    UNPACKABLE,
    Image,
    Packer,
    _bpftool,
    busybox_applets,
    carry_command,
    find_busybox,
    plan_commands,
    program_argv,
    shared_libraries,
)
from threadwise.runtime.lab.hostpriority import HostClaim
from threadwise.runtime.lab.kernel import GUEST_KERNEL_ARGS, LabKernel, find_lab_kernel
from threadwise.runtime.lab.runtimes import build_disk
from threadwise.runtime.lab.turns import take_turn
from threadwise.runtime.lab.watchdog import Watchdog, fixed

GUEST_OUT = "/out"
KCONFIG = "/etc/threadwise/kconfig"
EXTRA_PATH = "/etc/threadwise/path"
TREES = "/etc/threadwise/trees"  # the runtime disk's trees, one per line (guest/init binds them)
VIRTIO_BLK = "/lib/modules/virtio_blk.ko"
QEMU_APPEND = " ".join(("console=ttyS0 rdinit=/init quiet panic=1", *GUEST_KERNEL_ARGS))
# Boots that died before the agent said anything, for reasons of the emulation, are retried
# (multi-threaded TCG's code-patching race, runtime/lab/vng.py).
TRANSIENT = (TCG_PATCHING_OOPS, "Kernel panic")
BOOT_ATTEMPTS = 2
ICOUNT_ENV = "THREADWISE_LAB_ICOUNT"


@dataclass(frozen=True)
class Packed:
    """What a guest boots: the initramfs, and the runtime disk when the plan needs runtime trees."""

    initrd: Path
    disk: Path | None = None


def pack(out: Path, *, dest: Path, log: Callable[[str], None] = lambda _m: None) -> Packed:
    """dest/initrd.gz: busybox, scx_layered, bpftool, the plan's programs, agent, init and `out`;
    with the runtime disk (runtimes.py, cached) when a program needs a JVM's or Python's tree."""
    plan_file = out / "plan.sh"
    if not plan_file.is_file():
        raise InitramfsError(f"{out} has no plan.sh", hint="ladder.write_plan writes it")
    words = plan_commands(plan_file.read_text())
    if words.get("ATTACH_MODE") != ["direct"]:
        raise InitramfsError(
            f"{plan_file} attaches with ATTACH_MODE={' '.join(words.get('ATTACH_MODE', ['?']))}; "
            "the initramfs guest has no threadwise, so the agent must start scx_layered itself",
            hint="render the plan with plan_script(..., attach_mode='direct')")
    busybox = find_busybox()
    image = Image()
    packer = Packer(image, busybox_applets(busybox))
    for name in PLAN_FUNCTIONS:
        if name in words:
            carry_command(packer, words[name], why=f"plan.sh's {name}")
    for name in PLAN_VARIABLES:
        if words.get(name) and words[name][0]:  # LAYER_OF='': not built
            packer.command(words[name][0], why=f"plan.sh's {name}")
    if not words.get("SCX"):
        raise InitramfsError(f"{plan_file} names no scx_layered (SCX=)",
                             hint="plan_script(..., scx=scx_layered_path())")
    packer.executable(_bpftool(), why="the agent's membership dump")
    packer.command("chrt", why="the agent's membership probe (util-linux; busybox has no chrt)")
    kernel = find_lab_kernel()  # after the plan's commands: a refusal needs no kernel
    disk = build_disk(packer.trees, log=log) if packer.trees else None
    if disk is not None:
        packer.add_libraries(disk.libraries)  # what the trees' ELF files need from outside them
        image.add_file(TREES, ("".join(f"{tree.path}\n" for tree in disk.trees)).encode())
        image.add_file(VIRTIO_BLK, kernel.virtio_blk_module)
    # scx_layered is ~33 MB with symbols; stripped it is a fraction of that, and RAM is the disk here.
    scx = Path(words["SCX"][0])
    with tempfile.TemporaryDirectory(prefix="threadwise-strip-") as scratch:
        stripped = Path(scratch) / "scx_layered"
        if shutil.which("strip") and subprocess.run(
                ["strip", "-o", str(stripped), str(scx.resolve())], capture_output=True,
                check=False).returncode == 0:
            image.add_file(str(scx), stripped.read_bytes(), 0o755)
        # busybox at /bin, every applet a link to it (packed programs of the same name win)
        image.add_file("/bin/busybox", busybox.resolve(), 0o755)
        packer.libraries(busybox.resolve())  # none for busybox-static; a dynamic one works too
        for applet in sorted(packer.applets - {"busybox"}):
            image.add_link(f"/bin/{applet}", "busybox")
        if Path("/etc/ld.so.cache").is_file():  # so libraries resolve as on the host
            image.add_file("/etc/ld.so.cache", Path("/etc/ld.so.cache"))
        for directory in ("/proc", "/sys", "/dev", "/tmp", "/boot", "/root", "/run", "/mnt",
                          f"{GUEST_OUT}/cells", f"{GUEST_OUT}/arms"):
            image.mkdir(directory)
        image.add_char("/dev/console", 5, 1)  # init's stdio before devtmpfs is mounted
        image.add_char("/dev/null", 1, 3)
        image.add_file("/etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")
        image.add_file("/etc/group", b"root:x:0:\n")
        image.add_file("/etc/hosts", b"127.0.0.1 localhost\n::1 localhost\n")
        image.add_file(KCONFIG, kernel.config)
        image.add_file(EXTRA_PATH, (":".join(packer.extra_path) + "\n").encode())
        image.add_file("/agent.sh", agent_path(), 0o755)
        image.add_file("/init", init_path(), 0o755)
        image.add_file(f"{GUEST_OUT}/plan.sh", plan_file)
        for config in sorted([*(out / "arms").glob("*.json"), *(out / "arms").glob("*.args")]):
            image.add_file(f"{GUEST_OUT}/arms/{config.name}", config)
        dest.mkdir(parents=True, exist_ok=True)
        initrd = dest / "initrd.gz"
        image.write(initrd)
    return Packed(initrd, disk.image if disk is not None else None)


# --- booting it and reading the console ----------------------------------------------------------


def find_qemu() -> Path:
    found = shutil.which("qemu-system-x86_64")
    if found is None:
        raise MissingTool("qemu-system-x86_64 not found", hint="run scripts/setup-system.sh")
    return Path(found)


def icount_shift() -> int | None:
    """THREADWISE_LAB_ICOUNT=N: a measuring experiment, qemu's instruction-counted clock
    (`-icount shift=N,sleep=off`, single-threaded TCG). docs/lab.md says why it is not the default."""
    value = os.environ.get(ICOUNT_ENV, "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ThreadwiseError(f"{ICOUNT_ENV}={value!r}: expected a shift (0-10), e.g. 2")
    return int(value)


def qemu_argv(qemu: Path, vmlinuz: Path, initrd: Path, *, cpus: int, memory: str,
              disk: Path | None = None) -> list[str]:
    """shared/biglab's command line: q35, multi-threaded TCG, the console on stdio, exit on reboot;
    the runtime disk, when there is one, as a read-only virtio-blk drive (/dev/vda)."""
    shift = icount_shift()
    accel = (["-accel", "tcg,thread=multi"] if shift is None else
             ["-accel", "tcg,thread=single", "-icount", f"shift={shift},sleep=off"])
    # debug-threads names the vCPU threads (`CPU n/TCG`), so the host can sample them (hostload.py).
    return [str(qemu), "-name", "threadwise-lab,debug-threads=on", "-machine", "q35", *accel,
            "-cpu", "max",
            "-smp", str(cpus), "-m", memory, "-kernel", str(vmlinuz), "-initrd", str(initrd),
            "-append", QEMU_APPEND, "-display", "none", "-serial", "stdio", "-nodefaults",
            "-no-reboot", *(["-drive", f"file={disk},if=virtio,format=raw,readonly=on"] if disk else [])]


MARKERS = ("TWAGENT: ", "TWINIT: ", "TWSTATUS: ", "TWCLOCK: ", "TWCELL-BEGIN ", "TWARCHIVE-BEGIN ")


@dataclass
class Console:
    """The guest's serial console, one line at a time: what it said and what it sent back."""

    out: Path
    progress: Callable[[str], None]
    agent_lines: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # the console minus payload lines
    release: str | None = None
    cpus: int | None = None
    status: int | None = None
    cells: list[str] = field(default_factory=list)  # cells received intact
    damaged: list[str] = field(default_factory=list)
    archive: bool = False  # the whole /out arrived intact
    clock: list[tuple[float, float]] = field(default_factory=list)  # (host arrival, guest uptime)
    # Asked after each cell lands (its name); a sentence ends the run there (the host has decided:
    # refine's early stop), None goes on.
    on_cell: Callable[[str], str | None] | None = None
    stop_reason: str | None = None
    _payload: list[str] | None = None
    _header: list[str] = field(default_factory=list)

    def feed(self, raw: str, arrived: float | None = None) -> None:
        """One console line, `arrived` the host's monotonic time when it came in."""
        line = raw.rstrip("\r\n").replace("\r", "")
        if self._payload is not None:
            if "-END" in line and line.lstrip().startswith(("TWCELL-END", "TWARCHIVE-END")):
                self._finish()
            else:
                self._payload.append(line.strip())
            return
        self.log.append(line)
        marker = next(((m, line.find(m)) for m in MARKERS if m in line), None)
        if marker is None:
            return
        name, at = marker
        text = line[at + len(name):]
        if name == "TWAGENT: ":
            self.agent_lines.append(text)
            self.progress(text)
        elif name == "TWINIT: ":
            for word in text.split():
                key, _, value = word.partition("=")
                if key == "release":
                    self.release = value
                elif key == "cpus" and value.isdigit():
                    self.cpus = int(value)
            self.progress(f"guest: {text}")
        elif name == "TWCLOCK: ":
            with contextlib.suppress(ValueError, IndexError):
                self.clock.append((time.monotonic() if arrived is None else arrived,
                                   float(text.split()[0])))
        elif name == "TWSTATUS: ":
            self.status = int(text.strip()) if text.strip().lstrip("-").isdigit() else 255
        else:
            self._header = [name.strip(), *text.split()]
            self._payload = []

    def _finish(self) -> None:
        lines, header = self._payload or [], self._header
        self._payload = None
        self.log.append(f"[{len(lines)} base64 lines of {' '.join(header)}]")
        what = f"cell {header[1]}" if header[0] == "TWCELL-BEGIN" else "the results archive"
        digest, size = header[-2], header[-1]
        try:
            data = base64.b64decode("".join(lines), validate=True)
        except ValueError:
            data = b""
        if hashlib.md5(data).hexdigest() != digest or str(len(data)) != size:
            self.damaged.append(what)
            self.progress(f"guest: {what} arrived damaged on the console (kept out)")
            return
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            archive.extractall(self.out, filter="data")
        if header[0] == "TWCELL-BEGIN":
            self.cells.append(header[1])
            if self.on_cell is not None and self.stop_reason is None:
                self.stop_reason = self.on_cell(header[1])
        else:
            self.archive = True

    def where_stopped(self) -> str:
        last = self.agent_lines[-1] if self.agent_lines else "(the agent never wrote a line)"
        got = f"{len(self.cells)} cells came back" + (f" ({', '.join(self.cells)})" if self.cells else "")
        return f"last agent line: {last!r}; {got}"


def _reader(stream: Iterable[bytes], lines: queue.Queue[tuple[float, str] | None]) -> None:
    for raw in stream:
        lines.put((time.monotonic(), raw.decode(errors="replace")))
    lines.put(None)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End the qemu we started, by its PID: TERM, then KILL."""
    for send in (process.terminate, process.kill):
        if process.poll() is not None:
            return
        send()
        try:
            process.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def _boot(argv: list[str], console: Console, watchdog: Watchdog,
          host_priority: bool = True) -> tuple[int | None, str, tuple[int | None, bool]]:
    """One qemu run fed into `console`: (what host priority was applied, (qemu's exit status,
    whether the watchdog stopped it)).

    qemu runs in a session (so an autogroup) of its own, which claims the host while it runs
    (hostpriority.py). The vCPU threads' host run and wait times are sampled meanwhile
    (hostload.py) and written, with the guest's clock lines, into the run directory."""
    process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, start_new_session=True)
    assert process.stdout is not None
    lines: queue.Queue[tuple[float, str] | None] = queue.Queue()
    thread = threading.Thread(target=_reader, args=(process.stdout, lines), daemon=True)
    thread.start()
    sampler = hostload.VcpuSampler(process.pid)
    try:
        with HostClaim(process.pid, enabled=host_priority) as claim, sampler:
            console.progress(f"host priority: {claim.applied}")
            return claim.applied, _follow(process, lines, console, watchdog)
    finally:
        if icount_shift() is None:  # an instruction-counted guest clock does not follow the host's
            hostload.write_series(console.out, sampler.samples, console.clock)
        thread.join(timeout=5)


def _follow(process: subprocess.Popen[bytes], lines: queue.Queue[tuple[float, str] | None],
            console: Console, watchdog: Watchdog) -> tuple[int | None, bool]:
    try:
        while True:
            remaining = watchdog.remaining(time.monotonic())
            if remaining <= 0:
                _stop(process)
                return process.poll(), True
            try:
                line = lines.get(timeout=min(remaining, 1.0))
            except queue.Empty:
                continue
            if line is None:
                return process.wait(), False
            said = len(console.agent_lines)
            console.feed(line[1], line[0])
            if len(console.agent_lines) > said:
                watchdog.heard(line[0])
            if console.stop_reason is not None:
                console.progress(f"guest: stopped by the host: {console.stop_reason}")
                _stop(process)
                return process.poll(), False
    except BaseException:
        _stop(process)
        raise


def run_initramfs(out: Path, *, cpus: int, memory: str = "2G", timeout_s: float,
                  progress: Callable[[str], None], host_priority: bool = True,
                  on_cell: Callable[[str], str | None] | None = None,
                  stall_s: float | None = None) -> Execution:
    """Boot the lab kernel with `out` packed into an initramfs; the raw results land in `out`.

    `stall_s`: stop the guest when its agent says nothing for that long, and let it run while it
    talks, up to `timeout_s` in all (watchdog.py); None: `timeout_s` is a plain deadline.

    `on_cell(name)` is asked after each cell comes back; a sentence stops the guest there (the
    cells so far are kept, agent.log is rebuilt from the console) and becomes the Execution's
    `stopped_by_host`."""
    kernel = find_lab_kernel()
    qemu = find_qemu()
    # one lab at a time where their vCPUs outnumber the host's cores (turns.py); the watchdog and
    # the wall time count from the turn
    with take_turn(cpus, progress):
        return _run_initramfs(out, kernel, qemu, cpus=cpus, memory=memory, timeout_s=timeout_s,
                              progress=progress, host_priority=host_priority, on_cell=on_cell,
                              stall_s=stall_s)


def _run_initramfs(out: Path, kernel: LabKernel, qemu: Path, *, cpus: int, memory: str,
                   timeout_s: float, progress: Callable[[str], None], host_priority: bool,
                   on_cell: Callable[[str], str | None] | None, stall_s: float | None) -> Execution:
    started = time.monotonic()
    watchdog = fixed(started, timeout_s) if stall_s is None else Watchdog(started, stall_s, timeout_s)
    with tempfile.TemporaryDirectory(prefix="threadwise-initramfs-") as scratch:
        packed = pack(out, dest=Path(scratch), log=progress)
        carried = (f" + runtime disk {packed.disk.stat().st_size / 1e6:.0f} MB" if packed.disk else "")
        progress(f"guest: initramfs {packed.initrd.stat().st_size / 1e6:.1f} MB{carried}; booting "
                 f"{kernel.release} with {cpus} vCPUs (TCG)")
        argv = qemu_argv(qemu, kernel.vmlinuz, packed.initrd, cpus=cpus, memory=memory, disk=packed.disk)
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            console = Console(out, progress, on_cell=on_cell)
            priority, (returncode, timed_out) = _boot(argv, console, watchdog, host_priority)
            (out / "console.log").write_text("$ " + shlex.join(argv) + "\n" + "\n".join(console.log) + "\n")
            text = "\n".join(console.log)
            why = emulation_failure(text, TRANSIENT)
            if not console.agent_lines and not timed_out and attempt < BOOT_ATTEMPTS and why is not None:
                print(f"initramfs: boot {attempt} failed in the emulator ({why!r}); retrying",
                      file=sys.stderr)
                (out / f"console-attempt{attempt}.log").write_text(text)
                continue
            break
    wall = time.monotonic() - started
    if console.stop_reason is not None:
        if console.agent_lines:
            (out / "agent.log").write_text("\n".join(console.agent_lines) + "\n")
        return Execution(console.release, console.cpus or cpus, True, wall, 0, priority,
                         stopped_by_host=console.stop_reason)
    if not console.archive:
        # Keep what the console showed: the cells that came back are already in `out`, and the
        # agent's log is rebuilt from the streamed lines so ingest can tell where the run stopped.
        if console.agent_lines:
            (out / "agent.log").write_text("\n".join(console.agent_lines) + "\n")
        tail = "\n  ".join(line for line in console.log[-15:])
        cause = (watchdog.why(time.monotonic()) if timed_out
                 else f"ended (qemu exited {returncode}) before sending the results archive")
        damaged = f"; damaged on the console: {', '.join(console.damaged)}" if console.damaged else ""
        # named here because the oops is rarely among the last lines (the panic's trace follows
        # it), and train runs a step once more when its guest died of TCG's patching race
        emulator = f"; the console shows {why!r}, an emulator failure (docs/lab.md)" if why else ""
        raise LabError(f"the initramfs guest {cause}; {console.where_stopped()}{damaged}{emulator}; "
                       f"last console lines:\n  {tail}",
                       hint=f"full console log: {out / 'console.log'}"
                            + ("; raise the timeout (TCG is slow)" if timed_out else ""))
    status = console.status if console.status is not None else 255
    return Execution(console.release, console.cpus or cpus, True, wall, status, priority)
