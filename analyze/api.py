"""`analyze_capture(path) -> Analysis`: the analyze stage end to end (and `capture_threads`).

Reads the capture read-only (observe's `open_capture`), computes features,
the wake graph, groups, roles and prefixes, and collects caveats a reader of
the profile must know (lost events, truncated names, inseparable groups).
Storing the result back into the capture is a separate step (store.py).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

import threadwise.analyze.features as ft
import threadwise.analyze.groups as gr
import threadwise.analyze.names as nm
import threadwise.analyze.requests as rq
import threadwise.analyze.wakegraph as wg
from threadwise.analyze.model import GROUP_SCHEMA, Analysis
from threadwise.errors import InputError
from threadwise.observe.store import open_capture

SPINNER_DEMAND = 0.95        # runnable this much of its life, and this share of switches involuntary
# DuckDB's memory limit for analysis. Sorts, joins and plain aggregates spill to a temporary
# directory beyond it, so a capture of any size is analyzed in bounded memory, except for the
# exact percentiles (quantile_disc): a holistic aggregate keeps every value of its group in
# memory, and with 2 threads both partial states while combining. The busiest group of a
# 100M-event capture holds ~50M slices (400 MB per state), which failed at 1 GB; 2.5 GB holds
# it with peak RSS within 4 GB (benchmarks/analyze_scale.py, RESULTS.md).
DUCKDB_MEMORY_LIMIT = "2560MB"


@dataclass(frozen=True)
class CaptureThreads:
    """Per-thread features of a capture, without grouping or roles (what lint reads)."""

    duration_ns: int        # the analysis window (features.CaptureInfo.duration_ns)
    threads: pl.DataFrame   # thread_features.sql: utid, name, process_name, is_target, cpu_share, demand, ...
    corun: pl.DataFrame     # smt_corun.sql: utid (a target thread), other_utid, corun_ns; empty without SMT
    # upid -> its process's last title (features.process_titles); a target process without one is absent
    titles: dict[int, str] = field(default_factory=dict)


def capture_threads(path: str | Path, *, only_target: bool = True,
                    memory_limit: str = DUCKDB_MEMORY_LIMIT) -> CaptureThreads:
    """The per-thread features and SMT co-running `analyze_capture` starts from."""
    with open_capture(_capture_file(path)) as con, _bounded(con, memory_limit):
        info = ft.capture_info(con)
        return CaptureThreads(info.duration_ns, ft.thread_features(con, info, only_target=only_target),
                              ft.smt_corun(con, smt=info.smt, min_ns=1), ft.process_titles(con))


@contextlib.contextmanager
def _bounded(con: duckdb.DuckDBPyConnection, memory_limit: str) -> Iterator[None]:
    """DuckDB within `memory_limit`, spilling to a private temporary directory (removed after).

    Not beside the capture, DuckDB's default: a capture may sit in a directory we cannot write.
    """
    scratch = tempfile.mkdtemp(prefix="threadwise-analyze-")
    try:
        con.execute("SET memory_limit = ?", [memory_limit]).fetchall()
        con.execute("SET temp_directory = ?", [scratch]).fetchall()
        yield
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _capture_file(path: str | Path) -> Path:
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a capture file",
                         hint="pass the .duckdb file written by `threadwise observe`")
    return path


def analyze_capture(path: str | Path, *, memory_limit: str = DUCKDB_MEMORY_LIMIT) -> Analysis:
    """Analyze one finished capture file (see docs/interfaces.md)."""
    path = _capture_file(path)
    with open_capture(path) as con, _bounded(con, memory_limit):
        analysis = _analyze(con)
    analysis.capture_path = path
    return analysis


def _analyze(con: duckdb.DuckDBPyConnection) -> Analysis:
    info = ft.capture_info(con)
    caveats: list[str] = []
    threads = rq.with_request_evidence(ft.thread_features(con, info, only_target=True), ft.wake_sources(con))
    rivals = ft.cpu_rivals(con)
    edges_raw = ft.wake_edges(con)
    utids = sorted(set(threads["utid"].to_list()) | set(rivals["other_utid"].to_list())
                   | set(edges_raw["waker_utid"].to_list()) | set(edges_raw["wakee_utid"].to_list()))
    who = ft.thread_names(con, utids)
    threads = _with_rivals(threads, rivals, who).with_columns(poller=gr.poller_expr())
    spinners = frozenset(threads.filter(
        (pl.col("demand") >= SPINNER_DEMAND) & (pl.col("involuntary") >= SPINNER_DEMAND * pl.col("slices"))
    )["utid"].to_list())
    pattern_of_name = nm.patterns_of(threads["name"].fill_null("?").to_list())
    first_patterns = {u: pattern_of_name[n or "?"] for u, n in zip(threads["utid"], threads["name"],
                                                                  strict=True)}
    # the pool rule keeps reading the gaps alone: a pool's steady cadence can make its wakee's
    # sleeps regular enough to pass for a timer (the JVM pool's writer on a quiet host: sleeps'
    # CV 0.41, gaps' 0.96; pool_min_cv is 0.5)
    wake_cv = dict(zip(threads["utid"].to_list(), threads["wake_gap_cv"].to_list(), strict=True))
    edges = wg.classify_edges(edges_raw, who, duration_ns=info.duration_ns, spinners=spinners,
                              pattern_of=first_patterns, wake_cv=wake_cv)
    chains = wg.find_chains(edges, first_patterns)
    members = wg.chain_members(chains)
    grouping = gr.assign(threads, process_name=info.process_name, duration_ns=info.duration_ns,
                         chain_utids=members, processes=ft.target_processes(con))
    caveats += grouping.caveats
    if not chains.is_empty():   # re-label chains with the final group patterns
        final = {u: grouping.pattern_of_key.get(k, k) for u, k in grouping.key_of.items()}
        chains = wg.find_chains(edges, final)
    grouped = threads.filter(pl.col("utid").is_in(list(grouping.key_of)))
    groups = _groups(con, grouped, grouping, info.duration_ns, members)
    # a thread's group by row: a behaviour split gives two groups one pattern (docs/interfaces.md)
    group_id = {k: i for i, k in enumerate(groups["pattern"].to_list())}

    other_names = con.execute(ft.sql("capture", "other_names")).fetchall()
    groups = (gr.finish(groups, grouping, other_names=[r[0] for r in other_names],
                        duration_ns=info.duration_ns)
              if not groups.is_empty() else pl.DataFrame(schema=GROUP_SCHEMA))
    caveats += _caveats(con, info, threads, groups)
    caveats = list(dict.fromkeys(caveats))   # a group's note may already be a caveat (titles.py)
    return Analysis(
        groups=groups, process_name=info.process_name, duration_ns=info.duration_ns,
        nr_cpus=info.nr_cpus, events_lost=info.events_lost, caveats=caveats,
        threads=threads.with_columns(
            group=pl.col("utid").replace_strict(
                {u: grouping.pattern_of_key.get(k, k) for u, k in grouping.key_of.items()},
                default=None, return_dtype=pl.String),
            group_id=pl.col("utid").replace_strict(
                {u: group_id[k] for u, k in grouping.key_of.items() if k in group_id},
                default=None, return_dtype=pl.Int64)),
        wake_edges=edges, chains=chains, pattern_chains=wg.pattern_chains(chains),
        preemptors=_preemptors(rivals, threads, who),
        smt_corun=_corun(con, info.smt), capture_id=info.capture_id,
        names_separate_roles=grouping.names_separate_roles, cgroup=info.cgroup,
        short_lived=sorted(set(threads.filter(pl.col("utid").is_in(list(grouping.short_lived)))["name"]
                               .drop_nulls().to_list())),
        cgroup_cpu_quota_us=info.cgroup_cpu_quota_us, cgroup_cpu_period_us=info.cgroup_cpu_period_us)


def _with_rivals(threads: pl.DataFrame, rivals: pl.DataFrame, who: pl.DataFrame) -> pl.DataFrame:
    """Add wait_behind_other_ns: run-queue time behind threads of other processes (idle excluded)."""
    upid = who.select(pl.col("utid").alias("other_utid"), pl.col("upid").alias("other_upid"))
    own = threads.select("utid", pl.col("upid").alias("own_upid"))
    behind = (rivals.filter(pl.col("kind") == "waited_behind")
              .join(upid, on="other_utid", how="left").join(own, on="utid", how="left")
              .filter((pl.col("other_utid") != 0)
                      & (pl.col("other_upid").is_null() | (pl.col("other_upid") != pl.col("own_upid"))))
              .group_by("utid").agg(wait_behind_other_ns=pl.col("ns").sum().cast(pl.Int64)))
    return (threads.join(behind, on="utid", how="left")
            .with_columns(pl.col("wait_behind_other_ns").fill_null(0)))


def _preemptors(rivals: pl.DataFrame, threads: pl.DataFrame, who: pl.DataFrame) -> pl.DataFrame:
    unknown = pl.format("tid {}", "tid")   # a thread the capture never learnt the name of
    info = who.select(pl.col("utid").alias("other_utid"),
                      pl.coalesce("name", unknown).alias("preemptor"),
                      pl.coalesce("process_name", "name", unknown).alias("preemptor_process"))
    return (rivals.filter(pl.col("kind") == "preempted_by")
            .join(threads.select("utid", "name"), on="utid", how="left")
            .join(info, on="other_utid", how="left")
            .select("utid", "name", pl.col("other_utid").alias("preemptor_utid"), "preemptor",
                    "preemptor_process", pl.col("events").alias("preemptions"),
                    pl.col("ns").alias("taken_ns"))
            .sort(["taken_ns", "utid", "preemptor_utid"], descending=[True, False, False]))


def _corun(con: duckdb.DuckDBPyConnection, smt: bool) -> pl.DataFrame:
    """SMT co-running pairs with both threads' names (empty without SMT)."""
    pairs = ft.smt_corun(con, smt=smt)
    if pairs.is_empty():
        return pairs.with_columns(name=pl.lit(None, pl.String), other=pl.lit(None, pl.String),
                                  other_process=pl.lit(None, pl.String))
    who = ft.thread_names(con, sorted(set(pairs["utid"].to_list()) | set(pairs["other_utid"].to_list())))
    return (pairs.join(who.select("utid", "name"), on="utid", how="left")
            .join(who.select(pl.col("utid").alias("other_utid"), pl.col("name").alias("other"),
                             pl.col("process_name").alias("other_process")), on="other_utid", how="left")
            .sort(["corun_ns", "utid", "other_utid"], descending=[True, False, False]))


def _groups(con: duckdb.DuckDBPyConnection, threads: pl.DataFrame, grouping: gr.Grouping,
            duration_ns: int, members: set[int]) -> pl.DataFrame:
    if threads.is_empty():
        return pl.DataFrame(schema=GROUP_SCHEMA)
    keys = sorted(set(grouping.key_of.values()))
    ids = {k: i for i, k in enumerate(keys)}
    mapping = pl.DataFrame({"utid": list(grouping.key_of), "group_id": [ids[k] for k in
                                                                        grouping.key_of.values()]},
                           schema={"utid": pl.Int64, "group_id": pl.Int64})
    exact = ft.group_percentiles(con, mapping).with_columns(
        pattern=pl.col("group_id").replace_strict(dict(enumerate(keys)), return_dtype=pl.String)
    ).drop("group_id")
    return gr.aggregate(threads, grouping.key_of, duration_ns=duration_ns, chain_utids=members,
                        exact=exact)


def _caveats(con: duckdb.DuckDBPyConnection, info: ft.CaptureInfo, threads: pl.DataFrame,
             groups: pl.DataFrame) -> list[str]:
    out: list[str] = []
    if info.events_lost:
        total = info.events_recorded + info.events_lost
        out.append(f"{info.events_lost:,} events were lost ({100 * info.events_lost / max(total, 1):.2f}% "
                   "of those the kernel emitted): counts, rates and latencies are lower bounds, "
                   "and slices around a gap may be merged")
    if threads.is_empty():
        out.append("no target threads in the capture: nothing to group")
    elif threads["slices"].sum() == 0:
        out.append("no target thread ran during the capture: roles are guesses (all default)")
    if info.end_ts != info.capture_end_ts:
        out.append(f"the tracer stopped {(info.capture_end_ts - info.end_ts) / 1e9:.1f} s after the last "
                   "event: the analysis window ends at the last event")
    if info.duration_ns < 2_000_000_000:
        out.append(f"short capture ({info.duration_ns / 1e9:.2f} s): rates and periodicity are rough")
    missing = rq.missing_context_caveat(threads)
    if missing:
        out.append(missing)
    unnamed = threads.filter(pl.col("name") == "?").height
    if unnamed:
        out.append(f"{unnamed} target thread(s) have no known name ('?'): no prefix can select them")
    once = threads.filter(pl.col("slices") == 1)["name"].to_list()
    if once:
        out.append(f"{len(once)} thread(s) ran only once ({', '.join(sorted(set(once))[:3])}): "
                   "their features are single samples")
    reused = con.execute(ft.sql("capture", "reused_tids")).fetchone()
    if reused and reused[0]:
        out.append(f"{reused[0]} tid(s) were reused during the capture: each life is a separate thread")
    cut = sorted({n for n in threads["name"].drop_nulls().to_list() if nm.maybe_truncated(n)})
    if cut:
        out.append(f"{len(cut)} name(s) are 15 characters, the kernel's limit, and may be cut short "
                   f"({', '.join(cut[:3])}): prefixes use the 15 characters the kernel keeps")
    # (behaviour-split and unnamed groups are explained by the split's own caveat)
    noted = groups.filter(pl.col("note").is_not_null() & pl.col("avg_runtime_range_ns").is_null()
                          & ~pl.col("note").str.starts_with("names do not separate roles"))
    for row in noted.iter_rows(named=True):
        if row["note"]:
            out.append(f"group {row['pattern']}: {row['note']}")
    if info.end_reason and info.end_reason != "duration":
        out.append(f"the capture ended by {info.end_reason}")
    return out
