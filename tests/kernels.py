"""Run a notebook in a kernel that listens on Unix sockets, not TCP ports.

jupyter_client picks a kernel's five TCP ports by binding port 0 and letting go; ipykernel binds
them a second or more later, once the kernel has started. The bpf tier runs beside the fast tier,
and its load generators' client connections take local ports from the same ephemeral range. A port
taken in between kills the kernel at its bind ("Kernel died before replying to kernel_info": CI of
d69cd9c, 1 test in 1,420). Unix sockets in a private folder cannot collide with anything.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from jupyter_client import KernelManager
from nbclient import NotebookClient
from nbformat import NotebookNode


def execute(nb: NotebookNode, cwd: Path, *, timeout: int, allow_errors: bool = False) -> None:
    """Execute `nb` in place with `cwd` as the kernel's working directory (as NotebookClient does)."""
    with tempfile.TemporaryDirectory(prefix="tw-kernel-") as sockets:
        # ipc names each socket IP-N; a short folder keeps it under the 108-byte Unix path limit
        kernel = KernelManager(kernel_name="python3", transport="ipc", ip=str(Path(sockets) / "k"))
        NotebookClient(nb, km=kernel, timeout=timeout, allow_errors=allow_errors,
                       resources={"metadata": {"path": str(cwd)}}).execute()
