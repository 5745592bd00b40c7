"""search/screen_guide.py: the guided order places last what the screen measured clearly worse
than the start; on the committed memcached record (its screen and its step 0, as the search after
step 0 would see them) and on its edges."""

from __future__ import annotations

from pathlib import Path

from threadwise.refine.measure import store
from threadwise.refine.search.diagnose import diagnose, load_blockers, load_rows
from threadwise.refine.search.guide import Choice, order
from threadwise.refine.search.mutate import all_mutations
from threadwise.refine.search.screen_guide import DEMOTE_UNITS, ScreenAwareGuide, ScreenLosses
from threadwise.shape import parse_shape
from threadwise.synthesize.reader import load_profile

ROOT = Path(__file__).resolve().parents[2]
MEMCACHED = ROOT / "artifacts" / "memcached"
LAB_SHAPE = parse_shape("cores=2,threads-per-core=1,reserve=1")   # train's lab shape


def memcached_after_step0() -> tuple[list[Choice], list[Choice], ScreenLosses]:
    """The guide's order for the record's best (the screen's top, kept by step 0) from step 0's
    failures, plain and told the screen's losses."""
    con = store.open_ladder(MEMCACHED / "ladder.duckdb", read_only=True)
    try:
        rows = [r for r in load_rows(con, 2) if r.reference == "baseline" and r.candidate == "start"]
        blocking = load_blockers(con, 2, "start")
        losses = ScreenLosses.of_ladder(con)
    finally:
        con.close()
    assert losses is not None
    best = load_profile(MEMCACHED / "memcached.not-a-profile.toml")[0]
    found = diagnose(rows, primary=("ops_per_s", "higher"), secondary=[("get_p99_us", "lower")])
    assert found, "the record's step 0 lost somewhere: the guide aims at it"
    pool = all_mutations(best, LAB_SHAPE)
    plain = order(best, pool, found, blocking)
    return plain, ScreenAwareGuide(order, losses)(best, pool, found, blocking), losses


def names(choices: list[Choice]) -> list[str]:
    return [c.candidate.name for c in choices]


def test_the_change_the_screen_measured_as_a_collapse_goes_last_and_says_why():
    plain, aware, losses = memcached_after_step0()
    collapse = "mc-lrumaint:treatment=exclusive"   # 0.000333x at bg=4 in the screen of 2026-12-05
    assert losses.by_candidate[collapse] > losses.start + DEMOTE_UNITS
    assert collapse in names(plain)[:-1], names(plain)           # the guide alone: not last
    assert names(aware)[-1] == collapse
    last = aware[-1].because
    assert last.startswith(next(c.because for c in plain if c.candidate.name == collapse))
    assert f"loss {losses.by_candidate[collapse]:.2f} A/A units, the start's {losses.start:.2f}" in last


def test_nothing_is_dropped_and_the_rest_keep_the_guides_order_and_words():
    plain, aware, losses = memcached_after_step0()
    assert sorted(names(aware)) == sorted(names(plain))
    demoted = {n for n in names(plain) if losses.demotes(n) is not None}
    in_turn = [n for n in names(plain) if n not in demoted] + [n for n in names(plain) if n in demoted]
    assert names(aware) == in_turn
    kept = {c.candidate.name: c.because for c in plain if c.candidate.name not in demoted}
    assert all(kept[c.candidate.name] == c.because for c in aware if c.candidate.name in kept)


def test_within_two_units_of_the_start_a_screen_figure_moves_nothing():
    losses = ScreenLosses(15.0, {"close": 15.0 + DEMOTE_UNITS, "far": 15.0 + DEMOTE_UNITS + 0.01,
                                 "better": 0.5})
    assert losses.demotes("close") is None and losses.demotes("better") is None
    assert losses.demotes("far") is not None
    assert losses.demotes("never screened") is None


def test_a_training_that_screened_nothing_has_no_screen_losses():
    con = store.open_ladder(ROOT / "artifacts" / "postgres" / "ladder.duckdb", read_only=True)
    try:
        assert ScreenLosses.of_ladder(con) is None   # trained with --screen 0
    finally:
        con.close()
