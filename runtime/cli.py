"""Commands of the runtime stage: apply / status / stop, `info`, and the lab.

Each command parses options and calls the library; errors are ThreadwiseError
subclasses that threadwise/cli.py turns into `error:` / `hint:` lines.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from threadwise.durations import optional_duration, parse_duration
from threadwise.errors import GuestCommandFailed, SchedulerFailure, UsageError
from threadwise.options import Cpus, HostPriority, Json, ShapeSpec, Switch
from threadwise.runtime import display, launcher
from threadwise.runtime import info as runtime_info_mod
from threadwise.runtime.config import ResolvedConfig
from threadwise.runtime.lab import kernel as kernel_mod
from threadwise.runtime.lab import vng as lab_mod
from threadwise.runtime.state import RunFiles

lab_app = typer.Typer(
    help=(
        "The sched_ext lab: a VM on a Debian kernel with sched_ext, for hosts whose "
        "kernel has none.\n\n"
        "  threadwise lab kernel                      # fetch the kernel (once, ~15 MB)\n\n"
        "  threadwise lab run -- uname -r             # boot it (TCG), run a command\n\n"
        "  threadwise lab run -- threadwise apply layered.json --duration 20"
    ),
    no_args_is_help=True,
)


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@lab_app.command("kernel")
def lab_kernel(
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Re-read the archive index for a newer kernel.")
    ] = False,
) -> None:
    """Fetch the lab kernel: the newest Debian cloud kernel with CONFIG_SCHED_CLASS_EXT=y.

    Reads trixie-backports' Packages.xz from deb.debian.org (the machine's apt
    sources are never changed), downloads linux-binary-* and linux-base-*,
    checks their SHA256 against the index, unpacks them with dpkg-deb into
    ~/.cache/threadwise/lab-kernel/<release>/ and verifies the config. A cached
    kernel is reused without network access unless --refresh is given.
    """
    kernel = kernel_mod.fetch_lab_kernel(refresh=refresh, log=lambda msg: _err(f"lab kernel: {msg}"))
    print(kernel.vmlinuz)


@lab_app.command("run", context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True})
def lab_run(
    command: Annotated[list[str], typer.Argument(help="The command to run in the guest.")],
    *,
    cpus: Cpus = 2,
    threads_per_core: Annotated[
        int, typer.Option("--threads-per-core", help="2 gives the guest SMT sibling pairs.")
    ] = 1,
    memory: Annotated[str, typer.Option("--memory", help="Guest memory (qemu -m).")] = "2G",
    timeout: Annotated[
        str, typer.Option("--timeout", help="How long before the VM is stopped: 600, 600s, 10m, counted in "
                                            "host time given to the VM (beside other work: up to 3x that).")
    ] = "10m",
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Results directory (default: a new /tmp/threadwise-lab-*)."),
    ] = None,
    keep_console: Annotated[
        bool, typer.Option("--keep-console", help="Keep console.log even on success (implies --keep).")
    ] = False,
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the results directory after a successful run "
                                          "(it is always kept on failure, and with --out).")
    ] = False,
    host_priority: HostPriority = Switch.on,
) -> None:
    """Boot the lab kernel under virtme-ng (TCG, no KVM) and run COMMAND inside.

    The guest sees the host's root filesystem read-only, runs as root, and has
    /boot/config-<release> (a guest-only overlay). The command's stdout and
    stderr are printed here as they are written, in order, after `lab:`
    progress lines (boot, guest up). Inside, write files to
    $THREADWISE_LAB_OUT (the results directory, shared with the host); it is
    removed after a successful run unless --out or --keep is given, and kept,
    with the console log, when the command fails. Put `--` before the
    command: `threadwise lab run --cpus 4 --threads-per-core 2 -- nproc`.
    The guest's exit status is printed as `lab: guest exit status N`; when it
    is not 0, `lab run` itself exits 9 (never the guest's own number, which
    could be mistaken for one of threadwise's exit codes); a VM stopped at
    --timeout exits 10. Under TCG a boot takes 20-60 s and everything runs slower.
    """
    result = lab_mod.run_in_lab(
        command,
        cpus=cpus,
        threads_per_core=threads_per_core,
        memory=memory,
        timeout_s=parse_duration(timeout, option="--timeout"),
        out_dir=out,
        keep_console=keep_console,
        on_output=_echo_guest,
        progress=_err,
        host_priority=host_priority == "on",
    )
    removed = result.status == 0 and out is None and not (keep or keep_console)
    if removed:
        shutil.rmtree(result.out_dir, ignore_errors=True)
    where = ("results removed (--keep keeps them)" if removed else f"results in {result.out_dir}")
    _err(
        f"lab: guest exit status {result.status}; {result.release}, {result.wall_s:.1f} s wall (TCG); "
        f"{where}" + (f"; console log {result.console_log}" if result.console_log else "")
    )
    if result.status:
        raise GuestCommandFailed(result.status, result.out_dir, result.console_log)


def _refuse_keep_default(profile: Path, ignore_verdict: bool) -> None:
    """A candidate its training record rejected (refine/outcome.py) is not applied by accident."""
    # deferred: synthesize's package loads pydantic; `threadwise --help` imports this module
    from threadwise.synthesize.api import says_keep_default

    if ignore_verdict or profile.suffix != ".toml" or not profile.is_file():
        return
    if says_keep_default(profile.read_text(errors="replace")):
        raise UsageError(f"{profile}: its training record says keep the default scheduler for this service "
                         "(no measured profile beat it; KEEP-DEFAULT.md beside it says why)",
                         hint="pass --ignore-verdict to apply it anyway, e.g. to measure it yourself")


def _echo_guest(stream: str, line: str) -> None:
    """One line of the guest command's output, on our stdout or stderr, at once."""
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.write(line)
    out.flush()


def info_command(as_json: Json = False) -> None:
    """Report the bundled scx_layered (version, path), this kernel's sched_ext and the lab."""
    info = runtime_info_mod.gather_info()
    print(json.dumps(info, indent=2) if as_json else runtime_info_mod.format_info(info))


def apply(
    profile: Annotated[
        Path, typer.Argument(help="A profile (.toml) or an scx_layered layer config (.json).")
    ],
    *,
    shape: ShapeSpec = "host",
    foreground: Annotated[
        bool, typer.Option("--foreground", help="Stay attached until Ctrl-C, SIGTERM or --duration.")
    ] = False,
    duration: Annotated[
        str | None, typer.Option("--duration", help="Stop by itself after this long: 30, 30s, 2m.")
    ] = None,
    attach_timeout: Annotated[
        str, typer.Option("--attach-timeout", help="How long to wait for the attach.")
    ] = "120s",
    as_json: Json = False,
    scx_arg: Annotated[
        list[str] | None,
        typer.Option("--scx-arg", help="An scx_layered flag for a .json config, e.g. --scx-arg=--interval "
                     "--scx-arg=5 (repeatable; a profile's come from its \\[scheduler] table).")
    ] = None,
    hint_plan: Annotated[
        Path | None,
        typer.Option("--hint-plan", help="For a .json config: the title hints its HintEquals layers stand "
                     "for (a ladder's arms/ARM.hints.json); a profile makes its own."),
    ] = None,
    rematch: Annotated[
        bool,
        typer.Option("--rematch/--no-rematch",
                     help="After the attach, have scx_layered match the workload's threads again, one at "
                          "a time, so threads that renamed themselves are in their layers."),
    ] = True,
    ignore_verdict: Annotated[
        bool,
        typer.Option("--ignore-verdict", help="Apply a profile whose training record says keep the default "
                                              "scheduler."),
    ] = False,
) -> None:
    """Apply PROFILE with the bundled scx_layered; return once it is attached.

    A profile is validated, compiled for --shape and checked by scx_layered itself (a .json is
    taken as an scx_layered config as is), then launched by a supervisor that records everything
    under /run/threadwise; `threadwise status` and `threadwise stop` follow. --foreground stays
    attached (until Ctrl-C, or for --duration) and exits non-zero if the scheduler dies or the
    kernel ejects it; --duration alone attaches, holds, prints the per-layer summary and stops.
    Each target thread's layer is reported (docs/runtime.md: renamed threads, --rematch). Needs
    root and a kernel with sched_ext; elsewhere, in the lab:

      threadwise lab run -- threadwise apply P --duration 30
    """
    # deferred: shape loads pydantic; `threadwise --help` imports this module
    from threadwise.shape import parse_shape

    duration_s = optional_duration(duration, option="--duration")
    attach_timeout_s = parse_duration(attach_timeout, option="--attach-timeout")
    _refuse_keep_default(profile, ignore_verdict)
    files = RunFiles.default()
    resolved = launcher.prepare(profile, parse_shape(shape), files, tuple(scx_arg or ()), hint_plan)
    for note in resolved.notes:
        _err(f"note: {note}")
    if resolved.kind == "json" and shape != "host":
        _err("note: --shape applies to profiles; a .json layer config is used as written")
    if duration_s and not foreground:
        _timed(resolved, files, duration_s=duration_s, attach_timeout_s=attach_timeout_s, rematch=rematch,
               as_json=as_json)
    else:
        _attach(resolved, files, foreground=foreground, duration_s=duration_s,
                attach_timeout_s=attach_timeout_s, rematch=rematch, as_json=as_json)


def _attach(resolved: ResolvedConfig, files: RunFiles, *, foreground: bool, duration_s: float | None,
            attach_timeout_s: float, rematch: bool, as_json: bool) -> None:
    """apply, attached in the foreground (until Ctrl-C or --duration) or left to its supervisor."""
    if foreground:
        _err(f"applying {resolved.source} ({len(resolved.config)} layers) in the foreground")
        state = launcher.apply_foreground(resolved, files, attach_timeout_s=attach_timeout_s,
                                          duration_s=duration_s, log=lambda msg: _err(f"apply: {msg}"))
    else:
        state = launcher.apply_background(resolved, files, attach_timeout_s=attach_timeout_s)
        if rematch:
            launcher.rematch_targets(resolved.config, files)
        _err(display.membership(launcher.status(files, interval_s=0.2).membership))
    print(json.dumps(state.to_json(), indent=2) if as_json else display.applied(state, resolved))


TIMED_BACKSTOP_S = 60.0   # the supervisor stops by itself this long after --duration, should we die


def _timed(resolved: ResolvedConfig, files: RunFiles, *, duration_s: float, attach_timeout_s: float,
           rematch: bool, as_json: bool) -> None:
    """apply --duration: attach, hold for the duration, print the per-layer summary, then stop."""
    import time

    state = launcher.apply_background(resolved, files, attach_timeout_s=attach_timeout_s,
                                      duration_s=duration_s + TIMED_BACKSTOP_S)
    if rematch:
        launcher.rematch_targets(resolved.config, files)
    if not as_json:
        print(display.applied(state, resolved), flush=True)
    _err(f"apply: holding for {duration_s:g} s, then the per-layer summary and stop")
    try:
        time.sleep(duration_s)
        report = launcher.status(files, interval_s=1.0)
    finally:
        stopped = launcher.stop(files)
    if as_json:
        print(json.dumps({"status": report.to_json(), "stop": stopped.to_json()}, indent=2))
    else:
        print(display.status(report))
        print(display.stopped(stopped))
    if report.problem:
        raise SchedulerFailure(report.problem, hint=f"scx_layered output: {files.log}")


def status(
    interval: Annotated[
        str, typer.Option("--interval", help="How long utilisation is measured over: 1s, 500ms; 0: one read.")
    ] = "1s",
    as_json: Json = False,
) -> None:
    """Show the applied profile, the sched_ext state and per-layer tasks/utilisation/CPUs.

    Figures come from scx_layered's stats socket. Exits 1 when the last applied
    profile ended on its own (scx_layered died, or the kernel ejected it), with
    the exit kind and scx_layered's message.
    """
    files = RunFiles.default()
    result = launcher.status(files, interval_s=parse_duration(interval, option="--interval", minimum_s=0))
    print(json.dumps(result.to_json(), indent=2) if as_json else display.status(result))
    if result.problem:
        raise SchedulerFailure(result.problem, hint=f"scx_layered output: {files.log}")


def stop(as_json: Json = False) -> None:
    """Stop the applied profile: scx_layered unregisters and the state reads `disabled`.

    Only the supervisor started by `threadwise apply` is signalled (checked by
    pid and start time); a scheduler threadwise did not start is left alone.
    """
    result = launcher.stop(RunFiles.default())
    print(json.dumps(result.to_json(), indent=2) if as_json else display.stopped(result))


def register(app: typer.Typer) -> None:
    app.command("apply")(apply)
    app.command("status")(status)
    app.command("stop")(stop)
    app.command("info")(info_command)
    app.add_typer(lab_app, name="lab")
