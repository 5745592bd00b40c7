"""REPORT.md's sections on the screen, the null arm and the lab minutes, from the ladder file alone.

- The screen: every candidate measured beside the start in one run, its ratios against the
  default scheduler recomputed from the run's samples with the screen's own scoring
  (search/screen.py), its rank as stored, and the refused ones with their reason. The screen
  chooses what step 0 confirms; the section says that it decides nothing.
- What scx_layered itself costs: step 0's null arm (every thread in the catch-all) against the
  default scheduler and the profile against the null arm, as the judge stored them; each loss of
  the profile is named the scheduler's (the null arm loses as much there) or the profile's. A
  profile that loses only where the null arm loses as much, and gains under contention, is a
  trade-off, said plainly with both numbers; it is still not a profile by the rule.
- Where the minutes went: per run, its wall time and what its windows and attaches took.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from threadwise.refine.measure import stats, store
from threadwise.refine.measure.plan import BASELINE
from threadwise.refine.search import screen
from threadwise.refine.search.loop import START
from threadwise.sqlfiles import statement


def _sql(name: str) -> str:
    return statement("threadwise.refine", "sql/screen.sql", name)


def _has_screen(con: duckdb.DuckDBPyConnection) -> bool:
    return ("screen",) in con.execute(store.sql("tables")).fetchall()


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def confirmed_candidate(con: duckdb.DuckDBPyConnection) -> str | None:
    """The screen's candidate step 0 confirmed (`start`: the start itself; None: no screen)."""
    if not _has_screen(con):
        return None
    found = con.execute(_sql("chosen")).fetchone()
    return found[0] if found else None


def screen_rows(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """The stored screen's candidates (screen.sql `screen_rows`; none when nothing was screened)."""
    return con.execute(_sql("screen_rows")).fetchall() if _has_screen(con) else []


def rank_rule(con: duckdb.DuckDBPyConnection) -> str:
    """The rule the stored screen was ranked by (search/screen.py RANK_RULES)."""
    rules = [row[0] for row in con.execute(_sql("rank_rule")).fetchall()] if _has_screen(con) else []
    if len(rules) > 1:
        raise ValueError(f"one screen ranked by {len(rules)} rules: {rules}")
    return rules[0] if rules else screen.RANK_RULE


# How each rule ranks, in REPORT.md's words
_RANKED_BY = {
    screen.LOSS_THEN_GAIN: "then by its best primary gain",
    screen.RANK_RULE: (f"then those with a clear primary gain (at least {screen.CLEAR_GAIN_UNITS:g} units) "
                         "first, the safest of them (highest worst unit) first, then by that gain"),
}


def screen_section(con: duckdb.DuckDBPyConnection) -> list[str]:
    """## The screen (nothing when the training screened nothing)."""
    rows = screen_rows(con)
    if not rows:
        return []
    run_id = next(row[0] for row in rows if row[0] is not None)
    info = store.run_info(con, run_id)
    metrics = [info.primary, *info.secondary]
    measured = store.measured(con, run_id)
    head = " | ".join(f"{metric} bg={level}" for metric, _ in metrics for level in info.levels)
    lines = ["## The screen", "",
             f"Ladder run {run_id} measured the start, the null arm and {len(rows) - 1} candidates of its "
             f"neighbourhood side by side (levels {info.levels}, {info.repeats} repeat(s)); each is ranked "
             "against the default scheduler by its worst metric and level in units of that level's A/A "
             f"spread (loss: units beyond one on the bad side; worst: its weakest unit, + better), "
             f"{_RANKED_BY[rank_rule(con)]} "
             "(docs/search.md). The screen only chooses what step 0 confirms: no verdict or decision "
             "reads these figures.", "",
             f"| rank | candidate | arm | {head} | loss | gain | worst |", "|---|---|---|" + "---|" * (
                 len(metrics) * len(info.levels)) + "---|---|---|"]
    for _run, arm, candidate, _desc, _reserve, rejected, loss, gain, rank, chosen in rows:
        name = f"**`{candidate}`** (confirmed)" if chosen else f"`{candidate}`"
        if arm is None:
            blanks = " | ".join("-" for _ in metrics for _ in info.levels)
            lines.append(f"| - | {name} | - | {blanks} | refused: {rejected} | - | - |")
            continue
        scored = screen.score(measured, arm, metrics, info.levels)  # type: ignore[arg-type]
        ratios = " | ".join(_ratio(scored.ratios.get((metric, level))) for metric, _ in metrics
                            for level in info.levels)
        lines.append(f"| {rank} | {name} | {arm} | {ratios} | {loss:.2f} | {gain:.2f} | "
                     f"{scored.worst:+.2f} |")
    null = screen.score(measured, screen.NULL_ARM, metrics, info.levels)  # type: ignore[arg-type]
    if null.ratios:
        ratios = " | ".join(_ratio(null.ratios.get((metric, level))) for metric, _ in metrics
                            for level in info.levels)
        lines.append(f"| - | null arm (every thread in the catch-all) | {screen.NULL_ARM} | {ratios} | "
                     f"{null.loss:.2f} | {null.gain(info.primary[0]):.2f} | {null.worst:+.2f} |")
    return [*lines, ""]


def _comparisons(con: duckdb.DuckDBPyConnection, run_id: int, reference: str, candidate: str,
                 metric: str) -> dict[int, tuple]:
    return {row[0]: row for row in con.execute(store.sql("comparisons"),
                                               [run_id, reference, candidate, metric]).fetchall()}


def _cell(row: tuple | None) -> str:
    if row is None:
        return "-"
    ratio, low, high, verdict = row[3], row[4], row[5], row[6]
    interval = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
    return f"{ratio:.3g}{interval} {verdict.replace('_', ' ')}" if ratio is not None else "-"


def null_section(con: duckdb.DuckDBPyConnection) -> list[str]:
    """## What scx_layered itself costs (nothing when step 0 measured no null arm)."""
    found = con.execute(_sql("step0_run")).fetchone()
    run_id = found[0] if found else None
    if run_id is None:
        return []
    arms = {row[0] for row in con.execute(store.sql("run_arms"), [run_id]).fetchall()}
    if screen.NULL_ARM not in arms or START not in arms:
        return []
    info = store.run_info(con, run_id)
    metrics = [info.primary[0], *(m for m, _ in info.secondary)]
    null_vs = {m: _comparisons(con, run_id, BASELINE, screen.NULL_ARM, m) for m in metrics}
    profile_vs = {m: _comparisons(con, run_id, BASELINE, START, m) for m in metrics}
    over_null = {m: _comparisons(con, run_id, screen.NULL_ARM, START, m) for m in metrics}
    null_repeats = con.execute(_sql("arm_repeats"), [run_id, screen.NULL_ARM]).fetchone()[0]
    lines = ["## What scx_layered itself costs", "",
             f"Step 0 (ladder run {run_id}) measured the null arm beside the profile, at {null_repeats} of "
             f"its {info.repeats} repeats: the same scx_layered "
             "and flags with every thread in the catch-all. Against the default scheduler it is what any "
             "scx_layered config costs this service here; the profile against the null arm is what its "
             "layers add (ratios with 95% intervals and verdicts, as the judge stored them).", "",
             "| bg | " + " | ".join(f"{m}: null vs default | {m}: profile vs default | {m}: profile vs null"
                                   for m in metrics) + " |",
             "|---|" + "---|---|---|" * len(metrics)]
    for level in info.levels:
        cells = [f"{_cell(null_vs[m].get(level))} | {_cell(profile_vs[m].get(level))} | "
                 f"{_cell(over_null[m].get(level))}" for m in metrics]
        lines.append(f"| {level} | " + " | ".join(cells) + " |")
    lines += ["", *_whose_losses(metrics, info.levels, null_vs, profile_vs, over_null,
                                      primary=info.primary[0]), ""]
    return lines


def _whose_losses(metrics: Sequence[str], levels: Sequence[int], null_vs: dict, profile_vs: dict,
                  over_null: dict, *, primary: str) -> list[str]:
    """Each loss of the profile against the default, named the scheduler's or the profile's; the
    trade-off sentence where every loss is the scheduler's and the primary gains somewhere."""
    def verdict(table: dict, metric: str, level: int) -> str | None:
        row = table[metric].get(level)
        return row[6] if row else None

    def ratio(table: dict, metric: str, level: int) -> str:
        row = table[metric].get(level)
        return f"{row[3]:.3g}x" if row and row[3] is not None else "-"

    scheduler, profile = [], []
    for metric in metrics:
        for level in levels:
            if verdict(profile_vs, metric, level) != stats.Verdict.WORSE:
                continue
            where = (f"{metric} at bg={level} ({ratio(profile_vs, metric, level)}; null arm "
                     f"{ratio(null_vs, metric, level)})")
            own = (verdict(null_vs, metric, level) == stats.Verdict.WORSE
                   and verdict(over_null, metric, level) != stats.Verdict.WORSE)
            (scheduler if own else profile).append(where)
    gains = [f"bg={level} {ratio(profile_vs, primary, level)}" for level in levels
             if verdict(profile_vs, primary, level) == stats.Verdict.BETTER]
    if not scheduler and not profile:
        return ["The profile loses to the default scheduler at no level."]
    lines = []
    if scheduler:
        lines.append("Losses scx_layered itself pays here (the null arm loses as much, and the profile "
                     "is not worse than it): " + "; ".join(scheduler) + ".")
    if profile:
        lines.append("Losses of the profile's own layers (the null arm does not lose there, or the "
                     "profile is worse than it): " + "; ".join(profile) + ".")
    if scheduler and not profile and gains:
        lines.append(f"**A trade-off:** under contention the profile gains {primary} "
                     f"({', '.join(gains)}); its only losses are the ones any scx_layered config pays "
                     "here. By the rule (better somewhere, worse nowhere) it is not a profile; on a host "
                     "where scx_layered runs anyway, it is the better config.")
    return lines


def _minutes(con: duckdb.DuckDBPyConnection) -> tuple[list[tuple], dict[str, float]]:
    """The runs with a wall time, and the lab seconds by kind (screen, confirm, search)."""
    rows = [row for row in con.execute(_sql("run_minutes")).fetchall() if row[2] is not None]
    total = {"screen": 0.0, "confirm": 0.0, "search": 0.0}
    for _run, purpose, wall_s, *_ in rows:
        kind = "screen" if purpose == "screen" else "confirm" if purpose == "refine-step-0" else "search"
        total[kind] += wall_s
    return rows, total


def minutes_line(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The head's one line on lab time (nothing for runs measured before schema 6)."""
    rows, total = _minutes(con)
    if not rows:
        return []
    parts = ", ".join(f"{kind} {seconds / 60:.1f}" for kind, seconds in total.items() if seconds)
    return ["", f"Lab time: {sum(total.values()) / 60:.1f} minutes ({parts}; \"Where the lab minutes went\" "
            "below)."]


def minutes_section(con: duckdb.DuckDBPyConnection) -> list[str]:
    """## Where the lab minutes went (runs measured before schema 6 have no wall time)."""
    rows, total = _minutes(con)
    if not rows:
        return []
    lines = ["## Where the lab minutes went", "",
             "| run | purpose | cells | wall (min) | windows and warm-ups (min) | attaches (min) | "
             "boot, service and the rest (min) |", "|---|---|---|---|---|---|---|"]
    for run_id, purpose, wall_s, cells, window_s, attach_s in rows:
        rest = max(wall_s - window_s - attach_s, 0.0)
        lines.append(f"| {run_id} | {purpose} | {cells} | {wall_s / 60:.1f} | {window_s / 60:.1f} | "
                     f"{attach_s / 60:.1f} | {rest / 60:.1f} |")
    lines += ["", "In all: " + ", ".join(f"{kind} {seconds / 60:.1f} min" for kind, seconds in total.items()
                                         if seconds) + " of lab time (attaches: each profile arm's last "
              "attach time x the repeats it ran; the rest: boot, the service's start, each attach's wait for "
              "its threads and scx_layered's first step, each detach, and the unmeasured trace cells).", ""]
    return lines
