"""Planning a `--budget`: how many more rounds each condition needs, and whether the budget has them.

A run measured until decided used to add rounds while the budget lasted and end with whatever
was decided: on SmolLM2 (`--tune --budget 8m`) every condition was still `undecided` at 13 min
46 s, and nothing said in advance that 8 minutes could not decide it (issue 32). Here, after
every round, each undecided condition's kept pairs are projected forward
(`sequential.rounds_to_decide`: future rounds drawn from the log ratios measured so far, fed to
the same confidence sequence the decision uses), priced at its own slot and its baseline's, and
told to the user ("k9: about 5 more rounds, 6 min; budget left 5 min"). Conditions whose
projection fits what is left are measured; those that cannot be decided within it are not
measured for nothing, and the run says what budget would decide them. A projection is a plan,
never a decision: the decision is only ever made on what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specreg.decision import sequential

HORIZON = 40  # rounds looked ahead: past this, "not within any budget worth asking for"


@dataclass(frozen=True)
class Need:
    """One condition's projection: more rounds (None: not within `HORIZON`), and their seconds."""

    name: str
    rounds: int | None
    seconds: float | None

    def line(self, left_s: float) -> str:
        if self.rounds is None:
            return (
                f"{self.name}: not decidable within {HORIZON} more rounds (its measured speed-up is "
                f"within its spread of the bar); budget left {minutes(left_s)}"
            )
        if self.rounds == 0:
            return f"{self.name}: decided"
        rounds = f"{self.rounds} more round" + ("s" if self.rounds != 1 else "")
        return f"{self.name}: about {rounds}, {minutes(self.seconds or 0.0)}; budget left {minutes(left_s)}"

    def fits(self, left_s: float) -> bool:
        return self.rounds is not None and (self.seconds or 0.0) <= left_s


def minutes(seconds: float) -> str:
    """`6 min`, `50 s`: what a person plans with."""
    if seconds < 90:
        return f"{max(0.0, seconds):.0f} s"
    return f"{seconds / 60:.0f} min"


def need(
    name: str,
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    min_speedup: float,
    *,
    per_round: int,
    round_s: float,
    at_least: int = 0,
    pool: Sequence[float] = (),
    seed: int = 0,
) -> Need:
    """The projection of one condition: `round_s` is what one more round of it costs (its slot
    and its baseline's); `at_least` the rounds the policy still asks for whatever the decision;
    `pool` the log ratios of its neighbours (other draft lengths of the same tuning, re-centred
    on this one's), which sharpen the spread the projection draws from."""
    more = sequential.rounds_to_decide(
        base_ms, cond_ms, min_speedup, per_round=per_round, max_rounds=HORIZON, seed=seed, pool=pool
    )
    if more is None:
        return Need(name, None, None)
    more = max(more, at_least)
    return Need(name, more, more * round_s)


def round_seconds(slot_s: dict[int, list[float]], idxs: Sequence[int]) -> float:
    """A round of these conditions (one slot each), at each one's mean slot so far; a condition
    not measured yet at the mean of every slot."""
    every = [x for xs in slot_s.values() for x in xs]
    mean_all = sum(every) / len(every) if every else 0.0
    return sum((sum(slot_s[i]) / len(slot_s[i])) if slot_s.get(i) else mean_all for i in idxs)


def budget_for(spent_s: float, seconds: float) -> str:
    """The `--budget` that would have decided it: what was spent plus what is needed, rounded up
    to the minute."""
    return f"{math.ceil((spent_s + seconds) / 60):.0f}m"
