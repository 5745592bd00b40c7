"""A workload's service and load on this host, for the observation that training starts from.

The ladder's cells run through the guest agent; observing happens on the
host (eBPF needs no sched_ext). This starts the service the workload file
describes, waits until it is ready (a TCP port on loopback, a log line, or a
command), runs its prepare command once (the benchmark's data), keeps its load
generator running in a loop while it is observed, and stops both by PID
(SIGTERM, then SIGKILL): never by name.
"""

from __future__ import annotations

import difflib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from threadwise.errors import ServiceError, TargetError
from threadwise.refine.measure.workload import Workload, render_argv


def _ready(workload: Workload, log: Path, err: Path) -> bool:
    ready = workload.service.ready  # type: ignore[union-attr]
    if ready.tcp_port is not None:
        try:
            socket.create_connection(("127.0.0.1", ready.tcp_port), timeout=1).close()
            return True
        except OSError:
            return False
    if ready.log_line is not None:
        return any(ready.log_line in path.read_text(errors="replace")
                   for path in (log, err) if path.is_file())
    argv = render_argv(list(ready.command or []), window_s=workload.objective.window_s)
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def _stop(process: subprocess.Popen, timeout_s: float) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _comms() -> dict[int, str]:
    """pid -> comm of every process on this host."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "comm").read_text().strip()
            except OSError:
                continue  # exited meanwhile
    return found


def _pgrp(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[2])  # after "(comm)": state, ppid, pgrp


class RunningService:
    """The service (its own process group) and, optionally, its load looping in a thread."""

    def __init__(self, workload: Workload, workdir: Path) -> None:
        self.workload = workload
        self.workdir = workdir
        self.process: subprocess.Popen | None = None
        self._load_stop = threading.Event()
        self._load_thread: threading.Thread | None = None
        self._load_process: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self) -> RunningService:
        service = self.workload.service
        assert service is not None
        log, err = self.workdir / "service.log", self.workdir / "service.err"
        argv = render_argv(list(service.command), window_s=self.workload.objective.window_s)
        try:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log.open("wb"),
                                            stderr=err.open("wb"), start_new_session=True)
        except OSError as error:
            raise ServiceError(f"cannot start the service {argv[0]!r}: {error}",
                               hint="check [service] command in the workload file") from None
        deadline = time.monotonic() + service.ready_timeout_s
        while not _ready(self.workload, log, err):
            if self.process.poll() is not None:
                tail = err.read_text(errors="replace").strip().splitlines()[-3:]
                raise ServiceError(f"the service exited with status {self.process.returncode} before "
                                   f"it was ready: {' | '.join(tail)}", hint=f"its output: {log}, {err}")
            if time.monotonic() > deadline:
                self.stop()
                raise ServiceError(f"the service was not ready within {service.ready_timeout_s:g} s",
                                   hint="raise [service] ready_timeout_s, or check its ready condition")
            time.sleep(0.2)
        self.require_target()
        self.prepare()
        return self

    def prepare(self) -> None:
        """Run [service] prepare once (the benchmark's data), before anything is observed; a
        failure stops the service and names the end of the command's stderr."""
        service = self.workload.service
        assert service is not None
        if service.prepare is None:
            return
        argv = render_argv(list(service.prepare), window_s=self.workload.objective.window_s)
        out, err = self.workdir / "prepare.log", self.workdir / "prepare.err"
        try:
            with out.open("wb") as stdout, err.open("wb") as stderr:
                # its own session: a timeout ends exactly its process group
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                           start_new_session=True)
        except OSError as error:
            self.stop()
            raise ServiceError(f"cannot start the prepare command {argv[0]!r}: {error}",
                               hint="check [service] prepare in the workload file") from None
        try:
            status = process.wait(timeout=service.prepare_timeout_s)
        except subprocess.TimeoutExpired:
            _stop(process, 5.0)
            self.stop()
            raise ServiceError(f"the prepare command did not finish within {service.prepare_timeout_s:g} s",
                               hint="raise [service] prepare_timeout_s, or prepare less data") from None
        if status != 0:
            # sysbench prints its errors (`Can't connect ...`) on stdout: the stream that has them
            said = err.read_text(errors="replace").strip() or out.read_text(errors="replace").strip()
            tail = said.splitlines()[-3:]
            self.stop()
            raise ServiceError(f"the prepare command exited with status {status}: {' | '.join(tail)}",
                               hint=f"its output: {out}, {err}")

    def require_target(self) -> None:
        """Refuse a `[target] process` that names no process, before anything is measured.

        The ladder finds the target by comm prefix (agent.sh `target_pids`); a misspelt one
        would leave every profile cell without target threads, found minutes later."""
        process = self.workload.target.process
        comms = _comms()
        if any(comm.startswith(process) for comm in comms.values()):
            return
        assert self.process is not None
        ours = sorted({comm for pid, comm in comms.items() if _pgrp(pid) == self.process.pid})
        close = difflib.get_close_matches(process, ours, n=1)
        self.stop()
        raise TargetError(
            f"[target] process = {process!r} names no running process; the service's processes are "
            f"{', '.join(repr(c) for c in ours) or 'gone'}",
            hint=(f"did you mean {close[0]!r}? " if close else "")
                 + "the ladder finds the target by this prefix of the process name (comm)")

    def start_load(self) -> None:
        """Run the load command over and over until stop() (command-sourced workloads)."""
        if self.workload.load.source != "command" or not self.workload.load.command:
            return
        argv = render_argv(list(self.workload.load.command), window_s=self.workload.objective.window_s)

        def loop() -> None:
            while not self._load_stop.is_set():
                self._load_process = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                                      stderr=subprocess.DEVNULL, start_new_session=True)
                self._load_process.wait()
                if self._load_process.returncode != 0:
                    self._load_stop.wait(1.0)

        self._load_thread = threading.Thread(target=loop, daemon=True)
        self._load_thread.start()

    def stop(self) -> None:
        self._load_stop.set()
        if self._load_process is not None:
            _stop(self._load_process, 5.0)
        if self._load_thread is not None:
            self._load_thread.join(timeout=10)
        if self.process is not None:
            _stop(self.process, self.workload.service.stop_timeout_s if self.workload.service else 10.0)

    def __enter__(self) -> RunningService:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
