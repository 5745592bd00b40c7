"""Which layer a profile puts each of a capture's threads in (`threadwise export --profile`).

A capture does not record the profile applied while it was taken; the export
shows each thread's layer under one the user names. The placement is
scx_layered's first-match rule over the compiled config's own matchers
(layers.py), by thread and process name; a thread no group takes falls to the
catch-all layer. observe's export receives the result as data
(observe.interop.export_perfetto.ThreadLayers) and never imports synthesize.
"""

from __future__ import annotations

from pathlib import Path


def thread_layers(profile_path: Path, threads: list[tuple[int, int, str, str]],
                  nr_cpus: int) -> dict[tuple[int, int], str]:
    """(tid, tgid) -> the layer of `profile_path` that takes each (tid, tgid, comm, process comm)
    thread, compiled for a machine of `nr_cpus` CPUs; threads no group takes get the catch-all's."""
    # deferred: the CLI imports this module at startup, and these load pydantic (--help stays fast)
    from threadwise.shape import synthetic
    from threadwise.synthesize.layers import views_from_profile
    from threadwise.synthesize.reader import load_profile

    profile, _ = load_profile(profile_path)
    views = views_from_profile(profile, synthetic(max(nr_cpus, 1)))
    return {(tid, tgid): next((view.name for view in views if view.matches(name, process)), views[-1].name)
            for tid, tgid, name, process in threads}
