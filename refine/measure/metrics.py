"""Metrics from a load generator's output: one parser per tool, `parse_metrics(parser, text)`.

Problem: a ladder cell ends with whatever its load generator printed
(redis-benchmark's CSV, sysbench's report, cyclictest's summary or histogram,
JSON lines from rolesim or a user's own generator), and the statistics need
one number per metric per cell, under names a workload file can refer to
before anything has run.

Approach: each parser turns the text into `{metric: value}` with units in the
names (`_rps`, `_per_s`, `_ms`, `_us`), and declares the names it can produce
(`PARSERS[name].metrics`): fixed names plus, where the tool's output decides
(redis-benchmark's test names, sysbench's percentile), a pattern. A workload
file is checked against the declaration when it is loaded; the output is
checked by `require` when it is parsed. Parsers read the output of the real
tools (fixtures in tests/refine/fixtures, with the commands that made them)
and skip what they do not know rather than guessing; output with nothing they
know raises `MetricsError` with the first lines of the text as the hint.

Window values. A command (`source = "command"`) prints its result for the
window it ran; a service (`source = "service"`) prints lines all the time and
the caller passes just the window's lines. JSON-line parsers take, per
metric, the median over the lines that carry it: for a service the lines of
the window; for a command that prints one summary line, that line; for a
command that prints a line per interval, the median over its intervals (one
slow interval does not decide the window). cyclictest reports the worst
thread (`max_us`, `p99_us`, ...), and per thread as `t<N>_...`.
"""

from __future__ import annotations

import csv
import json
import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from threadwise.errors import MetricsError

Source = Literal["command", "service"]


@dataclass(frozen=True)
class MetricNames:
    """The metric names a parser can produce: fixed names, and a pattern for families."""

    names: tuple[str, ...]
    pattern: str | None = None
    note: str = ""
    summary: str = ""  # replaces the list of names in messages when that would be long
    _compiled: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            object.__setattr__(self, "_compiled", re.compile(self.pattern))

    def produces(self, metric: str) -> bool:
        return metric in self.names or (
            self._compiled is not None and self._compiled.fullmatch(metric) is not None)

    def describe(self) -> str:
        text = self.summary or ", ".join(self.names)
        return f"{text}; {self.note}" if self.note else text


@dataclass(frozen=True)
class Parser:
    name: str
    parse: Callable[[list[str], Source], dict[str, float]]
    metrics: MetricNames
    expects: str  # what output the parser reads, for hints


# -- redis-benchmark -------------------------------------------------------------

_REDIS_COLUMNS = {"rps": "rps"}  # other columns: "<x>_latency_ms" -> "<x>_ms"


def _redis_key(test: str) -> str:
    """'GET' -> 'get', 'LRANGE_100 (first 100 elements)' -> 'lrange_100', 'MSET (10 keys)' -> 'mset'."""
    base = test.split("(", 1)[0].strip().lower()
    return re.sub(r"[^a-z0-9]+", "_", base).strip("_")


def _parse_redis(lines: list[str], _source: Source) -> dict[str, float]:
    """redis 7's `redis-benchmark --csv`: a header row, then one row per test.

    Keys are `<test>_<column>`: `get_rps`, `get_avg_ms`, `get_p99_ms`, ...
    A test listed twice keeps its first row ("LPUSH (needed to benchmark
    LRANGE)" after "LPUSH" is a helper run, not the test).
    """
    header: list[str] | None = None
    out: dict[str, float] = {}
    for row in csv.reader(line for line in lines if line.startswith('"')):
        if header is None:
            if row and row[0] == "test":
                header = row
            continue
        if len(row) != len(header):
            continue
        test = _redis_key(row[0])
        if not test or any(key.startswith(test + "_") for key in out):
            continue
        for column, cell in zip(header[1:], row[1:], strict=True):
            suffix = _REDIS_COLUMNS.get(column) or column.replace("_latency_ms", "_ms")
            value = _number(cell)
            if value is not None:
                out[f"{test}_{suffix}"] = value
    return out


# -- sysbench --------------------------------------------------------------------

_SB_EPS = re.compile(r"^\s*events per second:\s*([\d.]+)")
_SB_PER_SEC = re.compile(r"^\s*([a-z ]+):\s+\d+\s+\(([\d.]+) per sec\.\)")
_SB_TOTAL_TIME = re.compile(r"^\s*total time:\s*([\d.]+)s")
_SB_EVENTS = re.compile(r"^\s*total number of events:\s*(\d+)")
_SB_LATENCY = re.compile(r"^\s*(min|avg|max|(\d+)th percentile):\s*([\d.]+)")
_SB_MIB = re.compile(r"\(([\d.]+) MiB/sec\)")


def _parse_sysbench(lines: list[str], _source: Source) -> dict[str, float]:
    """sysbench 1.0's final report (cpu, threads, memory, mutex, oltp_*).

    `events_per_s` is the tool's own line where it prints one (cpu), else
    total events / total time; oltp adds `transactions_per_s` and
    `queries_per_s`; the "Latency (ms)" block gives `lat_min_ms`,
    `lat_avg_ms`, `lat_max_ms` and `lat_p<N>_ms` (N from --percentile,
    95 by default). Interim `--report-interval` lines are skipped.
    """
    out: dict[str, float] = {}
    events = total_s = None
    in_latency = False
    for line in lines:
        if line.startswith("Latency (ms):"):
            in_latency = True
            continue
        if in_latency:
            found = _SB_LATENCY.match(line)
            if found:
                name = f"p{found.group(2)}" if found.group(2) else found.group(1)
                out[f"lat_{name}_ms"] = float(found.group(3))
                continue
            if line.strip() and not line.strip().startswith("sum:"):
                in_latency = False
        if found := _SB_EPS.match(line):
            out["events_per_s"] = float(found.group(1))
        elif found := _SB_PER_SEC.match(line):
            out[found.group(1).strip().replace(" ", "_") + "_per_s"] = float(found.group(2))
        elif found := _SB_TOTAL_TIME.match(line):
            total_s = float(found.group(1))
        elif found := _SB_EVENTS.match(line):
            events = int(found.group(1))
        elif (found := _SB_MIB.search(line)) and "transferred" in line:
            out["mib_per_s"] = float(found.group(1))
    if "events_per_s" not in out and events is not None and total_s:
        out["events_per_s"] = events / total_s
    return out


# -- cyclictest ------------------------------------------------------------------

_CT_THREAD = re.compile(
    r"^T:\s*(\d+)\s.*?Min:\s*(\d+)\s+Act:\s*\d+\s+Avg:\s*(\d+)\s+Max:\s*(\d+)")
_CT_SUMMARY = {"# Min Latencies:": "min", "# Avg Latencies:": "avg", "# Max Latencies:": "max",
               "# Total:": "total", "# Histogram Overflows:": "overflows"}
_PERCENTILES = {"p50": 0.50, "p99": 0.99}


def _histogram_percentile(buckets: list[tuple[int, int]], total: int, fraction: float) -> int | None:
    """Nearest-rank percentile from (latency_us, count) buckets; None if it lies in the overflow."""
    rank = max(1, math.ceil(fraction * total))
    seen = 0
    for latency, count in buckets:
        seen += count
        if seen >= rank:
            return latency
    return None


def _parse_cyclictest(lines: list[str], _source: Source) -> dict[str, float]:
    """cyclictest's quiet output: `T: N ... Min: Avg: Max:` lines (`-q`), or with
    `-h US` the histogram and its `# Min/Avg/Max Latencies` and `# Histogram
    Overflows` summary (one column per thread).

    Per thread `t<N>_min_us`, `t<N>_avg_us`, `t<N>_max_us` and, from the
    histogram, `t<N>_p50_us` and `t<N>_p99_us`; the unprefixed names are the
    worst thread's (the largest value). A percentile whose rank falls among the
    overflows (latencies beyond the histogram's range) is reported as that
    thread's max, an upper bound; `overflows` counts those samples.
    """
    per_thread: dict[int, dict[str, float]] = {}
    summary: dict[str, list[int]] = {}
    buckets: list[tuple[int, list[int]]] = []
    for line in lines:
        if found := _CT_THREAD.match(line):
            values = per_thread.setdefault(int(found.group(1)), {})
            values.update(min=int(found.group(2)), avg=int(found.group(3)), max=int(found.group(4)))
            continue
        for prefix, key in _CT_SUMMARY.items():
            if line.startswith(prefix):
                summary[key] = [int(v) for v in line[len(prefix):].split()]
        if line[:1].isdigit():
            fields = line.split()
            if len(fields) >= 2 and all(f.isdigit() for f in fields):
                buckets.append((int(fields[0]), [int(f) for f in fields[1:]]))
    for key in ("min", "avg", "max"):
        for thread, value in enumerate(summary.get(key, [])):
            per_thread.setdefault(thread, {})[key] = value
    overflows = summary.get("overflows", [])
    if buckets and "total" in summary:
        for thread, total in enumerate(summary["total"]):
            column = [(latency, counts[thread]) for latency, counts in buckets if thread < len(counts)]
            over = overflows[thread] if thread < len(overflows) else 0
            values = per_thread.setdefault(thread, {})
            for name, fraction in _PERCENTILES.items():
                found = _histogram_percentile(column, total + over, fraction)
                if found is not None:
                    values[name] = found
                elif "max" in values:
                    values[name] = values["max"]
    out: dict[str, float] = {}
    for thread, values in sorted(per_thread.items()):
        for name, value in values.items():
            out[f"t{thread}_{name}_us"] = float(value)
    for name in ("min", "avg", "max", *_PERCENTILES):
        found = [values[name] for values in per_thread.values() if name in values]
        if found:
            out[f"{name}_us"] = float(max(found))
    if out and overflows:
        out["overflows"] = float(sum(overflows))
    return out


# -- JSON lines (rolesim and the generic contract) ------------------------------------


def _json_lines(lines: list[str]) -> list[dict[str, float]]:
    """Numeric fields of each JSON-object line; blank lines skipped, anything else an error."""
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as bad:
            raise MetricsError(f"line {number}: not JSON ({bad.msg}): {_clip(line)}",
                               hint="the jsonl contract is one JSON object per line, nothing else "
                                    "on stdout (send logs to stderr)") from None
        if not isinstance(value, dict):
            raise MetricsError(f"line {number}: a JSON {type(value).__name__}, not an object: "
                               f"{_clip(line)}",
                               hint='each line must be an object such as {"requests_per_s": 1234.5}')
        rows.append({key: float(v) for key, v in value.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)})
    return rows


def _medians(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    columns: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            columns.setdefault(key, []).append(value)
    return {key: float(statistics.median(values)) for key, values in columns.items()}


def _parse_jsonl(lines: list[str], _source: Source) -> dict[str, float]:
    """Every numeric field of the objects, the median per field over the lines."""
    return _medians(_json_lines(lines))


ROLESIM_METRICS = ("hot_chunks_per_s", "items_per_s", "worker_lat_p50_us", "worker_lat_p99_us")


def _parse_rolesim(lines: list[str], _source: Source) -> dict[str, float]:
    """rolesim --report-ms: the jsonl contract, limited to rolesim's metric fields."""
    values = _medians(_json_lines(lines))
    return {key: value for key, value in values.items() if key in ROLESIM_METRICS}


# -- the registry ----------------------------------------------------------------------

_REDIS_FIELDS = ("rps", "avg_ms", "min_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")
_CT_FIELDS = ("min", "avg", "max", "p50", "p99")

PARSERS: dict[str, Parser] = {
    "redis-benchmark": Parser(
        "redis-benchmark", _parse_redis,
        MetricNames(tuple(f"{test}_{f}" for test in ("get", "set") for f in _REDIS_FIELDS),
                    pattern=r"[a-z0-9_]+_(" + "|".join(_REDIS_FIELDS) + ")",
                    summary="<test>_" + ", <test>_".join(_REDIS_FIELDS),
                    note="for each test run with -t, e.g. get_rps, set_p99_ms, lpush_rps"),
        "redis 7's `redis-benchmark --csv` (a header row, one row per test)"),
    "sysbench": Parser(
        "sysbench", _parse_sysbench,
        MetricNames(("events_per_s", "transactions_per_s", "queries_per_s", "mib_per_s",
                     "lat_min_ms", "lat_avg_ms", "lat_max_ms", "lat_p95_ms"),
                    pattern=r"lat_p\d+_ms|[a-z_]+_per_s",
                    note="lat_p<N>_ms for --percentile=N"),
        "sysbench 1.0's final report (`sysbench cpu run`, `sysbench oltp_read_write run`, ...)"),
    "cyclictest": Parser(
        "cyclictest", _parse_cyclictest,
        MetricNames((*(f"{f}_us" for f in _CT_FIELDS), "overflows"),
                    pattern=r"t\d+_(" + "|".join(_CT_FIELDS) + ")_us",
                    note="p50/p99 need -h US (histogram); t<N>_max_us etc. per thread"),
        "cyclictest -q output (T: lines, or with -h the histogram and its # summary)"),
    "rolesim": Parser(
        "rolesim", _parse_rolesim, MetricNames(ROLESIM_METRICS),
        "rolesim --report-ms MS: one JSON object per line"),
    "jsonl": Parser(
        "jsonl", _parse_jsonl,
        MetricNames((), pattern=r".+", note="any numeric field of the JSON objects"),
        "one JSON object per line with numeric fields"),
}
PARSER_NAMES = tuple(PARSERS)


def parse_metrics(parser: str, text: str, *, source: Source = "command") -> dict[str, float]:
    """The metrics in a load generator's output (a command's stdout, or a service's window lines)."""
    if parser not in PARSERS:
        raise MetricsError(f"unknown metrics parser {parser!r}",
                           hint="one of: " + ", ".join(PARSER_NAMES))
    spec = PARSERS[parser]
    lines = text.replace("\r", "\n").splitlines()
    values = spec.parse(lines, source)
    if not values:
        what = "no output" if not text.strip() else f"no {parser} metrics in the output"
        raise MetricsError(f"{what} ({len(lines)} lines from the {source})",
                           hint=f"expected {spec.expects}; it began:\n{head(text)}"
                           if text.strip() else f"expected {spec.expects}; did the command fail?")
    return values


def require(values: dict[str, float], metrics: Iterable[str], *, parser: str) -> dict[str, float]:
    """The named metrics out of parsed values; a missing one is an error naming what was found."""
    wanted = list(metrics)
    missing = [m for m in wanted if m not in values]
    if missing:
        found = ", ".join(sorted(values)) or "nothing"
        raise MetricsError(f"the {parser} output has no {', '.join(missing)}",
                           hint=f"it gave: {found}")
    return {m: values[m] for m in wanted}


def head(text: str, lines: int = 5, width: int = 100) -> str:
    """The first lines of an output, clipped, indented for a hint."""
    first = text.strip("\n").splitlines()[:lines]
    return "\n".join("  | " + _clip(line, width) for line in first)


def _clip(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
