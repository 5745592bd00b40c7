"""Validation rules: can scx_layered 1.1.4 express this profile, and as meant?

Problem: `scx_layered --print-and-exit` accepts configs that its own
`verify_layer_specs` (run only when it attaches) or the BPF matcher would
reject or never fire on, and it silently drops unknown keys. A profile must be
checked against those limits before it reaches a machine, with an answer a
reviewer can act on.

Approach: each rule is a function over the parsed Profile that yields
Diagnostics tagged with a rule name and the TOML path they concern; `validate`
runs them all and fills in line numbers from the source map. Limits come from
the matcher set data (`matchers.py`), never from literals here. Errors make a
profile invalid; warnings (threads that move between groups, evidence that
its own patterns do not match) are reported but do not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from threadwise.analyze.titles import title_selects
from threadwise.diagnostics import Diagnostic, ProfileError
from threadwise.sourcemap import SourceMap
from threadwise.synthesize.matchers import matcher_set
from threadwise.synthesize.overlap import find_overlaps, group_matches
from threadwise.synthesize.patterns import check_pattern, check_title
from threadwise.synthesize.presets import effective
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.schema import Group, Profile, Treatment

CATCH_ALL = "rest"
# The layer a title profile's runtime moves a process back to (a hint no title group uses would
# not move it: docs/profile-schema.md "Groups selected by process title").
HINT_DEFAULT = "untitled"
Rule = Callable[[Profile], Iterator[Diagnostic]]


def _cgroup(profile: Profile) -> Iterator[Diagnostic]:
    path = profile.workload.cgroup
    if path is None:
        return
    limit = matcher_set().limits.max_path
    problem = None
    if not path.startswith("/"):
        problem = (f"cgroup {path!r} is not an absolute cgroup v2 path",
                   "write it as /proc/PID/cgroup shows it after '0::', e.g. /kubepods.slice/...")
    elif any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        problem = (f"cgroup {path!r} holds a control character", "remove it")
    elif any(ch in path for ch in "*?["):
        problem = (f"cgroup {path!r} uses glob syntax; CgroupPrefix matches by prefix only",
                   "give the common parent path: every cgroup below it matches")
    elif len(path.encode("utf-8")) > limit:
        problem = (f"cgroup path is {len(path.encode('utf-8'))} bytes; scx_layered allows {limit}",
                   "use a shorter parent path")
    if problem:
        yield Diagnostic("cgroup_path", f"workload.cgroup: {problem[0]}", problem[1],
                         path=("workload", "cgroup"))


def _patterns(profile: Profile) -> Iterator[Diagnostic]:
    process_problem = (check_pattern(profile.workload.process)
                       if profile.workload.process is not None else None)
    if process_problem:
        yield Diagnostic(process_problem.rule, "workload.process: " + process_problem.message,
                         process_problem.hint, path=("workload", "process"))
    last = len(profile.groups) - 1
    for i, group in enumerate(profile.groups):
        names = group.evidence.names if group.evidence else None
        for field in ("match", "exclude"):
            for k, pattern in enumerate(getattr(group, field)):
                rest = field == "match" and i == last and len(group.match) == 1
                problem = check_pattern(pattern, names, rest_allowed=rest)
                if problem:
                    yield Diagnostic(problem.rule, f"group {group.name!r}: {problem.message}",
                                     problem.hint, path=("group", i, field, k))


def _titles(profile: Profile) -> Iterator[Diagnostic]:
    """Each title pattern well formed, and none that an earlier one already selects (the runtime
    gives a process the hint of the first group whose pattern selects its title)."""
    earlier: list[tuple[str, str]] = []
    for i, group in enumerate(profile.groups):
        for k, pattern in enumerate(group.title):
            problem = check_title(pattern)
            if problem:
                yield Diagnostic(problem.rule, f"group {group.name!r}: {problem.message}", problem.hint,
                                 path=("group", i, "title", k))
                continue
            by = next(((name, p) for name, p in earlier if title_selects(p, pattern)), None)
            if by is not None:
                yield Diagnostic("overlap", f"group {group.name!r} title {pattern!r} can never match: "
                                 f"group {by[0]!r} comes first and its title {by[1]!r} selects it",
                                 f"move {group.name!r} above {by[0]!r}", path=("group", i, "title", k))
            earlier.append((group.name, pattern))


def _layer_count(profile: Profile) -> Iterator[Diagnostic]:
    limit = matcher_set().limits.max_layers
    hinted = any(g.title for g in profile.groups)
    layers = len(profile.groups) + 1 + hinted
    if layers > limit:
        yield Diagnostic(
            "too_many_layers",
            f"{len(profile.groups)} groups{f', the hinted default layer {HINT_DEFAULT!r}' if hinted else ''} "
            f"and the catch-all make {layers} layers; "
            f"scx_layered {matcher_set().version} allows at most {limit}",
            "merge groups with the same treatment (one group may list several patterns)",
            path=("group", limit - 1),
        )


def _match_sizes(profile: Profile) -> Iterator[Diagnostic]:
    limits = matcher_set().limits
    for i, group in enumerate(profile.groups):
        if len(group.match) > limits.max_layer_match_ors:
            yield Diagnostic(
                "too_many_patterns",
                f"group {group.name!r} has {len(group.match)} patterns; a layer takes at most "
                f"{limits.max_layer_match_ors} OR blocks",
                "use shorter, shared prefixes or split the group",
                path=("group", i, "match"),
            )
        ands = (2 + len(group.exclude) + (1 if group.avg_runtime_us else 0)
                + (1 if group.uid is not None else 0))
        if ands > limits.max_match_ands:
            yield Diagnostic(
                "too_many_excludes",
                f"group {group.name!r} needs {ands} matches in one AND block (process, pattern, "
                f"excludes, uid, runtime); scx_layered allows {limits.max_match_ands}",
                "exclude by shorter prefixes",
                path=("group", i, "exclude"),
            )


def _names(profile: Profile) -> Iterator[Diagnostic]:
    seen: dict[str, int] = {}
    for i, group in enumerate(profile.groups):
        if group.name in (CATCH_ALL, HINT_DEFAULT):
            yield Diagnostic(
                "reserved_name",
                f"group name {group.name!r} is a compiled layer of its own (the catch-all, or the "
                "hinted default layer of title groups)",
                "pick another name",
                path=("group", i, "name"),
            )
        if group.name in seen:
            yield Diagnostic(
                "duplicate_name",
                f"group name {group.name!r} is also group {seen[group.name] + 1}; layer names "
                "must be unique",
                "rename one of them",
                path=("group", i, "name"),
            )
        seen.setdefault(group.name, i)


def _sizing(profile: Profile) -> Iterator[Diagnostic]:
    for i, group in enumerate(profile.groups):
        if group.treatment is Treatment.EXCLUSIVE and group.exclusive_cores() < 1:
            yield Diagnostic(
                "exclusive_without_size",
                f"exclusive group {group.name!r} asks for 0 cores (hot_threads = "
                f"{group.hot_threads}, no request_millicores)",
                "set hot_threads >= 1 or request_millicores, or use another treatment",
                path=("group", i, "treatment"),
            )


def _option_problems(group: Group) -> Iterator[tuple[str, str, str]]:
    """(key, problem, hint) for each override scx_layered 1.1.4 would ignore or refuse on this group."""
    owns_cpus = group.treatment is Treatment.EXCLUSIVE   # Confined (or, demoted, Grouped); others: Open
    if group.exclusive and not owns_cpus:
        yield ("exclusive", "exclusive = true keeps the SMT siblings of the CPUs the layer's threads run "
               f"on idle; only an exclusive group holds whole cores (a {group.treatment.value} group "
               "would idle siblings wherever its threads run)",
               "remove it, or make the group exclusive")
    if group.protected is not None and not owns_cpus:
        yield ("protected", f"protected is an option of layers that own CPUs (Confined, Grouped); a "
               f"{group.treatment.value} group compiles to an Open layer, which has none (scx_layered "
               "would drop the key silently)", "remove it, or make the group exclusive")
    if group.preempt_first and not effective(group, "preempt"):
        yield ("preempt_first", "preempt_first = true does nothing without preempt: scx_layered tries "
               "the previous CPU first only in a preempting layer (should_try_preempt_first)",
               "set preempt = true too, or remove preempt_first")
    if group.disallow_preempt_after_us is not None:
        if not owns_cpus:
            yield ("disallow_preempt_after_us", "disallow_preempt_after_us acts on CPUs a layer owns; a "
                   f"{group.treatment.value} group compiles to an Open layer, where scx_layered 1.1.4 "
                   "folds it into one minimum over all Open layers, read as nanoseconds",
                   "remove it, or make the group exclusive")
        elif effective(group, "preempt"):
            yield ("disallow_preempt_after_us", "scx_layered ignores disallow_preempt_after_us on a "
                   "preempting layer (it sets it to 'never' with a warning)",
                   "set preempt = false, or remove it")
        elif effective(group, "protected"):
            yield ("disallow_preempt_after_us", "the layer's CPUs are protected (the exclusive preset): "
                   "no other layer preempts them at all, so disallow_preempt_after_us never acts",
                   "set protected = false too, or remove it")


def _layer_options(profile: Profile) -> Iterator[Diagnostic]:
    for i, group in enumerate(profile.groups):
        for key, problem, hint in _option_problems(group):
            yield Diagnostic("layer_option", f"group {group.name!r}: {problem}", hint,
                             path=("group", i, key))


def _overlaps(profile: Profile) -> Iterator[Diagnostic]:
    groups = profile.groups
    for found in find_overlaps(profile):
        earlier, later = groups[found.earlier], groups[found.later]
        pattern = later.match[found.pattern]
        moved = f" ({', '.join(found.threads)})" if found.threads else ""
        if found.full:
            yield Diagnostic(
                "overlap",
                f"group {later.name!r} pattern {pattern!r} can never match: group "
                f"{earlier.name!r} comes first and its {found.by_pattern!r} takes every such "
                f"thread{moved}",
                f"move {later.name!r} above {earlier.name!r} or add {pattern!r} to the "
                f"exclude list of {earlier.name!r}",
                path=("group", found.later, "match", found.pattern),
                threads=found.threads,
            )
        else:
            yield Diagnostic(
                "overlap",
                f"threads {', '.join(found.threads)} recorded in group {later.name!r} also match "
                f"{found.by_pattern!r} of the earlier group {earlier.name!r}: they land there "
                "(first match wins)",
                f"exclude them from {earlier.name!r} or drop them from {later.name!r}'s evidence",
                severity="warning",
                path=("group", found.later, "match", found.pattern),
                threads=found.threads,
            )


def _evidence(profile: Profile) -> Iterator[Diagnostic]:
    for i, group in enumerate(profile.groups):
        if group.evidence is None or group.title:   # a title group's names decide nothing
            continue
        missed = [n for n in group.evidence.names if not group_matches(group, n)]
        if missed:
            yield Diagnostic(
                "evidence_unmatched",
                f"group {group.name!r} records threads its patterns do not match: "
                f"{', '.join(missed[:8])}",
                "add a pattern for them or move them to the group that matches them",
                severity="warning",
                path=("group", i, "evidence", "names"),
                threads=tuple(missed),
            )


RULES: tuple[Rule, ...] = (_cgroup, _patterns, _titles, _layer_count, _match_sizes, _names, _sizing,
                           _layer_options, _overlaps, _evidence)


def validate(profile: Profile, source: SourceMap | None = None,
             file: str = "<profile>") -> list[Diagnostic]:
    """Every problem of a schema-valid profile, in rule then file order, with lines."""
    found: list[Diagnostic] = []
    for rule in RULES:
        for diag in rule(profile):
            line = source.line_of(diag.path) if source else None
            found.append(replace(diag, file=file, line=line))
    return found


def check_file(path: str | Path) -> tuple[Profile | None, list[Diagnostic]]:
    """Read and validate a profile file: (profile or None, diagnostics).

    A missing file raises UsageError; unreadable TOML or schema errors come back
    as diagnostics with no profile.
    """
    try:
        profile, source = load_profile(path)
    except ProfileError as bad:
        return None, bad.diagnostics
    return profile, validate(profile, source, str(path))


def load_valid(path: str | Path) -> Profile:
    """A profile file that validates without errors, or ProfileError carrying every problem."""
    profile, found = check_file(path)
    bad = [d for d in found if d.severity == "error"]
    if profile is None or bad:
        raise ProfileError(str(path), bad or found)
    return profile
