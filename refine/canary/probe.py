"""Probes: where a canary reads a live service's metrics over one window.

A probe is started when a window begins and read when it ends; what it read is parsed by one of
the ladder's parsers (refine/measure/metrics.py), so a canary reads a service as its training did.
- `LogProbe`: the lines the service appended to its log file during the window (rolesim's report
  lines, a service's own JSON lines);
- `CommandProbe`: a command run for the window (`{window_s}` in its argv is the window's length),
  whose output is parsed: `redis-cli --latency` style tools, or a client of the service's own;
- `PrometheusProbe`: a Prometheus text endpoint on loopback, scraped as the window begins and
  ends: a counter's increase per second, or a gauge's (a quantile's) value at the end.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from threadwise.errors import MetricsError, UsageError
from threadwise.refine.measure.metrics import PARSER_NAMES, parse_metrics
from threadwise.refine.measure.workload_schema import Series


class Probe(Protocol):
    def describe(self) -> str: ...
    def begin(self, window_s: float) -> None: ...
    def end(self) -> dict[str, float]: ...
    def close(self) -> None: ...


def _parser(name: str) -> str:
    if name not in PARSER_NAMES:
        raise UsageError(f"unknown parser {name!r}", hint=f"one of {', '.join(PARSER_NAMES)}")
    return name


@dataclass
class LogProbe:
    """The lines appended to `path` during the window, parsed by `parser`."""

    path: Path
    parser: str
    _offset: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        _parser(self.parser)
        if not self.path.is_file():
            raise UsageError(f"{self.path}: no such log file",
                             hint="the probe reads the service's log as it grows")

    def describe(self) -> str:
        return f"the lines appended to {self.path}, parsed as {self.parser}"

    def begin(self, window_s: float) -> None:
        self._offset = self.path.stat().st_size

    def end(self) -> dict[str, float]:
        with self.path.open("rb") as log:
            log.seek(self._offset)
            text = log.read().decode(errors="replace")
        # a line the service was still writing at the window's start is cut: drop the first partial one
        lines = text.splitlines()
        if lines and self._offset and not text.startswith("\n"):
            lines = lines[1:]
        return parse_metrics(self.parser, "\n".join(lines), source="service")

    def close(self) -> None:
        return None


HANG_S = 120.0   # a probe command still running this long after its window hangs


@dataclass
class CommandProbe:
    """A command run for the window; its standard output parsed by `parser`."""

    argv: list[str]
    parser: str
    _process: subprocess.Popen[str] | None = field(default=None, init=False)
    _window_s: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        _parser(self.parser)
        if not self.argv:
            raise UsageError("the probe command is empty")

    def describe(self) -> str:
        return f"the output of `{' '.join(self.argv)}`, parsed as {self.parser}"

    def begin(self, window_s: float) -> None:
        self._window_s = window_s
        argv = [arg.replace("{window_s}", f"{window_s:g}") for arg in self.argv]
        try:
            self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                             start_new_session=True)
        except OSError as error:
            raise UsageError(f"the probe command cannot start: {error}",
                             hint="give the probe program's absolute path") from None

    def end(self) -> dict[str, float]:
        process = self._process
        assert process is not None, "end() before begin()"
        # The command's own length is the window (`redis-benchmark -n N` runs until N requests are
        # served): a slow window is the evidence, not a fault. Cutting it short would drop exactly
        # the windows where the service was slowest, so the limit only catches a command that hangs.
        limit = max(HANG_S, 10 * self._window_s)
        try:
            out, err = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            self.close()
            raise MetricsError(f"the probe command was still running {limit:g} s after its window",
                               hint="a probe command must end on its own; is it waiting for input?") from None
        finally:
            self._process = None
        if process.returncode != 0:
            raise MetricsError(f"the probe command exited {process.returncode}: {err.strip()[-300:]}")
        return parse_metrics(self.parser, out, source="command")

    def close(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)   # ours: its own session, by its PID
            process.wait()
        self._process = None


# -- Prometheus text exposition (the subset a scrape needs: samples, labels; comments skipped) --

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}

Sample = tuple[str, dict[str, str], float]


def parse_exposition(text: str) -> list[Sample]:
    """(name, labels, value) of every sample line of a Prometheus text exposition."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        matched = _SAMPLE.match(line)
        if matched is None:
            continue   # a line of a format this subset does not read (the spec's rare corners)
        name, labels, value = matched.groups()
        pairs = {k: re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], v)
                 for k, v in _LABEL.findall(labels or "")}
        try:
            samples.append((name, pairs, float(value)))
        except ValueError:
            continue
    return samples


def pick(samples: list[Sample], metric: str, series: Series) -> float:
    """The one sample `series` names; an error that says what the endpoint has instead."""
    found = [v for name, labels, v in samples
             if name == series.name and all(labels.get(k) == want for k, want in series.labels.items())]
    if len(found) == 1:
        if math.isnan(found[0]):
            raise MetricsError(f"{metric}: {series.name} reads NaN (nothing observed in its window?)")
        return found[0]
    wanted = series.name + ("{" + ",".join(f'{k}="{v}"' for k, v in series.labels.items()) + "}"
                            if series.labels else "")
    if not found:
        names = sorted({name for name, _, _ in samples})
        close = difflib.get_close_matches(series.name, names, n=3)
        raise MetricsError(f"{metric}: the endpoint has no series {wanted}",
                           hint=("similar: " + ", ".join(close)) if close else f"it has {len(names)} names")
    raise MetricsError(f"{metric}: {len(found)} series match {wanted}",
                       hint="add labels to the series so that one matches")


@dataclass
class PrometheusProbe:
    """A Prometheus text endpoint on loopback, scraped at the window's start and end."""

    url: str
    series: dict[str, Series]
    clock: Callable[[], float] = time.monotonic
    _first: tuple[float, list[Sample]] | None = field(default=None, init=False)
    # loopback: never through a proxy the environment names
    _opener: urllib.request.OpenerDirector = field(
        default_factory=lambda: urllib.request.build_opener(urllib.request.ProxyHandler({})), init=False)

    def describe(self) -> str:
        return f"{self.url} (Prometheus: {', '.join(f'{m} = {s.name}' for m, s in self.series.items())})"

    def _scrape(self) -> tuple[float, list[Sample]]:
        try:
            with self._opener.open(self.url, timeout=10) as answer:
                text = answer.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as error:
            raise MetricsError(f"{self.url} did not answer: {getattr(error, 'reason', error)}",
                               hint="is the service (or its exporter) running and listening there?") from None
        return self.clock(), parse_exposition(text)

    def begin(self, window_s: float) -> None:
        self._first = self._scrape()

    def end(self) -> dict[str, float]:
        assert self._first is not None, "end() before begin()"
        (t0, before), (t1, after) = self._first, self._scrape()
        self._first = None
        values = {}
        for metric, series in self.series.items():
            value = pick(after, metric, series)
            if series.rate:
                start = pick(before, metric, series)
                if value < start:
                    raise MetricsError(f"{metric}: counter {series.name} went back ({start:g} -> {value:g})",
                                       hint="the service restarted in the window; the window is left out")
                value = (value - start) / max(t1 - t0, 1e-9)
            values[metric] = value * series.scale
        return values

    def close(self) -> None:
        return None
