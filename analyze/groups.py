"""From per-thread features to name-pattern groups with roles and prefixes.

Problem: the profile works on groups of threads selected by comm prefix, one
role each. Which threads form a group depends on their names (patterns), on
whether related names behave alike (a `bio_*` family merges only when its
members would get the same role), and, when all threads share one name, on
behaviour (an AvgRuntime split).
Approach: `assign` maps every target thread to a group key in four steps:
pattern (names.py), family merge (checked with the role clusterer on
approximate group features), process-title split (titles.py) for processes that
share a comm but state different roles in their titles and run as different
users, behaviour split (split.py) for unnamed thread pools. `aggregate` then
builds one row per group from thread features plus exact percentiles computed
in SQL over the group's slices; `finish` runs the clusterer for roles and
names.py for prefixes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

import threadwise.analyze.names as nm
import threadwise.analyze.requests as rq
from threadwise.analyze.contract import HOT_SHARE, MIN_LIFE_NS, is_hot, is_poller, near_hot, poller_text
from threadwise.analyze.model import GROUP_SCHEMA
from threadwise.analyze.roles import RoleClusterer, group_feature_matrix
from threadwise.analyze.split import propose_split
from threadwise.analyze.titles import BY_TITLE, TitleClass, TitleProcess, split_by_title


def _is_hot() -> pl.Expr:
    """contract.is_hot over the thread features (the one definition, shared with lint)."""
    return is_hot(pl.col("cpu_share").fill_null(0.0), pl.col("demand").fill_null(0.0))


def poller_expr() -> pl.Expr:
    """contract.is_poller over the thread features (busy with few wakeups)."""
    return is_poller(pl.col("cpu_share").fill_null(0.0), pl.col("cpu_ns").fill_null(0),
                     pl.col("wakeups").fill_null(0))


def _poller_evidence(threads: pl.DataFrame) -> dict[str, str]:
    """pattern -> its busiest poller in words (contract.poller_text); groups without one absent."""
    busiest = (threads.filter(pl.col("poller"))
               .sort(["cpu_share", "utid"], descending=[True, False])
               .group_by("pattern", maintain_order=True).first())
    return {r["pattern"]: poller_text(r["name"] or "?", float(r["cpu_share"] or 0.0),
                                      float(r["wakeups_per_s"] or 0.0))
            for r in busiest.iter_rows(named=True)}


@dataclass
class Grouping:
    key_of: dict[int, str]                                    # utid -> group key
    pattern_of_key: dict[str, str]                            # group key -> pattern
    ranges: dict[str, list[int]] = field(default_factory=dict)  # key -> AvgRuntime range (ns)
    notes: dict[str, str] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)
    names_separate_roles: bool = True
    short_lived: dict[int, str] = field(default_factory=dict)   # utid -> pattern, grouped nowhere
    uids: dict[str, int] = field(default_factory=dict)          # key -> UIDEquals of a title split
    titles: dict[str, list[str]] = field(default_factory=dict)  # key -> its processes' titles
    title_patterns: dict[str, list[str]] = field(default_factory=dict)  # key -> its title selector


def aggregate(threads: pl.DataFrame, key_of: dict[int, str], *, duration_ns: int,
              chain_utids: set[int], exact: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per group key (pattern column = the key), approximate percentiles unless `exact`."""
    if threads.is_empty():
        return pl.DataFrame(schema={"pattern": pl.String})
    if "request_driven" not in threads.columns:   # thread features without wake sources
        threads = threads.with_columns(request_driven=pl.lit(None, pl.Float64))
    t = threads.with_columns(
        pattern=pl.col("utid").replace_strict(key_of, return_dtype=pl.String),
        in_chain=pl.col("utid").is_in(list(chain_utids)),
        periodic_cv=pl.when(pl.col("wakeups") >= 3).then(pl.col("wake_interval_cv")),
        poller=poller_expr())
    out = t.group_by("pattern").agg(
        thread_count=pl.len().cast(pl.Int64),
        names=pl.col("name").unique().sort(),
        cpu_time_ns=pl.col("cpu_ns").sum().cast(pl.Int64),
        max_thread_share=pl.col("cpu_share").fill_null(0.0).max(),
        hot_threads=_is_hot().sum().cast(pl.Int64),
        poller_threads=pl.col("poller").sum().cast(pl.Int64),
        slice_p50_ns=pl.col("slice_p50_ns").median().cast(pl.Int64),
        slice_p99_ns=pl.col("slice_p99_ns").max(),
        rq_latency_p50_ns=pl.col("rq_latency_p50_ns").median().cast(pl.Int64),
        rq_latency_p99_ns=pl.col("rq_latency_p99_ns").max(),
        wakeups=pl.col("wakeups").sum().cast(pl.Int64),
        life_ns=pl.col("life_ns").fill_null(0).max().cast(pl.Int64),   # its longest-lived thread
        in_wake_chain=pl.col("in_chain").any(),
        request_driven=rq.group_request_driven(),
        demand=pl.col("demand").fill_null(0.0).max(),
        wake_interval_cv=pl.col("periodic_cv").median(),
        slices=pl.col("slices").sum().cast(pl.Int64),
        involuntary=pl.col("involuntary").sum().cast(pl.Int64),
        wait_ns=pl.col("wait_ns").sum(),
        wait_other_ns=pl.col("wait_behind_other_ns").sum(),
    ).with_columns(
        cpu_share=pl.col("cpu_time_ns") / max(duration_ns, 1),
        wakeups_per_s=pl.col("wakeups") * 1e9 / max(duration_ns, 1),
        involuntary_frac=pl.when(pl.col("slices") > 0)
        .then(pl.col("involuntary") / pl.col("slices")),
        wait_behind_other_share=pl.when(pl.col("wait_ns") > 0)
        .then(pl.col("wait_other_ns") / pl.col("wait_ns")),
        poller_evidence=pl.col("pattern").replace_strict(_poller_evidence(t), default=None,
                                                         return_dtype=pl.String),
        request_evidence=pl.col("pattern").replace_strict(
            rq.group_evidence(t) if "request_share" in t.columns else {}, default=None,
            return_dtype=pl.String),
    ).drop("wait_ns", "wait_other_ns")
    if exact is not None and not exact.is_empty():
        out = out.drop("slice_p50_ns", "slice_p99_ns", "rq_latency_p50_ns", "rq_latency_p99_ns").join(
            exact, on="pattern", how="left")
    return out.sort(["cpu_time_ns", "pattern"], descending=[True, False])


def roles_for(groups: pl.DataFrame, *, random_state: int = 0) -> tuple[list[str], list[float]]:
    if groups.is_empty():
        return [], []
    model = RoleClusterer(random_state=random_state).fit(group_feature_matrix(groups))
    return list(model.roles_), [float(c) for c in model.confidence_]


def assign(threads: pl.DataFrame, *, process_name: str, duration_ns: int,
           chain_utids: set[int], processes: dict[int, TitleProcess] | None = None) -> Grouping:
    """Group keys for every target thread: patterns, merged families, title and behaviour splits.

    `processes` (upid -> title and effective uid) enables the title split; without it (or
    with one process per group) grouping is by names and behaviour alone.

    Threads of a pattern whose every thread lived under MIN_LIFE_NS in the capture form no
    group (`Grouping.short_lived`, with a caveat): a profile's catch-all takes them.
    """
    pattern_of_name = nm.patterns_of(threads["name"].fill_null("?").to_list())
    key_of = {u: pattern_of_name[n or "?"] for u, n in zip(threads["utid"], threads["name"], strict=True)}
    short = _short_lived(threads, key_of)
    for utid in short:
        key_of.pop(utid)
    threads = threads.filter(pl.col("utid").is_in(list(key_of)))
    grouping = Grouping(key_of, {k: k for k in key_of.values()}, short_lived=short)
    if short:
        patterns = sorted(set(short.values()))
        grouping.caveats.append(
            f"{len(short)} thread(s) lived under {MIN_LIFE_NS // 1_000_000} ms in the capture "
            f"({', '.join(patterns[:4])}{', ...' if len(patterns) > 4 else ''}): they form no "
            "group of their own; a profile's catch-all takes them")
    main_names = set(threads.filter(pl.col("is_main_thread"))["name"].drop_nulls().to_list())
    # Families (bio_aof, bio_close_file -> bio_*) merge only when their roles agree.
    keep = {pattern_of_name.get(n, n) for n in main_names}
    families = nm.family_candidates(set(key_of.values()), keep=keep)
    if families:
        fine = aggregate(threads, key_of, duration_ns=duration_ns, chain_utids=chain_utids)
        role_of = dict(zip(fine["pattern"], roles_for(fine)[0], strict=True))
        for merged, members in families.items():
            # An idle member (default: no evidence either way) does not block a merge.
            roles = {role_of[m] for m in members if m in role_of} - {"default"}
            if len(roles) > 1:
                grouping.caveats.append(
                    f"{', '.join(members)} look like one family ({merged}) but behave differently "
                    f"({', '.join(sorted(roles))}): kept apart")
                continue
            if merged in grouping.pattern_of_key:
                continue
            trial = {utid: merged if key in members else key for utid, key in key_of.items()}
            became = _role_as_merged(threads, trial, merged, duration_ns=duration_ns,
                                     chain_utids=chain_utids)
            if roles and became not in roles:
                # Idle members dilute the per-thread evidence: memcached's two busy mc-worker
                # threads (latency) with five idle mc-* housekeepers read as housekeeping.
                grouping.caveats.append(
                    f"{', '.join(members)} look like one family ({merged}) and agree "
                    f"({', '.join(sorted(roles))}), but merged they would read as {became}: kept apart")
                continue
            key_of.update(trial)
            grouping.pattern_of_key[merged] = merged
        grouping.pattern_of_key = {k: k for k in set(key_of.values())}
    if processes:
        _split_by_title(threads, grouping, processes)
    _split_unnamed(threads, grouping, process_name=process_name)
    return grouping


def _split_by_title(threads: pl.DataFrame, grouping: Grouping, processes: dict[int, TitleProcess]) -> None:
    """One group per process-title class where a group's processes share a comm but differ in
    title and user (titles.py); a note where titles differ and no matcher can follow them."""
    upid_of = dict(zip(threads["utid"].to_list(), threads["upid"].to_list(), strict=True))
    for key in sorted(set(grouping.key_of.values())):
        utids = [u for u, k in grouping.key_of.items() if k == key]
        upids = {upid_of[u] for u in utids if upid_of.get(u) in processes}
        outcome = split_by_title([processes[u] for u in sorted(upids)])
        if outcome is None:
            continue
        pattern = grouping.pattern_of_key.get(key, key)
        if not outcome.classes:
            grouping.notes[key] = outcome.note or ""
            grouping.titles[key] = sorted({processes[u].title or "untitled" for u in upids})
            # a caveat of its own: a behaviour split may follow, whose notes api.py does not repeat
            grouping.caveats.append(f"group {pattern}: {outcome.note}")
            continue
        grouping.names_separate_roles = False
        for cls in outcome.classes:
            sub = f"{key} [{cls.label}]"
            for utid in utids:
                if upid_of.get(utid) in cls.upids:
                    grouping.key_of[utid] = sub
            grouping.pattern_of_key[sub] = pattern
            grouping.titles[sub] = list(cls.titles)
            grouping.notes[sub] = _class_note(cls, outcome.note)
            if cls.uid is not None:
                grouping.uids[sub] = cls.uid
            if cls.patterns:
                grouping.title_patterns[sub] = list(cls.patterns)
        grouping.pattern_of_key.pop(key, None)
        grouping.notes.pop(key, None)


def _class_note(cls: TitleClass, why: str | None) -> str:
    """What a title split's group says of itself: its title, its processes and its selector."""
    count = f"{len(cls.upids)} process{'es' if len(cls.upids) != 1 else ''}"
    if cls.uid is not None:
        shared = (f"; titles {', '.join(map(repr, cls.titles))} share uid {cls.uid}, and no UIDEquals "
                  "tells them apart: one group" if len(cls.titles) > 1 else "")
        return (f"process title {cls.label!r} ({count}) runs as uid {cls.uid}: selected by comm and "
                f"UIDEquals {cls.uid}, since names do not separate it{shared}")
    if cls.patterns:
        return f"process title {cls.patterns[0]!r} ({count}): {why}; {BY_TITLE}"
    return (f"processes without a role in their title ({count}): {why}; the title groups take the "
            "others, these stay selected by comm")


def _role_as_merged(threads: pl.DataFrame, key_of: dict[int, str], merged: str, *, duration_ns: int,
                    chain_utids: set[int]) -> str:
    """The role the group `merged` would get in the grouping `key_of`: a merge must not change
    the role its members agreed on."""
    groups = aggregate(threads, key_of, duration_ns=duration_ns, chain_utids=chain_utids)
    return dict(zip(groups["pattern"], roles_for(groups)[0], strict=True))[merged]


def _short_lived(threads: pl.DataFrame, key_of: dict[int, str]) -> dict[int, str]:
    """utid -> pattern of threads whose whole pattern lived under MIN_LIFE_NS (none when that
    would leave no group at all)."""
    life = dict(zip(threads["utid"].to_list(), threads["life_ns"].fill_null(0).to_list(), strict=True))
    longest: dict[str, int] = {}
    for utid, key in key_of.items():
        longest[key] = max(longest.get(key, 0), int(life.get(utid, 0)))
    short_keys = {k for k, ns in longest.items() if ns < MIN_LIFE_NS}
    if short_keys == set(longest):
        return {}
    return {u: k for u, k in key_of.items() if k in short_keys}


def _split_unnamed(threads: pl.DataFrame, grouping: Grouping, *, process_name: str) -> None:
    """Propose AvgRuntime splits for groups whose threads all carry the process's own name."""
    for key in sorted(set(grouping.key_of.values())):
        members = threads.filter(pl.col("utid").is_in([u for u, k in grouping.key_of.items() if k == key]))
        distinct = set(members["name"].drop_nulls().to_list())
        unnamed = len(distinct) == 1 and nm.comm(process_name) in distinct
        if members.height < 3 or not unnamed or key in grouping.title_patterns:
            continue   # a title group's layer is HintEquals alone: no AvgRuntime beside it
        grouping.names_separate_roles = False
        head = (f"all {members.height} threads of {key} share one name: names do not separate roles")
        proposal = propose_split(members.select("utid", "cpu_ns", "slices"))
        grouping.caveats.append(f"{head}; {proposal.reason}")
        # a title split's note (or why titles could not split it) stays in front
        earlier = grouping.notes.get(key)
        if proposal.ranges is None:
            grouping.notes[key] = "; ".join(x for x in (earlier, "names do not separate roles; no "
                                                        "behaviour split") if x)
            continue
        low, high = proposal.ranges
        pattern = grouping.pattern_of_key.get(key, key)
        for suffix, utids, rng in (("short", proposal.low_utids, low), ("long", proposal.high_utids, high)):
            sub = f"{key} [{suffix} runs]"
            for utid in utids:
                grouping.key_of[utid] = sub
            grouping.pattern_of_key[sub] = pattern
            grouping.ranges[sub] = rng
            if key in grouping.uids:
                grouping.uids[sub] = grouping.uids[key]
            if key in grouping.titles:
                grouping.titles[sub] = grouping.titles[key]
            grouping.notes[sub] = "; ".join(x for x in (earlier, f"behaviour split ({suffix} runs): "
                                                        f"{proposal.reason}") if x)
        grouping.pattern_of_key.pop(key, None)


def _other_uid(grouping: Grouping, key: str, other: str) -> bool:
    """Whether two groups are selected by different UIDEquals (so they share no thread), or one of
    them by title (its hinted layer comes first and takes its processes whatever their names)."""
    if key in grouping.title_patterns or other in grouping.title_patterns:
        return True
    mine, theirs = grouping.uids.get(key), grouping.uids.get(other)
    return mine is not None and theirs is not None and mine != theirs


MIN_SLICES = 20          # a role read from fewer on-CPU slices than this is thin evidence
MIN_WAKEUPS = 10         # latency and housekeeping are read from wakeups: fewer is thin evidence
FULL_LIFE_NS = 10**9     # a second of a thread's behaviour (or the whole capture) is enough
NEAR_HOT_FLOOR = 0.75    # what a compute role keeps with its busiest thread on the hot cutoff
SAYS_THIN = 0.99         # a weight at or above this is not reported (nor applied)
_WOKEN_ROLES = ("latency", "housekeeping")


def evidence_weight(slices: int) -> float:
    """How much a role's confidence keeps with `slices` samples: 1 from MIN_SLICES up,
    sqrt(slices / MIN_SLICES) below (1 slice keeps 22%, none keeps nothing)."""
    return min(1.0, max(slices, 0) / MIN_SLICES) ** 0.5


def thin_evidence(role: str, *, slices: int, wakeups: int, life_ns: int, duration_ns: int,
                  max_thread_share: float) -> tuple[float, list[str]]:
    """How much of its confidence a role keeps given how much there was to see, and why.

    Each kind of evidence gives a weight in (0, 1]; the thinnest decides (they are not
    independent: a short life also means few slices). Slices, wakeups (for the roles read
    from them) and life fall as sqrt(seen / enough); a compute role whose busiest thread
    sits on the hot cutoff keeps NEAR_HOT_FLOOR (the cutoff decides exclusive or not, so
    it is worth saying, but not alone worth dropping the role).
    """
    if role == "default":
        return 1.0, []
    found: list[tuple[float, str]] = []
    if slices < MIN_SLICES:
        found.append((evidence_weight(slices), f"{slices} slices (< {MIN_SLICES})"))
    if role in _WOKEN_ROLES and wakeups < MIN_WAKEUPS:
        found.append((min(1.0, max(wakeups, 0) / MIN_WAKEUPS) ** 0.5,
                      f"{wakeups} wakeups (< {MIN_WAKEUPS})"))
    enough = min(FULL_LIFE_NS, duration_ns) if duration_ns > 0 else FULL_LIFE_NS
    if life_ns < enough:
        found.append((min(1.0, max(life_ns, 0) / enough) ** 0.5,
                      f"lived {life_ns / 1e6:.0f} ms (< {enough / 1e6:.0f} ms)"))
    distance = near_hot(max_thread_share) if role == "compute" else None
    if distance is not None:
        found.append((NEAR_HOT_FLOOR + (1 - NEAR_HOT_FLOOR) * distance,
                      f"busiest thread {max_thread_share:.2f} CPU, near the hot cutoff ({HOT_SHARE})"))
    # a factor that would print as x1.00 lowers nothing worth a reviewer's attention
    found = [(w, why) for w, why in found if w < SAYS_THIN]
    return min((w for w, _ in found), default=1.0), [why for _, why in found]


def finish(groups: pl.DataFrame, grouping: Grouping, *, other_names: list[str],
           duration_ns: int = 0) -> pl.DataFrame:
    """Roles, prefixes, separability and contract column order for aggregated groups."""
    if groups.is_empty():
        return pl.DataFrame(schema=GROUP_SCHEMA)
    roles, confidence = roles_for(groups)
    # the clusterer's responsibility says how well a group fits its role; how much there
    # was to see (slices, wakeups, life) and how close it sits to the hot cutoff say how
    # far to trust that: thin evidence lowers the confidence, and says why
    thin = [thin_evidence(role, slices=int(r["slices"] or 0), wakeups=int(r["wakeups"] or 0),
                          life_ns=int(r.get("life_ns") or duration_ns), duration_ns=duration_ns,
                          max_thread_share=float(r["max_thread_share"] or 0.0))
            for role, r in zip(roles, groups.iter_rows(named=True), strict=True)]
    weights = [w for w, _ in thin]
    confidence = [c * w for c, w in zip(confidence, weights, strict=True)]
    keys = groups["pattern"].to_list()
    names_of = dict(zip(keys, groups["names"].to_list(), strict=True))
    rows = []
    for i, key in enumerate(keys):
        mine = names_of[key]
        others = [n for k in keys if k != key for n in names_of[k]] + other_names
        # a group selected by UIDEquals never takes the threads of a group of another uid, so
        # names shared with those (a title split's whole point) neither clash nor need excluding
        rivals = [k for k in keys if k != key and not _other_uid(grouping, key, k)]
        selection = nm.select_prefixes(mine, [n for k in rivals for n in names_of[k]],
                                       pattern=grouping.pattern_of_key.get(key, key))
        note = grouping.notes.get(key) or selection.note
        thin_text = (f"{'; '.join(thin[i][1])}: confidence x{weights[i]:.2f}"
                     if thin[i][1] else None)
        if thin_text and not note:
            note = f"role {roles[i]} on thin evidence: {thin_text}"
        leak = nm.collisions(selection.match_prefixes, selection.exclude_prefixes,
                             [n for n in others if n not in mine])
        if leak and selection.separable:
            note = f"prefixes also select other processes' threads: {', '.join(leak[:3])}"
        rows.append({"pattern": grouping.pattern_of_key.get(key, key), "role": roles[i],
                     "confidence": round(confidence[i], 4), "match_prefixes": selection.match_prefixes,
                     "exclude_prefixes": selection.exclude_prefixes,
                     "separable": selection.separable and key not in grouping.ranges,
                     "avg_runtime_range_ns": grouping.ranges.get(key), "thin_evidence": thin_text,
                     "process_titles": grouping.titles.get(key, []), "uid": grouping.uids.get(key),
                     "title_patterns": grouping.title_patterns.get(key, []),
                     "fleet_evidence": None,   # one capture: a fleet's merge sets it (fleet.py)
                     "group_id": i, "note": note})
    decided = pl.DataFrame(rows, schema={k: GROUP_SCHEMA[k] for k in rows[0]})
    out = groups.drop("pattern").with_columns(group_id=pl.int_range(pl.len(), dtype=pl.Int64))
    out = decided.join(out, on="group_id", how="left")
    return out.select([pl.col(c).cast(t) for c, t in GROUP_SCHEMA.items()])

