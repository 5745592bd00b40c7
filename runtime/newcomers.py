"""Re-match a workload's processes that changed user after scx_layered matched them.

Problem: a profile may select a role by the effective uid or gid (`UIDEquals`, `GIDEquals`:
nginx's workers run as www-data, its master as root; docs/analyze.md "Roles from process
titles"). scx_layered 1.1.4 matches a task at fork and again only after a rename
(runtime/membership.py); it has no hook on setuid. A worker forked while the profile is applied
(a reload, a respawn) is matched as it first runs, still as root, and stays in the master's
layer: measured in the lab (tests/lab/test_titles_lab.py, two reloaded workers of euid 33 in
`nginx-master` until re-matched).

Approach: while the profile is attached, the supervisor polls the workload's processes (those
whose comm the config's `PcommPrefix` names) about once a second and has scx_layered match again
(`membership.rematch`) every process that is new since the last poll or whose effective uid or
gid changed since. A process first seen before its setuid is re-matched twice: when first seen,
and again when its user changes. Configs with no uid or gid matcher have nothing to gain, and are
not polled. Processes present at the attach are left to `apply --rematch`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from threadwise.observe.procfs import process_credentials
from threadwise.runtime import membership

if TYPE_CHECKING:
    from threadwise.synthesize.api import LayerConfig

CREDENTIAL_MATCHERS = frozenset({"UIDEquals", "GIDEquals"})
POLL_S = 1.0

Credentials = tuple[int, int]   # (effective uid, effective gid)


def selects_by_user(config: LayerConfig) -> bool:
    """Whether any layer of `config` matches on the effective uid or gid."""
    return any(match.kind in CREDENTIAL_MATCHERS for spec in config for block in spec.matches
               for match in block)


@dataclass
class Newcomers:
    """The workload's processes as last seen, and whom to re-match at the next poll."""

    prefixes: list[str]
    rematch: Callable[[int], object] = membership.rematch
    seen: dict[int, Credentials] = field(default_factory=dict)

    @classmethod
    def for_config(cls, config: LayerConfig,
                   rematch: Callable[[int], object] = membership.rematch) -> Newcomers | None:
        """A watcher for `config`'s workload as it is now, or None when no layer selects by user."""
        if not selects_by_user(config):
            return None
        watcher = cls(membership.target_prefixes(config), rematch)
        watcher.seen = watcher._current()
        return watcher

    def _current(self) -> dict[int, Credentials]:
        now = {}
        for pid in membership.pids_with_comm_prefix(self.prefixes):
            creds = process_credentials(pid)
            if creds is not None:
                now[pid] = creds
        return now

    def poll(self) -> list[tuple[int, Credentials, str]]:
        """Re-match every process new or of another user since the last poll; returns
        (pid, its credentials, why) for each one re-matched."""
        now = self._current()
        done = []
        for pid, creds in now.items():
            before = self.seen.get(pid)
            if before == creds:
                continue
            why = ("started since the last look" if before is None
                   else f"user changed from {before[0]}:{before[1]}")
            try:
                self.rematch(pid)
            except ProcessLookupError:
                continue
            done.append((pid, creds, why))
        self.seen = now
        return done
