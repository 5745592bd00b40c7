"""The workload file: what to run, how to load it, and what to measure (strict TOML).

A workload file tells the ladder how to start the service and know it is
ready, which process's threads a profile targets, the load generator run for
each measurement window (or the service's own output lines) with the parser
for its output, and the objective: a primary metric with its direction,
secondary metrics that must not get worse, warm-up and window length. The
binding contract is docs/refine.md ("Workload file"); docs/workload.md is
the user's reference.

Reading follows the profile reader (synthesize/reader.py): tomllib for the
syntax, pydantic (strict, unknown keys forbidden) for the schema
(workload_schema.py), then the
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
import shutil
import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pydantic

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
from threadwise.refine.measure.workload_schema import (
    PLACEHOLDER,
    PLACEHOLDERS,
    SCHEMA_VERSION,
    Load,
    Workload,
)
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.api import NAME_RULE

DOC = "docs/workload.md"


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
    {poolservice}, {fresh_mariadb}, {fresh_postgres} and {onnxload} filled in.

    {rolesim}, {spin} and {mcload} are the bundled binaries, {poolservice} the bundled JVM service's classes
    directory (its classpath), each compiled on first use; {fresh_mariadb} the bundled script that
    starts mariadbd on a fresh data directory (workloads/fresh-mariadb.sh), {fresh_postgres} its
    PostgreSQL twin (workloads/fresh-postgres.sh); {onnxload} the bundled
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

    return [PLACEHOLDER.sub(value, arg) for arg in argv]


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
