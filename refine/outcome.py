"""Where a training's profile goes: `profiles/` only when it beat the default scheduler.

Problem: train wrote `profiles/NAME.toml` whatever its record said, so a profile
that lost to the kernel's default scheduler (poolservice: 0.47x requests/s at 4
spinners) sat beside the winners, and only REPORT.md said not to apply it.

Approach: the judge's verdict on the final profile (report.final_comparison) decides.
A win is written to the profiles folder as before. Otherwise the record says
"keep the default scheduler for this service" (KEEP-DEFAULT.md, with the measured
reasons per class of candidate tried) and the best candidate stays in the record
as `NAME.not-a-profile.toml` for review, its header opening with a sentence and
the keep-default mark that `apply` refuses without --force; a profile of the same
name left in the profiles folder by an earlier training is removed (its record
has just been replaced). train and rejudge both decide through here.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from threadwise.refine import report
from threadwise.synthesize.api import KEEP_DEFAULT_MARK

KEEP_DEFAULT = "keep the default scheduler for this service"


@dataclass(frozen=True)
class Outcome:
    wins: bool
    path: Path  # the profile written, or the candidate kept in the record
    reasons: list[str]  # why not (empty on a win)


def candidate_path(record: Path, name: str) -> Path:
    """The name a losing candidate is kept under: it cannot be mistaken for a profile to apply."""
    return record / f"{name}.not-a-profile.toml"


def keep_default_header() -> str:
    return (f"# NOT A PROFILE TO APPLY: {KEEP_DEFAULT} (no measured profile beat it).\n"
            f"{KEEP_DEFAULT_MARK}\n")


def decide(con: duckdb.DuckDBPyConnection, profile_path: Path, record: Path, name: str) -> Outcome:
    """Where this record's profile belongs, from the ladder file alone."""
    final = report.final_comparison(con)
    if final is not None and final.wins:
        return Outcome(True, profile_path, [])
    return Outcome(False, candidate_path(record, name), report.keep_default_reasons(con, final))


def write(outcome: Outcome, header: str, body: str, profile_path: Path) -> None:
    """The profile, or the candidate and KEEP-DEFAULT.md; no stale profile left behind on a loss."""
    if outcome.wins:
        text = header + body
    else:
        text = keep_default_header() + header + body
        (outcome.path.parent / "KEEP-DEFAULT.md").write_text("\n".join([
            f"# {KEEP_DEFAULT[0].upper()}{KEEP_DEFAULT[1:]}", "",
            f"No profile this training measured beat the kernel's default scheduler (REPORT.md). "
            f"The best candidate is kept as `{outcome.path.name}` for review; `threadwise apply` "
            "refuses it unless --force.", "", "What was measured:", "",
            *[f"- {line}" for line in outcome.reasons], ""]))
        if profile_path.is_file():
            profile_path.unlink()
    outcome.path.parent.mkdir(parents=True, exist_ok=True)
    tmp = outcome.path.with_name(f".{outcome.path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(outcome.path)


def message(outcome: Outcome) -> str:
    """The one-paragraph answer a user reads when training ends without a win."""
    return f"{KEEP_DEFAULT}: no measured profile beat it. " + "; ".join(outcome.reasons)


def profile_header(command: str, record: Path, verdict: str, *, when: str | None = None) -> str:
    """The comment block atop a trained profile: how, when, where the evidence is, the verdict."""
    plain = verdict.replace("**", "")
    return "\n".join([
        f"# Trained by threadwise on {when or f'{datetime.now(UTC):%Y-%m-%d %H:%M}'} UTC with:",
        f"#   {command}",
        f"# Evidence: {record}/REPORT.md (data: {record}/ladder.duckdb).",
        *[f"# {line}" for line in textwrap.wrap(plain, 96)],
        "", ""])
