"""`status` never shows a count it does not explain: scx_layered's tasks next to the workload's threads."""

from __future__ import annotations

from threadwise.runtime import display
from threadwise.runtime.stats import LayerFigures


def _row(tid: int, comm: str, expected: str, actual: str | None) -> dict:
    return {"tid": tid, "pid": 1, "comm": comm, "process": "redis-server", "expected": expected,
            "actual": actual, "ok": expected == actual}


def test_layer_counts_come_with_their_meaning() -> None:
    layers = [LayerFigures("bio", 0, 0, 0.0, [], False), LayerFigures("rest", 1, 19, 5.3, [], False)]
    found = {"threads": [_row(11, "bio_close_file", "bio", None), _row(12, "bio_aof", "bio", None),
                         _row(13, "bio_lazy_free", "bio", "bio"), _row(10, "redis-server", "rest", "rest")],
             "error": None}
    lines = display.layer_table(layers, found)
    assert lines[0].split() == ["layer", "tasks", "workload", "util%", "cpus"]
    assert lines[1].split()[:3] == ["bio", "0", "1"] and lines[2].split()[:3] == ["rest", "19", "1"]
    notes = "\n".join(line for line in lines if line.startswith("note:"))
    assert "tasks: scx_layered's own count" in notes and "becomes runnable after the attach" in notes
    assert "workload: this profile's threads" in notes
    table = display.membership(found)
    assert "bio_close_file (11) in no layer (not runnable since the attach)" in table


def test_without_membership_the_tasks_note_still_shows() -> None:
    lines = display.layer_table([LayerFigures("hot", 0, 2, 196.9, [0, 1], True)], None)
    assert lines[0].split() == ["layer", "tasks", "util%", "cpus"]
    assert lines[-1].startswith("note:      tasks: scx_layered's own count")
