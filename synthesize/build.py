"""Turn an analysis (groups of threads with roles and numbers) into a Profile.

Problem: analysis says what each name-pattern group does (role, CPU share, hot
threads, wake rates); a profile must say how to schedule it, in an order where
first-match-wins gives every group its own threads, sized in whole cores, with
the reasons written down.

Approach:
- Input is analyze's `AnalysisRecord` (analyze/contract.py: the `Analysis`
  contract as typed rows; `Analysis.record()` or `from_analysis` make one from
  the real object and its polars DataFrame), so the builder is testable
  without a capture.
- Role -> treatment: compute with hot threads -> exclusive; latency, batch,
  housekeeping map to themselves; low confidence or groups that names cannot
  separate (and that have no AvgRuntime split) stay `default`. A group analyze
  split by process title (processes of one comm, each role its own user) keeps
  its `uid`: compile selects it by comm prefix AND UIDEquals.
- Busy-pollers (analyze's `poller_threads`, contract.is_poller) never get
  preempt on shared CPUs: a preempting poller is a spinner no one can
  preempt. A latency group of pollers whose every thread is hot gets
  exclusive cores (the sizing holds all its threads; compile demotes it to a
  non-preempting Grouped layer when the shape has no room); any other group
  with pollers whose treatment preempts (latency, here or by its family)
  keeps it with `preempt = false`: its 1 ms slices still hand the CPU on every
  millisecond, its wakeups kick no one off a CPU, and other preempting
  threads (the wake chain feeding it) can take its CPU. Batch, housekeeping
  and default do not preempt; an exclusive group preempts only on its own
  cores. The group's comment says which and why, with the numbers.
- Sizing: one exclusive core per hot thread; with a CPU request (millicores),
  cores = ceil(request x cpu_fraction), where cpu_fraction starts at 0.90 and
  is lowered in 0.05 steps until the cores do not exceed the hot threads
  (2250m x 0.90 rounds up to 3 cores for 2 hot threads; 0.85 keeps 2).
- The target's shape, when known (`train` knows its lab's): exclusive groups
  take whole cores in profile order, as compile hands them out, from the
  shape's cores minus its reserve. A group asking for more than is left is
  sized to what is left (a lower cpu_fraction) when that still gives each of its
  hot threads a core, else (no core left, or fewer cores than hot threads: they
  would time-share a core, or stack on one core's SMT siblings) it becomes
  `default`; its comment and the profile's say so, with the numbers. So placement lint is clean for the shape
  measured. Without a shape the profile stays machine-independent.
- Order: exclusive, latency, batch, housekeeping, default, then by CPU share
  and pattern. `fit.py` then makes the groups expressible (prefix syntax,
  layer budget, carve-outs, shadowed patterns, per-layer limits) and every
  compromise lands in the profile's `comment`.
"""

from __future__ import annotations

import math
from typing import Any

from threadwise.analyze.contract import (
    HOT_SHARE,
    MIN_LIFE_NS,
    AnalysisRecord,
    GroupRow,
    Role,
    near_hot,
    poller_text,
)
from threadwise.errors import InputError
from threadwise.shape import Shape
from threadwise.synthesize.compact import DEFAULT_MAX_GROUPS, WORKLOAD_REST, compact, readable_name
from threadwise.synthesize.families import MIN_CONFIDENCE, Families, decide
from threadwise.synthesize.families import bundled as bundled_families
from threadwise.synthesize.fit import clean_prefix, fit
from threadwise.synthesize.presets import TREATMENT_OPTIONS
from threadwise.synthesize.rules import CATCH_ALL, HINT_DEFAULT
from threadwise.synthesize.schema import (
    SCHEMA_VERSION,
    Evidence,
    Group,
    Profile,
    Source,
    Treatment,
    Workload,
)

MAX_NAMES = 64  # observed names kept as evidence per group
OPEN_NS = 2**63 - 1  # analyze's open upper end of a behaviour split (docs/interfaces.md)
START_FRACTION = 0.90
FRACTION_STEP = 0.05
_ORDER = [Treatment.EXCLUSIVE, Treatment.LATENCY, Treatment.BATCH, Treatment.HOUSEKEEPING,
          Treatment.DEFAULT]


# The contract types are analyze's (declared once, analyze/contract.py); these
# names stay importable from here for callers of the builder.
AnalysisInput = AnalysisRecord
from_analysis = AnalysisRecord.of           # an Analysis -> AnalysisRecord
analysis_from_dict = AnalysisRecord.from_dict


def analysis_to_dict(analysis: AnalysisRecord) -> dict[str, Any]:
    """A JSON-ready dict of an analysis (what the golden fixtures hold)."""
    return analysis.to_dict()


def treatment_for(row: GroupRow) -> tuple[Treatment, str | None]:
    """The treatment of a group and, when it is not the obvious one, why."""
    if row.confidence < MIN_CONFIDENCE:
        return Treatment.DEFAULT, f"role {row.role} has low confidence ({row.confidence:.2f})"
    if not row.separable and row.avg_runtime_range_ns is None:
        return Treatment.DEFAULT, "names do not separate it from another group"
    role = row.role
    if role is Role.COMPUTE:
        if row.hot_threads >= 1:
            return Treatment.EXCLUSIVE, None
        return Treatment.DEFAULT, "compute role but no thread keeps half a CPU busy"
    if role is Role.LATENCY and row.poller_threads >= 1 and row.hot_threads >= max(row.thread_count, 1):
        return Treatment.EXCLUSIVE, (f"{poller_note(row)}: exclusive cores, one per hot thread, instead "
                                     "of latency's preempt (a preempting spinner cannot be preempted)")
    return Treatment(role.value), None


def poller_note(row: GroupRow) -> str:
    """`poller: io_thd_1 0.71 CPU at 16.6 wakeups/s (43 ms of CPU per wakeup)`, with how many
    of the group's threads are pollers when not all."""
    what = row.poller_evidence or poller_text(row.pattern, row.max_thread_share, row.wakeups_per_s)
    some = (f" ({row.poller_threads} of {row.thread_count} threads)"
            if row.poller_threads < row.thread_count else "")
    return f"poller{some}: {what}"


def no_preempt(row: GroupRow, treatment: Treatment) -> str | None:
    """Why a group with pollers gets `preempt = false` (None: it has none, or its layer does not
    preempt on shared CPUs anyway)."""
    if row.poller_threads < 1 or treatment is Treatment.EXCLUSIVE or not TREATMENT_OPTIONS[treatment].preempt:
        return None
    return (f"{poller_note(row)}: {treatment.value} without preempt (a preempting spinner cannot be "
            "preempted); its short slices hand the CPU on, preempting threads can take it")


def thin_evidence(row: GroupRow) -> str | None:
    """Why the capture says little about a group's role (None: it says enough)."""
    if row.role is Role.DEFAULT:
        return "no role: too little activity in the capture"
    if row.confidence < MIN_CONFIDENCE:
        return f"role {row.role.value} at confidence {row.confidence:.2f}"
    return None


def near_hot_cutoff(row: GroupRow) -> str | None:
    """A note when the busiest thread sits near the hot cutoff (refine should try both)."""
    if near_hot(row.max_thread_share) is not None:
        return (f"busiest thread {row.max_thread_share:.2f} CPU is near the hot cutoff "
                f"({HOT_SHARE} CPU): a candidate for refine to try both ways")
    return None


def fraction_for(request_millicores: int, hot_threads: int) -> tuple[float, str | None]:
    """cpu_fraction for a request: 0.90, lowered until cores <= hot threads."""
    fraction = START_FRACTION
    first = math.ceil(round(request_millicores * fraction, 6) / 1000 - 1e-9)
    while fraction > FRACTION_STEP and hot_threads >= 1:
        cores = math.ceil(round(request_millicores * fraction, 6) / 1000 - 1e-9)
        if cores <= hot_threads:
            break
        fraction = round(fraction - FRACTION_STEP, 2)
    if fraction == START_FRACTION:
        return fraction, None
    return fraction, (
        f"cpu_fraction {fraction:.2f}, not {START_FRACTION:.2f}: {request_millicores}m x "
        f"{START_FRACTION:.2f} rounds up to {first} cores for {hot_threads} hot threads"
    )


def _pattern(prefix: str, names: list[str]) -> str:
    return prefix + "*" if any(n != prefix and n.startswith(prefix) for n in names) else prefix


def _group_name(pattern: str, taken: set[str]) -> str:
    base = readable_name(pattern)
    name, n = base, 2
    while name in taken or name in (CATCH_ALL, HINT_DEFAULT):
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _significant(value: float, digits: int = 4) -> float:
    """`value` to a few significant digits: stable text, small shares kept."""
    return float(f"{value:.{digits}g}")


def _evidence(row: GroupRow) -> Evidence:
    def us(ns: int | None) -> float | None:
        return None if ns is None else round(ns / 1000, 1)

    return Evidence(
        role=row.role, confidence=round(row.confidence, 3), threads=row.thread_count,
        names=sorted(row.names)[:MAX_NAMES], cpu_share=_significant(row.cpu_share),
        max_thread_share=_significant(row.max_thread_share),
        wakeups_per_s=_significant(row.wakeups_per_s), slice_p50_us=us(row.slice_p50_ns),
        slice_p99_us=us(row.slice_p99_ns), rq_latency_p50_us=us(row.rq_latency_p50_ns),
        rq_latency_p99_us=us(row.rq_latency_p99_ns), in_wake_chain=row.in_wake_chain,
        separable=row.separable, process_titles=list(row.process_titles),
    )


def _group(row: GroupRow, taken: set[str], requests: dict[str, int],
           notes: list[str], families: Families) -> Group | None:
    prefixes = list(dict.fromkeys(p for p in map(clean_prefix, row.match_prefixes) if p))
    if prefixes != list(row.match_prefixes):
        notes.append(f"pattern {row.pattern!r}: prefixes {row.match_prefixes} made "
                     f"expressible as {prefixes}")
    if not prefixes:
        return None
    treatment, why = treatment_for(row)
    family = families.family_of(list(row.names))
    if family is not None and (row.separable or row.avg_runtime_range_ns is not None):
        decision = decide(family, treatment, thin=thin_evidence(row))
        if decision.treatment is not treatment:
            why = None
        treatment = decision.treatment
        why = "; ".join(x for x in (why, decision.note) if x) or None
    # a role read from little evidence (analyze lowered its confidence): the reviewer sees it
    rests = f"decided on thin evidence: {row.thin_evidence}" if row.thin_evidence else None
    poller = no_preempt(row, treatment)   # after the family: it may have asked for latency
    # no wake chain shows a thread woken from the network: the reviewer sees what did (requests.py)
    woken = (f"woken by requests from outside the workload: {row.request_evidence}"
             if row.request_evidence and row.role is Role.LATENCY else None)
    notes = [x for x in (why, poller, rests, woken, near_hot_cutoff(row), row.fleet_evidence) if x]
    sizing: dict[str, Any] = {"hot_threads": row.hot_threads}
    if poller is not None:
        sizing["preempt"] = False
    request = requests.get(row.pattern)
    if treatment is Treatment.EXCLUSIVE and request:
        fraction, fraction_note = fraction_for(request, row.hot_threads)
        sizing.update(request_millicores=request, cpu_fraction=fraction)
        notes += [fraction_note] if fraction_note else []
    runtime = row.avg_runtime_range_ns
    if runtime is not None:
        # in us, both ends rounded up alike, so the two halves of a split stay complementary (rounding
        # the low end down and the high end up made them overlap by 1 us, and fit.py then merged one
        # half into the other); analyze's open end stays open, never a number
        low_us = -(-runtime[0] // 1000)
        runtime = [low_us] if runtime[1] >= OPEN_NS else [low_us, -(-runtime[1] // 1000)]
    # a title split's groups share a pattern: their first title word names them (nginx-worker)
    label = (f"{row.pattern} {row.process_titles[0].split()[0]}"
             if row.uid is not None and row.process_titles else row.pattern)
    titled = bool(row.title_patterns)   # selected by title alone (a HintEquals layer)
    if titled:   # postgres: background writer -> postgres-background-writer
        label = row.title_patterns[0].replace(":", "").replace(" ", "-")
    return Group(
        name=_group_name(label, taken),
        match=[] if titled else [_pattern(p, row.names) for p in prefixes],
        title=list(row.title_patterns),
        exclude=[] if titled else list(dict.fromkeys(p for p in map(clean_prefix, row.exclude_prefixes)
                                                     if p)),
        avg_runtime_us=runtime,
        uid=row.uid,
        treatment=treatment,
        family=family.name if family is not None else None,
        comment="; ".join(notes) or None,
        evidence=_evidence(row),
        **sizing,
    )


def short_lived(groups: list[Group], analysis: AnalysisRecord, notes: list[str]) -> list[Group]:
    """Say where the threads too short-lived to judge went (analyze formed no group for them):
    the workload's catch-all when the profile has one, else nowhere of the workload's own."""
    if not analysis.short_lived:
        return groups
    names = ", ".join(analysis.short_lived[:8]) + (", ..." if len(analysis.short_lived) > 8 else "")
    why = (f"{len(analysis.short_lived)} thread name(s) lived under {MIN_LIFE_NS // 1_000_000} ms "
           f"in the capture, too short to judge, so they form no group of their own: {names}")
    rest = next((g for g in groups if g.match == [WORKLOAD_REST]), None)
    if rest is None:
        notes.append(f"{why}; the profile has no catch-all of the workload's own: they go to the "
                     "first layer whose patterns match them, else scx_layered's last layer")
        return groups
    comment = "\n".join(x for x in (rest.comment, f"also takes: {why}") if x)
    return [g.model_copy(update={"comment": comment}) if g is rest else g for g in groups]


def pod_budget(groups: list[Group], analysis: AnalysisRecord, notes: list[str]) -> list[Group]:
    """The targeted cgroup's CPU limit as the CPU request of its exclusive groups.

    A pod's limit bounds every thread in it, so exclusive cores beyond it would sit idle: the
    limit becomes `request_millicores` of the exclusive groups that have none from --request
    (which wins), split by their hot threads when there are several. In Kubernetes the limit
    (cpu.max) equals the request for Guaranteed pods; a Burstable pod's request lives only in
    cpu.weight, which is not read back (--request PATTERN=M gives it). "max" is no request.
    """
    if analysis.cgroup is None:
        return groups
    where = f"cgroup {analysis.cgroup}"
    if analysis.cgroup_cpu_period_us is None:
        notes.append(f"{where}: its CPU limit could not be read (no cpu controller for it): "
                     "no request from the pod; exclusive cores follow the hot threads")
        return groups
    limit = analysis.cgroup_cpu_millicores()
    if limit is None:
        notes.append(f"{where} has no CPU limit (cpu.max \"max\", or a v1 cfs quota of -1): "
                     "no request from the pod; "
                     "exclusive cores follow the hot threads")
        return groups
    quota = f"{analysis.cgroup_cpu_quota_us}/{analysis.cgroup_cpu_period_us} us = {limit}m"
    takers = {id(g) for g in groups if g.treatment is Treatment.EXCLUSIVE
              and g.request_millicores is None and g.hot_threads >= 1}
    if not takers:
        notes.append(f"{where} CPU limit {quota}: no exclusive group to size with it")
        return groups
    hot = sum(g.hot_threads for g in groups if id(g) in takers)
    out: list[Group] = []
    for group in groups:
        if id(group) not in takers:
            out.append(group)
            continue
        request = max(1, limit * group.hot_threads // hot)
        fraction, fraction_note = fraction_for(request, group.hot_threads)
        why = (f"request {request}m from the pod's CPU limit ({where}: {quota}"
               + (f", x {group.hot_threads}/{hot} hot threads" if len(takers) > 1 else "") + ")")
        parts = [x for x in (group.comment, why, fraction_note) if x]
        comment = ("\n" if group.comment and "\n" in group.comment else "; ").join(parts)
        out.append(group.model_copy(update={"request_millicores": request, "cpu_fraction": fraction,
                                            "comment": comment}))
    return out


def _cores(count: int, noun: str = "core") -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _joined(comment: str | None, why: str) -> str:
    return ("\n" if comment and "\n" in comment else "; ").join(x for x in (comment, why) if x)


def fit_shape(groups: list[Group], shape: Shape, notes: list[str]) -> list[Group]:
    """Exclusive groups sized to what `shape` gives them: its cores minus the reserve, handed
    out in profile order as compile does. One asking for more than is left gets what is left
    (cpu_fraction lowered) where that is a core for each hot thread, else becomes `default`;
    the group's comment and `notes` say why."""
    budget = shape.exclusive_budget
    left = budget
    out: list[Group] = []
    for group in groups:
        cores = group.exclusive_cores() if group.treatment is Treatment.EXCLUSIVE else 0
        if cores <= left:
            left -= cores
            out.append(group)
            continue
        room = (f"{_cores(left)} left for exclusive groups on {shape.describe()}"
                + (f" (earlier ones took {budget - left})" if left < budget else ""))
        # Never fewer cores than hot threads: two threads that always run together squeezed onto
        # one exclusive core time-share it, and on a small machine the workload loses half its
        # CPUs whenever nothing else runs (onnxrt, 2 vCPUs: 0.455x at bg=0, where `default` held
        # 0.988x and kept the 1.58x gain at bg=4; issue 50). On SMT it would also stack two hot
        # threads on one core's siblings.
        room_for_each = left >= group.hot_threads
        fraction = group.fraction_for_cores(left) if room_for_each else None
        if fraction is not None:
            why = (f"sized for the target: {_cores(cores, 'exclusive core')} wanted, {room}: cpu_fraction "
                   f"{group.cpu_fraction:g} -> {fraction:g}")
            out.append(group.model_copy(update={"cpu_fraction": fraction,
                                                "comment": _joined(group.comment, why)}))
            left = 0
        else:
            siblings = (f"; fewer cores than its {group.hot_threads} hot threads would make them share a "
                        "core (time-shared, or stacked on one core's SMT siblings)" if left >= 1 else "")
            why = (f"exclusive -> default for the target: it needs {_cores(cores, 'whole core')}, "
                   f"{room}{siblings}")
            out.append(group.model_copy(update={"treatment": Treatment.DEFAULT, "cpu_fraction": 1.0,
                                                "comment": _joined(group.comment, why)}))
        notes.append(f"group {out[-1].name!r}: {why}")
    return out


def build_profile(analysis: AnalysisRecord, name: str, *, capture: str | None = None,
                  capture_sha256: str | None = None,
                  requests: dict[str, int] | None = None,
                  max_groups: int = DEFAULT_MAX_GROUPS,
                  families: Families | None = None,
                  shape: Shape | None = None) -> Profile:
    """The profile for one analysed workload (deterministic for the same input).

    `max_groups` is the group budget of `compact.py` (the workload's catch-all included);
    `shape`, when known, the target machine's (`fit_shape`).
    """
    taken: set[str] = set()
    notes: list[str] = []
    known = families if families is not None else bundled_families()
    rows = sorted(
        analysis.groups,
        key=lambda r: (_ORDER.index(treatment_for(r)[0]), -r.cpu_share, r.pattern),
    )
    built = [g for g in (_group(row, taken, requests or {}, notes, known) for row in rows)
             if g is not None]
    # a family may have changed a treatment: order again (stable: ties keep the order above)
    built.sort(key=lambda g: (_ORDER.index(g.treatment), -(g.evidence.cpu_share if g.evidence else 0.0)))
    compacted = compact(built, max_groups=max_groups)
    if compacted.merged or compacted.folded:
        notes.insert(0, f"compact: {len(built)} analysis groups -> {len(compacted.groups)} groups "
                        f"(budget {max_groups}); {compacted.merged} merged into others, "
                        f"{compacted.folded} folded into the workload's catch-all; "
                        "each group's comment says what it took in and why")
    groups = fit(pod_budget(short_lived(compacted.groups, analysis, notes), analysis, notes), notes)
    if shape is not None:
        groups = fit_shape(groups, shape, notes)
    source = Source(
        capture=capture, capture_sha256=capture_sha256, duration_s=round(analysis.duration_ns / 1e9, 3),
        nr_cpus=analysis.nr_cpus, events_lost=analysis.events_lost,
        caveats=list(analysis.caveats),
    )
    process = clean_prefix(analysis.process_name)
    if (not process and not analysis.cgroup) or not groups:
        what = "process name" if not process else "thread group"
        raise InputError(f"no {what} of the analysis can be written as a comm prefix "
                         f"(process {analysis.process_name!r})",
                         hint="scx_layered matches names by prefix; see docs/profile-schema.md")
    return Profile(schema_version=SCHEMA_VERSION, name=name, comment="; ".join(notes) or None,
                   workload=Workload(process=process or None, cgroup=analysis.cgroup),
                   source=source, group=groups)
