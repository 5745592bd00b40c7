"""`analyze_fleet(captures) -> FleetAnalysis`: many hosts' captures, one set of groups.

Problem: a profile is meant for every host of a service, and the hosts differ: one runs
hotter, one lacks a thread, one reads a group's role otherwise. Training on one capture of one
host bets the fleet on that host.

Approach, in three steps:
1. Per capture, the single-capture analysis (api.analyze_capture): groups, roles and the name
   patterns that select them. A group is the same group on every host when its pattern is the
   same (name patterns are what scx_layered matches, so they are what a fleet shares).
2. Per capture and per host, the features an engine computes over the fleet's Parquet
   (fleet_features.sql, on DuckDB or Spark: fleet_engine.py): each group's CPU share per capture,
   and per host over all its captures (CPU time over the windows' sum).
3. Per group, across hosts (here, on a table of hosts x groups): the role most hosts give it,
   its CPU share sized at a stated quantile across hosts (nearest rank: the smallest host share
   with at least that fraction of hosts at or below it; p90 of 4 hosts is the busiest), and
   where the hosts disagree, in words with host counts: a role differs, the group exists on some
   hosts only, a host's share is an outlier (more than 3.5 robust z, Iglewicz-Hoaglin's cutoff,
   from the hosts' median, and at least OUTLIER_MIN_CPU apart).
The result is an AnalysisRecord (what synthesize builds a profile from) whose group rows are the
fleet's, and each group's evidence in words for the profile's comments.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import polars as pl

from threadwise.analyze.api import analyze_capture
from threadwise.analyze.contract import AnalysisRecord, GroupRow, Role
from threadwise.analyze.fleet_engine import Engine, FleetTables, engine
from threadwise.analyze.fleet_inputs import Fleet, open_fleet
from threadwise.analyze.model import Analysis
from threadwise.options import DEFAULT_HOST_QUANTILE

_FIGURES = re.compile(r"\d+(?:[.,]\d+)*")
OUTLIER_Z = 3.5          # Iglewicz and Hoaglin's modified z-score cutoff
OUTLIER_MIN_CPU = 0.05   # ...and a host this far from the median at least (tiny groups are noise)
GROUP_MAP_SCHEMA = {"host": pl.String, "capture": pl.String, "utid": pl.Int64, "pattern": pl.String}


@dataclass(frozen=True)
class GroupAcrossHosts:
    """One group's evidence across the fleet."""

    pattern: str
    hosts: list[str]                 # hosts where the group exists
    captures: int                    # captures that hold it
    share_by_host: dict[str, float]  # each host's CPU share (fleet_features.sql group_host)
    sized_share: float               # the share at the fleet's quantile
    role_by_host: dict[str, str]
    role: str                        # the role most hosts give it
    outliers: dict[str, float]       # hosts whose share stands apart, and their share

    @property
    def agreeing(self) -> int:
        """Hosts that give the group the fleet's role."""
        return sum(1 for r in self.role_by_host.values() if r == self.role)

    @property
    def dissent(self) -> list[str]:
        """`ROLE on HOST` for each host that gives it another role, by host."""
        return [f"{r} on {h}" for h, r in sorted(self.role_by_host.items()) if r != self.role]

    def words(self, fleet_hosts: int, quantile: float) -> str:
        """The evidence as the profile's comment says it."""
        shares = ", ".join(f"{h} {v:.3g}" for h, v in sorted(self.share_by_host.items()))
        text = (f"fleet: {self.pattern} on {len(self.hosts)} of {fleet_hosts} hosts "
                f"({self.captures} captures); "
                f"sized at p{quantile * 100:g} across hosts of its CPU share, {self.sized_share:.3g} "
                f"CPUs (per host: {shares}); role {self.role} on {self.agreeing} of {len(self.hosts)} hosts")
        if self.dissent:
            text += f" ({', '.join(sorted(self.dissent))})"
        if self.outliers:
            median = statistics.median(self.share_by_host.values())
            text += "; outlier: " + ", ".join(f"{h} {v:.3g} against a median of {median:.3g}"
                                              for h, v in sorted(self.outliers.items()))
        return text


@dataclass(frozen=True)
class FleetAnalysis:
    record: AnalysisRecord              # the fleet's groups (synthesize's input)
    groups: list[GroupAcrossHosts]      # each group's evidence across hosts
    hosts: list[str]
    captures: int
    quantile: float
    engine: str
    tables: FleetTables                 # the engine's per-thread, per-capture and per-host features
    group_map: pl.DataFrame             # host, capture, utid -> pattern: what the engine grouped by


def nearest_rank(values: list[float], quantile: float) -> float:
    """The smallest value with at least `quantile` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(quantile * len(ordered)), 1) - 1]


def outliers(shares: dict[str, float]) -> dict[str, float]:
    """Hosts whose share lies more than OUTLIER_Z robust z from the hosts' median (3 hosts at least)."""
    if len(shares) < 3:
        return {}
    median = statistics.median(shares.values())
    mad = statistics.median(abs(v - median) for v in shares.values())
    return {h: v for h, v in shares.items()
            if abs(v - median) >= OUTLIER_MIN_CPU
            and (mad == 0 or 0.6745 * abs(v - median) / mad > OUTLIER_Z)}


def group_map(fleet: Fleet, analyses: list[Analysis]) -> pl.DataFrame:
    """host, capture, utid -> pattern: every grouped thread of every capture."""
    frames = [a.threads.filter(pl.col("group").is_not_null())
              .select(pl.lit(c.host).alias("host"), pl.lit(c.capture).alias("capture"),
                      pl.col("utid").cast(pl.Int64), pl.col("group").alias("pattern"))
              for c, a in zip(fleet.captures, analyses, strict=True)]
    return pl.concat(frames) if frames else pl.DataFrame(schema=GROUP_MAP_SCHEMA)


def _host_role(rows: list[tuple[str, float]]) -> str:
    """A host's role for a group: its captures' most common; a tie goes to its busiest capture's."""
    counts = Counter(role for role, _ in rows)
    best = max(counts.values())
    tied = {role for role, n in counts.items() if n == best}
    return max((share, role) for role, share in rows if role in tied)[1]


def _across_hosts(pattern: str, roles: list[tuple[str, str, float]], host_rows: pl.DataFrame,
                  captures: int, quantile: float) -> GroupAcrossHosts:
    """roles: (host, role, share) per capture that holds the group; host_rows: its group_host rows."""
    shares = dict(zip(host_rows["host"].to_list(), host_rows["cpu_share"].to_list(), strict=True))
    by_host: dict[str, list[tuple[str, float]]] = {}
    for host, role, share in roles:
        by_host.setdefault(host, []).append((role, share))
    role_by_host = {h: _host_role(rows) for h, rows in by_host.items()}
    votes = Counter(role_by_host.values())
    top = max(votes.values())
    role = max((sum(shares.get(h, 0.0) for h, r in role_by_host.items() if r == candidate), candidate)
               for candidate, n in votes.items() if n == top)[1]
    return GroupAcrossHosts(pattern, sorted(shares), captures, shares,
                            nearest_rank(list(shares.values()), quantile), role_by_host, role,
                            outliers(shares))


def _fleet_row(group: GroupAcrossHosts, rows: list[tuple[str, GroupRow]], host_rows: pl.DataFrame,
               duration_ns: int, fleet: tuple[int, float]) -> GroupRow:
    """The group's row for the fleet: the capture row nearest the sized share among those of the
    fleet's role, with the fleet's role, share and busiest thread, and all hosts' names."""
    mine = [(h, r) for h, r in rows if r.role == group.role] or rows
    _, base = min(mine, key=lambda hr: (abs(hr[1].cpu_share - group.sized_share), hr[0]))
    agree = group.agreeing
    thin = base.thin_evidence
    if group.dissent:
        thin = "; ".join(x for x in (thin, f"the hosts disagree: {group.role} on {agree}, "
                                     f"{', '.join(group.dissent)}") if x)
    hosts, quantile = fleet
    hot = [max(r.hot_threads for h2, r in rows if h2 == h) for h in group.hosts]
    return replace(
        base, role=Role(group.role), confidence=base.confidence * agree / max(len(group.role_by_host), 1),
        names=sorted({n for _, r in rows for n in r.names}),
        thread_count=max(r.thread_count for _, r in rows),
        cpu_share=group.sized_share, cpu_time_ns=round(group.sized_share * duration_ns),
        max_thread_share=nearest_rank(host_rows["max_thread_share"].to_list(), quantile),
        hot_threads=int(nearest_rank([float(h) for h in hot], quantile)), thin_evidence=thin,
        fleet_evidence=group.words(hosts, quantile))


def _split_rows(group: GroupAcrossHosts, captures: list[tuple[str, list[GroupRow]]],
                fleet: tuple[int, float]) -> list[GroupRow]:
    """A pattern some capture split by title or behaviour: the parts of the one capture whose whole
    share is nearest the sized share, each at its own size (the engine sees the pattern whole, so
    the parts cannot be sized across hosts one by one)."""
    hosts, quantile = fleet
    split = sum(1 for _, found in captures if len(found) > 1)
    host, found = min(captures, key=lambda hf: (abs(sum(r.cpu_share for r in hf[1]) - group.sized_share),
                                                -len(hf[1]), hf[0]))
    words = (f"{group.words(hosts, quantile)}; split by title or behaviour in {split} of {len(captures)} "
             f"captures: these are the parts of one capture of {host}, at that capture's sizes")
    return [replace(r, fleet_evidence=words) for r in found]


def _caveats(fleet: Fleet, analyses: list[Analysis], quantile: float) -> list[str]:
    per_host = Counter(c.host for c in fleet.captures)
    out = [f"trained from a fleet: {len(fleet.captures)} captures of {len(per_host)} hosts "
           f"({', '.join(f'{h} {n}' for h, n in sorted(per_host.items()))}); each group is sized at "
           f"p{quantile * 100:g} across hosts of its CPU share (nearest rank)"]
    cpus = {a.nr_cpus for a in analyses}
    if len(cpus) > 1:
        out.append(f"the hosts have {', '.join(map(str, sorted(cpus)))} CPUs: sized for the fewest")
    # one line per kind of caveat: captures say the same thing with their own figures
    kinds: dict[str, list[str]] = {}
    for analysis in analyses:
        for caveat in dict.fromkeys(analysis.caveats):
            kinds.setdefault(_FIGURES.sub("#", caveat), []).append(caveat)
    for said in sorted(kinds.values(), key=len, reverse=True):
        figures = ", the figures of one" if len(set(said)) > 1 else ""
        out.append(f"{said[0]} (on {len(said)} of {len(analyses)} captures{figures})")
    return out


def merge(fleet: Fleet, analyses: list[Analysis], tables: FleetTables, quantile: float) -> tuple[
        AnalysisRecord, list[GroupAcrossHosts]]:
    """The fleet's record and each group's evidence (steps 3 of the module note)."""
    parts: dict[str, list[tuple[str, list[GroupRow]]]] = {}   # pattern -> (host, its rows) per capture
    for capture, analysis in zip(fleet.captures, analyses, strict=True):
        mine: dict[str, list[GroupRow]] = {}
        for row in analysis.record().groups:   # a title or behaviour split's parts share a pattern
            mine.setdefault(row.pattern, []).append(row)
        for pattern, found in mine.items():
            parts.setdefault(pattern, []).append((capture.host, found))
    duration_ns = int(statistics.median(a.duration_ns for a in analyses))
    groups, fleet_rows = [], []
    for pattern in sorted(parts):
        host_rows = tables.hosts.filter(pl.col("pattern") == pattern)
        if host_rows.is_empty():
            continue   # a group whose threads never ran inside any window
        captures = parts[pattern]
        roles = [(host, max(found, key=lambda r: r.cpu_share).role.value, sum(r.cpu_share for r in found))
                 for host, found in captures]
        group = _across_hosts(pattern, roles, host_rows, len(captures), quantile)
        groups.append(group)
        if all(len(found) == 1 for _, found in captures):
            fleet_rows.append(_fleet_row(group, [(h, found[0]) for h, found in captures], host_rows,
                                         duration_ns, (len(fleet.hosts), quantile)))
        else:
            fleet_rows += _split_rows(group, captures, (len(fleet.hosts), quantile))
    names = Counter(a.process_name for a in analyses)
    cgroups = {a.cgroup for a in analyses}
    record = AnalysisRecord(
        process_name=names.most_common(1)[0][0], duration_ns=duration_ns,
        nr_cpus=min(a.nr_cpus for a in analyses), groups=fleet_rows,
        events_lost=sum(a.events_lost for a in analyses), caveats=_caveats(fleet, analyses, quantile),
        cgroup=cgroups.pop() if len(cgroups) == 1 else None,
        short_lived=sorted({n for a in analyses for n in a.short_lived}),
        names_separate_roles=all(a.names_separate_roles for a in analyses))
    return record, groups


def analyze_fleet(arguments: list[str], *, engine_name: str = "duckdb", master: str | None = None,
                  quantile: float = DEFAULT_HOST_QUANTILE,
                  progress: Callable[[str], None] = lambda _line: None) -> FleetAnalysis:
    """Analyze the captures `arguments` name (files, directories, globs, Parquet trees) as one fleet."""
    if not 0 < quantile <= 1:
        raise ValueError(f"quantile {quantile} is not in (0, 1]")
    chosen: Engine = engine(engine_name, master=master)
    with open_fleet(arguments) as fleet:
        analyses = []
        for number, capture in enumerate(fleet.captures, 1):
            progress(f"analyze {number}/{len(fleet.captures)}: host {capture.host}, "
                     f"capture {capture.capture}")
            analyses.append(analyze_capture(capture.capture_file()))
        progress(f"fleet features on {chosen.name}: {len(fleet.captures)} captures, {len(fleet.hosts)} hosts")
        grouped = group_map(fleet, analyses)
        tables = chosen.features([c.partition for c in fleet.captures], grouped)
        record, groups = merge(fleet, analyses, tables, quantile)
        return FleetAnalysis(record, groups, fleet.hosts, len(fleet.captures), quantile, chosen.name,
                             tables, grouped)


def render_fleet(fleet: FleetAnalysis) -> str:
    """What `threadwise analyze` prints for a fleet: one line per group, then its evidence."""
    lines = [f"fleet: {fleet.captures} captures of {len(fleet.hosts)} hosts ({', '.join(fleet.hosts)}), "
             f"features on {fleet.engine}; each group sized at p{fleet.quantile * 100:g} across hosts",
             f"{'pattern':<24} {'role':<17} {'hosts':>5} {'captures':>8} {'CPUs':>7}  per host"]
    for group in fleet.groups:   # not zipped with the record's rows: a split pattern has several
        shares = " ".join(f"{h}={v:.3g}" for h, v in sorted(group.share_by_host.items()))
        lines.append(f"{group.pattern:<24} {f'{group.role} {group.agreeing}/{len(group.hosts)}':<17} "
                     f"{len(group.hosts):>5} {group.captures:>8} {group.sized_share:>7.3f}  {shares}")
    disagree = [f"  {g.words(len(fleet.hosts), fleet.quantile).removeprefix('fleet: ')}"
                for g in fleet.groups if g.outliers or len(g.hosts) < len(fleet.hosts) or g.dissent]
    if disagree:
        lines += ["where the hosts disagree:", *disagree]
    lines += ["caveats:", *(f"  {c}" for c in fleet.record.caveats)]
    return "\n".join(lines)


def fleet_to_dict(fleet: FleetAnalysis) -> dict[str, Any]:
    """Plain JSON-ready data: the fleet's record, each group's evidence, the engine's tables."""
    return {"hosts": fleet.hosts, "captures": fleet.captures, "quantile": fleet.quantile,
            "engine": fleet.engine, "record": asdict(fleet.record),
            "groups": [asdict(g) for g in fleet.groups],
            "group_host": fleet.tables.hosts.to_dicts(), "group_capture": fleet.tables.captures.to_dicts()}
