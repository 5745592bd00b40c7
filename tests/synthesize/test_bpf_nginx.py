"""bpf tier: roles from process titles on a real multi-process service, Debian's nginx.

nginx forks one process per role, all of comm `nginx`, and says the role only in the title it
writes over its argv (`nginx: master process ...`, `nginx: worker process`); the master runs as
root, its workers as the `user` of its config (www-data). The test runs its own nginx on
127.0.0.1 with its own config, prefix, pid and log files in a temporary directory (2 workers),
drives a local HTTP load from a small Python loop, captures it with `threadwise observe --pid`
(real eBPF), and checks that `synthesize` gives one group per role, each selected by its comm
and `UIDEquals` its user, and that the real scx_layered accepts the compiled config
(`--print-and-exit`). nginx and the load are stopped by their PIDs (the master's own, which
Popen holds: `daemon off`).
"""

from __future__ import annotations

import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import _free_port, alone_with_labs, stop_by_pid
from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.observe import procfs
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.rules import validate

pytestmark = [pytest.mark.bpf, pytest.mark.scx]

NGINX = "/usr/sbin/nginx"
WORKERS = 2
CAPTURE_S = 4
CONFIG = """\
user www-data;
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


def tw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def _workers(master: int) -> list[int]:
    """The master's children that already run as their service user with a worker's title."""
    found = []
    for pid in procfs.children_of(master):
        cmdline = (Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}").exists() else b"")
        credentials = procfs.process_credentials(pid)
        if b"worker process" in cmdline and credentials and credentials[0] != 0:
            found.append(pid)
    return found


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    if not Path(NGINX).exists():
        pytest.skip("needs Debian's nginx: run scripts/setup-system.sh")
    try:
        pwd.getpwnam("www-data")
    except KeyError:
        pytest.skip("needs the www-data user (Debian's base system has it)")
    port = _free_port()
    root = tmp_path / "nginx"
    root.mkdir()
    conf = root / "nginx.conf"
    conf.write_text(CONFIG.format(workers=WORKERS, root=root, port=port))
    # -e: the error log before the config is read (not /var/log/nginx); -p: the prefix
    master = subprocess.Popen([NGINX, "-c", str(conf), "-p", f"{root}/", "-e", str(root / "error.log")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = givenclock.Deadline.start(master.pid, 20)
        while len(_workers(master.pid)) < WORKERS and not deadline.passed() and master.poll() is None:
            time.sleep(0.05)
        log = (root / "error.log").read_text() if (root / "error.log").exists() else ""
        assert len(_workers(master.pid)) == WORKERS, f"nginx did not start {WORKERS} workers: {log}"
        yield master, port
    finally:
        stop_by_pid(master)


def test_nginx_gets_one_group_per_role_selected_by_user(nginx: tuple[subprocess.Popen[bytes], int],
                                                        tmp_path: Path, scx_binary: Path) -> None:
    master, port = nginx
    www_data = pwd.getpwnam("www-data").pw_uid
    capture = tmp_path / "nginx.duckdb"
    with alone_with_labs("nginx capture"):
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            done = tw("observe", "--pid", str(master.pid), "-d", f"{CAPTURE_S}s", "-o", str(capture))
        finally:
            stop_by_pid(load)
    assert done.returncode == 0, done.stderr

    analysis = analyze_capture(capture)
    titled = {row["uid"]: row for row in analysis.groups.to_dicts() if row["uid"] is not None}
    assert set(titled) == {0, www_data}, analysis.groups.select("pattern", "uid", "process_titles", "note")
    assert titled[0]["process_titles"] == ["master process"] and titled[0]["thread_count"] == 1
    assert titled[www_data]["process_titles"] == ["worker process"]
    assert titled[www_data]["thread_count"] == WORKERS
    assert titled[www_data]["wakeups_per_s"] > 0          # the load reached the workers
    assert all(row["separable"] and row["match_prefixes"] == ["nginx"] for row in titled.values())

    out = tmp_path / "nginx.toml"
    done = tw("synthesize", str(capture), "--name", "nginx", "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    profile, _source = load_profile(out)
    assert [d for d in validate(profile) if d.severity == "error"] == [], text
    by_uid = {g.uid: g for g in profile.groups if g.uid is not None}
    assert set(by_uid) == {0, www_data}, text
    assert by_uid[www_data].name == "nginx-worker" and by_uid[0].name == "nginx-master", text
    for shape in ("cores=4,threads-per-core=2", "cores=2,threads-per-core=1"):
        compiled = compile_profile(profile, parse_shape(shape))
        assert oracle.check(compiled.config, scx_binary) == [], shape
        layers = {layer["name"]: layer for layer in compiled.config.to_json_data()}
        for name, uid in (("nginx-worker", www_data), ("nginx-master", 0)):
            assert all({"UIDEquals": uid} in block and {"CommPrefix": "nginx"} in block
                       for block in layers[name]["matches"]), layers[name]
    print(f"nginx: {', '.join(f'{g.name} uid {g.uid} ({g.treatment.value})' for g in by_uid.values())}")
