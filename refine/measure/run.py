"""One ladder run end to end: arms compiled for the guest, plan, agent, ingest, judgement.

`threadwise ladder`, the refine loop and `train` all measure through
`run_ladder`, so every measurement lands in a ladder file the same way.
Where the cells run decides the shape profiles are compiled for: the lab
guest (`--cpus N`, one thread per core) or this host (when it has sched_ext),
a typed `Shape` from here on (its text only where a run is stored or shown).
A profile file becomes an arm through the gate a search's candidates pass,
synthesize's `vet_profile` (validate, compile, the scx_layered oracle, lint).
"""

from __future__ import annotations

import functools
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb

from threadwise.errors import ConfigRefused, LadderIncomplete, MissingTool, ThreadwiseError, UsageError
from threadwise.refine.measure import ingest, judge, ladder, stats, store, summary
from threadwise.refine.measure.bundled import build
from threadwise.refine.measure.ladder import BASELINE, Arm
from threadwise.refine.measure.workload import Workload
from threadwise.runtime.hints import map_path_in
from threadwise.runtime.lab.agent import Execution
from threadwise.runtime.scx import sched_ext_state
from threadwise.scx import SCX_LAYERED_VERSION, scx_layered_path
from threadwise.shape import Shape, host_shape, synthetic
from threadwise.synthesize.api import Checked, load_valid, vet_profile

# The noisy neighbour's spiky pattern: each spinner busy 50% of every 100 ms (refine/workloads/spin.c).
SPIKY_BACKGROUND = "--duty 50 --period-ms 100"
SPIKY_DUTY = 0.5


GUESTS = ("vng", "initramfs")


@dataclass(frozen=True)
class Where:
    """Where the cells run: this host, or the lab (vng on the shared root, or a self-contained initramfs)."""

    lab: bool
    cpus: int
    # initramfs by default: measured, a vng guest (root shared over virtiofs) crawls while an
    # exclusive layer holds a vCPU (2-s windows took 22-50 s, once ejected for a 41 s stall);
    # the self-contained guest keeps everything in RAM and ran the same ladder at speed.
    guest: str = "initramfs"
    # The lab's qemu claims the host's CPU while it measures (runtime/lab/hostpriority.py):
    # beside a test suite its vCPUs went 20-35% unserved without, 3-4% with (docs/lab.md).
    host_priority: bool = True

    @functools.cached_property
    def shape(self) -> Shape:
        """The machine the cells run on, which profiles are compiled for: the lab guest (`cpus`
        vCPUs, one thread per core) or this host."""
        return synthetic(self.cpus) if self.lab else host_shape()


def where(lab: bool, cpus: int, guest: str = "initramfs", *, profiles: bool = True,
          host_priority: bool = True) -> Where:
    """Check that cells can run there: the lab, or a host with sched_ext (only if `profiles`:
    a ladder of baseline arms alone, an A/A run, attaches nothing and runs on any host)."""
    if lab and guest not in GUESTS:
        raise UsageError(f"unknown --guest {guest!r}", hint="vng (this machine's root shared) or initramfs "
                         "(self-contained: kernel + initramfs, runs on any x86-64 machine with qemu)")
    if not lab:
        guest = GUESTS[1]  # unused off the lab (execute ignores it), but a valid value
    if not lab and profiles and not sched_ext_state().supported:
        raise MissingTool("this kernel has no sched_ext, so profile arms cannot attach here",
                          hint="add --lab to run the whole ladder in one lab VM boot")
    if cpus < 1:
        raise UsageError("--cpus must be at least 1")
    return Where(lab, cpus, guest, host_priority)


def priority_line(on: bool) -> str:
    """The one line a lab run prints about its claim on the host: that it is on (or off), and why."""
    if on:
        return ("host priority on: the lab's qemu runs before other work on this host, so other work "
                "cannot take the vCPUs' time mid-cell (docs/lab.md \"The lab on a busy host\"); "
                "--host-priority off shares the host instead")
    return ("host priority off: other work on this host takes the lab's vCPU time as it likes; "
            "cells it disturbs are measured and left out of the verdicts")


def arm_from_file(path: Path, shape: Shape, name: str | None = None) -> Arm:
    """A profile file as a ladder arm, through the gate a search's candidates pass (vet_profile:
    validated, compiled for `shape`, checked by scx_layered, linted), built from what was checked;
    the file's text is kept as measured (its header comments too)."""
    if path.suffix != ".toml":
        raise UsageError(f"{path}: an arm is `baseline` or a profile .toml")
    name = ladder.check_arm_name(name or path.stem)
    answer = vet_profile(load_valid(path), shape)
    if isinstance(answer, Checked):
        return Arm(name, path.read_text(), answer.config, answer.args)
    arm = f"{path} on {shape.spec}"
    if answer.stage == "lint":
        raise UsageError(f"{arm}: lint refuses it: {answer.reason}",
                         hint=f"see each finding with `threadwise lint {path} --shape {shape.spec}`; fix "
                              "the profile, or measure it where it fits (more --cpus)")
    if answer.stage == "oracle":
        raise ConfigRefused(f"{arm}: scx_layered would not apply the compiled config as written: "
                            f"{answer.reason}", hint="a bug in threadwise compile; nothing was measured")
    raise ThreadwiseError(f"{arm}: {answer.stage} refused it: {answer.reason}",
                          hint="this is a bug in threadwise compile; please report it with the profile")


def _refuse_title_hints(arms: Sequence[Arm]) -> None:
    """The initramfs guest's agent attaches scx_layered itself, without the runtime that writes
    task hints: a profile's title layers would stay empty there and it would be measured as
    another profile."""
    titled = [arm.name for arm in arms if map_path_in(arm.scx_args) is not None]
    if titled:
        raise UsageError(f"arms {', '.join(titled)} select processes by title, which needs the runtime's "
                         "task hints: the initramfs guest has no runtime",
                         hint="measure it in the vng guest: --guest vng (docs/bundled-workloads.md)")


@dataclass(frozen=True)
class LadderRun:
    run_id: int
    ingested: ingest.Ingested
    judged: judge.Judged  # its figures and every comparison stored, by (reference, candidate)
    reference: str
    out: Path
    floors: stats.Floors = stats.NO_FLOORS  # the run's own A/A floors (reports; NO_FLOORS: no A/A arm)

    @property
    def comparisons(self) -> dict[str, stats.LadderComparison]:
        """candidate arm -> its stored comparison against the reference."""
        return {cand: c for (ref, cand), c in self.judged.comparisons.items() if ref == self.reference}


def _judge_run(con: duckdb.DuckDBPyConnection, run_id: int, asked: list[tuple[str, str]],
               progress: Callable[[str], None]) -> tuple[judge.Judged, stats.Floors]:
    """Store the run's floors and judge every (reference, candidate) pair `asked`, from one read of
    its cells; say the host's share and the invalid cells."""
    measured = store.measured(con, run_id)   # read once: floors and every comparison
    floors = judge.store_floors(con, run_id, measured=measured)
    judged = judge.Judged(measured, {(ref, cand): judge.judge(con, run_id, ref, cand, measured=measured)
                                     for ref, cand in asked})
    con.execute("CHECKPOINT")
    host = summary.host_line(con, run_id)
    if host:
        progress(f"ladder: {host.replace('**', '')}")
    progress(f"ladder: {summary.invalid_summary(con, run_id)}")
    return judged, floors


def run_ladder(workload: Workload, workload_toml: str, arms: list[Arm], *, ladder_file: Path,
               place: Where, levels: list[int], repeats: int, order: str = "rotate", seed: int = 1,
               purpose: str = "ladder", command: str | None = None,
               reference: str = BASELINE, keep_raw: Path | None = None,
               timeout_s: float | None = None, background: str = "",
               stop_when: Callable[[stats.Measured], str | None] | None = None,
               also_judge: Sequence[tuple[str, str]] = (), trace: bool = True,
               fewer: Mapping[str, int] | None = None,
               progress: Callable[[str], None] = print) -> LadderRun:
    """Measure `arms` on `workload`, store the run in `ladder_file`, judge every arm vs `reference`.

    With an `AA_ARM` among the arms every comparison takes its noise from the A/A pairs of the
    same run and level (stats.py); without one, from its own pairs' residuals. `stop_when`
    (the initramfs guest only): asked with the valid cells of the first k repeats each time
    another repeat is complete (2 <= k < repeats); a sentence stops the run there (refine's early
    stop: stats.early_loss), recorded as the run's stopped_reason; the run is then not an error.
    `also_judge`: more (reference, candidate) pairs to judge and store (a search's deciding pair);
    the result's `judged` holds every comparison stored, computed once from one read of the cells.
    `trace`: plan the extra trace cells of the blocker evidence (blockers.py) where the policy asks;
    False for a run nothing reads them of (the search's screen: 2 cells per arm it would trace).
    `fewer`: arms that run only their first k repeats (a training's null arm, plan.py)."""
    plan = ladder.make_plan(workload, arms, levels=levels, repeats=repeats, order=order, seed=seed,
                            shape=place.shape.spec, workload_toml=workload_toml,
                            background_duty=SPIKY_DUTY if background == SPIKY_BACKGROUND else 1.0,
                            fewer=fewer)
    scx = scx_layered_path()
    out = keep_raw if keep_raw else Path(tempfile.mkdtemp(prefix="threadwise-ladder-"))
    out.mkdir(parents=True, exist_ok=True)
    # The initramfs guest has no Python: scx_layered is started by the agent itself and TCP
    # readiness is probed with busybox nc. vng shares this machine's root: the runtime applies.
    initramfs = place.lab and place.guest == "initramfs"
    if initramfs:
        _refuse_title_hints(arms)
    script = ladder.plan_script(plan, attach_mode="direct" if initramfs else "runtime",
                                spin=build("spin"), scx=scx, tcp_probe="nc" if initramfs else "python",
                                spin_args=background, tracer="auto" if trace else None)
    ladder.write_plan(plan, out, script)
    # The initramfs guest runs while it makes progress (runtime/lab/watchdog.py): stopped after the
    # agent's longest rightful silence, and in all at `timeout_s` or three times the estimate (a
    # host that slow measures nothing worth keeping, and a run must end). Elsewhere the estimate is
    # a plain deadline, with no watchdog to end a stuck run sooner.
    budget = timeout_s or (3 if initramfs else 1) * _timeout(plan)
    fewer_text = "".join(f", {arm} {k}" for arm, k in (fewer or {}).items())
    progress(f"ladder: {len(plan.cells)} cells ({len(arms)} arms x {len(plan.levels)} levels x "
             f"{repeats} repeats{fewer_text}, {workload.objective.window_s:g} s windows), "
             + (f"in the lab ({place.cpus} vCPUs, TCG, {place.guest} guest)" if place.lab else "on this host")
             + f"; raw results in {out}")
    if place.lab:
        progress(f"ladder: {priority_line(place.host_priority)}")
    try:
        interim = _Interim(plan, out, stop_when, place.cpus) if stop_when is not None else None
        execution = ladder.execute(out, lab=place.lab, cpus=place.cpus, timeout_s=budget,
                                   progress=lambda line: progress(f"  {line}"), guest=place.guest,
                                   host_priority=place.host_priority, on_cell=interim,
                                   stall_s=ladder.stall_bound(plan) if initramfs else None)
    except BaseException as error:  # keep what was measured: ingest, then re-raise
        execution = Execution(None, place.cpus, place.lab, 0.0, 255)
        progress(f"ladder: stopped early ({type(error).__name__}: {error}); keeping the cells that finished")
        con, _ = _store(plan, out, execution, ladder_file=ladder_file, command=command,
                        purpose=purpose, scx_version=SCX_LAYERED_VERSION)
        con.close()
        raise
    con, ingested = _store(plan, out, execution, ladder_file=ladder_file, command=command,
                           purpose=purpose, scx_version=SCX_LAYERED_VERSION)
    try:
        asked = [(reference, arm.name) for arm in arms if arm.name != reference]
        judged, floors = _judge_run(con, ingested.run_id, asked + [p for p in also_judge if p not in asked],
                                    progress)
    finally:
        con.close()
    if not ingested.completed and execution.stopped_by_host is None:
        raise LadderIncomplete(
            f"the ladder stopped early: {ingested.stopped_reason}",
            hint=f"what was measured is kept: {ladder_file} (run {ingested.run_id}); raw files in {out}")
    if keep_raw is None:
        shutil.rmtree(out, ignore_errors=True)
    return LadderRun(ingested.run_id, ingested, judged, reference, out, floors)


def _store(plan: ladder.Plan, out: Path, execution: Execution, *,
           ladder_file: Path, command: str | None, purpose: str,
           scx_version: str) -> tuple[duckdb.DuckDBPyConnection, ingest.Ingested]:
    con = store.open_ladder(ladder_file)
    ingested = ingest.ingest(con, plan, out, execution, command=command or shlex.join(sys.argv),
                             purpose=purpose, scx_version=scx_version)
    return con, ingested


class _Interim:
    """The early-stop question, asked once per completed repeat while the guest runs."""

    def __init__(self, plan: ladder.Plan, out: Path, stop_when: Callable[[stats.Measured], str | None],
                 cpus: int) -> None:
        self.plan, self.out, self.stop_when, self.cpus = plan, out, stop_when, cpus
        self.judged = 0

    def complete_repeats(self) -> int:
        """The k such that every cell of repeats 1..k is back (trace cells are not planned cells)."""
        back = {int(p.name) for p in (self.out / "cells").iterdir()
                if p.name.isdigit() and (p / "cell").is_file()}
        k = 0
        for repeat in range(1, self.plan.repeats + 1):
            if any(cell.idx not in back for cell in self.plan.cells if cell.repeat == repeat):
                break
            k = repeat
        return k

    def __call__(self, _cell: str) -> str | None:
        k = self.complete_repeats()
        if k <= self.judged or k < stats.MIN_PAIRS or k >= self.plan.repeats:
            return None
        self.judged = k
        with tempfile.TemporaryDirectory(prefix="threadwise-interim-") as scratch:
            con = store.open_ladder(Path(scratch) / "interim.duckdb")
            try:
                done = ingest.ingest(con, self.plan, self.out, Execution(None, self.cpus, True, 0.0, 0),
                                     command="interim", purpose="interim", scx_version=SCX_LAYERED_VERSION)
                measured = store.measured(con, done.run_id)
            finally:
                con.close()
        kept = stats.first_repeats(measured, k)
        why = self.stop_when(kept)
        return f"after {k} of {self.plan.repeats} repeats the candidate is {why}" if why else None


def _timeout(plan: ladder.Plan) -> float:
    """A generous bound for the whole VM run: windows, warm-ups, attaches (TCG: up to ~35 s each)."""
    objective = plan.workload.objective
    # A command-sourced window lasts as long as its command (redis-benchmark: 10-35 s under TCG,
    # measured), not window_s; its own bound is the agent's LOAD_TIMEOUT.
    window = objective.window_s * 3
    if plan.workload.load.source != "service":
        window = max(window, 60)
    per_cell = window + objective.warmup_s + 5
    attaches = sum(1 for arm, _ in plan.turns if not plan.arm(arm).is_baseline)
    return 180 + len(plan.cells) * per_cell + attaches * 90
