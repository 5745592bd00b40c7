"""The workload file: what to run, how to load it, and what to measure (strict TOML).

A workload file tells the ladder how to start the service and know it is
ready, which process's threads a profile targets, the load generator run for
each measurement window (or the service's own output lines) with the parser
for its output, and the objective: a primary metric with its direction,
secondary metrics that must not get worse, warm-up and window length. The
binding contract is docs/refine.md ("Workload file"); docs/workload.md is
the user's reference.

Reading follows the profile reader (synthesize/reader.py): tomllib for the
syntax, pydantic (strict, unknown keys forbidden) for the schema, then the
checks that need the whole file (a metric the parser cannot produce, a load
source without its command or service). Every problem becomes a Diagnostic
with the file, the line and a hint, raised together as one WorkloadError.
Nothing here runs a command; `render_argv` only builds the bundled binaries
its placeholders name.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
import shlex
import shutil
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

# The core's TOML line mapping and syntax/format helpers, shared with the profile reader.
from threadwise.diagnostics import Diagnostic, dotted_location, inner_model, short_value, syntax_diagnostic
from threadwise.errors import InputError, UsageError, WorkloadError
from threadwise.paths import require_text
from threadwise.refine.measure.bundled import (
    JAVA_WORKLOADS,
    PYTHON_WORKLOADS,
    SCRIPT_WORKLOADS,
    build,
    build_java,
    build_python,
    script,
)
from threadwise.refine.measure.metrics import PARSERS
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.api import NAME_PATTERN, NAME_RULE

SCHEMA_VERSION = 1
PLACEHOLDERS = ("window_s", "rolesim", "spin", "mcload", "poolservice", "fresh_mariadb", "onnxload")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_COMM_LEN = 15  # the kernel truncates comm to 15 characters
DOC = "docs/workload.md"


# -- the schema -------------------------------------------------------------------


def _argv(argv: list[str]) -> list[str]:
    if not argv:
        raise PydanticCustomError("empty_command", "the command is empty")
    if not argv[0].strip():
        raise PydanticCustomError("empty_command", "the command's program (its first word) is empty")
    for arg in argv:
        for name in _PLACEHOLDER.findall(arg):
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


# -- errors -------------------------------------------------------------------------

_HINTS = {
    "empty_command": 'write the command as a list of strings, e.g. ["redis-server", "--port", "6399"]',
    "placeholder": "placeholders: " + ", ".join("{" + p + "}" for p in PLACEHOLDERS),
    "ready_kinds": 'e.g. ready = { tcp_port = 6399 } or ready = { log_line = "ready" }',
    "probe_kinds": 'e.g. [probe] log = "/var/log/my-service.log", or command = ["my-client", "--stats"], '
                   'or prometheus = "http://127.0.0.1:9121/metrics"',
    "probe_series": 'name where each objective metric is, e.g. [probe.series] ops_per_s = '
                    '{ name = "app_requests_total", rate = true }',
    "empty_process": "name the process comm whose threads the profile targets, e.g. \"redis-server\"",
    "comm_too_long": "the kernel keeps 15 characters of a comm: write its first 15",
    "missing": f"add it; see {DOC}",
    "float_type": "write a number without quotes, e.g. 5.0",
    "float_parsing": "write a number without quotes, e.g. 5.0",
    "int_type": "write a whole number without quotes, e.g. 6399",
    "string_type": 'write a string in double quotes, e.g. "redis-server"',
    "list_type": 'write a list, e.g. ["redis-benchmark", "-q"]',
    "model_type": "write a table: a [section], or an inline { key = value }",
    "dict_type": "write a table: a [section], or an inline { key = value }",
    "finite_number": "write a finite number",
}


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload file; raises UsageError (no such file) or WorkloadError."""
    file = Path(path)
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "no such file"
        raise UsageError(f"{file}: {what}", hint="give a workload TOML file, or a bundled name: "
                         + ", ".join(bundled_names()))
    require_text(file, "a workload file (TOML)")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as bad:
        raise WorkloadError([Diagnostic("encoding", f"not UTF-8 text ({bad.reason})",
                                        file=str(file), line=1)]) from None
    return parse_workload(text, str(file))


def parse_workload(text: str, file: str = "<workload>") -> Workload:
    """Parse TOML text into a Workload, or raise WorkloadError with file:line diagnostics."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as bad:
        raise WorkloadError([syntax_diagnostic(str(bad), text, file)]) from None
    source = SourceMap(text)
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        message = ("missing schema_version" if version is None
                   else f"schema_version {version!r} is not supported")
        raise WorkloadError([Diagnostic("schema_version", message, path=("schema_version",), file=file,
                                        line=source.line_of(("schema_version",)) or 1,
                                        hint=f"this threadwise reads schema_version = {SCHEMA_VERSION}")])
    try:
        workload = Workload.model_validate(raw)
    except pydantic.ValidationError as bad:
        found = [_schema_diagnostic(err, source, file) for err in bad.errors()]
        raise WorkloadError(sorted(found, key=lambda d: d.line or 0)) from None
    problems = [Diagnostic(rule, message, hint=hint, path=path, file=file,
                           line=source.line_of(path) or 1)
                for rule, path, message, hint in _whole_file_checks(workload)]
    if problems:
        raise WorkloadError(sorted(problems, key=lambda d: d.line or 0))
    return workload


def _whole_file_checks(w: Workload) -> list[tuple[str, tuple[str | int, ...], str, str]]:
    """(rule, path, message, hint) for what no single field can check."""
    out: list[tuple[str, tuple[str | int, ...], str, str]] = []
    load = w.load
    if load.source == "command" and load.command is None:
        out.append(("load", ("load",), 'load.command is missing (source = "command" runs it per window)',
                    'add command = [...], or set source = "service" to read the service\'s own lines'))
    if load.source == "service" and load.command is not None:
        out.append(("load", ("load", "command"), 'load.command is not used with source = "service"',
                    'remove it, or set source = "command" to run it per window'))
    if load.source == "service" and w.service is None:
        out.append(("load", ("load", "source"), 'source = "service" needs a [service] section',
                    "add [service] with its command and ready, or run a load command per window"))
    service = w.service
    if service is not None and service.prepare is None and "prepare_timeout_s" in service.model_fields_set:
        out.append(("prepare", ("service", "prepare_timeout_s"),
                    "prepare_timeout_s without a prepare command",
                    "add prepare = [...] (run once when the service is ready), or remove prepare_timeout_s"))
    spec = PARSERS[load.parser].metrics
    wanted: list[tuple[tuple[str | int, ...], str]] = [(("objective", "primary", "metric"),
                                                        w.objective.primary.metric)]
    wanted += [(("objective", "secondary", i, "metric"), m.metric)
               for i, m in enumerate(w.objective.secondary)]
    for path, metric in wanted:
        if not spec.produces(metric):
            close = difflib.get_close_matches(metric, spec.names, n=1)
            hint = (f"did you mean {close[0]!r}? " if close else "") + \
                f"{load.parser} produces: {spec.describe()}"
            out.append(("metric", path, f"the {load.parser} parser cannot produce {metric!r}", hint))
        elif load.parser == "cyclictest" and load.command is not None \
                and re.fullmatch(r"(t\d+_)?p\d+_us", metric) and not _has_histogram(load.command):
            out.append(("metric", path, f"{metric!r} needs cyclictest's histogram, and load.command has "
                        "no -h", "add -h US to the cyclictest command, e.g. -h 2000 (buckets up to 2 ms)"))
        elif load.parser == "redis-benchmark" and load.command is not None:
            tests = _redis_tests(load.command)
            test = re.sub(r"_(rps|[a-z0-9]+_ms)$", "", metric)
            # `-t lrange` runs lrange_100 ... lrange_600, `-t ping` ping_inline and ping_mbulk
            if tests is not None and not any(test == t or test.startswith(t + "_") for t in tests):
                out.append(("metric", path, f"{metric!r} needs the {test} test, and load.command runs "
                            f"-t {','.join(sorted(tests))}", f"add {test} to redis-benchmark's -t list"))
    if w.probe is not None and w.probe.prometheus is not None:
        missing = [metric for _path, metric in wanted if metric not in w.probe.series]
        if missing:   # the canary would have no series to read them from
            out.append(("probe_series", ("probe", "series"), f"[probe.series] names no series for "
                        f"{', '.join(missing)}", "add one per objective metric, e.g. [probe.series] "
                        f'{missing[0]} = {{ name = "app_requests_total", rate = true }}'))
    return out


def _redis_tests(argv: Sequence[str]) -> set[str] | None:
    """The tests a redis-benchmark argv runs (lower case), or None when it runs the default set."""
    for flag, value in itertools.pairwise(argv):
        if flag == "-t":
            return {t.strip().lower() for t in value.split(",") if t.strip()}
    return None


def _has_histogram(argv: Sequence[str]) -> bool:
    return any(a == "-h" or re.fullmatch(r"-h\d+", a) or a.startswith("--histogram")
               or a == "-H" or a.startswith("--histofall") for a in argv)


def _schema_diagnostic(err: Any, source: SourceMap, file: str) -> Diagnostic:
    loc = tuple(part for part in err["loc"] if isinstance(part, (str, int)))
    where = dotted_location(loc)
    kind = err["type"]
    hint = _HINTS.get(kind)
    if kind == "extra_forbidden":
        allowed = sorted(_allowed_keys(loc[:-1]))
        message = f"unknown key {where!r}"
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = (f"did you mean {close[0]!r}? " if close else "") + \
            ("allowed here: " + ", ".join(allowed) if allowed else "")
    elif kind == "missing":
        message = f"missing required key {where!r}"
    elif kind == "string_pattern_mismatch" and loc and loc[-1] == "name":
        message = f"{where}: {short_value(err.get('input'))} is not a valid name"
        hint = f"a name is {NAME_RULE}"
    elif kind == "string_pattern_mismatch" and loc and loc[-1] == "prometheus":
        message = f"{where}: {short_value(err.get('input'))} is not an http:// URL on loopback"
        hint = ("a canary reads a service on this host: its endpoint on 127.0.0.1, localhost or [::1], "
                'e.g. "http://127.0.0.1:9121/metrics"')
    elif kind in {"empty_command", "placeholder", "ready_kinds", "probe_kinds", "probe_series",
                  "empty_process", "comm_too_long", "literal_error", "enum"}:
        message = f"{where}: {err['msg']}"
    elif kind == "finite_number":
        message = f"{where}: nan and inf are not allowed"
    else:
        message = f"{where}: {err['msg'][:1].lower()}{err['msg'][1:]}, got {short_value(err.get('input'))}"
    return Diagnostic("schema", message, hint=hint or f"see {DOC} for the keys, types and ranges",
                      path=loc, file=file, line=source.line_of(loc) or 1)


def _allowed_keys(loc: tuple[str | int, ...]) -> set[str]:
    """The keys the model at `loc` accepts."""
    model: Any = Workload
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part)
        model = inner_model(field.annotation) if field is not None else None
        if model is None:
            return set()
    return set(model.model_fields)


# -- placeholders and bundled files --------------------------------------------------


def render_argv(argv: Sequence[str], *, window_s: float) -> list[str]:
    """The argv with {window_s} (whole seconds, at least 1), {rolesim}, {spin}, {mcload},
    {poolservice}, {fresh_mariadb} and {onnxload} filled in.

    {rolesim}, {spin} and {mcload} are the bundled binaries, {poolservice} the bundled JVM service's classes
    directory (its classpath), each compiled on first use; {fresh_mariadb} the bundled script that
    starts mariadbd on a fresh data directory (workloads/fresh-mariadb.sh); {onnxload} the bundled
    Python driver as an executable script run by this interpreter (bundled.build_python).
    """
    seconds = str(max(1, math.ceil(window_s - 1e-9)))
    resolved: dict[str, str] = {}

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PLACEHOLDERS:
            raise InputError(f"unknown placeholder {{{name}}} in {match.string!r}",
                             hint=_HINTS["placeholder"])
        if name not in resolved:
            resolved[name] = (seconds if name == "window_s" else
                              str(build_java(name)) if name in JAVA_WORKLOADS else
                              str(script(name)) if name in SCRIPT_WORKLOADS else
                              str(build_python(name)) if name in PYTHON_WORKLOADS else str(build(name)))
        return resolved[name]

    return [_PLACEHOLDER.sub(value, arg) for arg in argv]


def generator_argv(load: Load, *, window_s: float, is_target: bool = False) -> list[str]:
    """The load command as a ladder runs it: rendered, and under SCHED_FIFO 1 (`chrt -f 1`) when
    load.priority is "fifo" and the command is not itself the target (`is_target`: a workload
    without a service, whose threads must stay in the schedulers' contest). The program is named
    by its absolute path, so the lab guest's packer (initramfs.py) carries it as chrt's argument."""
    assert load.command is not None
    argv = render_argv(list(load.command), window_s=window_s)
    if load.priority != "fifo" or is_target:
        return argv
    return ["chrt", "-f", "1", shutil.which(argv[0]) or argv[0], *argv[1:]]


def _bundled_dir() -> Any:
    return resources.files("threadwise.refine").joinpath("workloads")


def bundled_names() -> list[str]:
    """Names of the workload files shipped with threadwise (rolesim, redis, ...)."""
    return sorted(p.name.removesuffix(".toml") for p in _bundled_dir().iterdir() if p.name.endswith(".toml"))


def bundled_workload_path(name: str) -> Path:
    """The path of a bundled workload file."""
    names = bundled_names()
    if name not in names:
        close = difflib.get_close_matches(name, names, n=1)
        raise UsageError(f"no bundled workload {name!r}",
                         hint=(f"did you mean {close[0]!r}? " if close else "")
                         + "bundled: " + ", ".join(names))
    return Path(str(_bundled_dir().joinpath(f"{name}.toml")))


def resolve_workload(spec: str | Path) -> Path:
    """A workload file's path from a path or a bundled name (an existing file wins)."""
    path = Path(spec)
    if path.exists() or str(spec).endswith(".toml") or "/" in str(spec):
        return path
    return bundled_workload_path(str(spec))
