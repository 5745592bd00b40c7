"""A private Debian PostgreSQL 15 for tests: a fresh data directory, 127.0.0.1, pgbench as its load.

Shared by the bpf tier (tests/analyze/test_bpf_postgres.py captures it on the host) and the lab
(tests/lab/guest/pg_hints.py runs it inside the VM, which shares the host's root filesystem). So
it holds no pytest: a caller turns `missing()` into a skip or a failure as its tier needs.
`initdb` of a fresh data directory owned by `postgres` (in a directory of its own under /tmp,
which that user can reach), the postmaster started as `postgres` (setpriv, which execs, so the
pid Popen holds is the postmaster's) listening only on 127.0.0.1 on a free port with its socket
in the data directory; trust authentication. Everything stops by PID: pgbench by SIGTERM, the
postmaster by SIGINT (PostgreSQL's fast shutdown); never by name.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import _free_port, stop_by_pid
from threadwise import givenclock

PG_BIN = Path("/usr/lib/postgresql/15/bin")
AS_POSTGRES = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
AUXILIARY = ("postgres: checkpointer", "postgres: walwriter", "postgres: background writer")


def missing() -> str | None:
    """What this machine lacks to run the server and its load, or None."""
    if not (PG_BIN / "postgres").is_file() or not (PG_BIN / "pgbench").is_file():
        return "needs postgresql-15 and postgresql-contrib: run scripts/setup-system.sh"
    if shutil.which("setpriv") is None:
        return "needs setpriv (util-linux) to run PostgreSQL as user postgres"
    return None


def _wait_ready(port: int, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Until the postmaster accepts connections on 127.0.0.1:`port` (pg_isready)."""
    deadline = givenclock.Deadline.start(server.pid, timeout_s)
    while not deadline.passed():
        if server.poll() is not None:
            raise RuntimeError(f"postgres exited {server.returncode} before it was ready")
        probe = [str(PG_BIN / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)]
        if subprocess.run(probe, check=False).returncode == 0:
            return
        time.sleep(0.1)
    raise TimeoutError(f"postgres did not accept connections on {port}")


@contextmanager
def serving(prefix: Sequence[str] = (),
            ready_timeout_s: float = 60) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A fresh server, its postmaster and port, removed after. `prefix`: a command the server
    runs under (e.g. nice), before the user is dropped."""
    home = Path(tempfile.mkdtemp(prefix="tw-pg-"))
    data = home / "data"
    shutil.chown(home, "postgres", "postgres")
    port = _free_port()
    try:
        givenclock.run([*AS_POSTGRES, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres", "-E", "UTF8", "--no-sync"],
                       capture_output=True, text=True, timeout=300, check=True)
        server = subprocess.Popen([*prefix, *AS_POSTGRES, str(PG_BIN / "postgres"), "-D", str(data),
                                   "-p", str(port), "-c", "listen_addresses=127.0.0.1",
                                   "-c", f"unix_socket_directories={data}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_ready(port, server, ready_timeout_s)
            yield server, port
        finally:
            stop_by_pid(server, signal.SIGINT, grace_s=30)   # fast shutdown; SIGKILL after 30 s
    finally:
        shutil.rmtree(home, ignore_errors=True)


def pgbench(port: int, *args: str, prefix: Sequence[str] = ()) -> list[str]:
    """pgbench against the server as user postgres, database postgres."""
    return [*prefix, str(PG_BIN / "pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
            *args, "postgres"]


def initialize(port: int, prefix: Sequence[str] = ()) -> None:
    """pgbench's tables at scale 1."""
    givenclock.run(pgbench(port, "-i", "-q", "-s", "1", prefix=prefix), capture_output=True, text=True,
                   timeout=300, check=True)


def title(pid: int) -> str | None:
    """The title the process wrote over its argv, NULs as spaces; None once it has gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None


def children(postmaster: int) -> list[int]:
    """The postmaster's child processes (every other PostgreSQL process)."""
    try:
        text = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]
