"""Probes: where a canary reads a live service's metrics over one window.

A probe is started when a window begins and read when it ends; what it read is parsed by one of
the ladder's parsers (refine/measure/metrics.py), so a canary reads a service as its training did.
- `LogProbe`: the lines the service appended to its log file during the window (rolesim's report
  lines, a service's own JSON lines);
- `CommandProbe`: a command run for the window (`{window_s}` in its argv is the window's length),
  whose output is parsed: `redis-cli --latency` style tools, or a client of the service's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from threadwise.errors import MetricsError, UsageError
from threadwise.refine.measure.metrics import PARSER_NAMES, parse_metrics


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
        try:
            out, err = process.communicate(timeout=max(10.0, self._window_s))
        except subprocess.TimeoutExpired:
            self.close()
            raise MetricsError(f"the probe command ran past its window by {max(10.0, self._window_s):g} s",
                               hint="a probe command must end on its own within its window") from None
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
