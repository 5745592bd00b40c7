"""Layer options a profile may set over its treatment's preset, and the catch-all's `[catch_all]`:
typed and checked with lines, compiled, written and diffed, and proven to reach the real scx_layered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.datafiles import line_of, profile_diagnostics
from threadwise.shape import parse_shape, synthetic
from threadwise.synthesize import oracle
from threadwise.synthesize.compile import CATCH_ALL_OPTIONS, compile_profile
from threadwise.synthesize.diff import diff_profiles
from threadwise.synthesize.diff_render import render_text
from threadwise.synthesize.layered import LayerConfig
from threadwise.synthesize.reader import parse_profile
from threadwise.synthesize.rules import validate
from threadwise.synthesize.schema import MAX_US, CatchAll, Group, Profile, Treatment, Workload
from threadwise.synthesize.writer import dumps

U64_MAX = 2**64 - 1


def tuned() -> Profile:
    """Every override key set to a value that is neither scx_layered's default nor the preset's
    (where the key has such a value), on a shape of 2 cores (1 reserved): `hot` fits, `hog` is
    demoted to Grouped."""
    return Profile(schema_version=1, name="t", workload=Workload(process="svc"), group=[
        Group(name="hot", match=["hot-"], treatment="exclusive", hot_threads=1, slice_us=3000, weight=321,
              preempt=False, exclusive=False, protected=False, min_exec_us=50,
              disallow_preempt_after_us=12345),
        Group(name="hog", match=["hog-"], treatment="exclusive", hot_threads=2, exclusive=True,
              protected=True, min_exec_us=75),
        Group(name="io", match=["io_"], treatment="latency", preempt_first=True, min_exec_us=250),
        Group(name="bg", match=["bg"], treatment="batch", preempt=True, preempt_first=True),
    ], catch_all=CatchAll(slice_us=7000, weight=42, preempt=True))


SHAPE = synthetic(2, 1)
# What scx_layered must print back for `tuned()`, written out by hand (not derived from compile),
# so a key compile drops, renames or leaves at its preset fails here.
EXPECTED: dict[str, tuple[str, dict[str, Any]]] = {
    "hot": ("Confined", {"cpus_range": [1, 1], "slice_us": 3000, "weight": 321, "preempt": False,
                         "exclusive": False, "protected": False, "min_exec_us": 50,
                         "disallow_preempt_after_us": 12345, "preempt_first": False}),
    "hog": ("Grouped", {"slice_us": 20000, "weight": 100, "preempt": False, "exclusive": True,
                        "protected": True, "min_exec_us": 75}),
    "io": ("Open", {"preempt": True, "preempt_first": True, "slice_us": 1000, "min_exec_us": 250}),
    "bg": ("Open", {"preempt": True, "preempt_first": True, "slice_us": 20000, "weight": 50}),
    "rest": ("Open", {"slice_us": 7000, "weight": 42, "preempt": True, "min_exec_us": 0}),
}




def test_overrides_compile_over_the_preset() -> None:
    compiled = compile_profile(tuned(), SHAPE)
    kinds = {spec["name"]: spec["kind"] for spec in compiled.config.to_json_data()}
    assert kinds["hot"] == {"Confined": {
        "util_range": [0.8, 0.9], "cpus_range": [1, 1], "exclusive": False, "protected": False,
        "preempt": False, "slice_us": 3000, "min_exec_us": 50, "weight": 321,
        "disallow_preempt_after_us": 12345}}
    assert kinds["hog"] == {"Grouped": {"util_range": [0.8, 0.9], "exclusive": True, "protected": True,
                                        "preempt": False, "slice_us": 20000, "min_exec_us": 75,
                                        "weight": 100}}
    assert kinds["io"] == {"Open": {"preempt": True, "preempt_first": True, "slice_us": 1000,
                                    "min_exec_us": 250, "weight": 100}}
    assert kinds["bg"] == {"Open": {"preempt": True, "preempt_first": True, "slice_us": 20000,
                                    "weight": 50}}
    assert kinds["rest"] == {"Open": {"preempt": True, "slice_us": 7000, "weight": 42}}
    # the typed reader knows them
    assert LayerConfig.from_json_data(compiled.config.to_json_data()) == compiled.config


def test_no_catch_all_table_is_the_fixed_catch_all() -> None:
    plain = tuned().model_copy(update={"catch_all": None})
    rest = compile_profile(plain, SHAPE).config.specs[-1]
    assert rest.kind.to_json_data() == {"Open": CATCH_ALL_OPTIONS.to_json_data()}
    empty = tuned().model_copy(update={"catch_all": CatchAll()})
    assert compile_profile(empty, SHAPE).config == compile_profile(plain, SHAPE).config


def test_a_demoted_group_keeps_its_overrides_and_the_notes_say_what_they_mean() -> None:
    p = tuned()
    hog = p.groups[1].model_copy(update={"preempt": True})
    bg = p.groups[3].model_copy(update={"treatment": Treatment.EXCLUSIVE, "hot_threads": 4, "preempt": None})
    compiled = compile_profile(p.model_copy(update={"groups": [p.groups[0], hog, p.groups[2], bg]}), SHAPE)
    assert compiled.config.specs[1].kind.options.preempt is True
    assert compiled.config.specs[3].kind.options.preempt_first is True
    assert ("group 'hog': the demoted layer keeps preempt = true from the profile: a CPU hog without "
            "cores of its own that preempts can take every CPU from the rest") in compiled.notes
    assert ("group 'bg': preempt_first has no effect on the demoted layer (it does not preempt)"
            in compiled.notes)


def test_written_with_what_each_override_replaces_and_read_back() -> None:
    text = dumps(tuned())
    again, _ = parse_profile(text)
    assert again == tuned() and dumps(again) == text
    # preempt = false is the exclusive preset's own value now, written because
    # disallow_preempt_after_us needs it (rules.py layer_option): still an override, said as such
    assert "# overrides of the exclusive preset:\n#   slice_us 2000 -> 3000\n#   weight 100 -> 321\n" \
           "#   preempt false -> false\n#   exclusive true -> false\n#   protected true -> false\n" \
           "#   min_exec_us 0 -> 50\n#   disallow_preempt_after_us 80000 -> 12345\nslice_us = 3000\n" in text
    assert "#   preempt_first false -> true\n#   min_exec_us 100 -> 250\npreempt_first = true\n" in text
    assert text.endswith("[catch_all]\n# The catch-all layer `rest`: every thread no group takes, on the "
                         "whole machine (an Open layer).\n# overrides of the catch-all preset:\n"
                         "#   slice_us 2000 -> 7000\n#   weight 100 -> 42\n#   preempt false -> true\n"
                         "slice_us = 7000\nweight = 42\npreempt = true\n")
    assert validate(again) == []


def test_a_profile_without_overrides_is_written_as_before(example: Profile, example_text: str) -> None:
    assert "overrides of" not in example_text and "[catch_all]" not in example_text
    assert example.catch_all is None


@pytest.mark.parametrize(("old", "new", "message"), [
    ("preempt_first = true", "preempt_first = 1",
     "group[2].preempt_first: input should be a valid boolean, got 1"),
    ("min_exec_us = 250", "min_exec_us = -1",
     "group[2].min_exec_us: input should be greater than or equal to 0, got -1"),
    ("disallow_preempt_after_us = 12345", "disallow_preempt_after_us = 12.5",
     "group[0].disallow_preempt_after_us: input should be a valid integer, got 12.5"),
    ("disallow_preempt_after_us = 12345", "disallow_preempt_after_us = 18446744073709552",
     "group[0].disallow_preempt_after_us: input should be less than or equal to 18446744073709551, "
     "got 18446744073709552"),
    ("weight = 42", "weight = 0", "catch_all.weight: input should be greater than or equal to 1, got 0"),
    ("slice_us = 7000", 'slice_us = "7ms"', "catch_all.slice_us: input should be a valid integer, got '7ms'"),
])
def test_option_types_are_strict_with_lines(old: str, new: str, message: str) -> None:
    text = dumps(tuned()).replace(old, new, 1)
    [diag] = profile_diagnostics(text)
    assert (diag.rule, diag.message, diag.file) == ("schema", message, "p.toml")
    assert diag.line == line_of(text, new)


@pytest.mark.parametrize(("old", "new", "where", "suggestion"), [
    ("preempt_first = true", "preempt_frist = true", "group[2].preempt_frist", "preempt_first"),
    ("slice_us = 7000", "slice = 7000", "catch_all.slice", "slice_us"),
    ("preempt = true\n", "min_exec_us = 5\n", "catch_all.min_exec_us", None),
])
def test_unknown_option_keys_are_errors_with_the_allowed_keys(old: str, new: str, where: str,
                                                              suggestion: str | None) -> None:
    text = dumps(tuned())
    at = text.rindex(old) if where.startswith("catch_all") else text.index(old)
    text = text[:at] + new + text[at + len(old):]
    [diag] = profile_diagnostics(text)
    assert diag.message == f"unknown key {where!r}"
    assert diag.line == text[:at].count("\n") + 1
    if suggestion:
        assert f"did you mean {suggestion!r}?" in (diag.hint or "")
    if where.startswith("catch_all"):
        assert (diag.hint or "").endswith("allowed here: preempt, slice_us, weight")


@pytest.mark.parametrize(("index", "change", "key", "says", "hint"), [
    (2, {"protected": True}, "protected", "a latency group compiles to an Open layer, which has none",
     "remove it, or make the group exclusive"),
    (3, {"protected": False}, "protected", "a batch group compiles to an Open layer",
     "make the group exclusive"),
    (3, {"exclusive": True}, "exclusive", "only an exclusive group holds whole cores",
     "make the group exclusive"),
    (3, {"preempt": None}, "preempt_first", "does nothing without preempt", "set preempt = true too"),
    (2, {"preempt": False}, "preempt_first", "should_try_preempt_first", "set preempt = true too"),
    (2, {"disallow_preempt_after_us": 5}, "disallow_preempt_after_us", "read as nanoseconds",
     "make the group exclusive"),
    (0, {"preempt": True}, "disallow_preempt_after_us", "ignores disallow_preempt_after_us on a preempting",
     "set preempt = false"),
    (0, {"protected": None}, "disallow_preempt_after_us", "no other layer preempts them at all",
     "set protected = false too"),
])
def test_combinations_scx_layered_would_ignore_are_errors_with_lines(
        index: int, change: dict[str, Any], key: str, says: str, hint: str) -> None:
    p = tuned()
    groups = list(p.groups)
    groups[index] = groups[index].model_copy(update=change)
    text = dumps(p.model_copy(update={"groups": groups}))
    parsed, source = parse_profile(text, "p.toml")
    [diag] = validate(parsed, source, "p.toml")
    assert diag.rule == "layer_option" and diag.severity == "error"
    assert diag.message.startswith(f"group {groups[index].name!r}: ") and says in diag.message
    assert hint in (diag.hint or "")
    assert diag.path == ("group", index, key)
    line = text.splitlines()[diag.line - 1]
    assert line.startswith(f"{key} = "), line


def test_diff_shows_option_and_catch_all_changes(tmp_path: Path) -> None:
    before, after = tmp_path / "a.toml", tmp_path / "b.toml"
    before.write_text(dumps(tuned().model_copy(update={"catch_all": None})))
    p = tuned()
    io = p.groups[2].model_copy(update={"preempt_first": None, "min_exec_us": 10})
    after.write_text(dumps(p.model_copy(update={"groups": [*p.groups[:2], io, p.groups[3]]})))
    text = render_text(diff_profiles(before, after, shape=parse_shape("cores=2,threads-per-core=1")))
    # once as the group's override (unset: its preset's value), once as the compiled layer's option
    # (unset: scx_layered's own default)
    assert "  io: preempt_first: true -> false (preset)\n" in text, text
    assert "  io: preempt_first: true -> false (scx_layered's default)\n" in text, text
    assert text.count("  io: min_exec_us: 250 -> 10\n") == 2, text
    for line in ("  rest (catch-all): slice_us: 2000 (preset) -> 7000",
                 "  rest (catch-all): preempt: false (preset) -> true",
                 "  rest: slice_us: 2000 -> 7000", "  rest: weight: 100 -> 42",
                 "  rest: preempt: false (scx_layered's default) -> true"):
        assert line + "\n" in text, text


@pytest.mark.scx
def test_every_option_reaches_scx_layered_unchanged(scx_binary: Path) -> None:
    """--print-and-exit drops unknown keys silently and prints every field with its default, so each
    value above must come back as set (not merely be absent from the mismatches)."""
    config = compile_profile(tuned(), SHAPE).config
    back = {spec["name"]: spec["kind"] for spec in oracle.print_and_exit(config, scx_binary).to_json_data()}
    assert list(back) == list(EXPECTED)
    for name, (kind, options) in EXPECTED.items():
        assert list(back[name]) == [kind], name
        got = {key: back[name][kind].get(key, "<missing>") for key in options}
        assert got == options, name
    assert oracle.check(config, scx_binary) == []


@pytest.mark.scx
def test_never_as_disallow_preempt_after_us_reaches_scx_layered_unchanged(scx_binary: Path) -> None:
    """The search's `preemptible` operator (refine/search/options.py) writes MAX_US, the largest value
    main.rs can multiply by 1000 without overflow; it must come back as sent."""
    p = tuned()
    hot = p.groups[0].model_copy(update={"disallow_preempt_after_us": MAX_US})
    config = compile_profile(p.model_copy(update={"groups": [hot, *p.groups[1:]]}), SHAPE).config
    back = oracle.print_and_exit(config, scx_binary).to_json_data()
    assert back[0]["kind"]["Confined"]["disallow_preempt_after_us"] == MAX_US == U64_MAX // 1000
    assert oracle.check(config, scx_binary) == []


@pytest.mark.scx
def test_what_the_rules_reject_is_what_scx_layered_would_silently_change(scx_binary: Path) -> None:
    """Each rejected combination, written by hand: scx_layered accepts the config and changes it.
    (`protected` on an Open layer, which it drops, is refused already by the typed reader, as
    config.rs has no such field: only the raw runner can send it.)"""
    from threadwise.scx import print_and_exit

    open_layer = {"name": "open", "matches": [[{"CommPrefix": "a"}]],
                  "kind": {"Open": {"protected": True, "preempt": False, "disallow_preempt_after_us": 5}}}
    rest = {"name": "rest", "matches": [[]], "kind": {"Open": {}}}
    assert "protected" not in print_and_exit([open_layer, rest], scx_binary)[0]["kind"]["Open"]
    config = LayerConfig.from_json_data([
        {"name": "preempting", "matches": [[{"CommPrefix": "b"}]],
         "kind": {"Confined": {"util_range": [0.8, 0.9], "cpus_range": [1, 1], "preempt": True,
                               "disallow_preempt_after_us": 5}}}, rest])
    assert oracle.check(config, scx_binary) == [
        f"preempting.Confined.disallow_preempt_after_us: sent 5, got {U64_MAX}"]
