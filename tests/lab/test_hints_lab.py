"""Roles from process titles, at runtime: the supervisor's hints place PostgreSQL's processes.

Problem: PostgreSQL's roles share comm and user; only their titles differ. A profile selects
them with `title = [...]`, compiled to `HintEquals(N)` layers, and the runtime must write each
process's hint into scx_layered's task-hint map (runtime/hints.py): for the processes there at
the attach and for every backend that connects later. Nothing but the real scheduler's task
state can show that the hints arrived.

Approach: one boot (TCG, 2 vCPUs). tests/lab/guest/pg_hints.py starts a private PostgreSQL 15
(tests/pgserve.py), applies tests/data/lab/postgres-titles.toml with the real CLI, connects new
backends in three pgbench rounds and reads every process's layer from scx_layered's task state
(threadwise-layer-of). What must hold: every backend that connected after the attach reached
`backends`; every process that ran since its hint was written sits in its title's layer (the
checkpointer, the writers, the backends) or, with no title group, in the comm layer `postgres`;
`status` judges them the same way; the run's pin is gone after `stop`. The time from a new
backend to its layer is printed (docs/profile-schema.md keeps the measured figure).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from tests.lab.labrun import run_guest_script

pytestmark = [pytest.mark.lab, pytest.mark.slow]

PROFILE = Path(__file__).resolve().parents[1] / "data" / "lab" / "postgres-titles.toml"
TITLE_LAYERS = {"postgres: checkpointer": "checkpointer", "postgres: walwriter": "writers",
                "postgres: background writer": "writers", "postgres: postgres postgres": "backends"}


@pytest.fixture(scope="module")
def guest() -> dict[str, Any]:
    _result, data = run_guest_script("pg_hints.py", str(PROFILE), label="pg-hints")
    assert data["missing"] is None, f"the lab guest cannot run PostgreSQL: {data['missing']}"
    assert "error" not in data, data["error"]
    assert data["reader"], "threadwise-layer-of is not built: run scripts/setup-tracer.sh"
    assert data["apply"]["rc"] == 0, data["apply"]["stderr"]
    return data


def table(rows: list[dict[str, Any]]) -> str:
    return "\n".join(f"  pid {r['pid']} {r['title']!r}: hint {r['hint']}, expected {r['expected']}, "
                     f"in {r['layer']}, {'ran' if r['ran'] else 'did not run'}" for r in rows)


def test_the_runs_own_map_is_pinned_then_removed(guest: dict[str, Any]) -> None:
    assert guest["hint_map"] and guest["hint_map"].startswith("/sys/fs/bpf/threadwise/run-")
    assert guest["stop"]["rc"] == 0 and guest["after"]["state"] == "disabled"
    assert guest["pin_after_stop"] is False
    log = guest["supervisor_log"]
    assert "hinting 'postgres' processes by title" in log, log[-2000:]
    assert "-> checkpointer (hint 1)" in log and "-> writers (hint 2)" in log, log[-3000:]


def test_every_backend_that_connects_after_the_attach_reaches_its_layer(guest: dict[str, Any]) -> None:
    print("\nnew backends (seen -> in `backends`, or ended first; TCG):\n" + "\n".join(
        f"  pid {r['pid']} {r['title']!r}: placed after {r['placed_after_s']} s, ended after "
        f"{r['ended_after_s']} s" for r in guest["new_backends"]))
    # pgbench's own short connection before each run may end before any poll: not late, gone
    late = [r for r in guest["new_backends"] if r["placed_after_s"] is None and r["ended_after_s"] is None]
    assert not late, late
    placed = [r for r in guest["new_backends"] if r["placed_after_s"] is not None]
    assert len(placed) >= 6, guest["new_backends"]   # 3 rounds of 2 connections, each for 6 s
    assert all(r["title"].startswith("postgres: postgres postgres ") for r in placed), placed
    times = [r["placed_after_s"] for r in placed]
    print(f"time to layer: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
          f"({len(times)} backends, TCG)")


def test_each_process_that_ran_sits_in_its_titles_layer(guest: dict[str, Any]) -> None:
    rows = guest["processes"]
    print(f"\nPostgreSQL processes after a CHECKPOINT and a pgbench load:\n{table(rows)}")
    for row in rows:
        want = next((layer for title, layer in TITLE_LAYERS.items()
                     if row["title"] == title or row["title"].startswith(title + " ")), "postgres")
        assert row["expected"] == want, row    # membership's rule agrees with the profile's intent
    ran = [r for r in rows if r["ran"]]
    assert {r["expected"] for r in ran} >= {"writers", "postgres"}, table(rows)
    misplaced = [r for r in ran if r["layer"] != r["expected"]]
    assert not misplaced, f"processes that ran outside their title's layer:\n{table(misplaced)}"


def test_status_judges_hinted_layers_like_the_others(guest: dict[str, Any]) -> None:
    status = guest["status"]
    assert status["rc"] == 0, status["stderr"]
    threads = status["json"]["membership"]["threads"]
    assert status["json"]["membership"]["error"] is None
    expected = {t["expected"] for t in threads}
    assert {"checkpointer", "writers"} <= expected, threads
