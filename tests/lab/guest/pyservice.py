"""A small CPython service with named threads, for the lab's runtime-tree tests.

usage: pyservice.py SECONDS [WORKERS] [WORK_US]

Threads (their comms; Python's thread names do not reach the kernel, so prctl):
  py-accept   hands requests to the workers, one per completion it is woken by
  py-work-N   CPU-busy workers (they take turns on the GIL)
  py-flush    wakes every 100 ms, little CPU
Says "pyservice: ready" on stderr once every thread has named itself, then prints one JSON
object every 500 ms on stdout (threadwise's jsonl contract):
  {"requests_per_s": ..., "accept_lat_p50_us": ..., "accept_lat_p99_us": ...}
where accept_lat is the time from a worker's completion to the acceptor taking it.
"""

from __future__ import annotations

import ctypes
import json
import queue
import sys
import threading
import time

PR_SET_NAME = 15
LIBC = ctypes.CDLL(None)
done_count = 0
latencies: list[float] = []
lock = threading.Lock()
named = threading.Barrier(1)


def name(comm: str) -> None:
    LIBC.prctl(PR_SET_NAME, comm.encode()[:15], 0, 0, 0)
    named.wait()


def worker(index: int, requests: queue.Queue[int], completions: queue.Queue[float], work_s: float) -> None:
    global done_count
    name(f"py-work-{index}")
    while True:
        requests.get()
        end = time.perf_counter() + work_s
        x = 1
        while time.perf_counter() < end:
            for _ in range(50):
                x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        with lock:
            done_count += 1
        completions.put(time.perf_counter())


def acceptor(requests: queue.Queue[int], completions: queue.Queue[float], depth: int) -> None:
    name("py-accept")
    for i in range(depth):
        requests.put(i)
    while True:
        finished = completions.get()
        waited = time.perf_counter() - finished
        with lock:
            latencies.append(waited)
        requests.put(0)


def flusher() -> None:
    name("py-flush")
    while True:
        time.sleep(0.1)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def main() -> None:
    global named, latencies
    seconds = float(sys.argv[1])
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    work_s = (float(sys.argv[3]) if len(sys.argv) > 3 else 500.0) / 1e6
    named = threading.Barrier(workers + 3)   # the threads and main
    requests: queue.Queue[int] = queue.Queue()
    completions: queue.Queue[float] = queue.Queue()
    threads = [threading.Thread(target=worker, args=(i, requests, completions, work_s), daemon=True)
               for i in range(workers)]
    threads += [threading.Thread(target=acceptor, args=(requests, completions, 2 * workers), daemon=True),
                threading.Thread(target=flusher, daemon=True)]
    for thread in threads:
        thread.start()
    named.wait()
    print("pyservice: ready", file=sys.stderr, flush=True)
    end = time.monotonic() + seconds
    last, last_t = 0, time.monotonic()
    while time.monotonic() < end:
        time.sleep(0.5)
        now_t = time.monotonic()
        with lock:
            count, batch, latencies = done_count, latencies, []
        line = {"requests_per_s": round((count - last) / (now_t - last_t))}
        if batch:
            line["accept_lat_p50_us"] = round(percentile(batch, 0.50) * 1e6, 1)
            line["accept_lat_p99_us"] = round(percentile(batch, 0.99) * 1e6, 1)
        print(json.dumps(line), flush=True)
        last, last_t = count, now_t


if __name__ == "__main__":
    main()
