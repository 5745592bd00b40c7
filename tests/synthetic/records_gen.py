"""Realistic binary record files, as the libbpf tracer writes them, for the ingest benchmark and tests.

Problem: the ingest path (observe/records.py -> CaptureWriter -> finalize.sql) must be measured
and tested on millions of records shaped like a real capture, without root or a tracer: every
CPU's sched_switch sequence must chain (each switch's prev is the previous switch's next),
sleeping threads must be woken before they run again, threads that change CPU must be migrated,
and a few threads must be born, exit, reuse a tid, and be renamed.
Approach: whole-array numpy, no per-event Python. Time is cut into epochs; in each epoch every
CPU runs a random walk over the threads homed on it (never the same thread twice in a row),
with exponential slice lengths, and ends the epoch idle, so a thread that moves to another CPU
in the next epoch never overlaps itself. A slice that ends asleep gets a waking inside the gap
before the thread's next slice, and a thread whose next slice is on another CPU gets a migrate
record in that gap. Records are laid out in the files in the order the tracer's per-CPU rings
are drained: in time windows, CPU by CPU. The record layouts are observe/records.py's dtypes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from threadwise.observe import records as rec

PREEMPTED = 0x100
SLEEPING = 1
UNINTERRUPTIBLE = 2
CLONE_THREAD = 0x10000
TARGET_TGID = 4000
OTHER_TGID = 7000
START_TS = 5_000_000_000_000      # monotonic ns (a host up for ~83 minutes)
DRAIN_NS = 100_000_000           # the tracer drains its rings every 100 ms


@dataclass(frozen=True)
class Threads:
    """Thread instances: one per life of a tid (a reused tid has two)."""

    tid: np.ndarray
    tgid: np.ndarray
    comm: list[str]
    home: np.ndarray          # home CPU
    mover: np.ndarray         # changes CPU every epoch
    mean_ns: np.ndarray       # mean slice length
    p_sleep: np.ndarray       # probability a slice ends asleep (else preempted)
    prio: np.ndarray
    born: np.ndarray          # first epoch alive (0: alive before the capture)
    dies: np.ndarray          # first epoch no longer alive (n_epochs: alive after it)


def make_threads(rng: np.random.Generator, *, nr_cpus: int, n_epochs: int) -> Threads:
    """A target process (a main thread, hot, worker, I/O, housekeeping threads) and other load."""
    classes = (("app", 1, 60_000, 0.9), ("hot-{}", 2, 2_000_000, 0.05), ("worker-{}", 24, 70_000, 0.9),
               ("io_thd_{}", 6, 30_000, 0.85), ("housekeep", 1, 200_000, 0.98),
               ("kworker/{}", 8, 15_000, 0.97), ("other-{}", 30, 400_000, 0.5))
    tid, tgid, comm, mean, sleep = [], [], [], [], []
    next_tid = TARGET_TGID
    for pattern, count, mean_ns, p in classes:
        other = pattern.startswith(("kworker", "other"))
        if other and next_tid < OTHER_TGID:
            next_tid = OTHER_TGID
        for n in range(count):
            tid.append(next_tid)
            tgid.append(OTHER_TGID if other else TARGET_TGID)
            comm.append(pattern.format(n))
            mean.append(mean_ns)
            sleep.append(p)
            next_tid += 1
    count = len(tid)
    born = np.zeros(count, np.int64)
    dies = np.full(count, n_epochs, np.int64)
    # a quarter of the workers are short-lived: born and exiting inside the capture
    workers = [i for i, c in enumerate(comm) if c.startswith("worker-")]
    for i in workers[::4]:
        born[i] = rng.integers(1, max(2, n_epochs // 3))
        dies[i] = rng.integers(born[i] + 1, max(born[i] + 2, n_epochs))
    # two of them reuse the tid of a worker that exited before they were born
    tid_arr = np.array(tid, np.int32)
    extra = []
    for i in workers[::4][:2]:
        if dies[i] + 1 < n_epochs:
            extra.append((i, dies[i] + 1))
    for i, first in extra:
        tid_arr = np.append(tid_arr, tid_arr[i])
        tgid.append(TARGET_TGID)
        comm.append(f"respawn-{len(comm)}")
        mean.append(80_000)
        sleep.append(0.9)
        born = np.append(born, first)
        dies = np.append(dies, n_epochs)
    count = len(tid_arr)
    home = np.arange(count) % nr_cpus
    mover = rng.random(count) < 0.25
    mover[[i for i, c in enumerate(comm) if c.startswith("hot-")]] = False
    prio = np.where(np.array(tgid) == OTHER_TGID, 120, rng.choice([110, 120, 120, 120, 125], count))
    return Threads(tid_arr, np.array(tgid, np.int32), comm, home.astype(np.int64), mover,
                   np.array(mean, np.float64), np.array(sleep, np.float64), prio.astype(np.int32),
                   born, dies)


def _cpu_of(threads: Threads, epoch: int) -> np.ndarray:
    n_cpus = int(threads.home.max()) + 1
    return np.where(threads.mover, (threads.home + epoch) % max(n_cpus, 1), threads.home)


def write_records(directory: Path, *, events: int, nr_cpus: int = 4, seed: int = 0,
                  epoch_slices: int = 250) -> dict[str, int]:
    """Write switch.bin, waking.bin, migrate.bin and task.bin into `directory` (about `events`
    records in all); returns the records per file, the capture window (start_ts, end_ts), nr_cpus.

    The steps draw from one generator in a fixed order (walks, slice lengths, slice ends, wake
    times, wakers, renames), so a seed always gives the same files."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    # about 0.615 of the events are switches, 0.4 wakings, a few migrations and task records
    switches = max(int(events * 0.615), nr_cpus * 8)
    per_cpu = switches // nr_cpus
    epoch_slices = max(4, min(epoch_slices, per_cpu // 4))
    n_epochs = max(1, per_cpu // (epoch_slices + 1))
    threads = make_threads(rng, nr_cpus=nr_cpus, n_epochs=n_epochs)
    idx = _walks(rng, threads, nr_cpus=nr_cpus, n_epochs=n_epochs, k=epoch_slices)
    start, end_ts = _slice_starts(rng, threads, idx)
    sw, slices = _switches(rng, threads, idx, start, end_ts)
    slices = _Slices(*(part[np.lexsort((slices.st, slices.th))] for part in slices))
    gaps = _gaps(rng, slices)
    wk = _drain_order(np.concatenate((_wakings(rng, threads, slices, gaps, nr_cpus=nr_cpus),
                                      _new_wakings(threads, slices))))
    mg = _drain_order(_migrations(threads, slices, gaps))
    task = _task_records(threads, th=slices.th, st=slices.st, en=slices.en, cpu=slices.cpu, rng=rng)
    del slices, gaps

    files = {"switch.bin": sw, "waking.bin": wk, "migrate.bin": mg, "task.bin": task}
    for name, array in files.items():
        (directory / name).write_bytes(array.tobytes())
    out = {name: len(array) for name, array in files.items()}
    out.update(start_ts=START_TS, end_ts=end_ts, nr_cpus=nr_cpus)
    return out


class _Slices(NamedTuple):
    """Busy slices: thread index, start, end (the next switch on its CPU), how it ended, CPU."""

    th: np.ndarray
    st: np.ndarray
    en: np.ndarray
    state: np.ndarray
    cpu: np.ndarray


class _Gaps(NamedTuple):
    """Per slice (sorted by thread, time): the gap until the thread's next slice, and its waking."""

    has_next: np.ndarray   # the thread runs again
    nxt_cpu: np.ndarray    # where it runs next
    woken: np.ndarray      # it slept, so it is woken in the gap
    wake_ts: np.ndarray
    gap: np.ndarray


def _walks(rng: np.random.Generator, threads: Threads, *, nr_cpus: int, n_epochs: int, k: int) -> np.ndarray:
    """(epoch, cpu, k + 1) thread indices: per epoch and CPU, k slices of threads homed there (a
    random walk, -1 idle), then a closing idle slot to the epoch end."""
    slot_thread = np.full((n_epochs, nr_cpus, k + 1), -1, np.int64)
    for e in range(n_epochs):
        cpu_of = _cpu_of(threads, e)
        alive = (threads.born <= e) & (threads.dies > e)
        for cpu in range(nr_cpus):
            mine = np.flatnonzero(alive & (cpu_of == cpu))
            if len(mine) == 0:
                continue
            if len(mine) == 1:
                walk = np.where(np.arange(k) % 2 == 0, mine[0], -1)
            else:
                walk = mine[np.cumsum(rng.integers(1, len(mine), k)) % len(mine)]
                # idle now and then inside the epoch, as a real CPU is
                walk = np.where(rng.random(k) < 0.15, -1, walk)
            slot_thread[e, cpu, :k] = walk
    return slot_thread


def _slice_starts(rng: np.random.Generator, threads: Threads, idx: np.ndarray) -> tuple[np.ndarray, int]:
    """Each slot's start time (exponential slice lengths; every CPU's epoch padded idle to the
    longest CPU's) and the capture's end."""
    n_epochs, nr_cpus, slots = idx.shape
    k = slots - 1
    thread_mean = np.where(idx >= 0, threads.mean_ns[np.maximum(idx, 0)], 20_000.0)
    dur = np.maximum(rng.exponential(thread_mean), 1_000).astype(np.int64)
    dur[:, :, k] = 0                                  # the closing idle slot, set below
    cpu_span = dur.sum(axis=2)                        # (epoch, cpu)
    epoch_len = cpu_span.max(axis=1) + 5_000
    epoch_start = START_TS + np.concatenate(([0], np.cumsum(epoch_len)[:-1]))
    dur[:, :, k] = epoch_len[:, None] - cpu_span
    start = epoch_start[:, None, None] + np.concatenate(
        (np.zeros((n_epochs, nr_cpus, 1), np.int64), np.cumsum(dur, axis=2)[:, :, :-1]), axis=2)
    return start, int(epoch_start[-1] + epoch_len[-1])


def _switches(rng: np.random.Generator, threads: Threads, idx: np.ndarray, start: np.ndarray,
              end_ts: int) -> tuple[np.ndarray, _Slices]:
    """Every CPU's switch records (in drain order), chained: each switch's prev is the previous
    switch's next; and the busy slices they delimit."""
    sw_parts, slices = [], []
    for cpu in range(idx.shape[1]):
        th = idx[:, cpu, :].reshape(-1)
        st = start[:, cpu, :].reshape(-1)
        # merge consecutive idle slots (an idle CPU does not switch to idle)
        keep = np.concatenate(([True], ~((th[1:] < 0) & (th[:-1] < 0))))
        th, st = th[keep], st[keep]
        en = np.concatenate((st[1:], [end_ts]))
        tid = np.where(th >= 0, threads.tid[np.maximum(th, 0)], 0)
        prio = np.where(th >= 0, threads.prio[np.maximum(th, 0)], 120)
        # how each slice ends: asleep (always when the CPU goes idle next), else preempted
        next_idle = np.concatenate((th[1:] < 0, [False]))
        asleep = next_idle | (rng.random(len(th)) < threads.p_sleep[np.maximum(th, 0)])
        state = np.where(th < 0, 0, np.where(asleep, np.where(rng.random(len(th)) < 0.05,
                                                              UNINTERRUPTIBLE, SLEEPING), PREEMPTED))
        n = len(th) - 1      # a switch at the start of every slice but the first (held at start)
        sw = np.zeros(n, rec.SWITCH)
        sw["kind"] = rec.TW_SWITCH
        sw["cpu"] = cpu
        sw["ts"] = st[1:]
        sw["prev_tid"] = tid[:-1]
        sw["prev_state"] = state[:-1]
        sw["prev_prio"] = prio[:-1]
        sw["next_tid"] = tid[1:]
        sw["next_prio"] = prio[1:]
        sw_parts.append(sw)
        busy = th >= 0
        slices.append((th[busy], st[busy], en[busy], state[busy], np.full(busy.sum(), cpu)))
    return (_drain_order(np.concatenate(sw_parts)),
            _Slices(*(np.concatenate(parts) for parts in zip(*slices, strict=True))))


def _gaps(rng: np.random.Generator, s: _Slices) -> _Gaps:
    """Each thread's slices in time order (`s` sorted so): the gap after a slice until its next
    one, and a waking inside it when the slice ended asleep."""
    has_next = np.concatenate((s.th[1:] == s.th[:-1], [False]))
    nxt_st = np.concatenate((s.st[1:], [0]))
    nxt_cpu = np.concatenate((s.cpu[1:], [0]))
    woken = has_next & (s.state != PREEMPTED)
    gap = nxt_st - s.en
    wake_ts = s.en + (gap * rng.uniform(0.3, 0.95, len(s.th))).astype(np.int64)
    return _Gaps(has_next, nxt_cpu, woken, wake_ts, gap)


def _wakings(rng: np.random.Generator, threads: Threads, s: _Slices, gaps: _Gaps, *,
             nr_cpus: int) -> np.ndarray:
    """A waking record for every slice that ended asleep, by a random task or a hard interrupt."""
    wk = np.zeros(int(gaps.woken.sum()), rec.WAKING)
    wk["kind"] = rec.TW_WAKING
    wk["ts"] = gaps.wake_ts[gaps.woken]
    wk["wakee_tid"] = threads.tid[s.th[gaps.woken]]
    waker = rng.integers(0, len(threads.tid), len(wk))
    wk["waker_tid"] = np.where(rng.random(len(wk)) < 0.2, 0, threads.tid[waker])
    # a waker 0 is a hard interrupt on an idle CPU (the task on the CPU: 0), else the task woke it
    wk["current_tid"] = wk["waker_tid"]
    wk["context"] = np.where(wk["waker_tid"] == 0, 2, 0)
    wk["cpu"] = rng.integers(0, nr_cpus, len(wk))
    wk["target_cpu"] = gaps.nxt_cpu[gaps.woken]
    return wk


def _migrations(threads: Threads, s: _Slices, gaps: _Gaps) -> np.ndarray:
    """A migrate record in the gap of every thread whose next slice is on another CPU."""
    moved = gaps.has_next & (gaps.nxt_cpu != s.cpu)
    mg = np.zeros(int(moved.sum()), rec.MIGRATE)
    mg["kind"] = rec.TW_MIGRATE
    mg["ts"] = np.where(gaps.woken, gaps.wake_ts + 1, s.en + gaps.gap // 2)[moved]
    mg["tid"] = threads.tid[s.th[moved]]
    mg["orig_cpu"] = s.cpu[moved]
    mg["dest_cpu"] = gaps.nxt_cpu[moved]
    mg["cpu"] = mg["dest_cpu"]
    return mg


def _new_wakings(threads: Threads, s: _Slices) -> np.ndarray:
    """The first wakeup of every thread born in the capture (sched_wakeup_new), by the main thread."""
    first = np.concatenate(([True], s.th[1:] != s.th[:-1]))
    born_inside = first & (threads.born[s.th] > 0)
    new_wk = np.zeros(int(born_inside.sum()), rec.WAKING)
    new_wk["kind"] = rec.TW_WAKING
    new_wk["ts"] = s.st[born_inside] - 2_000
    new_wk["wakee_tid"] = threads.tid[s.th[born_inside]]
    new_wk["waker_tid"] = TARGET_TGID
    new_wk["current_tid"] = TARGET_TGID
    new_wk["cpu"] = 0
    new_wk["target_cpu"] = s.cpu[born_inside]
    new_wk["is_new"] = 1
    return new_wk


def _task_records(threads: Threads, *, th: np.ndarray, st: np.ndarray, en: np.ndarray,
                  cpu: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """First sightings, births, exits and a few renames (th, st, en, cpu sorted by thread, time)."""
    rows = []
    first = np.flatnonzero(np.concatenate(([True], th[1:] != th[:-1])))
    last = np.concatenate((first[1:] - 1, [len(th) - 1]))
    for f, lst in zip(first, last, strict=True):
        i = int(th[f])
        tid, tgid, comm = int(threads.tid[i]), int(threads.tgid[i]), threads.comm[i]
        if threads.born[i] > 0:
            parent = TARGET_TGID
            rows.append((rec.TW_NEW, 0, int(st[f]) - 3_000, tid, tgid, parent, TARGET_TGID,
                         CLONE_THREAD | 0x3D0F00, "app", ""))
        else:
            rows.append((rec.TW_SEEN, int(cpu[f]), int(en[f]), tid, tgid, 0, 0, 0, comm, ""))
        if threads.dies[i] < int(threads.dies.max()):
            rows.append((rec.TW_EXIT, int(cpu[lst]), int((st[lst] + en[lst]) // 2), tid, tgid, 0, 0, 0,
                         comm, ""))
        if threads.born[i] > 0 and lst > f:
            # a born thread names itself right after it first runs (pthread_setname_np)
            rows.append((rec.TW_RENAME, int(cpu[f]), int(st[f]) + 500, tid, tgid, 0, 0, 0, "app", comm))
        elif rng.random() < 0.05 and lst > f:
            rows.append((rec.TW_RENAME, int(cpu[lst]), int(st[lst]) + 500, tid, tgid, 0, 0, 0, comm,
                         comm[:10] + "-r"))
    task = np.zeros(len(rows), rec.TASK)
    for j, (kind, c, ts, tid, tgid, ptid, ptgid, flags, comm, new) in enumerate(rows):
        task[j] = (kind, c, ts, tid, tgid, ptid, ptgid, flags, comm.encode(), new.encode())
    return task[np.argsort(task["ts"], kind="stable")]


def _drain_order(records: np.ndarray) -> np.ndarray:
    """Records in the order per-CPU rings are drained: each drain window, CPU by CPU, in time."""
    window = (records["ts"] - START_TS) // DRAIN_NS
    return records[np.lexsort((records["ts"], records["cpu"], window))]
