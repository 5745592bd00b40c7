"""`threadwise diff` is complete for a reviewer (issue 34): a workload change moves threads out of
(or into) the profile, a layer whose settings change lists its threads, a demotion is one change
with its reason, unset options show their preset, and the Markdown keeps every pattern."""

from __future__ import annotations

import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

from threadwise.observe.builder import CaptureBuilder
from threadwise.shape import parse_shape
from threadwise.synthesize.diff import diff_profiles
from threadwise.synthesize.diff_render import render_markdown, render_text
from threadwise.synthesize.schema import Evidence, Group, Profile, Workload
from threadwise.synthesize.writer import dumps
from threadwise.words import plain

THREADS = {"rolesim": 10, "hot-0": 11, "worker-0": 12, "worker-1": 13, "feeder": 14}


def profile(*, process: str = "rolesim", cgroup: str | None = None, hot_threads: int = 1,
            worker: dict | None = None, patterns: tuple[str, ...] = ("worker-*",)) -> Profile:
    workload = Workload(process=process, cgroup=cgroup)
    return Profile(schema_version=1, name="rolesim", workload=workload, group=[
        Group(name="hot", match=["hot-*"], treatment="exclusive", hot_threads=hot_threads,
              evidence=Evidence(threads=1, names=["hot-0"])),
        Group(name="worker", match=list(patterns), treatment="latency", **(worker or {}),
              evidence=Evidence(threads=3, names=["worker-0", "worker-1", "feeder"])),
        Group(name="other", match=["*"], treatment="default",
              evidence=Evidence(threads=1, names=["rolesim"])),
    ])


def write(tmp_path: Path, name: str, p: Profile) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(dumps(p))
    return path


def capture(tmp_path: Path, process: str = "rolesim") -> Path:
    """A capture of one process (the leader's comm is the process name) and its threads."""
    cap = CaptureBuilder(target_tgids=[10])
    for name, tid in THREADS.items():
        cap.thread(tid, 10, process if tid == 10 else name)
        cap.slice(tid, 0, cap.start_ts + tid * 1_000_000, 50_000)
    return cap.write(tmp_path / "c.duckdb")


def test_a_process_rename_shows_every_thread_leaving(tmp_path: Path) -> None:
    old, new = write(tmp_path, "old", profile()), write(tmp_path, "new", profile(process="rolesim-v2"))
    with_capture = diff_profiles(old, new, capture=capture(tmp_path))
    assert with_capture.threads_checked == 5 and len(with_capture.moves) == 5
    text = render_text(with_capture)
    assert "threads that change layer (5 of 5, from capture" in text and "5 leave the profile" in text
    assert ("  hot-0: hot (exclusive) -> not in the profile: its process rolesim does not start with "
            "rolesim-v2\n") in text
    # without a capture: the evidence names, as threads of the old profile's process
    from_evidence = render_text(diff_profiles(old, new))
    assert ("(5 of 5, from the profiles' evidence names, as threads of process rolesim; 5 leave"
            in from_evidence)
    # and back: every thread joins
    back = render_text(diff_profiles(new, old, capture=capture(tmp_path)))
    assert "5 join the profile" in back


def test_a_narrower_process_prefix_keeps_the_threads(tmp_path: Path) -> None:
    old, new = write(tmp_path, "old", profile(process="roles")), write(tmp_path, "new", profile())
    result = diff_profiles(old, new, capture=capture(tmp_path))
    assert result.moves == [] and result.threads_checked == 5


def test_a_cgroup_change_moves_the_threads_outside_it(tmp_path: Path) -> None:
    old = write(tmp_path, "old", profile(cgroup="/synthetic"))   # where CaptureBuilder's threads are
    new = write(tmp_path, "new", profile(cgroup="/kubepods.slice/pod-1"))
    result = render_text(diff_profiles(old, new, capture=capture(tmp_path)))
    assert "5 leave the profile" in result, result
    assert "its cgroup /synthetic is not under /kubepods.slice/pod-1" in result


def test_a_layer_whose_settings_change_lists_its_threads(tmp_path: Path) -> None:
    old = write(tmp_path, "old", profile())
    new = write(tmp_path, "new", profile(worker={"slice_us": 500}))
    text = render_text(diff_profiles(old, new))
    # the unset option shows the preset's value, not `-`
    assert "  worker: slice_us: 1000 (preset) -> 500\n" in text, text
    assert "threads that change layer (0 of 5" in text
    assert ("threads that keep their layer while its settings change (2 of 5):\n"
            "  worker (latency): slice_us: worker-0, worker-1\n") in text


def test_a_demotion_is_one_change_with_its_reason(tmp_path: Path) -> None:
    old, new = write(tmp_path, "old", profile()), write(tmp_path, "new", profile(hot_threads=4))
    result = diff_profiles(old, new, shape=parse_shape("cores=2,threads-per-core=1"))
    hot = [c for c in result.layer_changes if c.where == "hot"]
    assert [c.field for c in hot] == ["demoted"], hot
    line = f"{plain(hot[0].old)} -> {plain(hot[0].new)}"
    assert line.startswith("Confined exclusive, 1 whole core (1 CPU) -> Grouped (shares CPUs, sized by use): "
                           "needs 4 whole cores, the shape has 1 left (2 cores - 1 reserved)"), line
    assert "exclusive true -> false" in line   # what comes with it, in the same change
    text = render_text(result)
    assert "kind:" not in text and "  hot: demoted: Confined" in text
    # and back: no longer demoted
    back = diff_profiles(new, old, shape=parse_shape("cores=2,threads-per-core=1"))
    assert [c.field for c in back.layer_changes if c.where == "hot"] == ["no longer demoted"]


def _code_spans(rendered_html: str) -> list[str]:
    return [html.unescape(span) for span in re.findall(r"<code>(.*?)</code>", rendered_html)]


def test_markdown_keeps_every_pattern_name_and_value(tmp_path: Path) -> None:
    old = write(tmp_path, "old", profile())
    patterns = ("io_thd_*", "redis-*", "a_b_", "x|y")
    new = write(tmp_path, "new", profile(patterns=patterns, worker={"slice_us": 500}))
    text = render_markdown(diff_profiles(old, new, shape=parse_shape("cores=2")))
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    spans = _code_spans(rendered)
    for literal in (*patterns, "worker-*", "worker-0", "500", "1000", "worker", "other", "slice_us"):
        assert literal in spans, (literal, spans, text)
    assert "<em>" not in rendered and "<strong>Threads" in rendered   # no pattern read as emphasis
    # the workload's catch-all pattern `*` too (the last group's patterns change to it)
    base = profile()
    star = write(tmp_path, "star", base.model_copy(update={"groups": [
        base.groups[0], base.groups[1].model_copy(update={"match": ["*"]})]}))
    spans = _code_spans(MarkdownIt("commonmark").enable("table").render(
        render_markdown(diff_profiles(old, star))))
    assert "*" in spans and "worker-*" in spans
