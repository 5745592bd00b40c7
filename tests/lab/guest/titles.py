"""Runs INSIDE the lab VM: where does the real scx_layered put nginx's master and its workers?

usage: titles.py PROFILE
PROFILE is the nginx profile synthesized on the host (groups nginx-master, uid 0, and
nginx-worker, uid of www-data; both `match = ["nginx"]`). This driver starts its own nginx
(tests/nginxserve.py: 127.0.0.1, a free port, `daemon off`, `master_process on`, `user
www-data`, 2 workers, config and prefix in a temporary directory), applies PROFILE with the real
CLI, wakes the master once (SIGUSR1: reopen the logs) and drives a loopback HTTP load so the
workers run, and reads every nginx thread's layer from scx_layered's own task state
(`membership.read_placement`, threadwise-layer-of). A thread is matched when it becomes
runnable, so each is recorded with whether it ran since the attach (its schedstat run count
against one taken right after `apply` returned); run counts are read before placements, as
runtime/membership.py does, so a thread counted as run was matched before its layer is read.

Then, as a measurement of its own (`reload`): SIGHUP makes the master fork new workers while
the profile is attached. scx_layered 1.1.4 matches a new task when it first becomes runnable
after the fork, while it still runs as root, and has no hook on setuid, so without help the new
workers stay where root's nginx goes (measured before runtime/newcomers.py: both in
nginx-master). The supervisor now re-matches a workload process that is new or changed user; the
driver waits for its line on each new worker, then reads their layers after a load, and again
after `membership.rematch` (which sets their refresh flag) and another load.

nginx is stopped by the PID of the Popen'd master, the load by its own PID; `threadwise stop`
ends the profile. Writes $THREADWISE_LAB_OUT/results.json; tests/lab/test_titles_lab.py asserts.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from runtime_scenarios import sysfs, threadwise, write

# The guest runs this file by path with the venv's python: the repository root (three folders
# up) is not on sys.path, and the nginx helpers are shared with the bpf tier's host test.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests import nginxserve
from threadwise.observe import procfs
from threadwise.observe.tracer_build import layer_of_path
from threadwise.runtime import membership
from threadwise.runtime.state import RunFiles
from threadwise.synthesize.api import LayerConfig

LOAD_S = 3.0          # of loopback GETs: hundreds of wake-ups per worker even under TCG
RELOAD_WAIT_S = 30.0  # for the new workers after SIGHUP (TCG)
REMATCH_WAIT_S = 30.0  # for the supervisor's re-match of each (it looks once a second; TCG)


def title(pid: int) -> str:
    """The process title nginx wrote over its argv (`nginx: worker process`)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def read_threads(pids: list[int], since: dict[int, int], names: list[str]) -> list[dict[str, Any]]:
    """Every thread of `pids`: pid, tid, comm, euid, title, whether it ran since `since`, its layer."""
    threads = [(pid, tid, comm) for pid in pids for tid, comm in membership.process_threads(pid)]
    # run counts first: a thread that ran by now was matched before its placement is read
    counts = {tid: membership.run_count(pid, tid) for pid, tid, _ in threads}
    placed = membership.read_placement([tid for _, tid, _ in threads])
    rows = []
    for pid, tid, comm in threads:
        # /proc/TID/status holds that thread's own credentials (the kernel keeps them per thread)
        credentials = procfs.process_credentials(tid)
        index = placed.get(tid)
        count, before = counts.get(tid), since.get(tid)
        rows.append({
            "pid": pid, "tid": tid, "comm": comm, "title": title(pid),
            "euid": credentials[0] if credentials else None,
            "runs_before": before, "runs_after": count,
            "ran": None if count is None or before is None else count != before,
            "layer_index": index,
            # an index past the config's layers (MAX_LAYERS before the first match) is no layer
            "layer": names[index] if index is not None and 0 <= index < len(names) else None,
        })
    return rows


def wait_new_workers(master: int, old: set[int]) -> list[int]:
    """The workers the master forked after a reload (none of `old`), once all of them are up."""
    deadline = time.monotonic() + RELOAD_WAIT_S
    while time.monotonic() < deadline:
        new = [pid for pid in nginxserve.worker_pids(master) if pid not in old]
        if len(new) >= nginxserve.WORKERS:
            return new
        time.sleep(0.1)
    return [pid for pid in nginxserve.worker_pids(master) if pid not in old]


def wait_rematched(pids: list[int]) -> list[str]:
    """The supervisor's re-match lines on `pids` once it has one for each as its current user
    (or what it said by REMATCH_WAIT_S)."""
    log = RunFiles.default().supervisor_log
    wanted = [f"re-matched pid {pid} (euid {nginxserve.service_uid()}," for pid in pids]
    deadline = time.monotonic() + REMATCH_WAIT_S
    while True:
        lines = [line for line in log.read_text(errors="replace").splitlines() if "re-matched pid" in line]
        if all(any(w in line for line in lines) for w in wanted) or time.monotonic() >= deadline:
            return lines
        time.sleep(0.2)


def loaded(port: int) -> None:
    with nginxserve.loopback_load(port):
        time.sleep(LOAD_S)


def attached(results: dict[str, Any], master: int, port: int) -> None:
    """The measurements while the profile is applied."""
    results["layers"] = names = LayerConfig.load(RunFiles.default().config).layer_names()
    workers = nginxserve.worker_pids(master)
    pids = [master, *workers]
    results["worker_pids"] = workers
    since = membership.run_counts(pids)   # right after the attach: who runs from now on is matched
    # The master sleeps in sigsuspend between signals: without a wake-up it would not run while
    # attached and its placement could not be judged. SIGUSR1 (reopen the logs) is harmless.
    os.kill(master, signal.SIGUSR1)
    loaded(port)
    results["threads"] = read_threads(pids, since, names)
    results["status"] = threadwise("status", "--json", "--interval", "1")

    os.kill(master, signal.SIGHUP)   # reload: new workers forked under the attached scheduler
    new = wait_new_workers(master, set(workers))
    reload: dict[str, Any] = {"worker_pids": new}
    results["reload"] = reload
    # the supervisor re-matches processes that changed user (runtime/newcomers.py): wait for its
    # line on each new worker as the user it runs as, so the read below judges that re-match
    reload["supervisor"] = wait_rematched(new)
    since = membership.run_counts(new)
    loaded(port)
    reload["threads"] = read_threads(new, since, names)
    since = {}
    for pid in new:
        try:
            since.update(membership.rematch(pid))
        except ProcessLookupError:   # a new worker that ended meanwhile: nothing to read of it
            continue
    loaded(port)
    reload["after_rematch"] = read_threads(new, since, names)


def main() -> None:
    profile = sys.argv[1]
    results: dict[str, Any] = {"timings": {}}
    reader = layer_of_path()
    results["reader"] = str(reader) if reader.is_file() else None
    results["missing"] = nginxserve.missing()   # the guest shares the host's root: expected None
    if results["missing"]:
        write("results.json", results)
        return
    results["service_uid"] = nginxserve.service_uid()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="tw-nginx-") as tmp:
            # mkdtemp's 0700 would keep www-data's workers from reopening the error log on SIGUSR1
            Path(tmp).chmod(0o755)
            with nginxserve.serving(Path(tmp) / "nginx") as (master, port):
                results["master_pid"] = master.pid
                results["apply"] = threadwise("apply", profile, "--json")
                if results["apply"]["rc"] == 0:
                    try:
                        attached(results, master.pid, port)
                    finally:
                        results["stop"] = threadwise("stop", "--json")
    except RuntimeError as error:   # nginx did not come up: its error log is in the message
        results["error"] = str(error)
    except Exception:   # anything else: the host test shows it rather than a missing key
        results["error"] = traceback.format_exc()
    finally:
        if sysfs()["state"] != "disabled":
            threadwise("stop")
        results["after"] = sysfs()
        results["timings"]["titles"] = round(time.monotonic() - started, 1)
        write("results.json", results)


if __name__ == "__main__":
    main()
