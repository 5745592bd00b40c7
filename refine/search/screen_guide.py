"""The guided order, told what the screen measured.

Problem: the guide (guide.py) orders the best's neighbours by what can fix the
last ladder's failures; it does not read the screen, which measured most of
the same changes on the start one ladder earlier. On memcached (2026-12-05)
the guide's first pick after step 0, `mc-lrumaint:treatment=exclusive`, was
the change the screen had measured at 0.000333x at bg=4 (loss 163 A/A units
against the start's 21): a whole step spent on a known collapse.

Approach: a candidate whose change the screen measured clearly worse than the
start (its loss more than DEMOTE_UNITS A/A units beyond the start's) goes
after every other candidate; the demoted keep the guide's order among
themselves, and their `chosen_because` says why they came last. Nothing is
dropped: a budget that reaches them still measures them. The screen measured
the change applied to the start, not to the best that step 0 kept (they
differ by the screen's top), so its figures only order, as they only choose
in the screen; no verdict or decision reads them. Two units: at the screen's
one repeat, a difference within twice the A/A spread is noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import duckdb

from threadwise.refine.search.candidate import Candidate
from threadwise.refine.search.diagnose import Blocker, Failure
from threadwise.refine.search.guide import Choice
from threadwise.refine.search.loop import START, Guide
from threadwise.refine.search.screen import ScreenResult
from threadwise.refine.search.screen_report import screen_rows
from threadwise.synthesize.api import Profile

DEMOTE_UNITS = 2.0  # A/A units beyond the start's loss that demote a screened change


@dataclass(frozen=True)
class ScreenLosses:
    """What the screen measured: the start's loss and each measured candidate's, by name."""

    start: float
    by_candidate: Mapping[str, float]

    @classmethod
    def of_result(cls, result: ScreenResult) -> ScreenLosses:
        """From the screen train just ran (the start is always measured in it)."""
        losses = {e.candidate.name: e.score.loss for e in result.entries if e.score is not None}
        return cls(losses.pop(START), losses)

    @classmethod
    def of_ladder(cls, con: duckdb.DuckDBPyConnection) -> ScreenLosses | None:
        """From a ladder file's stored screen (None: the training screened nothing)."""
        losses = {candidate: loss for _run, _arm, candidate, *_, loss, _gain, _rank, _chosen
                  in screen_rows(con) if loss is not None}
        start = losses.pop(START, None)
        return cls(start, losses) if start is not None else None

    def demotes(self, name: str) -> float | None:
        """The candidate's screen loss when it demotes it, else None."""
        loss = self.by_candidate.get(name)
        return loss if loss is not None and loss > self.start + DEMOTE_UNITS else None


class ScreenAwareGuide:
    """A guide (loop.Guide) that places the changes the screen measured clearly worse last."""

    def __init__(self, guide: Guide, losses: ScreenLosses) -> None:
        self.guide = guide
        self.losses = losses

    def __call__(self, parent: Profile, pool: Sequence[Candidate], failures: Sequence[Failure],
                 blockers: Sequence[Blocker] = ()) -> list[Choice]:
        choices = self.guide(parent, pool, failures, blockers)
        kept, demoted = [], []
        for choice in choices:
            loss = self.losses.demotes(choice.candidate.name)
            if loss is None:
                kept.append(choice)
            else:
                demoted.append(Choice(choice.candidate, (
                    f"{choice.because}; placed last: the screen measured this change of the start at "
                    f"loss {loss:.2f} A/A units, the start's {self.losses.start:.2f}")))
        return [*kept, *demoted]
