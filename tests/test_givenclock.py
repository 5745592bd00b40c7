"""threadwise.givenclock on real processes: a starved tree is charged little, a sleeping one fully."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from threadwise import givenclock

# 0.05 s of CPU at nice 19: behind one nice-0 spinner per CPU it waits ~98% of the time
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.05: pass"


@pytest.fixture
def spinners() -> Iterator[None]:
    # each says so once it spins: a spinner still loading Python sleeps on the disk now and then,
    # and the burner would run in those gaps (seen beside a full test run: 0.11 s wall, few waits)
    spin = "import sys\nsys.stdout.write('spinning\\n'); sys.stdout.flush()\nwhile True: pass"
    procs = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
             for _ in range(os.cpu_count() or 1)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"spinning\n"
        yield
    finally:
        for proc in procs:  # ours, by PID
            proc.kill()
            proc.wait()


def follow(proc: subprocess.Popen[bytes]) -> givenclock.GivenClock:
    clock = givenclock.GivenClock(proc.pid)
    while proc.poll() is None:
        clock.sample()
        time.sleep(0.05)
    return clock


def test_a_tree_held_back_by_the_host_is_charged_only_what_it_was_given(spinners: None) -> None:
    # the burner is a grandchild (sh -> nice -> python): the clock follows the tree
    proc = subprocess.Popen(["sh", "-c", f"exec nice -n 19 {sys.executable} -c '{BURN}'; true"])
    clock = follow(proc)
    assert clock.waited_s() > 0.5 * clock.wall_s(), (clock.waited_s(), clock.wall_s())
    assert clock.given_s() < 0.5 * clock.wall_s()


def test_a_sleeping_process_is_charged_its_wall_time() -> None:
    clock = follow(subprocess.Popen(["sleep", "1"]))
    # sleeping is not waiting for a CPU: only its start and exit can queue
    assert clock.given_s() > 0.5 * clock.wall_s() >= 0.5


def test_run_returns_like_subprocess_run_and_times_out_by_given_time() -> None:
    done = givenclock.run([sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"],
                          timeout=60, input="abc", capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip()) == (0, "ABC")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        givenclock.run(["sleep", "30"], timeout=1)
    assert time.monotonic() - started < 20
    with pytest.raises(subprocess.CalledProcessError):
        givenclock.run(["false"], timeout=60, check=True)


def test_the_wall_cap_ends_a_wait_before_its_given_time_bound() -> None:
    # 5 s of given time cannot pass within 1 s of wall time: the cap ends the wait
    deadline = givenclock.Deadline(givenclock.GivenClock(os.getpid()), bound_s=5.0, cap_s=1.0)
    while not deadline.passed():
        time.sleep(0.05)
    assert deadline.clock.wall_s() >= 1.0
    assert "waiting for a CPU" in deadline.describe()
