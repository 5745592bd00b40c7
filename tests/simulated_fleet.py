"""A fleet to test on: real captures of the bundled rolesim under different background loads.

Problem: a fleet's analysis (docs/fleet.md) needs many hosts' captures of one service, and this
machine is one host. Gigabytes of captures do not belong in the repository.

Approach: each simulated host is this machine under its own background load (busy-loop
processes that are not the workload, started before and stopped by PID after each capture), so
the hosts differ as a fleet's do: the same threads, less CPU left for them. Every capture is a
fresh run of rolesim, launched and traced by `observe` (the default tracer), exported as Parquet
under the host's name (`export --host`): ROOT/host=H/capture=C/. Four hosts of five captures
(the issue's "at least 4 hosts and 20 captures") by default:

    sudo .venv/bin/python -m tests.simulated_fleet /tmp/fleet          # 4 x 5 captures of 4 s
    threadwise synthesize /tmp/fleet --name rolesim-fleet -o rolesim-fleet.toml

tests/analyze/test_bpf_fleet.py makes one with shorter captures; benchmarks/fleet.py scales a
synthetic one (tests/synthetic/bulk.py) past what this machine can trace.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROLESIM_ARGS  # the bpf tier's rolesim: 2 hot threads, 3 workers


@dataclass(frozen=True)
class SimulatedHost:
    name: str
    spinners: int   # busy-loop processes beside the workload


HOSTS = (SimulatedHost("quiet", 0), SimulatedHost("busy-1", 1), SimulatedHost("busy-2", 2),
         SimulatedHost("busy-3", 3))


@contextmanager
def spinners(count: int) -> Iterator[None]:
    """`count` busy loops for the duration, stopped by PID (never by name)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def simulate(root: Path, *, hosts: tuple[SimulatedHost, ...] = HOSTS, captures: int = 5,
             duration_s: float = 4.0, progress: Callable[[str], None] = print) -> Path:
    """Write `captures` captures per host under `root` (a Parquet tree); returns `root`."""
    from threadwise.observe.capture import observe
    from threadwise.observe.interop.parquet import export_parquet
    from threadwise.observe.target import Target
    from threadwise.refine.measure.bundled import build

    rolesim = str(build("rolesim"))
    with tempfile.TemporaryDirectory(prefix="threadwise-fleet-sim-") as scratch:
        for host in hosts:
            for number in range(captures):
                path = Path(scratch) / f"{host.name}-{number}.duckdb"
                target = Target.from_options(pid=None, comm=None, cgroup=None,
                                             command=[rolesim, *ROLESIM_ARGS])
                with spinners(host.spinners):
                    observe(target, path, duration_s=duration_s, progress=lambda _line: None)
                done = export_parquet(path, root, host=host.name)
                path.unlink()
                progress(f"host {host.name} ({host.spinners} spinners): capture {number + 1}/{captures} "
                         f"-> {done.directory}")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the Parquet tree to write (host=H/capture=C/)")
    parser.add_argument("--captures", type=int, default=5, help="captures per host (default 5)")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per capture (default 4)")
    args = parser.parse_args()
    simulate(args.root, captures=args.captures, duration_s=args.duration)


if __name__ == "__main__":
    main()
