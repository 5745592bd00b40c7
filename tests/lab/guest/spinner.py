"""A CPU spinner with a chosen thread name (comm), for lab tests.

usage: spinner.py NAME SECONDS [THREADS]   (each thread is named NAME)
Python's threading names do not reach the kernel (LAB.md), so use prctl.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time

PR_SET_NAME = 15


def spin(name: str, until: float) -> None:
    ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
    while time.time() < until:
        pass


def main() -> None:
    name, seconds = sys.argv[1], float(sys.argv[2])
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    until = time.time() + seconds
    workers = [threading.Thread(target=spin, args=(name, until)) for _ in range(threads - 1)]
    for worker in workers:
        worker.start()
    spin(name, until)
    for worker in workers:
        worker.join()


if __name__ == "__main__":
    main()
