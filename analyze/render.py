"""Plain-text tables of an Analysis for terminals and logs (stable layout, no colour)."""

from __future__ import annotations

from typing import Any

import polars as pl

from threadwise.analyze.contract import POLLER_CPU_PER_WAKEUP_NS, POLLER_SHARE
from threadwise.analyze.model import Analysis
from threadwise.analyze.requests import IRREGULAR_CV, SHORT_RUN_NS, STREAM_PER_S


def _us(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e3:,.0f}"


def _table(headers: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                                for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()
    return [line(headers), *[line(r) for r in rows]]


GLOSSARY_DOC = "docs/analyze.md#reading-the-output"

# Every word `render` prints that is not plain English, in the order it appears.
# docs/analyze.md ("Reading the output") holds the same terms; a test keeps them in step.
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("events lost", "tracer events that never reached the capture (ring-buffer drops plus gaps in a "
                    "CPU's switch chain); the final figure of `observe`, which its live progress may "
                    "not have seen yet"),
    ("names separate roles", "yes when thread names tell the groups apart; NO when all threads of a "
                             "group share the process's own name, so groups are split by behaviour "
                             "(average runtime per run, scx_layered AvgRuntime) instead"),
    ("pattern", "the group's normalised thread-name pattern: numbers collapse (worker-3 -> worker-*)"),
    ("role", "compute, latency, housekeeping, batch or default: the role prototype the group's "
             "behaviour is closest to"),
    ("conf", "confidence in the role, 0..1 (the winning role's share); below 0.5 the profile treats "
             "the group as default"),
    ("thr", "threads in the group"),
    ("cpus", "the group's CPU time / capture duration, in CPUs (2.0 = two CPUs kept busy)"),
    ("max/thr", "the same for the group's busiest single thread"),
    ("slice50us, slice99us", "on-CPU slice length p50 / p99, microseconds"),
    ("wake/s", "wakeups the group received per second (a table of edges: wakeups along that edge)"),
    ("rq50us, rq99us", "run-queue latency p50 / p99: time runnable but waiting for a CPU, microseconds"),
    ("chain", "yes when the group is part of one of the busiest wake chains (A wakes B wakes C)"),
    ("select (comm prefix)", "the comm prefixes (<= 15 characters) scx_layered matches the group by; "
                             "!x excludes a prefix, +avgrun[a..b] is a behaviour split, +uid=N selects "
                             "only threads running as user N (a process-title split, scx_layered "
                             "UIDEquals), +title='p: role' selects processes by title (a hinted "
                             "layer, HintEquals), NOT separable: no prefix set tells it from another group"),
    ("demand", "share of the thread's life spent running or runnable (1.0 = always wants a CPU); "
               "max over the group"),
    ("preempted", "share of its slices that ended while still runnable (preempted or yielded), not by "
                  "sleeping"),
    ("wake-cv", "coefficient of variation of the time between wakeups or of the sleeps they end, "
                "whichever is lower (median over the group's threads with 3 or more wakeups; a sleep "
                "holds no wait for a CPU, so a busy host does not move a timer's): low (< 0.3) = "
                "periodic, ~1 = random"),
    ("rq-behind-other", "share of its run-queue wait spent behind threads of other processes "
                        "(background load), not its own"),
    ("pollers", f"threads of the group that stay busy with few wakeups (>= {POLLER_SHARE} CPU and >= "
                f"{POLLER_CPU_PER_WAKEUP_NS / 1e6:g} ms of CPU per wakeup received: they spin between "
                "wakeups), the busiest named below the table; synthesize gives them no preempt"),
    ("requests", "how far the group is woken by requests from outside the workload, 0..1: a softirq "
                 f"or another process woke it, irregularly (wake-cv >= {IRREGULAR_CV}) or at a stream's "
                 f"rate (>= {STREAM_PER_S:g} wakeups/s), for short runs "
                 f"(slice p50 <= {SHORT_RUN_NS / 1e6:g} ms), weighted by its threads' wakeups; the role "
                 "model reads it as latency evidence beside wake chains, the busiest such thread named "
                 "below the table; - when the capture did not record what woke its threads"),
    ("names", "the observed thread names (comm, as the kernel truncates them to 15 characters)"),
    ("busiest wake chains", "the most frequent paths of causal wake edges between patterns, with their "
                            "rate and wake-to-run latency"),
    ("waker, wakee", "who woke whom; the number in brackets, e.g. feeder (66), is the thread's utid, the "
                     "capture's id for one thread (tids are reused, utids are not)"),
    ("share", "this edge's share of all the wakee's wakeups"),
    ("lift", "share / the share a bystander holding the CPU would get by chance (interrupts land on "
             "whoever runs); an edge is causal at lift >= 2"),
    ("lat50us", "wake-to-run latency p50 along this edge, microseconds"),
    ("by", "how the edge was found causal: thread (this waker alone passes the lift test) or pool "
           "(the waker's group together carries the wakee's wakeups, e.g. busy producers feeding a "
           "queue)"),
    ("who took the CPU", "CPU time other processes ran while target threads were preempted or waiting"),
    ("caveats", "what a reader of the profile must know: loss, truncated names, tid reuse, threads "
                "seen only once, ..."),
)

# What `synthesize` makes of each role (docs/profile-schema.md has the layer and its options).
TREATMENTS: tuple[tuple[str, str], ...] = (
    ("exclusive (role compute, with a hot thread)", "whole physical cores of its own (a Confined, "
     "exclusive layer; SMT siblings kept idle); demoted to a Grouped layer when the shape has no room"),
    ("latency (role latency)", "an Open layer that preempts, 1 ms slices: wake chains run soon after "
     "they are woken"),
    ("poller (a group with pollers)", "never preempts on shared CPUs: where its role asks for latency "
     "it gets exclusive cores when every thread of it is hot (demoted, not preempting, when the shape "
     "has no room), else the latency layer with preempt = false; the other treatments do not preempt, "
     "or (exclusive) only on cores of their own"),
    ("batch (role batch)", "an Open layer with weight 50 and 20 ms slices: throughput, yields to others"),
    ("housekeeping (role housekeeping)", "an Open layer with weight 10: runs when nothing else wants "
     "the CPU"),
    ("default", "an ordinary Open layer (also for a low-confidence role, a compute group without a hot "
     "thread, or a group names cannot separate)"),
)


def explain() -> str:
    """The glossary `analyze --explain` prints."""
    lines = ["columns and terms of `threadwise analyze`:"]
    lines += [f"  {term}\n      {meaning}" for term, meaning in GLOSSARY]
    lines += ["", "treatments (what `threadwise synthesize` gives each role):"]
    lines += [f"  {term}\n      {meaning}" for term, meaning in TREATMENTS]
    lines += ["", f"also in {GLOSSARY_DOC}"]
    return "\n".join(lines)


def render(analysis: Analysis, *, top_edges: int = 10) -> str:
    a = analysis
    lines = [f"process    {a.process_name or '?'}   capture {a.duration_ns / 1e9:.2f} s on "
             f"{a.nr_cpus} CPUs   {a.events_lost:,} events lost",
             f"groups     {a.groups.height}   names separate roles: "
             f"{'yes' if a.names_separate_roles else 'NO'}", "", "groups and roles:"]
    rows = []
    for g in a.groups.iter_rows(named=True):
        prefixes = ",".join(g["match_prefixes"]) + ("".join(f" !{e}" for e in g["exclude_prefixes"]))
        if g["avg_runtime_range_ns"]:
            lo, hi = g["avg_runtime_range_ns"]
            prefixes += f" +avgrun[{_us(lo)}us..{'inf' if hi >= 2**62 else _us(hi) + 'us'}]"
        if g.get("uid") is not None:
            prefixes += f" +uid={g['uid']}"
        if g.get("title_patterns"):   # a hinted layer: the title alone selects it
            prefixes = " ".join(f"+title={t!r}" for t in g["title_patterns"])
        rows.append([g["pattern"], g["role"], f"{g['confidence']:.2f}", str(g["thread_count"]),
                     f"{g['cpu_share']:.3f}", f"{g['max_thread_share']:.2f}", _us(g["slice_p50_ns"]),
                     _us(g["slice_p99_ns"]), f"{g['wakeups_per_s']:,.1f}", _us(g["rq_latency_p50_ns"]),
                     _us(g["rq_latency_p99_ns"]), "yes" if g["in_wake_chain"] else "-",
                     prefixes + ("" if g["separable"] else "  (NOT separable)")])
    lines += _table(["pattern", "role", "conf", "thr", "cpus", "max/thr", "slice50us", "slice99us",
                     "wake/s", "rq50us", "rq99us", "chain", "select (comm prefix)"], rows,
                    right={2, 3, 4, 5, 6, 7, 8, 9, 10})
    lines += ["", "evidence:"]
    ev = []
    for g in a.groups.iter_rows(named=True):
        ev.append([g["pattern"], f"{g['demand']:.2f}" if g["demand"] is not None else "-",
                   f"{g['involuntary_frac']:.2f}" if g["involuntary_frac"] is not None else "-",
                   f"{g['wake_interval_cv']:.2f}" if g["wake_interval_cv"] is not None else "-",
                   f"{g['wait_behind_other_share']:.2f}" if g["wait_behind_other_share"] is not None
                   else "-", str(g.get("poller_threads") or "-"),   # absent: stored before issue 23
                   f"{g['request_driven']:.2f}" if g.get("request_driven") is not None else "-",
                   ", ".join(g["names"][:4]) + (" ..." if len(g["names"]) > 4 else "")])
    lines += _table(["pattern", "demand", "preempted", "wake-cv", "rq-behind-other", "pollers", "requests",
                     "names"], ev, right={1, 2, 3, 4, 5, 6})
    lines += [f"  poller in {g['pattern']}: {g['poller_evidence']}" for g in a.groups.iter_rows(named=True)
              if g.get("poller_evidence")]
    lines += [f"  requests wake {g['pattern']}: {g['request_evidence']}"
              for g in a.groups.iter_rows(named=True) if g.get("request_evidence")]
    chains = a.pattern_chains.filter(pl.col("busiest")) if not a.pattern_chains.is_empty() \
        else a.pattern_chains
    lines += ["", "busiest wake chains (by pattern):"]
    if chains.is_empty():
        lines.append("  (none)")
    for c in chains.iter_rows(named=True):
        lines.append(f"  {' -> '.join(c['patterns'])}   {c['rate_per_s']:,.1f}/s over "
                     f"{c['threads_chains']} thread chain(s), wake-to-run p50 {_us(c['latency_p50_ns'])} us "
                     f"(p99 {_us(c['latency_p99_ns'])} us)")
    edges = a.wake_edges.filter(pl.col("causal")).head(top_edges) if not a.wake_edges.is_empty() \
        else a.wake_edges
    lines += ["", f"top causal wake edges (of {a.wake_edges.height} seen):"]
    rows = [[f"{e['waker']} ({e['waker_utid']})", f"{e['wakee']} ({e['wakee_utid']})",
             f"{e['wakeups_per_s']:,.1f}", f"{e['share_of_wakee']:.2f}", f"{e['lift']:.1f}",
             _us(e["latency_p50_ns"]), e.get("judged_by") or "-"] for e in edges.iter_rows(named=True)]
    lines += _table(["waker", "wakee", "wake/s", "share", "lift", "lat50us", "by"], rows,
                    right={2, 3, 4, 5}) \
        if rows else ["  (none)"]
    if not a.preemptors.is_empty():
        by_process = (a.preemptors.group_by("preemptor_process")
                      .agg(pl.col("preemptions").sum(), pl.col("taken_ns").sum())
                      .sort(["taken_ns", "preemptor_process"], descending=[True, False], nulls_last=True)
                      .head(5))
        lines += ["", "who took the CPU from target threads (by process):"]
        lines += [f"  {r['preemptor_process'] or '?':<20} {r['taken_ns'] / 1e6:>10,.1f} ms over "
                  f"{r['preemptions']:,} preemptions" for r in by_process.iter_rows(named=True)]
    if a.caveats:
        lines += ["", "caveats:", *[f"  - {c}" for c in a.caveats]]
    lines += ["", f"what each column means: threadwise analyze --explain ({GLOSSARY_DOC})"]
    return "\n".join(lines)
