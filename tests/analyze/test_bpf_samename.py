"""bpf tier: a live process whose threads never got names (all share the process's comm).

The capture is taken as the other ground-truth captures are (tests/conftest.py): it takes the
host's turn (no lab VM boots beside it), the process runs at nice -10 (NICE_WORKLOAD), and it is
observed by its pid once all its threads run, for a fixed window, then stopped by its PID. Launched
by the observer with a fixed life instead, a loaded host (a Redis benchmark, a JVM and kill -9
loops beside a `make test`, issue 51) left the split test reading one group: the start-up under
load is part of the window, and a spinner seen in few slices is no evidence of long runs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import polars as pl
import pytest

from tests.conftest import NICE_WORKLOAD, alone_with_labs, stop_by_pid
from threadwise import givenclock
from threadwise.analyze import analyze_capture

pytestmark = [pytest.mark.bpf,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc: apt-get install gcc")]

# Two spinners and four threads that wake every 5 ms for ~50 us; none is named. It says
# "ready" once every thread is started and runs until it is stopped.
SOURCE = r"""
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static unsigned long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec; }
static void *spin(void *a) { volatile unsigned long x = 0; (void)a; for (;;) x++; return NULL; }
static void *tick(void *a) { (void)a; volatile unsigned long x = 0;
    for (;;) { unsigned long long end = now() + 50000; while (now() < end) x++; usleep(5000); }
    return NULL; }
int main(void) { pthread_t t[6];
    for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, i < 2 ? spin : tick, NULL);
    printf("ready\n"); fflush(stdout);
    for (;;) pause(); }
"""
CAPTURE_S = 4


@pytest.fixture(scope="module")
def samename(tmp_path_factory):
    work = tmp_path_factory.mktemp("samename")
    (work / "samename.c").write_text(SOURCE)
    binary = work / "samename"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(work / "samename.c")], check=True)
    out = work / "samename.duckdb"
    with alone_with_labs("same-name capture"):
        # nice execs: the process's pid is the program's
        process = subprocess.Popen([*NICE_WORKLOAD, str(binary)], stdout=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
            done = givenclock.run(
                [sys.executable, "-m", "threadwise.cli", "observe", "--pid", str(process.pid),
                 "-d", f"{CAPTURE_S}s", "-o", str(out)],
                capture_output=True, text=True, timeout=120, check=False)
            assert done.returncode == 0, done.stderr
        finally:
            stop_by_pid(process)
    return analyze_capture(out)


def test_names_do_not_separate_roles_and_a_split_is_proposed(samename):
    threads = samename.threads.select("tid", "slices", "cpu_ns", "cpu_share", "demand",
                                      avg_us=pl.col("cpu_ns") / pl.col("slices") / 1e3)
    print(threads)   # the measured values, for the record
    assert not samename.names_separate_roles
    assert any("names do not separate roles" in c for c in samename.caveats)
    groups = samename.groups.filter(pl.col("pattern") == "samename")
    assert groups["thread_count"].sum() == 7
    assert groups.height == 2, (samename.caveats, threads)
    assert not any(groups["separable"])
    long = groups.filter(pl.col("avg_runtime_range_ns").list.first() > 0).row(0, named=True)
    short = groups.filter(pl.col("avg_runtime_range_ns").list.first() == 0).row(0, named=True)
    # the spinners run long, the tickers short; the main thread (startup work, then
    # pause) may land on either side
    assert long["thread_count"] in (2, 3) and long["role"] == "compute"
    assert short["thread_count"] in (4, 5) and short["role"] != "compute"
    assert long["cpu_time_ns"] > 5 * short["cpu_time_ns"]
