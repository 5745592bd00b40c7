"""The options several stages' commands share, declared once (SQLMesh's cli/options.py is the model).

Each is a typed alias a command uses as `force: Force = False`, so a flag's spelling and help read
the same in every command; a command whose flag would mean something else takes another name.
Defaults stay with the commands. A help text says what the option does; what it is for, and the
measurements behind a default, are in docs/. typer is the only import: `threadwise --help` loads
this module, so the shape is parsed by the commands (threadwise.shape loads pydantic).
"""

from __future__ import annotations

import functools
import glob
import inspect
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

__all__ = ["DEFAULT_HOST_QUANTILE", "Cpus", "EngineOption", "FleetEngine", "Force", "HostPriority",
           "HostQuantile", "Json", "MaybeOutput", "MaybeShapeSpec", "Output", "ShapeSpec", "SparkMaster",
           "Switch", "names_a_fleet", "with_options"]

Built = TypeVar("Built")

_SHAPE = typer.Option(
    "--shape", "-s", metavar="SHAPE",
    help="Machine shape: host (this machine), cores=N,threads-per-core=T[,reserve=R] (tpc=T for short), "
    "or a JSON/TOML shape file.")
ShapeSpec = Annotated[str, _SHAPE]
MaybeShapeSpec = Annotated[str | None, _SHAPE]   # the command does without a shape when none is given

_OUTPUT = typer.Option(
    "--output", "-o", metavar="FILE",
    help="The file to write (what it holds, and where it goes without -o: the command's description).")
Output = Annotated[Path, _OUTPUT]
MaybeOutput = Annotated[Path | None, _OUTPUT]

Force = Annotated[bool, typer.Option("--force", help="Replace an existing output instead of refusing.")]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON.")]
Cpus = Annotated[int, typer.Option("--cpus", help="The lab guest's vCPUs (at most the host's cores).")]


class Switch(StrEnum):
    on = "on"
    off = "off"


# every command that boots the lab takes it (lab run, ladder, train, refine)
HostPriority = Annotated[Switch, typer.Option(
    "--host-priority",
    help="on: the lab's qemu runs before other work on this host (its threads at nice -20); off: it "
    "shares the host like any other work.")]


class FleetEngine(StrEnum):
    duckdb = "duckdb"
    spark = "spark"


# the commands that read many captures as one fleet (analyze, synthesize; docs/fleet.md)
EngineOption = Annotated[FleetEngine, typer.Option(
    "--engine", help="What computes a fleet's features: duckdb (embedded, this machine) or spark "
    "(the --spark-master cluster).")]
SparkMaster = Annotated[str | None, typer.Option(
    "--spark-master", metavar="URL", show_default=False,
    help="With --engine spark: local[N] (this machine, N cores; the default is local[2]) or a "
    "cluster's URL, e.g. spark://head:7077.")]
DEFAULT_HOST_QUANTILE = 0.9   # p90 across hosts: a busy host's need, not the fleet's average
HostQuantile = Annotated[float, typer.Option(
    "--host-quantile", min=0.01, max=1.0,
    help="With many captures: size each group at this quantile of the hosts' CPU shares.")]


def names_a_fleet(captures: list[str]) -> bool:
    """Whether capture arguments name many captures (or may: a directory, a glob), not one file."""
    return len(captures) > 1 or any(Path(c).is_dir() or glob.has_magic(c) for c in captures)


def with_options(build: Callable[..., Built]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator that gives a command the options `build` declares (a set several commands share,
    declared once, as click's shared option decorators do), after the command's own: typer reads
    the joined signature, so --help lists them all, and the command's last parameter receives what
    `build` made of them."""
    shared = list(inspect.signature(build, eval_str=True).parameters.values())

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        *own, last = inspect.signature(command, eval_str=True).parameters.values()
        # keyword-only, so that a required shared option may follow the command's defaults
        joined = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in (*own, *shared)]

        @functools.wraps(command)
        def run(**given: Any) -> None:
            built = build(**{p.name: given.pop(p.name) for p in shared})
            command(**given, **{last.name: built})

        run.__signature__ = inspect.Signature(joined)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in joined}
        return run

    return decorate
