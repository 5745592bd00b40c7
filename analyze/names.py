"""Thread names -> patterns -> groups, and the comm prefixes that select a group.

Problem: a profile selects threads by comm prefix (scx_layered matches the
comm, at most 15 characters, by PREFIX only), so analysis must group threads
the way their names can be told apart: `worker-0..N` are one group, `bio_aof`
and `bio_close_file` belong together, `redis-server` is its own. Names the
kernel cut at 15 characters (`C2 CompilerThre`) lose their distinguishing tail.
Approach:
1. `normalise`: digit runs that stand as their own token (after a separator
   `-_#:./ ` or at the end after one) become `*`: `worker-3` -> `worker-*`,
   `GC Thread#3` -> `GC Thread#*`, `kworker/u8:3` -> `kworker/u*:*`... A bare
   trailing number without separator (`thread3`) collapses only when another
   name shares the stem, so `x264` stays itself.
2. `family`: patterns that share a first word ending in `_` or `-` (`bio_aof`,
   `bio_close_file`) may be merged into `bio_*`; the caller decides (roles must
   agree); the main thread's name never merges.
3. `select_prefixes`: a group's match prefixes are its pattern's stem before
   the first `*` (`io_thd_`), else the longest common prefix of its comms
   (when that is >= 3 characters), else each comm; every other
   group's comm that a match prefix also selects becomes an exclusion (that
   comm itself). Two groups sharing an identical comm cannot be separated by
   any prefix set: `separable` is false then.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

COMM_LEN = 15          # TASK_COMM_LEN - 1: the kernel keeps 15 characters of a name
MIN_PREFIX = 3         # a common prefix shorter than this selects too broadly
UNKNOWN = "?"          # the name of a thread the capture never learnt (thread_features.sql)
_SEPS = "-_#:./ "
_TOKEN_DIGITS = re.compile(r"(?<=[-_#:./ ])\d+(?=$|[-_#:./ ])")
_TRAILING_DIGITS = re.compile(r"^(?P<stem>.*\D)(?P<num>\d+)$")
_FAMILY = re.compile(r"^(?P<word>[A-Za-z][A-Za-z0-9]*[-_])[A-Za-z]")


def comm(name: str) -> str:
    """The kernel's view of a name: at most 15 characters."""
    return name[:COMM_LEN]


def maybe_truncated(name: str) -> bool:
    """A 15-character comm may be the cut-off start of a longer name."""
    return len(name) >= COMM_LEN


def normalise(name: str, *, stems: frozenset[str] = frozenset()) -> str:
    """The pattern of one name; `stems` are bare stems shared by several names."""
    pattern = _TOKEN_DIGITS.sub("*", comm(name))
    match = _TRAILING_DIGITS.match(pattern)
    if match and match["stem"] in stems and not match["stem"].endswith("*"):
        pattern = match["stem"] + "*"
    return pattern


def shared_stems(names: Iterable[str]) -> frozenset[str]:
    """Stems of bare trailing numbers (`thread3`) that at least two distinct names share."""
    seen: dict[str, set[str]] = defaultdict(set)
    for name in set(names):
        match = _TRAILING_DIGITS.match(_TOKEN_DIGITS.sub("*", comm(name)))
        if match and match["stem"][-1] not in _SEPS:
            seen[match["stem"]].add(name)
    return frozenset(stem for stem, members in seen.items() if len(members) >= 2)


def patterns_of(names: Iterable[str]) -> dict[str, str]:
    """name -> pattern for a set of names observed together (one workload)."""
    names = list(names)
    stems = shared_stems(names)
    return {name: normalise(name, stems=stems) for name in names}


def family(pattern: str) -> str | None:
    """The first word of a pattern when it ends in `_` or `-` and more words follow."""
    match = _FAMILY.match(pattern)
    return match["word"] if match and len(match["word"]) >= MIN_PREFIX else None


def family_candidates(patterns: Iterable[str], *, keep: Iterable[str] = ()) -> dict[str, list[str]]:
    """Families of >= 2 patterns that could merge into `word*` (patterns in `keep` never merge)."""
    keep = set(keep)
    families: dict[str, list[str]] = defaultdict(list)
    for pattern in sorted(set(patterns)):
        word = family(pattern)
        if word is not None and pattern not in keep:
            families[word].append(pattern)
    return {word + "*": members for word, members in families.items() if len(members) >= 2}


@dataclass(frozen=True)
class Selection:
    match_prefixes: list[str]
    exclude_prefixes: list[str]
    separable: bool
    note: str | None   # why a group cannot be separated, or None


def common_prefix(names: Iterable[str]) -> str:
    # character-wise on purpose: scx_layered's CommPrefix compares characters, not path parts
    return os.path.commonprefix([comm(n) for n in names])  # noqa: RUF071


def select_prefixes(mine: Iterable[str], others: Iterable[str], *, pattern: str | None = None) -> Selection:
    """Prefixes selecting every comm in `mine` and none in `others` (exclusions if needed).

    With a pattern such as `io_thd_*`, its stem (`io_thd_`) is preferred, so
    threads numbered beyond those seen are selected too.
    """
    mine_set = sorted({comm(n) for n in mine if n != UNKNOWN})
    other_set = sorted({comm(n) for n in others if n != UNKNOWN})
    if not mine_set:
        return Selection([], [], False, "the group has no known names: no prefix can select it")
    lcp = common_prefix(mine_set)
    stem = comm(pattern.split("*", 1)[0]) if pattern and "*" in pattern else ""
    stem_ok = len(stem) >= MIN_PREFIX or (len(stem) >= 2 and stem[-1] in _SEPS)
    if stem_ok and all(m.startswith(stem) for m in mine_set):
        lcp = stem
    # A lone name that may be truncated is still its own best prefix (the full comm).
    match = [lcp] if len(lcp) >= MIN_PREFIX or len(mine_set) == 1 else mine_set
    shared = sorted(set(mine_set) & set(other_set))
    if shared:
        return Selection(match, [], False,
                         f"comm {shared[0]!r} belongs to this group and another: no prefix can separate them")
    excludes: list[str] = []
    for other in other_set:
        if any(other.startswith(p) for p in match):
            excludes.append(other)
    # An exclusion that also selects one of our own names would drop it: fall back to exact names.
    if any(m.startswith(e) for e in excludes for m in mine_set):
        match = mine_set
        excludes = [o for o in other_set if any(o.startswith(p) for p in match)]
        clash = [(e, m) for e in excludes for m in mine_set if m.startswith(e)]
        if clash:
            return Selection(match, _minimal(excludes), False,
                             f"{clash[0][1]!r} starts with {clash[0][0]!r} of another group: only layer "
                             "order (the other group first) can separate them")
    return Selection(match, _minimal(excludes), True, None)


def _minimal(prefixes: list[str]) -> list[str]:
    """Drop prefixes already covered by a shorter one in the list."""
    out: list[str] = []
    for prefix in sorted(set(prefixes), key=lambda p: (len(p), p)):
        if not any(prefix.startswith(kept) for kept in out):
            out.append(prefix)
    return sorted(out)


def collisions(prefixes: Iterable[str], excludes: Iterable[str], names: Iterable[str]) -> list[str]:
    """Names (e.g. of other processes) the prefix set would also select."""
    prefixes, excludes = list(prefixes), list(excludes)
    return sorted({n for n in names if any(comm(n).startswith(p) for p in prefixes)
                   and not any(comm(n).startswith(e) for e in excludes)})
