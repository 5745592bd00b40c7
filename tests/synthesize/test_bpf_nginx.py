"""bpf tier: roles from process titles on a real multi-process service, Debian's nginx.

nginx forks one process per role, all of comm `nginx`, and says the role only in the title it
writes over its argv (`nginx: master process ...`, `nginx: worker process`); the master runs as
root, its workers as the `user` of its config (www-data). The test runs its own nginx on
127.0.0.1 with its own config, prefix, pid and log files in a temporary directory (2 workers),
drives a local HTTP load from a small Python loop (both from tests/nginxserve.py, which the
lab's tests/lab/test_titles_lab.py shares), captures it with `threadwise observe --pid`
(real eBPF), and checks that `synthesize` gives one group per role, each selected by its comm
and `UIDEquals` its user, and that the real scx_layered accepts the compiled config
(`--print-and-exit`). nginx and the load are stopped by their PIDs (the master's own, which
Popen holds: `daemon off`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import nginxserve
from tests.conftest import alone_with_labs
from threadwise import givenclock
from threadwise.analyze import analyze_capture
from threadwise.shape import parse_shape
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import compile_profile
from threadwise.synthesize.reader import load_profile
from threadwise.synthesize.rules import validate

pytestmark = [pytest.mark.bpf, pytest.mark.scx]

CAPTURE_S = 4


def tw(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return givenclock.run([sys.executable, "-m", "threadwise.cli", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    reason = nginxserve.missing()
    if reason:
        pytest.skip(reason)
    with nginxserve.serving(tmp_path / "nginx") as running:
        yield running


def test_nginx_gets_one_group_per_role_selected_by_user(nginx: tuple[subprocess.Popen[bytes], int],
                                                        tmp_path: Path, scx_binary: Path) -> None:
    master, port = nginx
    www_data = nginxserve.service_uid()
    capture = tmp_path / "nginx.duckdb"
    with alone_with_labs("nginx capture"), nginxserve.loopback_load(port):
        done = tw("observe", "--pid", str(master.pid), "-d", f"{CAPTURE_S}s", "-o", str(capture))
    assert done.returncode == 0, done.stderr

    analysis = analyze_capture(capture)
    titled = {row["uid"]: row for row in analysis.groups.to_dicts() if row["uid"] is not None}
    assert set(titled) == {0, www_data}, analysis.groups.select("pattern", "uid", "process_titles", "note")
    assert titled[0]["process_titles"] == ["master process"] and titled[0]["thread_count"] == 1
    assert titled[www_data]["process_titles"] == ["worker process"]
    assert titled[www_data]["thread_count"] == nginxserve.WORKERS
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
