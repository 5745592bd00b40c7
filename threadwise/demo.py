"""`threadwise demo`: the README's main job, training a profile for the bundled workload.

`threadwise train` on rolesim (threads with known roles) in the sched_ext lab
with 10-s windows (docs/lab.md "The window decides the floors"): observe it,
analyze the capture, synthesize a profile, measure it against the kernel's
default scheduler in a background-load ladder (with the default scheduler
against itself interleaved: the noise each verdict
takes), and write the profile with its record. The demo measures no mutation
(`--budget 0`): each one adds a ladder with two attaches per repeat, 7.5 of the 12.5
minutes its training took with one on a busy host (2026-11-27), and the first
impression must come in minutes; `--budget 1` shows the search. Then the trained profile is
validated, compiled for the lab's shape (checked by the real scx_layered) and
linted. With `--budget 0` no cell is traced (`_tracing`): the trace cells' blocker rows
guide the search, and with no search they would only add the report's "Who blocked whom", for
two cells of about 15 s each (2026-11-29, a fresh `make demo` of 9 min 5 s); `--budget 1`, or
THREADWISE_LAB_TRACE set by the user, traces as `train` does. Each step is run as the same
`threadwise` command a user would type
(in this process), and printed, so the demo doubles as a walkthrough; it ends with the report's
table. Lint findings are results, not failures.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from threadwise.errors import FindingsReported, KeepDefault, ThreadwiseError, UsageError
from threadwise.refine.cli_options import Budget, Levels, Repeats

# Steps whose findings are results for this machine: only the findings code
# (errors.py) goes on; any other non-zero status, 1 included, is a failure.
_FINDINGS_OK = {"lint": {FindingsReported.exit_code}}
# train's "keep the default scheduler" (no measured profile beat it) is the demo's result too: the
# rejected candidate is then validated, compiled and linted from the record instead.
_KEEP_DEFAULT = KeepDefault.exit_code
NAME = "rolesim"
# Where the demo's capture stays: train observes into its work directory build/train/NAME
# (refine/train.py). notebooks/explore_capture.ipynb reads it by default.
CAPTURE = Path("build") / "train" / NAME / "capture.duckdb"
OUT = Path("build/demo")   # the demo's outputs by default (notebooks/review_profile.ipynb reads there)
# The shell's runner of one command line (threadwise.cli.run_command): handed in by `register`, as
# the shell imports this module to register the demo (this module importing the shell was a cycle).
Runner = Callable[[list[str]], int]


def _run(step: list[str], run: Runner, *, results: frozenset[int] = frozenset()) -> int:
    """One step as the command a user would type, run by `run` (the shell's command line, in this
    process: its errors printed as that command prints them); its status (0, or one of `results`)."""
    shown = shlex.join(["threadwise", *step])
    typer.echo(f"\n$ {shown}", err=False)
    sys.stdout.flush()
    status = run(step)
    if status in _FINDINGS_OK.get(step[0], set()):
        typer.echo(f"(the demo goes on: {step[0]}'s findings above are results for this machine)")
    elif status != 0 and status not in results:
        raise ThreadwiseError(f"demo step failed with status {status}: {shown}")
    return status


@contextmanager
def _tracing(budget: int) -> Iterator[str | None]:
    """THREADWISE_LAB_TRACE=off while train runs, when it measures no mutation and the user set no
    policy (the module's note); yields the line that says so, or None."""
    # deferred: blockers.py loads duckdb and the capture builder, which `threadwise --help` does without
    from threadwise.refine.measure.blockers import TRACE_ENV

    if budget > 0 or os.environ.get(TRACE_ENV, "").strip():
        yield None
        return
    os.environ[TRACE_ENV] = "off"
    try:
        yield (f"(the demo traces no cell: with --budget 0 no search reads the trace; {TRACE_ENV}=top "
               "traces two cells for the report's \"Who blocked whom\")")
    finally:
        os.environ.pop(TRACE_ENV, None)


def _demo_command(run: Runner) -> Callable[..., None]:
    """The `demo` command, running each step with `run`."""

    def demo_command(
        out: Annotated[Path, typer.Option(help="Directory for the demo's outputs.")] = OUT,
        window: Annotated[float, typer.Option(help="Seconds per ladder window.", min=0.1)] = 10.0,
        repeats: Repeats = 3,
        levels: Levels = "0,2",
        budget: Budget = 0,   # 0: the synthesized profile against the default only
    ) -> None:
        """Train a profile for the bundled workload in the lab, then validate, compile and lint it."""
        if out.exists() and not out.is_dir():
            raise UsageError(f"--out {out}: not a directory", hint="give a directory for the demo's outputs")
        out.mkdir(parents=True, exist_ok=True)
        with _tracing(budget) as untraced:
            if untraced is not None:
                typer.echo(untraced)
            # no screen and no null arm: each adds minutes the first impression cannot spend
            # (docs/demo.md); `threadwise train` does both by default
            profile, kept = _train(run, out, ["--levels", levels, "--repeats", str(repeats),
                                              "--window", f"{window:g}", "--budget", str(budget),
                                              "--screen", "0", "--no-null-arm"])
        _check(run, profile, out / "rolesim.layered.json")
        _closing(profile, kept, out, levels)

    return demo_command


def _train(run: Runner, out: Path, settings: list[str]) -> tuple[Path, bool]:
    """train on the bundled workload in the lab: the profile to check, and whether it is one (False:
    keep the default scheduler, and the path is the record's rejected candidate)."""
    # deferred: the bundled workloads' builder, which `threadwise --help` (importing this module) does without
    from threadwise.refine.measure.bundled import build
    from threadwise.refine.outcome import candidate_path

    build("rolesim")
    build("spin")
    profiles, artifacts = out / "profiles", out / "artifacts"
    trained = _run(["train", "--workload", "rolesim", "--name", NAME, "--lab", "--cpus", "2", *settings,
                    "--profiles", str(profiles), "--artifacts", str(artifacts), "--force"], run,
                   results=frozenset({_KEEP_DEFAULT}))
    if trained != _KEEP_DEFAULT:
        return profiles / f"{NAME}.toml", True
    profile = candidate_path(artifacts / NAME, NAME)
    typer.echo(f"(the demo goes on: this run's answer is keep the default scheduler; the rejected "
               f"candidate {profile} is checked below, for review)")
    return profile, False


def _check(run: Runner, profile: Path, config: Path) -> None:
    """validate, compile for the lab guest's shape (checked by scx_layered), lint there."""
    shape = "cores=2,threads-per-core=1"  # the lab guest's shape (2 vCPUs)
    for step in (["validate", str(profile)],
                 ["compile", str(profile), "--shape", shape, "--check", "-o", str(config), "--force"],
                 ["lint", str(profile), "--shape", shape]):
        _run(step, run)


def _closing(profile: Path, kept: bool, out: Path, levels: str) -> None:
    """What the demo made, and what to do next: each suggestion a command that works on what this
    run produced (tests/test_demo.py)."""
    # deferred: the lab's vng lookup, which `threadwise --help` (importing this module) does without
    from threadwise.refine.cli import lab_apply_line

    record = out / "artifacts" / NAME
    what = "profile" if kept else "keep the default scheduler; rejected candidate"
    typer.echo(f"\ndemo done: {what} {profile}, record {record}/REPORT.md, "
               f"scx_layered config {out / 'rolesim.layered.json'}, capture {CAPTURE}")
    if kept:
        trial = f"apply the profile in the lab: {lab_apply_line(profile)}"
    else:   # `apply` refuses a rejected candidate; measuring it again is what can be done with it
        trial = ("measure the rejected candidate again: threadwise ladder rolesim "
                 f"--arm {profile} --lab --levels {levels}")
    typer.echo(f"next: read {record}/REPORT.md; `make notebook` opens notebooks that read "
               f"this capture (explore_capture) and profile (review_profile); {trial}; "
               "or train your own workload: threadwise train --workload FILE --name NAME --lab "
               "(docs/workload.md)")


def register(app: typer.Typer, *, run: Runner) -> None:
    """The `demo` command; `run` (the shell's run_command, handed in by the shell, which imports this
    module) runs each step as the command line a user would type."""
    app.command("demo")(_demo_command(run))
