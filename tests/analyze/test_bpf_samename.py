"""bpf tier: a live process whose threads never got names (all share the process's comm)."""

from __future__ import annotations

import shutil
import subprocess

import polars as pl
import pytest

from threadwise.analyze import analyze_capture
from threadwise.observe.capture import observe
from threadwise.observe.target import Target

pytestmark = [pytest.mark.bpf,
              pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc: apt-get install gcc")]

# Two spinners and four threads that wake every 5 ms for ~50 us; none is named.
SOURCE = r"""
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
static atomic_int stop;
static unsigned long long now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ull + t.tv_nsec; }
static void *spin(void *a) { volatile unsigned long x = 0; (void)a;
    while (!atomic_load(&stop)) x++; return NULL; }
static void *tick(void *a) { (void)a; volatile unsigned long x = 0;
    while (!atomic_load(&stop)) { unsigned long long end = now() + 50000; while (now() < end) x++;
        usleep(5000); } return NULL; }
int main(int argc, char **argv) { pthread_t t[6]; (void)argc; (void)argv;
    for (int i = 0; i < 6; i++) pthread_create(&t[i], NULL, i < 2 ? spin : tick, NULL);
    sleep(8); atomic_store(&stop, 1); for (int i = 0; i < 6; i++) pthread_join(t[i], NULL); return 0; }
"""


@pytest.fixture(scope="module")
def samename(tmp_path_factory):
    work = tmp_path_factory.mktemp("samename")
    (work / "samename.c").write_text(SOURCE)
    binary = work / "samename"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(work / "samename.c")], check=True)
    out = work / "samename.duckdb"
    target = Target.from_options(pid=None, comm=None, cgroup=None, command=[str(binary)])
    observe(target, out, duration_s=4.0, progress=lambda _m: None)
    return analyze_capture(out)


def test_names_do_not_separate_roles_and_a_split_is_proposed(samename):
    assert not samename.names_separate_roles
    assert any("names do not separate roles" in c for c in samename.caveats)
    groups = samename.groups.filter(pl.col("pattern") == "samename")
    assert groups["thread_count"].sum() == 7
    assert groups.height == 2, samename.caveats
    assert not any(groups["separable"])
    long = groups.filter(pl.col("avg_runtime_range_ns").list.first() > 0).row(0, named=True)
    short = groups.filter(pl.col("avg_runtime_range_ns").list.first() == 0).row(0, named=True)
    # the spinners run long, the tickers short; the main thread (startup work, then
    # sleep) may land on either side
    assert long["thread_count"] in (2, 3) and long["role"] == "compute"
    assert short["thread_count"] in (4, 5) and short["role"] != "compute"
    assert long["cpu_time_ns"] > 5 * short["cpu_time_ns"]
