"""Keep scx_layered's task-hint map true: every task of the workload hinted by its process title.

Problem: a profile may select a role by process title (`title = ["postgres: checkpointer"]`):
PostgreSQL's processes share their comm and their user, and only the title each one writes over
its argv (/proc/PID/cmdline) tells a checkpointer from a backend. scx_layered cannot read titles.
compile turns each title group into a layer matched by `HintEquals(N)` alone, which takes a task
whose entry in scx_layered's task-hint map (`--task-hint-map PATH`: BPF task storage, keyed by a
pidfd, value `struct task_hint { u64 hint; u64 __reserved[3]; }`) equals N. Somebody must write
those entries: for the processes there at the attach, for each one that starts or retitles itself
later (PostgreSQL forks a backend per connection), and for every thread (task storage belongs to
one task and is not inherited at fork).

Approach: while the profile is attached, the supervisor polls (`TitleHints.poll`, every POLL_S)
the workload's processes (comm prefix: the profile's `process`), reads each one's title and takes
the hint of the first title pattern that selects it (analyze's `title_selects`, the rule lint and
diff use). Every task of a process whose hint changed, and every task not written before, is
written through its pidfd (pidfd_open(TID, PIDFD_THREAD), Linux 6.9+) with BPF_MAP_UPDATE_ELEM on
the pinned map (BPF_OBJ_GET). scx_layered reads the hint at the task's next wake-up or slice end
(`maybe_refresh_task_layer_from_hint`). A process whose title no longer selects any pattern after
it had a hint gets the hinted default (1024, layer `untitled`: deleting a hint moves nothing);
one that never had a title hint gets none, and its comm layers keep it. A task that ends between
the read and the write is skipped. Any other failure is a HintError that names the task; the
supervisor logs it and goes on. The poll reads /proc/PID/cmdline as observe's TitleWatch does
(35-46 us a read on this 2-core host, docs/capture.md "Process titles"); the time from a new
process to its hinted layer, measured in the lab, is in docs/profile-schema.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.analyze.titles import title_selects
from threadwise.errors import HintError, UsageError
from threadwise.observe.titles import read_title
from threadwise.procs import proc_start_time
from threadwise.runtime import membership

if TYPE_CHECKING:
    from threadwise.synthesize.api import LayerConfig, Profile

POLL_S = 0.25
BPFFS = Path("/sys/fs/bpf")
HINT_DEFAULT = 1024    # synthesize.compile.HINT_DEFAULT_VALUE: the largest hint scx_layered reads

# bpf(2): the command numbers of include/uapi/linux/bpf.h, the syscall's number per architecture
_BPF_MAP_LOOKUP_ELEM, _BPF_MAP_UPDATE_ELEM, _BPF_OBJ_GET = 1, 2, 7
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
PIDFD_THREAD = os.O_EXCL   # include/uapi/linux/pidfd.h: a pidfd of a thread, not only a leader


class _ObjGet(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32),
                ("file_flags", ctypes.c_uint32), ("path_fd", ctypes.c_int32)]


class _MapElem(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("key", ctypes.c_uint64),
                ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class TaskHint(ctypes.Structure):
    """scx_layered 1.1.4's `struct task_hint` (src/bpf/main.bpf.c)."""

    _fields_ = [("hint", ctypes.c_uint64), ("reserved", ctypes.c_uint64 * 3)]


_libc = ctypes.CDLL(None, use_errno=True)


def _bpf(command: int, attr: ctypes.Structure) -> int:
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(f"bpf(2) on {platform.machine()}: not known to threadwise")
    done = _libc.syscall(ctypes.c_long(number), ctypes.c_int(command), ctypes.byref(attr),
                         ctypes.c_uint(ctypes.sizeof(attr)))
    if done < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return done


class HintMap:
    """A pinned BPF map of `struct task_hint` values, opened with BPF_OBJ_GET."""

    def __init__(self, path: Path) -> None:
        name = ctypes.create_string_buffer(os.fsencode(path))
        self.path = path
        self.fd = _bpf(_BPF_OBJ_GET, _ObjGet(pathname=ctypes.addressof(name)))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> HintMap:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def update_key(self, key: int, hint: int) -> None:
        """Set the entry of `key` (for task storage: a pidfd) to `hint`."""
        raw_key, value = ctypes.c_int(key), TaskHint(hint=hint)
        _bpf(_BPF_MAP_UPDATE_ELEM, _MapElem(map_fd=self.fd, key=ctypes.addressof(raw_key),
                                            value=ctypes.addressof(value)))

    def lookup_key(self, key: int) -> int | None:
        """The hint stored for `key`, None when it has none."""
        raw_key, value = ctypes.c_int(key), TaskHint()
        try:
            _bpf(_BPF_MAP_LOOKUP_ELEM, _MapElem(map_fd=self.fd, key=ctypes.addressof(raw_key),
                                                value=ctypes.addressof(value)))
        except FileNotFoundError:
            return None
        return int(value.hint)

    def write(self, tid: int, hint: int) -> None:
        """Hint task `tid`. ProcessLookupError: it has ended; HintError: anything else."""
        pidfd = _pidfd(tid)
        try:
            self.update_key(pidfd, hint)
        except OSError as error:
            raise HintError(f"task {tid}: writing hint {hint} to {self.path}: {error.strerror or error}",
                            hint="is scx_layered still attached with --task-hint-map?") from error
        finally:
            os.close(pidfd)

    def read(self, tid: int) -> int | None:
        """Task `tid`'s hint, None when it has none (ProcessLookupError: it has ended)."""
        pidfd = _pidfd(tid)
        try:
            return self.lookup_key(pidfd)
        finally:
            os.close(pidfd)


def _pidfd(tid: int) -> int:
    try:
        return os.pidfd_open(tid, PIDFD_THREAD)
    except ProcessLookupError:
        raise
    except OSError as error:
        raise HintError(f"task {tid}: pidfd_open: {error.strerror}",
                        hint="hints need Linux 6.9 or later (PIDFD_THREAD) and root") from error


@dataclass(frozen=True)
class HintPlan:
    """What the runtime hints, from a compiled profile: title pattern -> hint (profile order), the
    workload's process comm prefix, and the layer each hint selects. Kept as the run's hints.json."""

    patterns: dict[str, int]
    process: str
    layers: dict[int, str]            # hint -> layer name
    default: int = HINT_DEFAULT

    def hint_for(self, title: str | None) -> int | None:
        """The hint of the first pattern that selects `title`; None when none does."""
        return next((hint for pattern, hint in self.patterns.items() if title_selects(pattern, title)), None)

    def save(self, path: Path) -> None:
        data = asdict(self)
        data["layers"] = {str(k): v for k, v in self.layers.items()}
        path.write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> HintPlan:
        data = json.loads(path.read_text())
        return cls(dict(data["patterns"]), data["process"], {int(k): v for k, v in data["layers"].items()},
                   int(data["default"]))


def plan_from(profile: Profile, config: LayerConfig, source: str) -> HintPlan | None:
    """What the runtime hints for `profile` compiled to `config` (None: no title group). `source`
    names the profile in the error for one without `[workload] process`."""
    # deferred: pydantic
    from threadwise.synthesize.api import title_hints

    patterns = title_hints(profile)
    if not patterns:
        return None
    if profile.workload.process is None:
        raise UsageError(f"{source}: title groups need the workload's process comm: the runtime finds "
                         "the processes to hint by it",
                         hint='set [workload] process = "COMM" (docs/profile-schema.md)')
    return HintPlan(patterns, profile.workload.process, hinted_layers(config))


def hinted_layers(config: LayerConfig) -> dict[int, str]:
    """hint -> the name of the layer `HintEquals(hint)` selects, in `config`."""
    return {match.value: spec.name for spec in config for block in spec.matches
            for match in block if match.kind == "HintEquals"}


@dataclass(frozen=True)
class Placement:
    """One process hinted at a poll: its title, the hint and layer, its tasks written, and why."""

    pid: int
    title: str | None
    hint: int
    layer: str
    tids: tuple[int, ...]
    why: str

    def describe(self) -> str:
        return (f"hinted pid {self.pid} ({self.title!r}) -> {self.layer} (hint {self.hint}), "
                f"{len(self.tids)} task(s): {self.why}")


@dataclass
class TitleHints:
    """The workload's processes as last hinted; `poll` writes what changed since."""

    plan: HintPlan
    write: Callable[[int, int], None]            # (tid, hint): HintMap.write, or a test's recorder
    hinted: dict[int, int] = field(default_factory=dict)        # pid -> hint written
    written: dict[int, set[int]] = field(default_factory=dict)  # pid -> tids written
    started: dict[int, int | None] = field(default_factory=dict)  # pid -> its start time (identity)

    def poll(self) -> tuple[list[Placement], list[HintError]]:
        """Hint every task whose process is new, retitled into another hint, or has new threads."""
        placed: list[Placement] = []
        failed: list[HintError] = []
        alive = membership.pids_with_comm_prefix([self.plan.process])
        for pid in alive:
            if pid in self.hinted and proc_start_time(pid) != self.started.get(pid):
                self._forget(pid)   # a new process under a reused pid: nothing of it is written
            title = read_title(pid)
            hint = self.plan.hint_for(title)
            before = self.hinted.get(pid)
            if hint is None and before is not None:
                hint = self.plan.default   # move it back: deleting a hint would not
            if hint is None:
                continue
            tids = {tid for tid, _comm in membership.process_threads(pid)}
            todo = tids if hint != before else tids - self.written.get(pid, set())
            if not todo:
                continue
            done = self._write(pid, sorted(todo), hint, failed)
            if not done:
                continue
            self.hinted[pid] = hint
            self.written[pid] = (self.written.get(pid, set()) if hint == before else set()) | set(done)
            self.started.setdefault(pid, proc_start_time(pid))
            why = ("first seen" if before is None else "new threads" if hint == before
                   else f"title changed (hint {before} before)")
            placed.append(Placement(pid, title, hint, self.plan.layers.get(hint, "?"), tuple(done), why))
        for gone in set(self.hinted) - set(alive):
            self._forget(gone)
        return placed, failed

    def _forget(self, pid: int) -> None:
        self.hinted.pop(pid, None)
        self.written.pop(pid, None)
        self.started.pop(pid, None)

    def _write(self, pid: int, tids: list[int], hint: int, failed: list[HintError]) -> list[int]:
        done = []
        for tid in tids:
            try:
                self.write(tid, hint)
            except ProcessLookupError:
                continue          # ended since it was listed: nothing to place
            except HintError as error:
                failed.append(HintError(f"pid {pid} {error.message}", hint=error.hint))
                continue
            done.append(tid)
        return done


def expected_hints(plan: HintPlan, pids: list[int], hint_map: HintMap | None = None) -> dict[int, int]:
    """pid -> the hint the classifier gives it now: its title's; where its title earns none, the
    hinted default if the map shows the process was moved back there (`hint_map`, when open)."""
    found = {}
    for pid in pids:
        hint = plan.hint_for(read_title(pid))
        if hint is None and hint_map is not None:
            with contextlib.suppress(ProcessLookupError, HintError):
                hint = plan.default if hint_map.read(pid) == plan.default else None
        if hint is not None:
            found[pid] = hint
    return found


# --- the map's pin: a path of the run's own, on a mounted bpffs -------------------------------------


def own_map_path(run_id: int) -> Path:
    """Where this run's scx_layered pins its task-hint map (removed when the run ends)."""
    return BPFFS / "threadwise" / f"run-{run_id}" / "task_hint_map"


def with_map_path(scx_args: tuple[str, ...], path: Path) -> tuple[str, ...]:
    """`scx_args` with --task-hint-map's value replaced by `path` (compile writes a default)."""
    args = list(scx_args)
    for i, arg in enumerate(args[:-1]):
        if arg == "--task-hint-map":
            args[i + 1] = str(path)
    return tuple(args)


def map_path_in(scx_args: tuple[str, ...]) -> Path | None:
    """The --task-hint-map path among scx_layered flags, if any."""
    args = list(scx_args)
    return next((Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "--task-hint-map"), None)


def bpffs_mounted(mounts: str | None = None) -> bool:
    """Whether a bpf filesystem is mounted at /sys/fs/bpf (where scx_layered pins the map)."""
    text = mounts if mounts is not None else Path("/proc/mounts").read_text()
    return any(f.split()[1:3] == [str(BPFFS), "bpf"] for f in text.splitlines() if len(f.split()) >= 3)


def prepare_pin(path: Path) -> None:
    """Mount bpffs at /sys/fs/bpf when it is not (as bpftool does for a pin), make the pin's
    directory, and remove a stale pin of an earlier run of the same id."""
    if not bpffs_mounted():
        _mount_bpffs()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)


def remove_pin(path: Path) -> None:
    """Unpin the map and remove the run's directory (the map goes once scx_layered has exited)."""
    path.unlink(missing_ok=True)
    for directory in (path.parent, path.parent.parent):
        try:
            directory.rmdir()
        except OSError:
            break          # not empty (another run's pin) or gone


def _mount_bpffs() -> None:
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(b"bpf", os.fsencode(BPFFS), b"bpf", 0, None) != 0:
        errno = ctypes.get_errno()
        raise HintError(f"mounting bpffs at {BPFFS}: {os.strerror(errno)}",
                        hint=f"mount -t bpf bpf {BPFFS} (as root), then apply again")
