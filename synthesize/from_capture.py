"""A capture in, a validated profile out: what `threadwise synthesize CAPTURE` does, as a function.

Problem: the synthesize command and `train` both turn a capture into the start
profile; written twice, the two drift (how the capture is named from the
profile's folder, its hash, the validation that refuses a bad profile).

Approach: `synthesize_capture` analyses the capture (analyze's
`analyze_capture`), builds the profile (`build.build_profile`, sized for the
shape when one is known), names the capture relative to where the profile will
be written (so the profile travels with it) with its sha256, and validates the
result; every diagnostic goes to `report`, and an error-level one raises. The
CLI writes the profile; `train` also keeps the typed profile it got back.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from threadwise.errors import MissingTool, ThreadwiseError
from threadwise.options import DEFAULT_HOST_QUANTILE
from threadwise.paths import file_sha256
from threadwise.shape import Shape
from threadwise.synthesize.build import DEFAULT_MAX_GROUPS, build_profile, from_analysis
from threadwise.synthesize.families import Families
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import Profile

if TYPE_CHECKING:   # the analysis loads polars, duckdb and sklearn: only when there is one
    from threadwise.analyze import Analysis


def relative(path: Path, base: Path) -> str:
    """`path` as seen from `base` (the profile's directory), so the profile travels with it."""
    return Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()


def sha256(path: Path) -> str | None:
    return file_sha256(path) if path.is_file() else None


def no_analyze_stage(missing: ImportError) -> MissingTool:
    """What synthesize says when the analyze stage cannot be loaded (an install without it)."""
    return MissingTool(f"the analyze stage is not available ({missing})",
                       hint="install threadwise with its analyze stage")


def synthesize_capture(capture: Path, name: str, *, where: Path, report: Callable[[str], None],
                       shape: Shape | None = None, requests: dict[str, int] | None = None,
                       max_groups: int = DEFAULT_MAX_GROUPS, families: Families | None = None,
                       analysis: Analysis | None = None) -> Profile:
    """The valid profile for `capture`, to be written at `where`; diagnostics go to `report`.
    `analysis`: the capture's analysis when the caller has it already (train prints it first)."""
    if analysis is None:
        try:
            # deferred: loads polars, duckdb and sklearn, which this module's other callers do without
            from threadwise.analyze import analyze_capture
        except ImportError as missing:
            raise no_analyze_stage(missing) from None
        analysis = analyze_capture(capture)
    profile = build_profile(from_analysis(analysis), name, capture=relative(capture, where.parent),
                            capture_sha256=sha256(capture), requests=requests, max_groups=max_groups,
                            families=families, shape=shape)
    check(profile, report)
    return profile


def check(profile: Profile, report: Callable[[str], None]) -> None:
    """Report every diagnostic of a synthesized profile; raise when one is an error."""
    problems = validate(profile)
    for diag in problems:
        report(diag.render())
    if any(d.severity == "error" for d in problems):
        raise ThreadwiseError("the synthesized profile is not valid (see above); not written",
                              hint="this is a bug in synthesize; please report it")


@dataclass(frozen=True)
class FleetOptions:
    """How a fleet is read: the engine (`duckdb`, `spark`), Spark's master, the quantile across hosts."""

    engine: str = "duckdb"
    master: str | None = None
    quantile: float = DEFAULT_HOST_QUANTILE


def synthesize_fleet(captures: list[str], name: str, *, report: Callable[[str], None],
                     fleet: FleetOptions = FleetOptions(), shape: Shape | None = None,
                     requests: dict[str, int] | None = None, max_groups: int = DEFAULT_MAX_GROUPS,
                     families: Families | None = None) -> Profile:
    """The valid profile for many captures of one service (analyze.fleet: the groups of every host,
    each sized at `fleet.quantile` across hosts, its comment saying how many hosts back it)."""
    try:
        # deferred: loads polars, duckdb and sklearn, which this module's other callers do without
        from threadwise.analyze.fleet import analyze_fleet
    except ImportError as missing:
        raise no_analyze_stage(missing) from None
    analysis = analyze_fleet(captures, engine_name=fleet.engine, master=fleet.master,
                             quantile=fleet.quantile, progress=report)
    profile = build_profile(analysis.record, name, requests=requests, max_groups=max_groups,
                            families=families, shape=shape)
    check(profile, report)
    return profile
