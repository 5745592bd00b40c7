"""Files of the interop commands: outputs written atomically, Perfetto's packet framing.

Problem: export and import write files users keep (a trace to open in the
Perfetto UI, a capture to train from); a crash must never leave half a file
under the final name, an existing file is replaced only when asked, and a
trace of millions of events must be read and written without holding it.
Approach: outputs are written beside the final path under a temporary name
carrying our pid (`.NAME.tmp-PID`) and renamed into place when complete. A
Perfetto trace is a protobuf `Trace` message, which on the wire is nothing
but a sequence of `packet` fields (field 1, length-delimited): one
TracePacket at a time is framed on write and unframed on read, so neither
side ever holds the whole trace.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from threadwise.errors import InputError, UsageError

PACKET_TAG = 0x0A          # field 1 (Trace.packet), wire type 2 (length-delimited)
_READ_CHUNK = 4 << 20


def check_output(path: Path, *, force: bool, what: str) -> None:
    """Refuse to overwrite without --force; fail early on a missing or unwritable directory."""
    if path.is_dir():
        raise UsageError(f"output path {path} is a directory", hint=f"give a file name for the {what}")
    if path.exists() and not force:
        raise UsageError(f"{what} {path} already exists",
                         hint="choose another -o/--output or pass --force to replace it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"directory {parent} does not exist", hint="create it first or choose another -o")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"directory {parent} is not writable", hint="choose another -o")


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[BinaryIO]:
    """A binary file that appears under `path` only if the block completes."""
    temp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with temp.open("wb") as handle:
            yield handle
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def write_packet(handle: BinaryIO, packet: bytes) -> int:
    """Append one serialized TracePacket as a `Trace.packet` field; returns bytes written."""
    frame = bytes([PACKET_TAG]) + _varint(len(packet))
    handle.write(frame)
    handle.write(packet)
    return len(frame) + len(packet)


def read_packets(path: Path) -> Iterator[bytes]:
    """The serialized TracePackets of a Perfetto trace file, one at a time.

    Raises InputError at the first field that is not a `packet` (not a Perfetto
    trace) or when the file ends inside a packet (truncated)."""
    buffer = bytearray()
    position = 0
    offset = 0             # file offset of buffer[0], for messages
    size = path.stat().st_size
    with path.open("rb") as handle:
        eof = False
        while True:
            if len(buffer) - position < 16 and not eof:
                chunk = handle.read(_READ_CHUNK)
                eof = not chunk
                buffer = buffer[position:] + chunk
                offset += position
                position = 0
            if position >= len(buffer):
                return
            if buffer[position] != PACKET_TAG:
                raise InputError(f"{path} is not a Perfetto trace: byte {offset + position} is "
                                 f"0x{buffer[position]:02x}, not a Trace.packet field",
                                 hint="give a Perfetto protobuf trace (.pftrace/.perfetto-trace) or a "
                                      "perf.data recorded with `perf sched record`")
            length, shift, cursor = 0, 0, position + 1
            while True:
                if cursor >= len(buffer):
                    raise InputError(f"{path} ends inside a packet header (truncated trace)")
                byte = buffer[cursor]
                length |= (byte & 0x7F) << shift
                cursor += 1
                if not byte & 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise InputError(f"{path} is not a Perfetto trace: bad packet length at byte "
                                     f"{offset + position}")
            end = cursor + length
            if offset + end > size:
                raise InputError(f"{path} ends inside a packet at byte {offset + position} (truncated trace, "
                                 "or not a Perfetto trace)",
                                 hint="copy the trace again; a trace cut short cannot be read")
            while end > len(buffer) and not eof:
                chunk = handle.read(max(_READ_CHUNK, end - len(buffer)))
                eof = not chunk
                buffer += chunk
            if end > len(buffer):
                raise InputError(f"{path} ends inside a packet at byte {offset + position} (truncated trace)",
                                 hint="copy the trace again; a trace cut short cannot be read")
            yield bytes(buffer[cursor:end])
            position = end
