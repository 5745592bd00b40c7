"""Parse the tracer's compact text stream into Arrow batches per raw table.

Problem: bpftrace can only hand events to user space as text. Parsing must keep
up with tens of thousands of events per second on 2 cores and must never drop
a line silently.
Approach: one line per event, a one-letter kind first, numbers next, the comm
(which may contain spaces) last. The parser keeps the partial tail of a chunk
for the next call, appends parsed fields to column lists, and turns them into
Arrow tables of the raw tables' schemas (schema.py, derived from schema_v1.sql).
Lines it does not understand are counted (`unparsed`) and kept as samples,
never ignored silently. The format is written out in tracers/sched_stream.bt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pyarrow as pa

from threadwise.observe.schema import CLONE_THREAD, SCHEMAS

_LOST = re.compile(r"^Lost (\d+) events")
_COUNT = re.compile(r"^@events\[(\w+)\]: (\d+)")
_PENDING = re.compile(r"^@pend\[(\d+)\]: \((\d+), (-?\d+), (-?\d+), (-?\d+), (-?\d+), (-?\d+)\)")
# Lines bpftrace itself prints that carry no event.
_NOISE = ("Attaching ", "@pend", "@seen", "@tracer")


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


@dataclass
class ParsedChunk:
    """What one call to `StreamParser.feed` produced."""

    tables: dict[str, pa.Table]
    lost: list[int] = field(default_factory=list)


class StreamParser:
    """Incremental parser of sched_stream.bt output."""

    def __init__(self) -> None:
        self._tail = ""
        self._cols: dict[str, list[list]] = {}
        self._reset_columns()
        self.live_ts: int | None = None   # "B": tracing is live
        self.end_ts: int | None = None    # "E": END probe ran
        self.kernel_counts: dict[str, int] = {}
        self.unparsed = 0
        self.unparsed_samples: list[str] = []
        self._lost: list[int] = []

    def _reset_columns(self) -> None:
        self._cols = {name: [[] for _ in schema] for name, schema in SCHEMAS.items()}

    def feed(self, text: str) -> ParsedChunk:
        """Parse complete lines of `text` (a trailing partial line waits for more)."""
        text = self._tail + text
        lines = text.split("\n")
        self._tail = lines.pop()
        for line in lines:
            if line:
                self._line(line)
        return self._flush()

    def close(self) -> ParsedChunk:
        """Parse whatever is left (the stream ended)."""
        if self._tail:
            self._line(self._tail)
            self._tail = ""
        return self._flush()

    def _flush(self) -> ParsedChunk:
        tables = {
            name: pa.table(cols, schema=SCHEMAS[name])
            for name, cols in self._cols.items()
            if cols[0]
        }
        self._reset_columns()
        lost, self._lost = self._lost, []
        return ParsedChunk(tables=tables, lost=lost)

    def _add(self, table: str, values: tuple) -> None:
        for column, value in zip(self._cols[table], values, strict=True):
            column.append(value)

    def _line(self, line: str) -> None:
        kind = line[0]
        try:
            if line[1] != " ":
                raise ValueError
            if kind == "S":
                ts, cpu, prev, state, pprio, nxt, nprio = line[2:].split(" ")
                self._add("raw_sched_switch", (int(ts), int(cpu), int(prev), int(state), int(pprio),
                                               int(nxt), int(nprio)))
            elif kind in "WN":
                fields = line[2:].split(" ")
                if len(fields) == 5:   # a stream of a script before the context (migration 7)
                    fields += [None, None]
                ts, cpu, waker, wakee, target, context, current = fields
                self._add("raw_sched_waking", (int(ts), int(cpu), int(waker), int(wakee), int(target),
                                               kind == "N", _int(context), _int(current)))
            elif kind == "M":
                ts, cpu, tid, orig, dest = line[2:].split(" ")
                self._add("raw_sched_migrate", (int(ts), int(cpu), int(tid), int(orig), int(dest)))
            elif kind == "F":
                ts, cpu, ptid, ptgid, child, flags, comm = line[2:].split(" ", 6)
                flags_int = int(flags)
                tgid = int(ptgid) if flags_int & CLONE_THREAD else int(child)
                self._add("raw_task_new", (int(ts), int(cpu), int(ptid), int(ptgid), int(child), tgid,
                                           flags_int, comm))
            elif kind == "X":
                ts, cpu, tid, tgid, comm = line[2:].split(" ", 4)
                self._add("raw_task_exit", (int(ts), int(cpu), int(tid), int(tgid), comm))
            elif kind == "R":
                ts, cpu, tid, names = line[2:].split(" ", 3)
                old, _, new = names.partition("|")
                self._add("raw_task_rename", (int(ts), int(cpu), int(tid), old, new))
            elif kind == "T":
                ts, tid, tgid, comm = line[2:].split(" ", 3)
                self._add("raw_task_seen", (int(ts), int(tid), int(tgid), comm))
            elif kind == "B":
                self.live_ts = int(line[2:])
            elif kind == "E":
                self.end_ts = int(line[2:])
            else:
                raise ValueError
        except (ValueError, IndexError):
            self._other(line)

    def _other(self, line: str) -> None:
        if m := _LOST.match(line):
            self._lost.append(int(m.group(1)))
        elif m := _COUNT.match(line):
            self.kernel_counts[m.group(1)] = int(m.group(2))
        elif m := _PENDING.match(line):
            # A tracer switch-out still deferred at END (see sched_stream.bt).
            ts, prev, state, pprio, nxt, nprio = (int(g) for g in m.groups()[1:])
            if ts:
                self._add("raw_sched_switch", (ts, int(m.group(1)), prev, state, pprio, nxt, nprio))
        elif line.startswith(_NOISE) or not line.strip():
            pass
        else:
            self.unparsed += 1
            if len(self.unparsed_samples) < 5:
                self.unparsed_samples.append(line[:200])
