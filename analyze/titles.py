"""Roles from process titles: split a group whose processes share a comm but not a title.

Problem: a server that forks a process per role gives every process the same comm
(`nginx`, `postgres`), so name patterns put its master and its workers in one group, and it
says the role only in the process title it writes over its argv (`nginx: master process
...`, `postgres: checkpointer`, `postgres: app shop 127.0.0.1(51234) idle`; php-fpm and sshd
do the same). A profile can only use what scx_layered 1.1.4 can match. It has no matcher that
reads a title (its `CmdJoin` matches a join command a service writes into its own comm), but
it has two that can follow one: the effective uid (`UIDEquals`, `p->real_cred->euid`, nginx's
master runs as root, its workers as www-data), which needs nothing at run time, and a hint
(`HintEquals`), a number the runtime writes into a task-hint map for each process after
reading its title (docs/profile-schema.md "Groups selected by process title").

Approach, per group whose threads belong to processes of two or more titles:
1. A process's role is the stable part of its title: the text after `<comm>: ` in its
   cmdline, up to the first word that is an argument rather than a role word (a path, an
   option, a number, an address, a bracket): `nginx: master process /usr/sbin/nginx -c x` ->
   `master process`; a PostgreSQL backend `postgres: USER DB HOST(PORT) STATE` -> `USER DB`
   (its connection's user and database; the client address and the query state change). Its
   title pattern is `<comm>: <role>` (`postgres: checkpointer`), which a title selects when
   it equals it or continues it after a space. A cmdline not in that form has no title
   (`untitled`).
2. Titles are joined into classes when processes of both run as one effective uid
   (union-find over title -> uid). Two or more classes, each with exactly one uid: the
   group splits into one group per class, each selected by its comm prefix AND `UIDEquals`
   its uid (no runtime help needed).
3. Otherwise (titles share a uid, a title spread over several uids, or uids unknown, a
   capture older than schema migration 6): one class per role, each selected by its title
   pattern (a hinted layer), and one class of the untitled processes, which stays selected by
   comm (PostgreSQL's postmaster).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

UNTITLED = "untitled"   # the class of processes whose cmdline is no `comm: title`
# A word of a title is a role word unless it looks like an argument: a path, an option, a
# number or address, a bracketed or quoted value, or a key=value.
_ARGUMENT = re.compile(r"^([/~.-]|\(|\[|\"|'|\d)|=")
_MAX_TITLE_WORDS = 4    # `nginx: cache manager process`; more words are a command line


def process_title(cmdline: str | None, comm: str | None) -> str | None:
    """The role a process states in its title, or None when its cmdline has no title.

    The convention (setproctitle, nginx's ngx_setproctitle, postgres): the program's name,
    `: `, then the role, then often the original arguments. The name must be the process's
    comm or begin it (`php-fpm: pool www` of comm `php-fpm8.2`), so an ordinary command whose
    first argument ends in a colon is not read as a title.
    """
    if not cmdline or not comm or ": " not in cmdline:
        return None
    head, _, rest = cmdline.partition(": ")
    if not head or " " in head or not (comm.startswith(head) or head.startswith(comm)):
        return None
    words: list[str] = []
    for word in rest.split():
        if _ARGUMENT.search(word) or len(words) == _MAX_TITLE_WORDS:
            break
        words.append(word)
    return " ".join(words) or None


def title_pattern(cmdline: str | None, comm: str | None) -> str | None:
    """The pattern that selects a process of this title (`postgres: checkpointer`): the title's
    program name, `: `, and its role (`process_title`); None when the cmdline has no title."""
    role = process_title(cmdline, comm)
    if role is None or cmdline is None:
        return None
    return f"{cmdline.partition(': ')[0]}: {role}"


def title_selects(pattern: str, title: str | None) -> bool:
    """Whether a title pattern selects a process of `title` (its cmdline, NULs as spaces): the
    title equals the pattern or continues it after a space (`postgres: app shop` selects
    `postgres: app shop 127.0.0.1(51234) idle`, not `postgres: app shopping ...`)."""
    if title is None:
        return False
    title = " ".join(title.split())
    return title == pattern or title.startswith(pattern + " ")


@dataclass(frozen=True)
class TitleProcess:
    """What the split needs of one target process (analyze/capture.sql `target_processes`)."""

    upid: int
    title: str | None
    euid: int | None
    pattern: str | None = None   # title_pattern of its cmdline: what a hinted layer selects it by


@dataclass
class TitleSplit:
    """The outcome for one group: its classes when it splits, else why it stays whole."""

    classes: list[TitleClass] = field(default_factory=list)
    note: str | None = None     # when it does not split: the titles and what is missing


@dataclass(frozen=True)
class TitleClass:
    """Titles no matcher tells apart, and the processes that carry them: selected by one uid, or
    (uid None) by title patterns (empty: the untitled processes, selected by comm alone)."""

    titles: tuple[str, ...]
    uid: int | None
    upids: frozenset[int]
    patterns: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return " | ".join(self.titles)


def split_by_title(processes: list[TitleProcess]) -> TitleSplit | None:
    """Classes of one group's processes by title and uid (None: fewer than two titles, nothing
    to split or say)."""
    by_title: dict[str, set[int]] = defaultdict(set)
    uids_of: dict[str, set[int | None]] = defaultdict(set)
    for proc in processes:
        title = proc.title or UNTITLED
        by_title[title].add(proc.upid)
        uids_of[title].add(proc.euid)
    if len(by_title) < 2 or set(by_title) == {UNTITLED}:
        return None
    if any(None in uids for uids in uids_of.values()):
        return _by_title(processes, "the capture has no user id "
                                    "of some of their processes (recorded from schema migration 6 on)")
    spread = sorted(t for t, uids in uids_of.items() if len(uids) > 1)
    if spread:
        return _by_title(processes, f"{spread[0]!r} runs as several "
                                    f"users ({', '.join(map(str, sorted(uids_of[spread[0]])))}), so no one "
                                    "UIDEquals selects it")
    # one uid per title: titles sharing a uid form one class
    titles_of_uid: dict[int, list[str]] = defaultdict(list)
    for title, uids in uids_of.items():
        (uid,) = uids
        titles_of_uid[uid].append(title)   # type: ignore[index]
    if len(titles_of_uid) < 2:
        (uid,) = titles_of_uid
        return _by_title(processes, f"every process runs as uid "
                                    f"{uid}, so UIDEquals cannot tell them apart")
    classes = [TitleClass(tuple(sorted(members)), uid,
                          frozenset(u for t in members for u in by_title[t]))
               for uid, members in titles_of_uid.items()]
    return TitleSplit(classes=sorted(classes, key=lambda c: (c.titles, c.uid or 0)))


BY_TITLE = ("selected by its title pattern: the runtime reads each process's title and writes a "
            "hint scx_layered's HintEquals layer matches (docs/profile-schema.md)")


def _by_title(processes: list[TitleProcess], why: str) -> TitleSplit:
    """One class per title pattern, and one of the untitled processes (selected by comm); the
    note says why users could not separate them. A title without a pattern (no role words) is
    untitled here: nothing could select it."""
    upids_of: dict[str, set[int]] = defaultdict(set)
    roles_of: dict[str, set[str]] = defaultdict(set)
    for proc in processes:
        key = proc.pattern or UNTITLED
        upids_of[key].add(proc.upid)
        roles_of[key].add(proc.title if proc.pattern else UNTITLED)
    if len(upids_of) < 2:
        return TitleSplit(note=f"{why}; every process has the one title pattern: one group")
    classes = [TitleClass(tuple(sorted(roles_of[key])), None, frozenset(upids),
                          () if key == UNTITLED else (key,))
               for key, upids in upids_of.items()]
    return TitleSplit(classes=sorted(classes, key=lambda c: (c.patterns == (), c.patterns, c.titles)),
                      note=why)
