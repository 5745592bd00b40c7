"""Write a profile as TOML: deterministic, with the evidence as comments.

Problem: profiles are reviewed in pull requests, so the same profile must give
byte-identical text, and a reviewer must see why each group is treated the way
it is (thread counts, runtime shares, wake rates, the sizing arithmetic).

Approach: every comment is rendered from values in the profile itself (its
`evidence` tables, sizing fields, and option overrides with the preset value
each one replaces), never from data that is lost on reading. Reading a
profile and writing it again therefore reproduces the file byte for byte,
comments included. Keys come in schema order; values that equal
their default (None, empty lists) are left out; floats are written by tomlkit
(shortest repr that round-trips), comment numbers with fixed precision.
"""

from __future__ import annotations

from typing import Any

import tomlkit
from tomlkit.items import AoT, Table

from threadwise.synthesize.layered import LayerOptions
from threadwise.synthesize.matchers import SCX_LAYERED_VERSION
from threadwise.synthesize.presets import CATCH_ALL_OPTIONS, TREATMENT_OPTIONS, effective, preset_value
from threadwise.synthesize.schema import (
    OPTION_KEYS,
    CatchAll,
    Evidence,
    Group,
    Profile,
    Scheduler,
    Source,
    Treatment,
)

_TREATMENT_NOTES = {
    Treatment.EXCLUSIVE: "whole physical cores of its own (Confined layer, exclusive)",
    Treatment.LATENCY: "preempts other layers and runs short slices (wake-chain latency)",
    Treatment.BATCH: "low weight and long slices (throughput, yields to others)",
    Treatment.HOUSEKEEPING: "lowest weight (background work)",
    Treatment.DEFAULT: "a layer with default settings (keeps first-match order)",
}


def dumps(profile: Profile) -> str:
    """The profile as TOML text (deterministic)."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment(f'threadwise profile "{profile.name}" for scx_layered '
                            f"{SCX_LAYERED_VERSION} (schema {profile.schema_version})."))
    doc.add(tomlkit.comment("Comments are derived from the values below; "
                            "`threadwise compile` sizes it for a machine."))
    doc.add("schema_version", profile.schema_version)
    doc.add("name", profile.name)
    if profile.comment is not None:
        doc.add("comment", profile.comment)
    workload = tomlkit.table()
    if profile.workload.process is not None:
        workload.add(tomlkit.comment("Groups match only threads of processes whose comm starts "
                                     "with this (PcommPrefix)."))
        workload.add("process", profile.workload.process)
    if profile.workload.cgroup is not None:
        workload.add(tomlkit.comment("...and only threads in this cgroup or below it "
                                     "(CgroupPrefix; a pod's or a service's cgroup v2 path)."))
        workload.add("cgroup", profile.workload.cgroup)
    doc.add("workload", workload)
    if profile.source is not None:
        doc.add("source", _source_table(profile.source))
    groups = AoT([])
    for group in profile.groups:
        groups.append(_group_table(group))
    doc.add("group", groups)
    if profile.catch_all is not None:
        doc.add("catch_all", _catch_all_table(profile.catch_all))
    if profile.scheduler is not None:
        doc.add("scheduler", _scheduler_table(profile.scheduler))
    return tomlkit.dumps(doc)


def _scheduler_table(scheduler: Scheduler) -> Table:
    table = tomlkit.table()
    table.add(tomlkit.comment("scx_layered's own process (command-line flags, not layer options)."))
    if scheduler.interval_ms is not None:
        table.add(tomlkit.comment(f"its userspace step every {scheduler.interval_ms} ms "
                                  "(scx_layered's default: 100 ms; the step runs ahead of every layer)"))
        table.add("interval_ms", scheduler.interval_ms)
    return table


def _catch_all_table(catch_all: CatchAll) -> Table:
    table = tomlkit.table()
    table.add(tomlkit.comment("The catch-all layer `rest`: every thread no group takes, on the whole "
                              "machine (an Open layer)."))
    data = catch_all.model_dump(mode="json", exclude_defaults=True)
    _add_options(table, "catch-all", CATCH_ALL_OPTIONS, data)
    return table


def _add_options(table: Table, preset: str, base: LayerOptions, options: dict[str, Any]) -> None:
    """Option overrides, under a comment that says what each replaces in the preset."""
    if options:
        table.add(tomlkit.comment(f"overrides of the {preset} preset:"))
        for key, value in options.items():
            table.add(tomlkit.comment(f"  {key} {_toml(preset_value(base, key))} -> {_toml(value)}"))
    _add_fields(table, options)


def _toml(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _source_table(source: Source) -> Table:
    table = tomlkit.table()
    table.add(tomlkit.comment("The capture this profile was trained on."))
    _add_fields(table, source.model_dump(mode="json", exclude_defaults=True))
    return table


def treatment_line(group: Group) -> str:
    """The group's treatment in words (a latency group that does not preempt says so)."""
    if group.treatment is Treatment.LATENCY and not effective(group, "preempt"):
        return "latency: runs short slices, does not preempt (override below)"
    return f"{group.treatment.value}: {_TREATMENT_NOTES[group.treatment]}"


def group_comments(group: Group) -> list[str]:
    """The comment lines the writer derives from a group's values (markers and one space removed),
    in order: what `validate` compares a file's comments with."""
    text = _group_table(group).as_string()
    return [line[2:] if line.startswith("# ") else line[1:] for line in text.splitlines()
            if line.startswith("#")]


def _group_table(group: Group) -> Table:
    table = tomlkit.table()
    table.add(tomlkit.comment(treatment_line(group)))
    if group.evidence is not None:
        for line in evidence_lines(group.evidence):
            table.add(tomlkit.comment(line))
    data = group.model_dump(mode="json", exclude_defaults=True, exclude={"evidence"})
    for key in ("name", "match", "title", "exclude", "avg_runtime_us", "uid", "treatment"):
        if key in data:
            _add(table, key, data.pop(key))
            if key == "title":
                table.add(tomlkit.comment("  processes whose title begins so (HintEquals: the runtime "
                                          "reads each title and writes the layer's hint)"))
            if key == "avg_runtime_us":
                table.add(tomlkit.comment(runtime_line(group)))
            if key == "uid":
                table.add(tomlkit.comment(uid_line(group)))
    for line in sizing_lines(group):
        table.add(tomlkit.comment(line))
    options = {key: data.pop(key) for key in list(data) if key in OPTION_KEYS}
    comment = data.pop("comment", None)
    _add_fields(table, data)
    _add_options(table, group.treatment.value, TREATMENT_OPTIONS[group.treatment], options)
    if comment is not None:
        _add(table, "comment", comment)
    if group.evidence is not None:
        evidence = tomlkit.table()
        _add_fields(evidence, group.evidence.model_dump(mode="json", exclude_defaults=True))
        table.add("evidence", evidence)
    return table


def uid_line(group: Group) -> str:
    """The group's user condition in words."""
    titles = group.evidence.process_titles if group.evidence else []
    said = f"; their process title: {', '.join(map(repr, titles))}" if titles else ""
    return f"  only threads running as uid {group.uid} (UIDEquals, the effective uid){said}"


def runtime_line(group: Group) -> str:
    """The group's AvgRuntime split in words."""
    bounds = group.avg_runtime_bounds()
    assert bounds is not None
    low, high = bounds
    if high is None:
        return f"  threads whose average runtime per run is {low} us or more (AvgRuntime, open-ended)"
    since = f"at least {low} us and " if low else ""
    return f"  threads whose average runtime per run is {since}below {high} us (AvgRuntime)"


def evidence_lines(evidence: Evidence) -> list[str]:
    """What the capture showed, in words (one or more comment lines)."""
    names = ", ".join(_printable(n) for n in evidence.names[:6])
    names += ", ..." if len(evidence.names) > 6 else ""
    lines = [
        f"evidence: {_plural(evidence.threads, 'thread')}"
        + (f" ({names})" if names else "")
        + f", {evidence.cpu_share:.3g} CPUs busy, busiest thread {evidence.max_thread_share:.3g}"
    ]
    timing = [f"{evidence.wakeups_per_s:.6g} wakeups/s"]
    if evidence.slice_p50_us is not None and evidence.slice_p99_us is not None:
        timing.append(f"slice p50 {evidence.slice_p50_us:.0f} us / p99 "
                      f"{evidence.slice_p99_us:.0f} us")
    if evidence.rq_latency_p99_us is not None:
        timing.append(f"run-queue latency p99 {evidence.rq_latency_p99_us:.0f} us")
    if evidence.in_wake_chain:
        timing.append("in a busy wake chain")
    lines.append("  " + ", ".join(timing))
    if evidence.role is not None:
        role = f"  role {evidence.role.value}"
        if evidence.confidence is not None:
            role += f" (confidence {evidence.confidence:.2f})"
        if not evidence.separable:
            role += "; names alone do not separate it from another group"
        lines.append(role)
    return lines


def sizing_lines(group: Group) -> list[str]:
    """The sizing arithmetic of a group, as a reviewer would check it."""
    if group.treatment is not Treatment.EXCLUSIVE:
        if group.hot_threads:
            return [f"sizing: not exclusive; {_plural(group.hot_threads, 'hot thread')} "
                    "share the layer's CPUs"]
        return ["sizing: not exclusive; no hot threads"]
    cores = group.exclusive_cores()
    if group.request_millicores:
        demand = f"request {group.request_millicores}m"
        wanted = group.request_millicores * group.cpu_fraction
    else:
        demand = f"{_plural(group.hot_threads, 'hot thread')} x 1000m"
        wanted = group.hot_threads * 1000 * group.cpu_fraction
    lines = [f"sizing: {demand} x cpu_fraction {group.cpu_fraction:.2f} = {wanted:.1f}m "
             f"-> {_plural(cores, 'exclusive core')} (rounded up)"]
    if group.hot_threads > cores:
        lines.append(f"  {group.hot_threads} hot threads share {_plural(cores, 'core')}")
    return lines


def _printable(text: str) -> str:
    """Text safe inside a TOML comment (no control characters)."""
    return "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _add_fields(table: Table, data: dict[str, Any]) -> None:
    for key, value in data.items():
        _add(table, key, value)


def _add(table: Table, key: str, value: Any) -> None:
    if isinstance(value, str) and "\n" in value and "\r" not in value:
        # several lines (what compact merged or folded, one per line): a multi-line
        # string, so the TOML reads as the lines (it reads back as the same value; a carriage
        # return would not: TOML readers normalise the line endings of multi-line strings, so
        # such a value stays a one-line string with escapes)
        table.add(key, tomlkit.string(value, multiline=True))
        return
    if isinstance(value, list) and len(value) > 1 and (
        len(value) > 4 or sum(len(str(v)) for v in value) > 60
    ):
        array = tomlkit.array()
        array.extend(value)
        array.multiline(True)
        table.add(key, array)
    else:
        table.add(key, value)
