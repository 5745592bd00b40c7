"""Which tracer backend runs: the one asked for by name, or the default with its fallback.

Problem: the backends (bpftrace_backend.py, libbpf_backend.py) build on backend.py's interface
and helpers, so backend.py cannot also be where one is picked without the two importing each
other.

Approach: picking lives here, above the backends: `choose_backend` (what capture.py calls) and
`get_backend` (one by name) import both at the top; backend.py keeps only what they share.
"""

from __future__ import annotations

from collections.abc import Callable

from threadwise.errors import MissingTool, UsageError
from threadwise.observe.backend import TracerBackend
from threadwise.observe.bpftrace_backend import BpftraceBackend
from threadwise.observe.libbpf_backend import LibbpfBackend

# The default tracer (benchmarks/RESULTS.md, "Tracer overhead", is why); FALLBACK runs when the
# default cannot (not built, no BTF) and the user did not ask for a backend by name.
DEFAULT_BACKEND = "libbpf"
FALLBACK_BACKEND = "bpftrace"
BACKENDS: dict[str, type] = {"libbpf": LibbpfBackend, "bpftrace": BpftraceBackend}


def choose_backend(name: str | None, progress: Callable[[str], None]) -> TracerBackend:
    """The backend `name`, or with None the default, falling back when it cannot run here."""
    if name is not None:
        backend = get_backend(name)
        backend.check()
        return backend
    backend = get_backend(DEFAULT_BACKEND)
    try:
        backend.check()
    except MissingTool as missing:
        progress(f"observe: {missing.message}; using {FALLBACK_BACKEND} instead "
                 f"({missing.hint or 'see docs/capture.md'})")
        backend = get_backend(FALLBACK_BACKEND)
        backend.check()
    return backend


def get_backend(name: str) -> TracerBackend:
    if name not in BACKENDS:
        raise UsageError(f"unknown tracer backend {name!r}", hint=f"choose one of: {', '.join(BACKENDS)}")
    return BACKENDS[name]()
