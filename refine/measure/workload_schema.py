"""The workload file's schema: strict pydantic models, one per table, units in field names.

What a workload file may say and nothing else (unknown keys, non-finite numbers, an empty command
or a comm no kernel keeps are refused here, field by field); reading a file, the checks that need
the whole file, and the file:line errors are workload.py's.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from threadwise.synthesize.api import NAME_PATTERN

SCHEMA_VERSION = 1
PLACEHOLDERS = ("window_s", "rolesim", "spin", "mcload", "poolservice", "fresh_mariadb", "fresh_postgres",
                "onnxload")
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_COMM_LEN = 15  # the kernel truncates comm to 15 characters


# -- the schema -------------------------------------------------------------------


def _argv(argv: list[str]) -> list[str]:
    if not argv:
        raise PydanticCustomError("empty_command", "the command is empty")
    if not argv[0].strip():
        raise PydanticCustomError("empty_command", "the command's program (its first word) is empty")
    for arg in argv:
        for name in PLACEHOLDER.findall(arg):
            if name not in PLACEHOLDERS:
                raise PydanticCustomError("placeholder", f"unknown placeholder {{{name}}} in {arg!r}")
    return argv


def _comm(process: str) -> str:
    if not process:
        raise PydanticCustomError("empty_process", "the process name is empty")
    if len(process) > _COMM_LEN:
        raise PydanticCustomError(
            "comm_too_long", f"{process!r} is longer than {_COMM_LEN} characters, so no comm can equal it")
    return process


Argv = Annotated[list[str], AfterValidator(_argv)]
PositiveSeconds = Annotated[float, Field(gt=0.0)]
Direction = Literal["higher", "lower"]
LoadSource = Literal["command", "service"]
# the parsers of metrics.PARSERS (a test keeps the two in step)
ParserName = Literal["redis-benchmark", "sysbench", "cyclictest", "rolesim", "jsonl"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Ready(_Model):
    """How the service is known to be ready: exactly one of the three."""

    tcp_port: Annotated[int, Field(ge=1, le=65535)] | None = None  # on 127.0.0.1
    log_line: Annotated[str, Field(min_length=1)] | None = None  # in the service's stdout/stderr
    command: Argv | None = None  # exits 0 once the service is ready

    @pydantic.model_validator(mode="after")
    def _exactly_one(self) -> Ready:
        kinds = [k for k in ("tcp_port", "log_line", "command") if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = " and ".join(kinds) if kinds else "none"
            raise PydanticCustomError("ready_kinds", "ready needs exactly one of tcp_port, log_line, "
                                      f"command (found {found})")
        return self

    def describe(self) -> str:
        if self.tcp_port is not None:
            return f"TCP port {self.tcp_port} on 127.0.0.1 accepts"
        if self.log_line is not None:
            return f"the service prints {self.log_line!r}"
        return f"`{shlex.join(self.command or [])}` exits 0"


class Service(_Model):
    """A long-running service, started once before the first cell and stopped (by PID) after.

    prepare: a command run once when the service is ready, before anything is observed or
    measured, that must exit 0 within prepare_timeout_s: the data a benchmark needs (`sysbench
    prepare`, `pgbench -i`, a YCSB load phase). It belongs here rather than in a wrapper script
    around the service because its parameters must agree with the load command's (sysbench's
    --tables and --table-size), and one file keeps them side by side.
    """

    command: Argv
    ready: Ready
    ready_timeout_s: PositiveSeconds = 30.0
    prepare: Argv | None = None
    prepare_timeout_s: PositiveSeconds = 300.0
    stop_timeout_s: PositiveSeconds = 10.0  # SIGTERM, then SIGKILL after this long


class Target(_Model):
    """The process whose threads the profile targets (scx_layered PcommPrefix)."""

    process: Annotated[str, AfterValidator(_comm)]


class Load(_Model):
    """The window's measurement: a command run per window, or the service's own lines.

    priority: how a ladder runs the load command. "fifo" (default): under SCHED_FIFO priority 1,
    a class above both the kernel's default scheduler and sched_ext, so the generator is out of
    the contest the same way in every arm (in production it runs on another machine; in the lab
    it shares the vCPUs). "normal": as an ordinary task, scheduled by the scheduler under test.
    See docs/lab.md "A fair load generator".
    """

    source: LoadSource = "command"
    command: Argv | None = None
    parser: ParserName
    priority: Literal["fifo", "normal"] = "fifo"


LOOPBACK_URL = r"^http://(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|\[::1\])(:\d+)?(/\S*)?$"


class Series(_Model):
    """One objective metric read from a Prometheus text exposition: the series `name` whose
    labels include `labels`; with `rate`, its increase per second over the window (a counter),
    else its value at the window's end (a gauge, a summary's quantile); times `scale`."""

    name: Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")]
    labels: dict[str, str] = {}
    rate: bool = False
    scale: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0


class Probe(_Model):
    """Where `threadwise canary` reads the live service's metrics over a window (docs/canary.md):
    the lines the service appends to its log, or the output of a command run once per window
    (`{window_s}` in it is the window's length), both read with `load.parser`; or a Prometheus
    text endpoint on loopback, scraped as the window begins and ends, whose `series` name where
    each objective metric is. Exactly one of the three; the ladder and train never read it."""

    log: Annotated[str, Field(min_length=1)] | None = None
    command: Argv | None = None
    prometheus: Annotated[str, Field(pattern=LOOPBACK_URL)] | None = None
    series: dict[str, Series] = {}

    @pydantic.model_validator(mode="after")
    def _exactly_one(self) -> Probe:
        kinds = [k for k in ("log", "command", "prometheus") if getattr(self, k) is not None]
        if len(kinds) != 1:
            found = " and ".join(kinds) if kinds else "none"
            raise PydanticCustomError("probe_kinds",
                                      f"probe needs exactly one of log, command, prometheus (found {found})")
        if (self.prometheus is None) == bool(self.series):
            raise PydanticCustomError("probe_series", "series go with prometheus, and prometheus needs series"
                                      if self.prometheus is None else "prometheus needs series")
        return self


class Metric(_Model):
    metric: Annotated[str, Field(min_length=1)]
    direction: Direction


class Objective(_Model):
    primary: Metric
    secondary: list[Metric] = []
    warmup_s: Annotated[float, Field(ge=0.0)] = 1.0
    window_s: PositiveSeconds = 5.0

    def metrics(self) -> list[Metric]:
        return [self.primary, *self.secondary]


class Workload(_Model):
    """The root of a workload file."""

    schema_version: Literal[1]
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: Annotated[str, Field(min_length=1)]
    service: Service | None = None  # absent: the target is already running (or is the load itself)
    target: Target
    load: Load
    objective: Objective
    probe: Probe | None = None  # canary only: where the live service's metrics are read

    def summary(self) -> list[str]:
        """A few lines saying what a ladder on this workload will do."""
        lines = [f"{self.name}: {self.description}"]
        if self.service is None:
            lines.append("service:   none (the target runs already, or is the load command itself)")
        else:
            svc = self.service
            lines.append(f"service:   {shlex.join(svc.command)}")
            lines.append(f"ready:     when {svc.ready.describe()} (within {svc.ready_timeout_s:g} s); "
                         f"stop: SIGTERM, SIGKILL after {svc.stop_timeout_s:g} s")
            if svc.prepare is not None:
                lines.append(f"prepare:   `{shlex.join(svc.prepare)}` once when ready, before the first "
                             f"window (within {svc.prepare_timeout_s:g} s)")
        lines.append(f"target:    threads of process {self.target.process!r}")
        if self.load.source == "command":
            how = ("as an ordinary task: it is the target (no service)" if self.service is None
                   else "under SCHED_FIFO 1 (out of both schedulers' contest)" if self.load.priority == "fifo"
                   else "as an ordinary task (scheduled by the scheduler under test)")
            lines.append(f"load:      `{shlex.join(self.load.command or [])}` per window {how}, "
                         f"parsed as {self.load.parser}")
        else:
            lines.append("load:      the service's stdout lines in each window, "
                         f"parsed as {self.load.parser}")
        objective = self.objective
        text = f"objective: {objective.primary.metric} ({objective.primary.direction} is better)"
        if objective.secondary:
            text += "; not worse: " + ", ".join(f"{m.metric} ({m.direction})" for m in objective.secondary)
        lines.append(text)
        lines.append(f"windows:   {objective.warmup_s:g} s warm-up, then {objective.window_s:g} s measured")
        return lines

    def with_window(self, window_s: float | None) -> Workload:
        """This workload with another measurement window (None: unchanged), e.g. short demo runs."""
        if window_s is None:
            return self
        return self.model_copy(update={"objective": self.objective.model_copy(
            update={"window_s": window_s})})
