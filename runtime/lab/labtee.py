"""Run a command in the lab guest, keeping its stdout and stderr apart and, line by line, in order.

Problem: the host prints the guest command's output while the VM runs, so it
must land in a file shared with the host as it is written, with stdout and
stderr told apart and in the order they were written. Two tee pipelines (one
per stream) race each other: a line written to stderr just after one to
stdout often arrives first.

Approach: one process reads both pipes (poll, in the order the kernel
reports them ready, at most one line each turn from each), appends each line
to STREAM tagged `O ` or `E ` and writes the raw bytes to `stdout` / `stderr`.
Once the command exits, what is already in the pipes is read and the rest
is left: a background process it started may hold them open (its later
output is not kept). Standard library only: it runs inside the guest before
anything else is imported. Exits with the command's status (128 + N for a
signal, like a shell).

    python -m threadwise.runtime.lab.labtee OUT_DIR -- COMMAND [ARGS...]
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

STREAM = "stream"
TAGS = {"stdout": b"O ", "stderr": b"E "}


def run(out: Path, command: list[str]) -> int:
    """Run `command`, writing out/stdout, out/stderr and the tagged out/STREAM as output arrives."""
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
    except OSError as error:
        message = f"{command[0]}: {error.strerror}\n".encode()
        (out / "stderr").write_bytes(message)
        (out / STREAM).write_bytes(TAGS["stderr"] + message)
        return 127
    assert child.stdout is not None and child.stderr is not None
    pipes = {child.stdout.fileno(): "stdout", child.stderr.fileno(): "stderr"}
    files = {name: (out / name).open("wb") for name in TAGS}
    pending = {name: b"" for name in TAGS}
    with (out / STREAM).open("ab") as stream:
        poller = select.poll()
        for fd in pipes:
            poller.register(fd, select.POLLIN | select.POLLHUP)
        open_fds = set(pipes)
        ended = False
        while open_fds:
            # once the command has exited, read only what is already there: a background process
            # it started may hold the pipes open for as long as it lives
            ready = poller.poll(0 if ended else 200)
            if not ready:
                if ended:
                    break
                ended = child.poll() is not None
                continue
            for fd, _event in ready:
                name = pipes[fd]
                data = os.read(fd, 65536)
                if not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    if pending[name]:
                        stream.write(TAGS[name] + pending[name] + b"\n")
                        pending[name] = b""
                    continue
                files[name].write(data)
                files[name].flush()
                *lines, pending[name] = (pending[name] + data).split(b"\n")
                for line in lines:
                    stream.write(TAGS[name] + line + b"\n")
                stream.flush()
        for name, rest in pending.items():
            if rest:
                stream.write(TAGS[name] + rest + b"\n")
    for handle in files.values():
        handle.close()
    status = child.wait()
    return 128 - status if status < 0 else status


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m threadwise.runtime.lab.labtee OUT_DIR -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    return run(Path(argv[0]), argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
