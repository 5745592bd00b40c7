"""A private Debian nginx for tests: master as root, workers as www-data, on 127.0.0.1, and a load.

Shared by the bpf tier (tests/synthesize/test_bpf_nginx.py captures it on the host) and the lab
(tests/lab/guest/titles.py runs it inside the VM, which shares the host's root filesystem, and
imports this module from there). So it holds no pytest: a caller turns `missing()` into a skip
or a failure as its tier needs. nginx gets its own config, prefix, pid and log files in a
directory the caller owns (`daemon off`, so the Popen'd process IS the master), and everything
is stopped by its PID, never by name.
"""

from __future__ import annotations

import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import _free_port, stop_by_pid
from threadwise import givenclock
from threadwise.observe import procfs

NGINX = "/usr/sbin/nginx"
USER = "www-data"
WORKERS = 2
CONFIG = """\
user {user};
worker_processes {workers};
daemon off;
master_process on;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 200 "ok\\n"; }}
    }}
}}
"""
# keep-alive GETs on loopback until stopped: enough requests that both workers wake often
LOAD = """\
import http.client, sys
while True:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
        for _ in range(200):
            conn.request("GET", "/")
            conn.getresponse().read()
        conn.close()
    except OSError:
        pass
"""


def missing() -> str | None:
    """What this machine lacks to run the test nginx (with the fix), or None."""
    if not Path(NGINX).exists():
        return f"needs Debian's nginx ({NGINX}): run scripts/setup-system.sh"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"needs the {USER} user (Debian's base system has it)"
    return None


def service_uid() -> int:
    """The uid nginx's workers run as (www-data: 33 on Debian)."""
    return pwd.getpwnam(USER).pw_uid


def worker_pids(master: int) -> list[int]:
    """The master's children that already run as their service user with a worker's title."""
    found = []
    for pid in procfs.children_of(master):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError):  # exited since it was listed (a reload's old worker)
            continue
        credentials = procfs.process_credentials(pid)
        # the title is written and the uid dropped after the fork: until both, it is no worker yet
        if b"worker process" in cmdline and credentials and credentials[0] != 0:
            found.append(pid)
    return found


@contextmanager
def serving(root: Path, *, workers: int = WORKERS,
            start_s: float = 20) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """(master, port): nginx running in `root` (created) with `workers` workers up; stopped on exit.

    Raises RuntimeError with nginx's error log when the workers do not come up within `start_s`
    of host time given to nginx."""
    port = _free_port()
    root.mkdir(parents=True, exist_ok=True)
    conf = root / "nginx.conf"
    conf.write_text(CONFIG.format(user=USER, workers=workers, root=root, port=port))
    # -e: the error log before the config is read (not /var/log/nginx); -p: the prefix
    master = subprocess.Popen([NGINX, "-c", str(conf), "-p", f"{root}/", "-e", str(root / "error.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = givenclock.Deadline.start(master.pid, start_s)
        while len(worker_pids(master.pid)) < workers and not deadline.passed() and master.poll() is None:
            time.sleep(0.05)
        if len(worker_pids(master.pid)) != workers:
            log = (root / "error.log").read_text() if (root / "error.log").exists() else ""
            raise RuntimeError(f"nginx did not start {workers} workers (exit {master.poll()}): {log}")
        yield master, port
    finally:
        stop_by_pid(master)


@contextmanager
def loopback_load(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The keep-alive GET loop against 127.0.0.1:`port` while inside; stopped by its PID on exit."""
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield load
    finally:
        stop_by_pid(load)
