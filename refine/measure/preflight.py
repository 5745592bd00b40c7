"""Before anything runs: will the workload's commands run where `train` and `ladder` run them?

Problem: a workload file can be valid TOML and schema and still fail minutes
into a training: a program that is not installed, a relative path (the ladder
runs commands in its own run directory), an interpreter the self-contained lab
guest cannot carry, a binary under /tmp (the guest mounts a fresh tmpfs there).
Found that late, the cause is buried in a raw file of a half-finished run.

Approach: `preflight` checks each command of the workload (service, readiness
command, load command) on this host first: its program exists and is
executable, on PATH or by absolute path; no relative program or file argument.
Then, for the initramfs guest, it renders the commands exactly as the ladder's
plan.sh does (`ladder.plan_script`) and runs them through the packer the guest
image is built with (`carry.carry_command`), without building an image, so a
refusal here is the refusal packing would give (a JVM's or Python's trees are
named, not copied: the runtime disk is built only when a ladder packs).
Every problem is a Diagnostic
with the workload file, the line of the command and what to do, raised
together as one WorkloadError. `Checked` keeps what a dry run prints: the
plan.sh lines, the programs the guest would carry and the runtime disk's trees.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from threadwise.diagnostics import Diagnostic
from threadwise.errors import InitramfsError, MissingTool, WorkloadError
from threadwise.refine.measure import ladder
from threadwise.refine.measure.workload import Workload, render_argv
from threadwise.runtime.lab import carry
from threadwise.runtime.lab.runtimes import outermost
from threadwise.sourcemap import SourceMap

PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_]*\}")
FUNCTION_OF = {("service", "command"): "service_cmd", ("service", "ready", "command"): "ready_cmd",
               ("service", "prepare"): "prepare_cmd", ("load", "command"): "load_cmd"}
RUN_DIR_NOTE = "the ladder runs every command in its own run directory"
Report = Callable[[str, tuple[str, ...], str, str], None]   # (rule, TOML path, message, hint)


@dataclass(frozen=True)
class Command:
    """One command of the workload file, named by its key."""

    path: tuple[str, ...]   # ("service", "command"), ...
    argv: tuple[str, ...]

    @property
    def key(self) -> str:
        return ".".join(self.path)


@dataclass
class Checked:
    """What the checks saw: the plan.sh lines of the workload's commands, and what the guest carries."""

    guest: str | None                                      # None: on this host, no lab
    functions: dict[str, str] = field(default_factory=dict)   # plan.sh function -> its line
    carried: list[str] = field(default_factory=list)       # host programs the guest image holds
    extra_path: list[str] = field(default_factory=list)    # directories the guest adds to PATH
    trees: list[str] = field(default_factory=list)         # on the runtime disk (runtimes.py), with why


def commands(workload: Workload) -> list[Command]:
    found = []
    if workload.service is not None:
        found.append(Command(("service", "command"), tuple(workload.service.command)))
        if workload.service.ready.command is not None:
            found.append(Command(("service", "ready", "command"), tuple(workload.service.ready.command)))
        if workload.service.prepare is not None:
            found.append(Command(("service", "prepare"), tuple(workload.service.prepare)))
    if workload.load.source == "command" and workload.load.command is not None:
        found.append(Command(("load", "command"), tuple(workload.load.command)))
    return found


def _absolute_hint(word: str, bases: list[Path]) -> str:
    here = next((base / word for base in bases if (base / word).exists()), None)
    return f"write its absolute path: {here.resolve()}" if here else "write its absolute path"


def program_problems(command: Command, bases: list[Path]) -> list[tuple[str, str]]:
    """(message, hint) when the command's program is missing, not executable or a relative path."""
    program = command.argv[0]
    what = command.key
    out: list[tuple[str, str]] = []
    if PLACEHOLDER.search(program):
        pass   # a bundled program ({rolesim}, {mcload}, ...): built on first use
    elif "/" not in program:
        if shutil.which(program) is None:
            out.append((f"{what} runs {program!r}, which is not on PATH",
                        "install it, or write its absolute path"))
    elif not program.startswith("/"):
        out.append((f"{what} runs {program!r}, a relative path: {RUN_DIR_NOTE}, where it is not",
                    _absolute_hint(program, bases)))
    elif not Path(program).exists():
        out.append((f"{what} runs {program}, which does not exist", "install it there, or fix the path"))
    elif not Path(program).is_file() or not os.access(program, os.X_OK):
        kind = "a directory" if Path(program).is_dir() else "not executable"
        out.append((f"{what} runs {program}, which is {kind}",
                    f"chmod +x {program}" if kind != "a directory" else "name the program inside it"))
    return out


def argument_problems(command: Command, bases: list[Path]) -> list[tuple[str, str]]:
    """(message, hint) for a file argument given relative to here (commands run elsewhere)."""
    out = []
    for arg in command.argv[1:]:
        if PLACEHOLDER.search(arg) or arg.startswith(("-", "/")) \
                or not any((base / arg).is_file() for base in bases):
            continue
        out.append((f"{command.key} names {arg!r}, a file relative to this directory: {RUN_DIR_NOTE}, "
                    "where it is not", _absolute_hint(arg, bases)))
    return out


def plan_functions(workload: Workload, guest: str | None) -> dict[str, str]:
    """The workload's commands as plan.sh lines for `guest` (the ladder's own rendering), by function."""
    plan = ladder.make_plan(workload, [ladder.Arm(ladder.BASELINE)], levels=[0], repeats=1, shape="host")
    initramfs = guest == "initramfs"
    script = ladder.plan_script(plan, attach_mode="direct" if initramfs else "runtime",
                                spin=Path("/bin/true"), scx=None, tcp_probe="nc" if initramfs else "python",
                                tracer=None)
    return {name: line for line in script.splitlines() for name in carry.PLAN_FUNCTIONS
            if line.startswith(f"{name}() ")}


def preflight(workload: Workload, text: str, file: str, *, guest: str | None) -> Checked:
    """Check that every command of `workload` runs where train runs it: on this host, and in the lab
    `guest` ("initramfs", "vng"; None: no lab). Raises WorkloadError with every problem found."""
    source = SourceMap(text)
    bases = list(dict.fromkeys([Path.cwd(), Path(file).resolve().parent]))
    problems: list[Diagnostic] = []

    def problem(rule: str, path: tuple[str, ...], message: str, hint: str) -> None:
        problems.append(Diagnostic(rule, message, hint=hint, path=path, file=file,
                                   line=source.line_of(path) or 1))

    broken: set[tuple[str, ...]] = set()
    for command in commands(workload):
        for message, hint in program_problems(command, bases):
            problem("program", command.path, message, hint)
            broken.add(command.path)   # nothing to carry: the guest's packer would only repeat it
        for message, hint in argument_problems(command, bases):
            problem("program", command.path, message, hint)
    checked = Checked(guest)
    checked.functions = plan_functions(workload, guest)
    if guest == "initramfs":
        _guest_problems(workload, checked, broken, problem)
    if problems:
        raise WorkloadError(sorted(problems, key=lambda d: d.line or 0))
    return checked


def _guest_problems(workload: Workload, checked: Checked, broken: set[tuple[str, ...]],
                    problem: Report) -> None:
    """The initramfs guest's packer on each command, as `pack` runs it."""
    try:
        applets = carry.busybox_applets(carry.find_busybox())
    except MissingTool as missing:
        problem("guest", (), f"the initramfs guest cannot be built on this host: {missing.message}",
                missing.hint or "")
        return
    packer = carry.Packer(carry.Image(), applets)
    words = carry.plan_commands("\n".join(checked.functions.values()))
    by_function = {FUNCTION_OF[c.path]: c for c in commands(workload)}
    for name in carry.PLAN_FUNCTIONS:
        command = by_function.get(name)
        if name not in words or (command is not None and command.path in broken):
            continue
        # a ready_cmd threadwise writes itself (tcp_port, log_line) runs busybox applets
        path, why = ((command.path, command.key) if command
                     else (("service", "ready"), "service.ready's probe"))
        try:
            carry.carry_command(packer, words[name], why=why)
        except InitramfsError as refused:
            problem("guest", path, refused.message, refused.hint or "")
    service = workload.service
    if service is not None and service.ready.tcp_port is not None and "nc" not in applets:
        problem("guest", ("service", "ready", "tcp_port"),
                "this host's busybox has no nc applet, which the initramfs guest's TCP readiness probe runs",
                'install busybox-static (scripts/setup-system.sh), or use ready = { log_line = "..." }')
    checked.carried = list(packer.packed)
    checked.extra_path = list(packer.extra_path)
    try:
        checked.trees = [f"{tree.path} ({tree.why})" for tree in outermost(packer.trees)]
    except InitramfsError as refused:
        problem("guest", (), refused.message, refused.hint or "")


def dry_run_lines(workload: Workload, checked: Checked, *, observe_s: float = 8.0) -> list[str]:
    """What `train` would run, in words (nothing is started)."""
    where = {"initramfs": "the lab VM's self-contained guest (initramfs: kernel + image, in RAM)",
             "vng": "the lab VM on this machine's root filesystem (vng, read-only)",
             None: "this host (it has sched_ext)"}[checked.guest]

    window = workload.objective.window_s
    load = shlex.join(render_argv(list(workload.load.command or []), window_s=window))
    lines = ["dry run: nothing was started. train would run:"]
    if workload.service is None:   # train observes the load command itself, for the whole time
        whole = shlex.join(render_argv(list(workload.load.command or []), window_s=max(observe_s, 1.0)))
        lines.append(f"  1. observe, on this host, for {observe_s:g} s: `threadwise observe -- {whole}` "
                     "(the load is the workload)")
    else:
        service = shlex.join(render_argv(list(workload.service.command), window_s=window))
        with_load = "with its own load" if workload.load.source == "service" else f"and `{load}` in a loop"
        if workload.service.prepare is not None:
            prepare = shlex.join(render_argv(list(workload.service.prepare), window_s=window))
            with_load = f"prepared once with `{prepare}`, {with_load}"
        lines.append(f"  1. observe, on this host, for {observe_s:g} s: the service `{service}` {with_load}")
    lines.append("  2. analyze + synthesize the capture, sized for the shape measured on")
    lines.append(f"  3-4. ladders in {where}; each cell runs plan.sh's commands:")
    lines += [f"       {line}" for line in checked.functions.values()]
    if checked.guest == "initramfs":
        lines.append("  carried into the guest at their host paths, with their shared libraries: "
                     + (", ".join(checked.carried) or "busybox applets only"))
        if checked.trees:
            lines.append("  on the guest's read-only runtime disk (ext4, built once per content hash): "
                         + "; ".join(checked.trees))
        lines.append("  and threadwise's own: busybox, scx_layered, bpftool, the spinner, the agent"
                     + (f"; guest PATH adds {':'.join(checked.extra_path)}" if checked.extra_path else ""))
    elif checked.guest == "vng":
        lines.append("  nothing is carried: the guest sees this machine's files read-only")
    return lines
