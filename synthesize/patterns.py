"""Comm patterns and what scx_layered can make of them.

scx_layered 1.1.4 matches a thread's comm (and its process's comm) by PREFIX
only (`CommPrefix`, `PcommPrefix`, `match_str(..., STR_PREFIX)` in its BPF),
and the kernel keeps at most 15 bytes of a comm. A profile pattern is therefore
a prefix, written either bare (`redis-server`) or with one trailing `*`
(`io_thd_*`); both compile to the same `CommPrefix`. Anything else a glob can
say (a leading `*`, `?`, `[...]`, a `*` in the middle) has no matcher, and a
prefix longer than 15 bytes can never match.

One exception: `*` alone as the only pattern of a profile's LAST group means
"every other thread of the workload" (the workload's own catch-all: the
layer matches the process by `PcommPrefix` and no comm prefix). Anywhere
else `*` alone is the `match_all` error (`rules.py` decides where it stands).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from threadwise.synthesize.matchers import matcher_set

GLOB_CHARS = "*?["
WORKLOAD_REST = "*"   # the whole-workload pattern (last group only)


@dataclass(frozen=True)
class PatternProblem:
    """Why a pattern cannot be compiled: rule name, message, hint."""

    rule: str
    message: str
    hint: str


def prefix_of(pattern: str) -> str:
    """The comm prefix a (valid) pattern compiles to."""
    return pattern[:-1] if pattern.endswith("*") else pattern


def check_pattern(pattern: str, observed: list[str] | None = None, *,
                  rest_allowed: bool = False) -> PatternProblem | None:
    """None when `pattern` is expressible as a comm prefix, else the problem.

    `rest_allowed`: the pattern is the only one of the profile's last group, where
    `*` alone takes every other thread of the workload.
    """
    if rest_allowed and pattern == WORKLOAD_REST:
        return None
    limit = matcher_set().limits.max_comm_bytes
    body = prefix_of(pattern)
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in pattern):
        return PatternProblem(
            "control_char",
            f"pattern {pattern!r} holds a control character; no comm can contain it "
            "(and scx_layered cannot pass a NUL to its BPF side)",
            "remove the control character",
        )
    if pattern.startswith("*") and any(ch not in "*" for ch in pattern):
        return PatternProblem(
            "suffix_pattern",
            f"pattern {pattern!r} matches by suffix or substring; scx_layered matches "
            "comm by prefix only",
            _prefix_hint(pattern, observed),
        )
    if not body:
        return PatternProblem(
            "match_all",
            f"pattern {pattern!r} matches every thread",
            "only the last group may match every other thread of the workload (`match = "
            "[\"*\"]`, alone); elsewhere name a prefix",
        )
    if any(ch in body for ch in GLOB_CHARS):
        return PatternProblem(
            "glob_pattern",
            f"pattern {pattern!r} uses glob syntax scx_layered cannot express; only a "
            "trailing '*' (a prefix) is allowed",
            _prefix_hint(pattern, observed),
        )
    size = len(body.encode("utf-8"))
    if size > limit:
        cut = body.encode("utf-8")[:limit].decode("utf-8", "ignore")
        return PatternProblem(
            "prefix_too_long",
            f"prefix {body!r} is {size} bytes; the kernel keeps {limit} bytes of a comm, "
            "so it can never match",
            f"use at most the first {limit} bytes: {cut!r}",
        )
    return None


def _prefix_hint(pattern: str, observed: list[str] | None) -> str:
    if observed:
        hits = [name for name in observed if _glob_hit(pattern, name)]
        common = _common_prefix(hits)
        if common:
            return f"threads seen: {', '.join(hits[:5])}; their common prefix is {common!r}"
        if hits:
            return f"list the full names as prefixes: {', '.join(repr(h) for h in hits[:5])}"
    return "name the threads by a common prefix, or list their full names (each is a prefix)"


def _common_prefix(names: list[str]) -> str:
    if not names:
        return ""
    first, last = min(names), max(names)
    size = 0
    while size < min(len(first), len(last)) and first[size] == last[size]:
        size += 1
    return first[:size]


def _glob_hit(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern)


def comm_matches(prefix: str, comm: str) -> bool:
    """Whether scx_layered's CommPrefix(prefix) matches a thread named `comm`."""
    limit = matcher_set().limits.max_comm_bytes
    kept = comm.encode("utf-8")[:limit]
    return kept.startswith(prefix.encode("utf-8"))


TITLE_GLOBS = "*?"


def check_title(pattern: str) -> PatternProblem | None:
    """None when `pattern` is a title pattern the runtime can classify by, else the problem.

    A title pattern is literal words, `NAME: role` as a server writes its title
    (`postgres: checkpointer`): it selects a process whose title (its cmdline, NULs as spaces)
    equals it or continues it after a space (analyze/titles.py `title_selects`)."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in pattern):
        return PatternProblem("control_char", f"title pattern {pattern!r} holds a control character",
                              "remove the control character")
    if pattern != " ".join(pattern.split()):
        return PatternProblem("title_pattern", f"title pattern {pattern!r} has leading, trailing or "
                              "repeated spaces; titles are compared word by word",
                              f"write it as {' '.join(pattern.split())!r}")
    if any(ch in pattern for ch in TITLE_GLOBS):
        return PatternProblem("title_pattern", f"title pattern {pattern!r} uses glob syntax; a title "
                              "pattern is literal words, matched as a prefix of whole words",
                              "drop the glob: the pattern already selects every title it begins")
    head, sep, role = pattern.partition(": ")
    if not sep or not head or " " in head or not role:
        return PatternProblem("title_pattern", f"title pattern {pattern!r} is not a process title "
                              "`NAME: role`", "write the program's name, ': ' and the role, as `ps` "
                              "shows the title: 'postgres: checkpointer'")
    return None
