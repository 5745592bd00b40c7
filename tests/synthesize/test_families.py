"""Runtime families: the data file is strict, ties to live thread names on this machine,
and decides a treatment only when the evidence is thin (saying so)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import stop_by_pid
from threadwise import givenclock
from threadwise.diagnostics import ProfileError
from threadwise.synthesize.families import bundled, decide, load_families, parse_families
from threadwise.synthesize.schema import Treatment

ROOT = Path(__file__).resolve().parents[2]
GOOD = '''schema_version = 1
version = "t"

[[family]]
name = "x"
runtime = "X"
match = ["x_"]
treatment = "batch"
why = "w"
sources = ["s"]
'''


def test_bundled_families_are_valid_and_sourced() -> None:
    families = bundled()
    assert families.schema_version == 1 and families.version
    names = [f.name for f in families.families]
    assert len(names) == len(set(names))
    assert all(f.sources for f in families.families)
    for name in ("jvm-gc", "redis-io", "redis-bio", "jemalloc", "mysql-innodb", "tokio"):
        assert name in names


def test_an_unknown_treatment_is_an_error_at_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "families.toml"
    bad.write_text(GOOD.replace('treatment = "batch"', 'treatment = "turbo"'))
    with pytest.raises(ProfileError) as raised:
        load_families(bad)
    assert raised.value.message.startswith(f"{bad}:8: family[0].treatment: ")
    assert "batch" in (raised.value.hint or "")
    bad.write_text(GOOD.replace('match = ["x_"]', 'match = ["*x"]'))
    with pytest.raises(ProfileError, match=r"families.toml:7: .*suffix"):
        load_families(bad)
    with pytest.raises(ProfileError, match=r":3: unknown key 'colour'"):
        parse_families(GOOD.replace('version = "t"', 'version = "t"\ncolour = 1'), "f.toml")


def test_cli_refuses_a_bad_families_file(tmp_path: Path) -> None:
    bad = tmp_path / "families.toml"
    bad.write_text(GOOD.replace('treatment = "batch"', 'treatment = "turbo"'))
    done = givenclock.run([sys.executable, "-m", "threadwise.cli", "synthesize", "cap.duckdb", "-n", "x",
                           "--families", str(bad), "-o", str(tmp_path / "x.toml")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert f"error: {bad}:8: family[0].treatment" in done.stderr and "hint:" in done.stderr
    assert "Traceback" not in done.stderr


def test_measured_evidence_overrides_the_family() -> None:
    gc = next(f for f in bundled().families if f.name == "jvm-gc")
    thin = decide(gc, Treatment.DEFAULT, thin="no role")
    assert thin.treatment is Treatment.BATCH and "the family decided" in (thin.note or "")
    measured = decide(gc, Treatment.LATENCY, thin=None)
    assert measured.treatment is Treatment.LATENCY
    assert "suggests batch; the measured evidence decided latency" in (measured.note or "")
    assert decide(gc, Treatment.EXCLUSIVE, thin="x").treatment is Treatment.EXCLUSIVE


def _comms(pid: int) -> set[str]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            out.add((task / "comm").read_text().strip())
    return out


def _check(runtime_families: list[str], comms: set[str]) -> None:
    families = {f.name: f for f in bundled().families}
    for name in runtime_families:
        family = families[name]
        assert family.observed, name
        taken = {c for c in comms if family.takes(c)}
        assert taken, f"family {name} ({family.match}) takes none of the live threads {sorted(comms)}"


def test_redis_families_match_a_live_redis(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server: run scripts/setup-system.sh")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--io-threads", "2",
                             "--save", "", "--dir", str(tmp_path), "--appendonly", "yes"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    try:
        comms: set[str] = set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not {"io_thd_1", "jemalloc_bg_thd"} <= comms:
            time.sleep(0.2)
            comms = _comms(proc.pid)
        _check(["redis-io", "redis-bio", "jemalloc"], comms)
    finally:
        stop_by_pid(proc)


def test_jvm_families_match_a_live_jvm(tmp_path: Path) -> None:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac, java)")
    givenclock.run(["javac", "-d", str(tmp_path), str(ROOT / "refine" / "workloads" / "PoolService.java")],
                   check=True, timeout=120)
    proc = subprocess.Popen(["java", "-Xmx64m", "-cp", str(tmp_path), "PoolService", "20", "2", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        comms = _comms(proc.pid)
        _check(["jvm-gc", "jvm-compiler", "jvm-runtime"], comms)
        internals = {c for c in comms if c not in {"java", "acceptor", "writer", "flusher"}
                     and not c.startswith("request-")}
        families = bundled()
        untaken = sorted(c for c in internals if families.family_of([c]) is None)
        assert not untaken, f"JVM threads no family takes: {untaken}"
    finally:
        stop_by_pid(proc)
    assert os.path.exists(tmp_path / "PoolService.class")
