"""Process titles over time: each target process's cmdline when first read and whenever it changes.

Problem: servers that fork a process per role (PostgreSQL, nginx, php-fpm) say the role only in
the process title they write over their argv (`postgres: checkpointer`), so /proc/PID/cmdline
changes while the comm stays `postgres`, and no tracepoint fires (task_rename is for comm
writes; a title is a plain store into the process's own memory). A backend retitles itself
with every query state (`... idle`, `... SELECT`), and a forked child carries its parent's
title until it writes its own.

Approach: a poll. While a capture runs, the observe loop (capture.py, every POLL_INTERVAL_S =
0.25 s) reads /proc/PID/cmdline of every target process and records a row (ts, pid, title)
when a process is first read and whenever its title differs from the last row of that pid.
A title that lived shorter than one period between two reads is not seen; a role is the stable
part of a title (analyze/titles.py), which lives as long as its process, so the poll misses
roles only of processes shorter-lived than a period. The proc connector would see every
retitle-free fork/exec but not a title write either, so it would not save the reads. Cost,
measured on this 2-core host (docs/capture.md "Process titles"): 35-46 us a read (open, read,
close of /proc/PID/cmdline, and the compare), so a poll of PostgreSQL's 14 processes is about
0.6 ms of the observer's CPU every 0.25 s, 0.26% of one CPU.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from threadwise.observe.procfs import PROC, _read


@dataclass(frozen=True)
class ProcessTitle:
    """A `process_title` row (schema migration 8): a process's title as of `ts` (monotonic ns).
    `upid` is filled by finalize.sql (None until then)."""

    ts: int
    pid: int
    title: str
    upid: int | None = None


def read_title(pid: int) -> str | None:
    """/proc/PID/cmdline with its NULs as spaces (how `ps` shows a title); None: gone or unreadable.
    A kernel thread's empty cmdline is no title either."""
    raw = _read(PROC / str(pid) / "cmdline")
    if not raw:
        return None
    return raw.replace("\0", " ").strip() or None


class TitleWatch:
    """The last title recorded per pid; `poll` returns the rows of titles new or changed since."""

    def __init__(self) -> None:
        self.last: dict[int, str] = {}
        self.reads = 0
        self.read_ns = 0     # time spent in poll, for the capture's cost figure

    def poll(self, pids: Iterable[int]) -> list[ProcessTitle]:
        started = time.monotonic_ns()
        rows = []
        for pid in sorted(pids):
            title = read_title(pid)
            self.reads += 1
            if title is None or self.last.get(pid) == title:
                continue
            self.last[pid] = title
            rows.append(ProcessTitle(time.monotonic_ns(), pid, title))
        self.read_ns += time.monotonic_ns() - started
        return rows
