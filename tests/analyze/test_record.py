"""The analysis contract is declared once (`contract.AnalysisRecord`), and the rest follows it.

`Analysis` carries the record's fields, the stored `analysis_meta` table and `to_dict` are
derived from them, docs/interfaces.md lists the stored columns, and a stored analysis reads
back as the same record (short_lived once went unstored: store.py listed columns by hand).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import duckdb
import pytest

from tests.analyze.test_pool_chains import short_lived_capture
from threadwise.analyze import analyze_capture
from threadwise.analyze.contract import RECORD_FIELDS, AnalysisRecord
from threadwise.analyze.model import META_SCHEMA, Analysis
from threadwise.analyze.store import analysis_path, load_analysis, store_analysis

ROOT = Path(__file__).resolve().parents[2]
US = 1_000
T0 = 1_000_000_000
SECOND = 1_000_000_000
HEAD = ("analysis_schema_version", "capture_id", "analyzed_at")   # what and whose, not the record

def test_record_fields_are_every_field_but_groups() -> None:
    names = [f.name for f in dataclasses.fields(AnalysisRecord)]
    assert list(RECORD_FIELDS) == [n for n in names if n != "groups"]


def test_analysis_carries_each_record_field_with_its_type_and_default() -> None:
    """The one mirror left: `Analysis` holds frames, so it declares the record's fields itself."""
    record = {f.name: f for f in dataclasses.fields(AnalysisRecord)}
    analysis = {f.name: f for f in dataclasses.fields(Analysis)}
    record_types, analysis_types = typing.get_type_hints(AnalysisRecord), typing.get_type_hints(Analysis)
    for name in RECORD_FIELDS:
        assert name in analysis, f"AnalysisRecord.{name} is not a field of Analysis"
        assert analysis_types[name] == record_types[name], name
        assert analysis[name].default == record[name].default, name
        assert analysis[name].default_factory == record[name].default_factory, name


def test_the_stored_table_is_derived_from_the_record() -> None:
    assert tuple(META_SCHEMA) == HEAD + RECORD_FIELDS


def test_docs_list_the_stored_columns() -> None:
    text = (ROOT / "docs" / "interfaces.md").read_text()
    found = re.search(r"`analysis_meta` is one\s+row, derived from `AnalysisRecord`.*?its columns:(.*?)\(",
                      text, re.DOTALL)
    assert found, "docs/interfaces.md no longer lists analysis_meta's columns"
    assert re.findall(r"`(\w+)`", found.group(1)) == list(META_SCHEMA)


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    found = analyze_capture(short_lived_capture(tmp_path_factory.mktemp("record")))
    assert found.short_lived == ["tmp-job"]
    return found


def test_to_dict_writes_every_record_field(analysis: Analysis) -> None:
    out = analysis.to_dict(threads=False)
    record = analysis.record().to_dict()
    assert {name: out[name] for name in RECORD_FIELDS} == {name: record[name] for name in RECORD_FIELDS}


def test_a_stored_analysis_reads_back_as_the_same_record(analysis: Analysis) -> None:
    assert analysis.capture_path is not None
    written = store_analysis(analysis)
    assert written == analysis_path(analysis.capture_path)
    con = duckdb.connect(str(written), read_only=True)
    try:
        columns = [row[0] for row in con.execute("DESCRIBE analysis_meta").fetchall()]
        stored = con.execute("SELECT short_lived FROM analysis_meta").fetchall()
    finally:
        con.close()
    assert columns == list(META_SCHEMA)
    assert stored == [(["tmp-job"],)]
    back = load_analysis(analysis.capture_path)
    assert back is not None
    assert back.record() == analysis.record()


def test_an_analysis_stored_without_newer_columns_loads_their_defaults(analysis: Analysis,
                                                                       tmp_path: Path) -> None:
    """Additive columns: an analysis file written before short_lived (or the cgroup) loads."""
    assert analysis.capture_path is not None
    older = tmp_path / "older.analysis.duckdb"
    store_analysis(analysis, output=older)
    con = duckdb.connect(str(older))
    try:
        for column in ("short_lived", "names_separate_roles", "cgroup", "cgroup_cpu_quota_us"):
            con.execute(f"ALTER TABLE analysis_meta DROP COLUMN {column}")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    back = load_analysis(analysis.capture_path, analysis_file=older)
    assert back is not None
    assert back.short_lived == [] and back.names_separate_roles and back.cgroup is None
    assert back.record() == dataclasses.replace(analysis.record(), short_lived=[], cgroup=None,
                                                cgroup_cpu_quota_us=None, names_separate_roles=True)
