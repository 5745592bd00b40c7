"""When the host gives up on a lab guest: when it stops making progress, not at a fixed hour.

Problem: a ladder's guest ran under one fixed deadline, an estimate of its windows, warm-ups
and attaches. Under TCG the guest's speed follows the host's: on a busy or slower host (CI
measured it, 2026-11-27) a JVM ladder that was progressing steadily, a cell every 20 s, was
stopped at 684 s with 16 of 24 cells back, and the whole training failed. A fixed deadline
cannot tell a slow guest from a stuck one.

Approach: the guest's agent bounds every step it takes itself (an attach, a service's start,
a load generator, a trace, a stop: each has its own timeout in plan.sh) and says a line when
each step begins and ends. So silence longer than the longest step's own bound, plus a margin,
means the guest is stuck: the watchdog stops it then (`stall_s`, counted from the last agent
line, or from the boot for the first). A guest that keeps talking runs on, up to `cap_s` in
all: a host so slow that a run takes several times its estimate measures nothing worth having,
and a test run must end. Console clock lines (TWCLOCK) are not progress: a live kernel with a
stuck agent prints them too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Watchdog:
    """Progress-based deadline for one guest run (monotonic seconds)."""

    started: float
    stall_s: float  # the longest silence allowed between agent lines
    cap_s: float  # the whole run, however steadily it progresses
    last_heard: float = 0.0

    def __post_init__(self) -> None:
        self.last_heard = self.started

    def heard(self, now: float) -> None:
        """The agent said something: the guest is making progress."""
        self.last_heard = now

    def remaining(self, now: float) -> float:
        """Seconds until the watchdog fires (<= 0: it has)."""
        return min(self.last_heard + self.stall_s, self.started + self.cap_s) - now

    def why(self, now: float) -> str:
        """The sentence for a guest the watchdog stopped."""
        if now - self.started >= self.cap_s:
            return f"did not finish within its cap of {self.cap_s:.0f} s; stopped qemu"
        return (f"said nothing for {now - self.last_heard:.0f} s (longer than any step of a cell may "
                f"take: {self.stall_s:.0f} s), {now - self.started:.0f} s into the run; stopped qemu")


def fixed(started: float, timeout_s: float) -> Watchdog:
    """A plain deadline: `timeout_s` in all, silence allowed throughout."""
    return Watchdog(started, stall_s=timeout_s, cap_s=timeout_s)
