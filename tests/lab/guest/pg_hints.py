"""Runs INSIDE the lab VM: does each PostgreSQL process sit in its title's layer, new backends too?

usage: pg_hints.py PROFILE
PROFILE is tests/data/lab/postgres-titles.toml: title groups for the checkpointer, the WAL and
background writers and pgbench's backends, then a comm group `postgres` for the rest. This
driver starts its own PostgreSQL (tests/pgserve.py: a fresh data directory, 127.0.0.1, a free
port), makes pgbench's tables, applies PROFILE with the real CLI (the supervisor pins the
task-hint map at a path of its own and hints the workload's processes by title,
runtime/hints.py), then:
- `new_backends`: ROUNDS rounds of `pgbench -c 2` connect after the attach. The driver watches
  the postmaster's children every WATCH_S; for each new backend it records when it first saw it
  and when scx_layered's own task state (threadwise-layer-of) first had it in `backends`: the
  time from a new process to its hinted layer, as a user would see it (TCG). pgbench also opens
  a short connection of its own before each run (its vacuum and truncate), which may end before
  a poll reaches it: such a backend is recorded as `ended` (the runtime's 0.25-s poll hints
  nothing shorter-lived, docs/runtime.md);
- `processes`: every PostgreSQL process with its title, hint, expected layer (membership's
  first-match rule with the hint its title earns) and the layer scx_layered has it in, with
  whether it ran since the hints were written (a task is re-placed by its hint when it next
  wakes or ends a slice, so only those that ran are judged). A CHECKPOINT wakes the checkpointer;
- `status`: `threadwise status --json` (its membership reads hinted layers too);
- after `threadwise stop`: whether the run's pin is gone.
Everything stops by PID. Writes $THREADWISE_LAB_OUT/results.json (tests/lab/test_hints_lab.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from runtime_scenarios import sysfs, threadwise, write

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))   # the repository root: tests.pgserve

from tests import pgserve
from tests.conftest import stop_by_pid
from threadwise.observe.tracer_build import layer_of_path
from threadwise.runtime import membership
from threadwise.runtime.hints import HintPlan
from threadwise.runtime.state import RunFiles
from threadwise.synthesize.api import LayerConfig

ROUNDS = 3            # of `pgbench -c 2`: 6 backends that connect after the attach
ROUND_S = 6           # pgbench -T per round
WATCH_S = 0.02        # the driver's look at the postmaster's children and their layers
PLACED_WAIT_S = 20.0  # for a new backend to reach its layer (TCG)


def layer_name(names: list[str], index: int | None) -> str | None:
    # an index past the config's layers (MAX_LAYERS before the first match) is no layer
    return names[index] if index is not None and 0 <= index < len(names) else None


def watch_round(postmaster: int, port: int, names: list[str], plan: HintPlan) -> list[dict[str, Any]]:
    """One pgbench round: each new backend's first sighting and first read in its layer."""
    before = set(pgserve.children(postmaster))
    load = subprocess.Popen(pgserve.pgbench(port, "-c", "2", "-j", "1", "-T", str(ROUND_S)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        while time.monotonic() - started < ROUND_S + PLACED_WAIT_S:
            now = time.monotonic()
            for pid in set(pgserve.children(postmaster)) - before - set(seen):
                seen[pid] = {"pid": pid, "seen_at": now, "placed_after_s": None, "title": None,
                             "ended_after_s": None}
            waiting = [r for r in seen.values() if r["placed_after_s"] is None and r["ended_after_s"] is None]
            if not waiting and seen and load.poll() is not None:
                break
            placed = membership.read_placement([r["pid"] for r in waiting]) if waiting else {}
            for row in waiting:
                title = pgserve.title(row["pid"])
                if title is None:   # ended before it was read in its layer
                    row["ended_after_s"] = round(time.monotonic() - row["seen_at"], 3)
                    continue
                row["title"] = title
                if plan.hint_for(title) is None:
                    continue    # not (yet) a backend's title: no layer it must reach
                if layer_name(names, placed.get(row["pid"])) == "backends":
                    row["placed_after_s"] = round(time.monotonic() - row["seen_at"], 3)
            time.sleep(WATCH_S)
    finally:
        stop_by_pid(load)
    return [{k: v for k, v in row.items() if k != "seen_at"} for row in seen.values()]


def read_processes(pids: list[int], since: dict[int, int], names: list[str], config: LayerConfig,
                   plan: HintPlan) -> list[dict[str, Any]]:
    """Every PostgreSQL process (single-threaded): title, hint, expected and actual layer, ran."""
    counts = membership.run_counts(pids)   # first: a task that ran by now was re-placed before the read
    placed = membership.read_placement(pids)
    rows = []
    for pid in pids:
        title = pgserve.title(pid)
        if title is None:
            continue    # ended meanwhile
        hint = plan.hint_for(title)
        rows.append({"pid": pid, "title": title, "hint": hint,
                     "expected": membership.expected_layer(config, "postgres", "postgres", hint),
                     "layer": layer_name(names, placed.get(pid)),
                     "ran": pid in counts and pid in since and counts[pid] != since[pid]})
    return rows


def attached(results: dict[str, Any], postmaster: int, port: int) -> None:
    files = RunFiles.default()
    config = LayerConfig.load(files.config)
    results["layers"] = names = config.layer_names()
    results["hint_map"] = json.loads(files.state.read_text()).get("hint_map")
    plan = HintPlan.load(files.hints)
    results["new_backends"] = [row for _ in range(ROUNDS)
                               for row in watch_round(postmaster, port, names, plan)]
    pids = [postmaster, *pgserve.children(postmaster)]
    since = membership.run_counts(pids)   # the hints of these are written by now (0.25-s poll)
    checkpoint = ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-c", "CHECKPOINT"]
    done = subprocess.run(checkpoint, capture_output=True, timeout=120, check=False)
    results["checkpoint_rc"] = done.returncode
    load = subprocess.Popen(pgserve.pgbench(port, "-c", "2", "-j", "1", "-T", "30"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        results["processes"] = read_processes(pids, since, names, config, plan)
        results["status"] = threadwise("status", "--json", "--interval", "1")
    finally:
        stop_by_pid(load)
    results["supervisor_log"] = files.supervisor_log.read_text(errors="replace")[-8000:]


def main() -> None:
    profile = sys.argv[1]
    results: dict[str, Any] = {"timings": {}}
    reader = layer_of_path()
    results["reader"] = str(reader) if reader.is_file() else None
    results["missing"] = pgserve.missing()   # the guest shares the host's root: expected None
    if results["missing"]:
        write("results.json", results)
        return
    started = time.monotonic()
    try:
        with pgserve.serving(ready_timeout_s=180) as (server, port):
            pgserve.initialize(port)
            results["apply"] = threadwise("apply", profile, "--json")
            if results["apply"]["rc"] == 0:
                try:
                    attached(results, server.pid, port)
                finally:
                    results["stop"] = threadwise("stop", "--json")
                    pin = results.get("hint_map")
                    results["pin_after_stop"] = bool(pin) and Path(pin).exists()
    except Exception:   # the host test shows it rather than a missing key
        results["error"] = traceback.format_exc()
    finally:
        if sysfs()["state"] != "disabled":
            threadwise("stop")
        results["after"] = sysfs()
        results["timings"]["pg_hints"] = round(time.monotonic() - started, 1)
        write("results.json", results)


if __name__ == "__main__":
    main()
