"""Has live traffic drifted below the audit? An anytime-valid test over windows, so noise pages nobody.

Each window with traffic gives one observation per quantity: log(live / audited) of its
acceptance, and of its decode rate where that is compared. Each feeds the test `bench --budget`
decides speed-ups with (decision/bar.py: two one-sided betting tests of the centre of log
ratios against a bar, valid at every window at once); the quantity has drifted once its `not
faster` test rejects "the centre is at or above 1 - tolerance" (the policy's `[watch]`).
However many windows are looked at, a server that still meets the bar is called drifted with
probability at most that test's alpha, and once rejected the bar stays rejected until the
server restarts (a new test).
"""

from __future__ import annotations

import math

from specreg.decision.bar import BarTest
from specreg.decision.sequential import CLIP
from specreg.schemas.audit import WatchPolicy


def _log_ratio(live: float, audited: float) -> float:
    """log(live / audited), a zero live value at the sequence's widest clip (it counts as 1/8)."""
    return math.log(max(live / audited, 1 / CLIP))


class DriftTest:
    """The two sequences (acceptance, decode rate) of one server since its last restart."""

    def __init__(self, policy: WatchPolicy) -> None:
        self.policy = policy
        self.acceptance = BarTest()
        self.decode = BarTest()
        self.windows = 0  # windows fed (with traffic)
        self.decided_after: int | None = None
        self.why: str | None = None

    def add(self, acceptance: tuple[float, float] | None, decode: tuple[float, float] | None) -> None:
        """One window's (live, audited) acceptance and decode rate; None where it has none
        (nothing drafted, not compared, or no audited value)."""
        fed = False
        if acceptance is not None and acceptance[1] > 0:
            self.acceptance.add_logs([_log_ratio(*acceptance)])
            fed = True
        if decode is not None and decode[1] > 0:
            self.decode.add_logs([_log_ratio(*decode)])
            fed = True
        if not fed:
            return
        self.windows += 1
        if self.decided_after is None:
            self.why = self._below()
            if self.why is not None:
                self.decided_after = self.windows

    def _below(self) -> str | None:
        parts = []
        for name, seq, tol in (
            ("acceptance", self.acceptance, self.policy.acceptance_tolerance),
            ("decode rate", self.decode, self.policy.decode_tolerance),
        ):
            if seq.n and seq.verdict(1.0 - tol) == "not faster":
                d = seq.decision(1.0 - tol)
                parts.append(f"{name} at most {d.high:.2f}x the audited (bar {1.0 - tol:.2f}x)")
        return "; ".join(parts) or None

    @property
    def drifted(self) -> bool:
        return self.decided_after is not None

    def intervals(self) -> tuple[tuple[float, float] | None, tuple[float, float] | None]:
        """The anytime-valid intervals of live / audited: acceptance, decode rate."""
        return self.acceptance.interval(), self.decode.interval()
