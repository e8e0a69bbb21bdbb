"""Measuring until decided: an anytime-valid decision on a condition's speed-up.

`bench admitted --budget 8m` adds rounds until every condition is decided against the policy's
`min_speedup`, and looks at the data after every round. A fixed-sample interval (the bootstrap
of `statistics.py`) checked after each round would be wrong more often the more rounds it is
checked after: the chance that it *ever* clears the bar by luck grows with every look. So the
decision here is made with a **confidence sequence**: intervals that hold at every round at
once, P(the true value ever leaves them) <= alpha, however often one looks and stops.

Which one, and why:
- The observations are the paired per-request log speed-ups log(baseline ms / condition ms) of
  the units (prompt, repetition) both conditions ran; pairing inside a round cancels slow drift
  (a warming machine, a neighbour) that would otherwise land on whichever ran later.
- Each is clipped to +-log(`CLIP`) (a request 8x faster or slower than its pair is an outlier
  whose exact size says nothing about the typical request), then mapped to [0, 1]: bounded
  observations are what the betting method needs, with no assumption about their distribution
  (timings are skewed and heavy-tailed: a normal-theory sequential test would be off).
- The sequence is Waudby-Smith & Ramdas' hedged-capital betting CS with predictable plug-in
  bets ("Estimating means of bounded random variables by betting", JRSS-B 2023, PrPl-EB bets
  and their hedged process K = (K+ + K-)/2, itself a martingale): for every candidate mean m a
  gambler bets on the next observation being above (or below) m with a stake fixed before it
  is seen; Ville's inequality bounds the chance that the wealth against the true mean ever
  reaches 1/alpha. Among the confidence sequences for bounded means it is the tightest in
  their comparisons, and it needs no tuning beyond alpha.
- The decision against the threshold t = log(min_speedup): `faster` when the whole interval
  lies above t, `not faster` when it lies below, `undecided` otherwise. Under "not faster"
  (true mean <= t) deciding `faster` needs the interval to miss the truth: probability <= alpha.

Measured on simulated timings (the generator of `tests/test_bench_sequential.py`: 8 prompts a
round, drift across rounds (log-normal steps, sd 0.08) and within them (3% a slot), 10% noise,
1 request in 25 an outlier 2-6x slower; a look after every round, stopping when decided, at most
20 rounds): of 400 seeded A/A runs, 1 was decided `faster` against 1.0x (0.25%; the bound is 5%)
and 399 stayed undecided; a true 1.3x against 1.05x was decided `faster` in 400 of 400, after a
median of 8 rounds; a true 0.7x `not faster` in 100 of 100 (median 4 rounds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Decision = Literal["faster", "not faster", "undecided"]
ALPHA = 0.05
CLIP = 8.0  # a pair whose ratio is beyond 8x either way counts as 8x
_BOUND = math.log(CLIP)
_GRID = 400  # candidate means on [0, 1]: a resolution of 2*log(8)/400 = 0.01 in log ratio (1%)
_MAX_BET = 0.75  # the largest fraction of wealth staked (Waudby-Smith & Ramdas: c = 1/2 or 3/4)


@dataclass(frozen=True)
class SpeedDecision:
    """The decision and the anytime-valid interval of the (clipped) geometric-mean speed-up."""

    decision: Decision
    low: float | None  # None: no pair measured yet
    high: float | None
    n: int  # paired observations

    @property
    def interval(self) -> tuple[float, float] | None:
        return None if self.low is None or self.high is None else (self.low, self.high)


def _to_unit(x: float) -> float:
    return (min(max(x, -_BOUND), _BOUND) + _BOUND) / (2 * _BOUND)


def _from_unit(y: float) -> float:
    return math.exp(y * 2 * _BOUND - _BOUND)


class SpeedSequence:
    """The running-intersection betting CS for the mean of the clipped log ratios, fed one
    observation at a time (each is seen once, however often the interval is asked for); valid
    at every prefix of what it was fed."""

    def __init__(self, alpha: float = ALPHA) -> None:
        import numpy as np

        self.alpha = alpha
        self.n = 0
        self._m = (np.arange(_GRID) + 0.5) / _GRID
        self._log_plus = np.zeros(_GRID)
        self._log_minus = np.zeros(_GRID)
        self._lo, self._hi = 0.0, 1.0
        self._total = self._sq = 0.0

    def add(self, base_ms: Sequence[float], cond_ms: Sequence[float]) -> SpeedSequence:
        """Paired totals (the units both conditions ran, in the order they were measured)."""
        import numpy as np

        m, threshold = self._m, math.log(1 / self.alpha)
        for b, c in zip(base_ms, cond_ms, strict=True):
            if not (b > 0 and c > 0):
                continue
            y = _to_unit(math.log(b / c))
            self.n += 1
            i = self.n
            mu = (0.5 + self._total) / i  # plug-in estimates from the observations before this one
            var = (0.25 + self._sq) / i
            lam = math.sqrt(2 * math.log(2 / self.alpha) / (var * i * math.log(i + 1)))
            self._log_plus += np.log1p(np.minimum(lam, _MAX_BET / m) * (y - m))  # stakes keep wealth > 0
            self._log_minus += np.log1p(-np.minimum(lam, _MAX_BET / (1 - m)) * (y - m))
            hedged = np.logaddexp(self._log_plus, self._log_minus) - math.log(2)
            inside = m[hedged < threshold]
            if inside.size:
                self._lo = max(self._lo, float(inside[0]) - 0.5 / _GRID)
                self._hi = min(self._hi, float(inside[-1]) + 0.5 / _GRID)
            self._total += y
            self._sq += (y - mu) ** 2
        return self

    def interval(self) -> tuple[float, float] | None:
        """The interval as speed-ups (exp of the bounds); None before the first observation."""
        if not self.n:
            return None
        return _from_unit(self._lo), _from_unit(max(self._lo, self._hi))

    def decision(self, min_speedup: float) -> SpeedDecision:
        cs = self.interval()
        if cs is None:
            return SpeedDecision("undecided", None, None, 0)
        low, high = cs
        decision: Decision = "faster" if low > min_speedup else "not faster" if high < min_speedup else "undecided"
        return SpeedDecision(decision, low, high, self.n)


def decide(
    base_ms: Sequence[float], cond_ms: Sequence[float], min_speedup: float, alpha: float = ALPHA
) -> SpeedDecision:
    """`faster`, `not faster` or `undecided` for paired totals (same order, the units both ran)."""
    return SpeedSequence(alpha).add(base_ms, cond_ms).decision(min_speedup)
