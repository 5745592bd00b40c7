"""The committed training records: every stored verdict recomputes, and the docs show the same tables.

REPORT.md, the README's table, docs/trained-profiles.md's tables and the refine loop's decisions
come from one judge (refine/measure/judge.py); these tests recompute each from the committed ladder
files' `sample` + `cell` rows (and the floors of their A/A runs), so a table edited by hand or left
from an older judge fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.refine.recompute import recompute_ladder_file
from threadwise.refine import report
from threadwise.refine.measure import store

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted(p.parent for p in (ROOT / "artifacts").glob("*/ladder.duckdb"))


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_every_stored_verdict_recomputes_from_the_ladder_file(record: Path) -> None:
    assert recompute_ladder_file(record / "ladder.duckdb") > 0


def _documented_table(name: str) -> list[str]:
    """The table under the record's paragraph (`**NAME** (...`) in docs/trained-profiles.md."""
    text = (ROOT / "docs" / "trained-profiles.md").read_text()
    section = text[text.index(f"**{name}** ("):]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| bg spinners"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


@pytest.mark.parametrize("record", RECORDS, ids=[r.name for r in RECORDS])
def test_the_docs_and_report_show_the_judges_table(record: Path) -> None:
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        best = report.best_measurement(con)
        assert best is not None
        table = report.level_table(con, *best)
        verdict = report.verdict_sentence(con)
    finally:
        con.close()
    assert _documented_table(record.name) == table
    report_md = (record / "REPORT.md").read_text()
    assert "\n".join(table) in report_md
    assert verdict in report_md
    # the record names its profile: profiles/NAME.toml, or its rejected candidate (outcome.py)
    con = store.open_ladder(record / "ladder.duckdb", read_only=True)
    try:
        (named,) = con.execute(report.sql("training")).fetchone()[3:4]
    finally:
        con.close()
    profile_header = (ROOT / named).read_text().split("# threadwise profile")[0]
    plain = re.sub(r"\s+", " ", verdict.replace("**", ""))
    assert plain in re.sub(r"\s*\n#\s*", " ", profile_header)


def test_the_readme_summary_table_is_generated_from_the_records() -> None:
    """README's "Trained profiles" table is refine/records_table.py's output on the committed
    records, row for row (regenerate: python -m threadwise.refine.records_table --write README.md)."""
    from threadwise.refine import records_table

    text = (ROOT / "README.md").read_text()
    body = records_table.table(ROOT / "artifacts")
    assert records_table.replaced(text, body) == text, "README's records table differs from the records"
    rows = body.splitlines()[2:]
    assert len(rows) == len(RECORDS)
    # an answer of "profile" only where the record's final profile beat the default scheduler
    for record in RECORDS:
        con = store.open_ladder(record / "ladder.duckdb", read_only=True)
        try:
            wins = report.final_comparison(con).wins
        finally:
            con.close()
        row = next(r for r in rows if r.startswith(f"| {record.name} |"))
        assert ("**profile**" in row) == wins, row


def test_a_missing_marker_is_an_error_that_says_what_to_add() -> None:
    from threadwise.refine import records_table

    with pytest.raises(SystemExit, match="no records table markers"):
        records_table.replaced("# README without the table\n", "| x |")


# The trainings under benchmarks/data that the docs cite as evidence: docs/judge.md "Sample size and
# power" (rolesim-w10: train at 8 repeats, 10-s windows) and docs/search.md "Time"
# (rolesim-retrain-2026-12-07: train's defaults at levels 0,1,2,4, 35.5 lab minutes, keep the default).
CITED_TRAININGS = ("rolesim-w10", "rolesim-retrain-2026-12-07")


@pytest.mark.parametrize("training", CITED_TRAININGS)
def test_a_training_the_docs_cite_recomputes(training: str) -> None:
    """Every verdict the cited training stored must be what the judge gives again."""
    assert recompute_ladder_file(ROOT / "benchmarks" / "data" / training / "ladder.duckdb") > 0
