"""Roles from process titles: split a group whose processes share a comm but not a title.

Problem: a server that forks a process per role gives every process the same comm
(`nginx`), so name patterns put its master and its workers in one group, and it says
the role only in the process title it writes over its argv (`nginx: master process
...`, `nginx: worker process`; postgres, php-fpm and sshd do the same). A profile can
only use what scx_layered 1.1.4 can match, and it has no matcher for a title: its
`CmdJoin` does not read /proc cmdline at all; it matches a task that wrote a binary
join command (prefix 0x5C10, an opcode, a layer name) into its own comm with
pthread_setname_np (main.bpf.c `handle_cmd`, `MATCH_SCXCMD_JOIN`), which only a
service built to talk to scx_layered does. What it can match per process and that
stays put across restarts is the effective uid (`UIDEquals`, `p->real_cred->euid`):
nginx's master runs as root, its workers as the `user` of nginx.conf (www-data).
(PID, PPID and TGID matchers also separate them, but only for one boot of the
service: a committed profile cannot name them.)

Approach, per group whose threads belong to processes of two or more titles:
1. A process's title is the text after `<comm>: ` in its cmdline, up to the first
   word that is an argument rather than a role word (a path, an option, a number,
   a bracket): `nginx: master process /usr/sbin/nginx -c x` -> `master process`.
   A cmdline not in that form has no title (`untitled`).
2. Titles are joined into classes when processes of both run as one effective uid
   (union-find over title -> uid), since no matcher could tell them apart.
3. Two or more classes, each with exactly one uid: the group splits into one group
   per class, each selected by its comm prefix AND `UIDEquals` its uid. One class
   (titles share a uid), a title spread over several uids, or a process whose uid
   the capture lacks (older than schema migration 6): the group stays whole, with a
   note naming the titles and what is missing.
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


@dataclass(frozen=True)
class TitleProcess:
    """What the split needs of one target process (analyze/capture.sql `target_processes`)."""

    upid: int
    title: str | None
    euid: int | None


@dataclass
class TitleSplit:
    """The outcome for one group: its classes when it splits, else why it stays whole."""

    classes: list[TitleClass] = field(default_factory=list)
    note: str | None = None     # when it does not split: the titles and what is missing


@dataclass(frozen=True)
class TitleClass:
    """Titles no matcher tells apart (one uid), and the processes that carry them."""

    titles: tuple[str, ...]
    uid: int
    upids: frozenset[int]

    @property
    def label(self) -> str:
        return " | ".join(self.titles)


def _counted(titles: dict[str, set[int]]) -> str:
    return ", ".join(f"{title!r} ({len(upids)} process{'es' if len(upids) != 1 else ''})"
                     for title, upids in sorted(titles.items()))


NO_TITLE_MATCHER = ("scx_layered 1.1.4 has no matcher for a process title (its CmdJoin matches only "
                    "a join command the service itself writes into a thread's comm with "
                    "pthread_setname_np)")


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
    titles = _counted(by_title)
    if any(None in uids for uids in uids_of.values()):
        return TitleSplit(note=f"process titles {titles} differ, but the capture has no user id of "
                               "some of their processes (recorded from schema migration 6 on); "
                               f"{NO_TITLE_MATCHER}: one group")
    spread = sorted(t for t, uids in uids_of.items() if len(uids) > 1)
    if spread:
        return TitleSplit(note=f"process titles {titles} differ, but {spread[0]!r} runs as several "
                               f"users ({', '.join(map(str, sorted(uids_of[spread[0]])))}), so no one "
                               f"UIDEquals selects it; {NO_TITLE_MATCHER}: one group")
    # one uid per title: titles sharing a uid form one class
    titles_of_uid: dict[int, list[str]] = defaultdict(list)
    for title, uids in uids_of.items():
        (uid,) = uids
        titles_of_uid[uid].append(title)   # type: ignore[index]
    if len(titles_of_uid) < 2:
        (uid,) = titles_of_uid
        return TitleSplit(note=f"process titles {titles} differ, but every process runs as uid {uid}, "
                               f"so UIDEquals cannot tell them apart either; {NO_TITLE_MATCHER}: one "
                               "group")
    classes = [TitleClass(tuple(sorted(members)), uid,
                          frozenset(u for t in members for u in by_title[t]))
               for uid, members in titles_of_uid.items()]
    return TitleSplit(classes=sorted(classes, key=lambda c: (c.titles, c.uid)))
