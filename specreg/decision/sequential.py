"""Measuring until decided: an anytime-valid decision on a condition's speed-up.

`bench --budget` looks at the data after every round and stops once a condition is decided; a
fixed-sample interval (the bootstrap of `statistics.py`) checked after every look would clear
the bar by luck more often the more it is looked at. So the decision is made with a confidence
sequence, intervals that hold at every look at once: Waudby-Smith & Ramdas' hedged betting
interval on the clipped deviations of Wang & Ramdas' Huber-robust confidence sequences, over
the paired per-request log speed-ups. The clip adapts to the spread of the observations before
each one (predictable, as the betting martingale requires), so that real speed-ups, small
against the widest clip, still decide within a budget, and an outlier moves the wealth no more
than a typical request. Each condition has its own sequence, fed whole pairs in the order they
were completed, so the runner may stop, pause a condition or measure part of a round at any
point without losing validity. docs/statistics.md states the method, its assumption (a paired
log ratio symmetric about its centre), why alpha is 0.02, the argument for stopping anywhere,
and the simulations that check it.

The interval is the running intersection of the intervals so far: a centre once outside never
comes back in, so only the centres still inside are bet on, a block of observations at a time.
"""

from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Decision = Literal["faster", "not faster", "undecided"]
ALPHA = 0.02  # two-sided: at most ~1% false `faster` (the one-sided share), issue 32
CLIP = 8.0  # the widest clip: a pair whose ratio is beyond 8x either way counts as 8x
_BOUND = math.log(CLIP)
SCALE = 3.0  # the clip, in robust spreads of the observations before
FLOOR = math.log(1.01)  # the narrowest clip (identical timings have no spread to size from)
WARM = 4  # observations measured at the widest clip before the spread sizes it
_GRID = 1601  # candidate centres on [-log 8, log 8]: a resolution of 0.0026 in log ratio
_BLOCK = 4096  # centres x observations a block of the wealth update holds at most (sequential.py)
_SURE = 1e-9  # a margin far above rounding: a wealth this far from the threshold is decided by a bound
_MAX_BET = 0.75  # the largest stake on z in [-1, 1] (Waudby-Smith & Ramdas: c = 1/2 or 3/4)
Scale = Literal["adaptive", "fixed"]  # fixed: the clip of log 8 throughout (before issue 32)
# slice: the running intersection, only the centres still inside bet on; grid: every centre, the hull of those
# under the threshold (how runs were decided before the slice: an import re-derives their bundles so)
Intersection = Literal["slice", "grid"]


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


def log_ratios(base_ms: Sequence[float], cond_ms: Sequence[float]) -> list[float]:
    """log(baseline / condition) of the pairs both measured (a zero or missing time is left out)."""
    return [math.log(b / c) for b, c in zip(base_ms, cond_ms, strict=True) if b > 0 and c > 0]


def robust_spread(xs: Sequence[float]) -> float:
    """1.4826 x the median absolute deviation: the standard deviation for normal data, unmoved
    by the few requests that ran several times slower."""
    if not xs:
        return 0.0
    s = sorted(xs)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    dev = sorted(abs(x - med) for x in xs)
    mad = dev[len(dev) // 2] if len(dev) % 2 else (dev[len(dev) // 2 - 1] + dev[len(dev) // 2]) / 2
    return 1.4826 * mad


def _sorted_spread(s: Sequence[float]) -> float:
    """`robust_spread` of observations already in order, without sorting them again: the median
    absolute deviation is the middle of two runs that are each in order (the deviations of the
    values above the median, and of those below it, read outwards), found by bisection. The
    same floats as `robust_spread` (|x - med| is med - x exactly below the median)."""
    n = len(s)
    if not n:
        return 0.0
    h = n // 2
    med = s[h] if n % 2 else (s[h - 1] + s[h]) / 2
    p = bisect.bisect_left(s, med)  # s[p:] >= med: their deviations, in order, are s[p + j] - med
    k = h  # the k-th smallest deviation (from 0), and for an even n the one before it
    lo, hi = max(0, k + 1 - (n - p)), min(k + 1, p)  # how many of the k + 1 smallest lie below med
    while lo < hi:
        t = (lo + hi) // 2  # t from below and k + 1 - t from above: too few from below?
        if med - s[p - 1 - t] < s[p + k - t] - med:
            lo = t + 1
        else:
            hi = t
    t = lo  # the k + 1 smallest: the first t below med, the first k + 1 - t above it
    below = [med - s[p - 1 - j] for j in range(max(0, t - 2), t)]  # the largest two taken from below
    above = [s[p + j] - med for j in range(max(0, k - t - 1), k + 1 - t)]  # and from above
    top = sorted(below + above)
    mad = top[-1] if n % 2 else (top[-2] + top[-1]) / 2
    return 1.4826 * mad


class SpeedSequence:
    """The running-intersection betting CS for the centre of the log ratios, fed one observation
    at a time (each is seen once, however often the interval is asked for); valid at every
    prefix of what it was fed. `scale="fixed"` is the earlier method (clip log 8 throughout),
    kept so `benchmarks/bench_decision.py` can show what the adaptive clip gains.
    `intersection="grid"` is the interval before the slice (every centre's wealth kept, the hull
    of all centres under the threshold intersected with the interval so far), kept so an import
    can re-derive the decisions of bundles written then (exchange/rederive.py)."""

    def __init__(self, alpha: float = ALPHA, scale: Scale = "adaptive", intersection: Intersection = "slice") -> None:
        import numpy as np

        self.alpha, self.scale, self.intersection = alpha, scale, intersection
        self.n = 0
        self._m = np.linspace(-_BOUND, _BOUND, _GRID)  # the centres still inside [_lo, _hi]
        self._step = float(self._m[1] - self._m[0])
        self._log_plus = np.zeros(_GRID)
        self._log_minus = np.zeros(_GRID)
        self._lo, self._hi = -_BOUND, _BOUND
        self._xs: list[float] = []
        self._sorted: list[float] = []  # _xs in order: the clip's median and MAD without a sort per step
        self._total = self._sq = 0.0  # the plug-in variance of z, in units of each step's clip
        self._cap = 0.0  # the sum of log(1 + stake): no centre's log-wealth is above it

    def copy(self) -> SpeedSequence:
        new = copy.copy(self)  # the floats and the settings; the arrays and lists are this one's own below
        new._m, new._log_plus, new._log_minus = self._m.copy(), self._log_plus.copy(), self._log_minus.copy()
        new._xs, new._sorted = list(self._xs), list(self._sorted)
        return new

    def clip(self) -> float:
        """B for the next observation, from the observations before it only (predictable)."""
        if self.scale == "fixed" or self.n < WARM:
            return _BOUND
        return min(_BOUND, max(FLOOR, SCALE * _sorted_spread(self._sorted)))

    def add(self, base_ms: Sequence[float], cond_ms: Sequence[float]) -> SpeedSequence:
        """Paired totals (the units both conditions ran, in the order they were measured)."""
        return self.add_logs(log_ratios(base_ms, cond_ms))

    def add_logs(self, xs: Sequence[float]) -> SpeedSequence:
        """Log ratios, in the order they were measured."""
        # the clip and the stake of each observation come from the ones before it, not from the
        # wealth: all of them first, then the wealth in blocks of observations
        bets = [self._bet(x) for x in xs]
        if self.intersection == "grid":
            self._wealth_grid(bets)
        else:
            done = 0
            while done < len(bets):
                block = max(1, _BLOCK // self._m.size)
                self._wealth_slice(bets[done : done + block])
                done += block
        return self

    def _bet(self, x: float) -> tuple[float, float, float]:
        """(x, its clip, its stake), and x taken into the plug-ins the next observation's are made from."""
        b = self.clip()
        self.n += 1
        i = self.n
        var = (0.25 + self._sq) / i  # the plug-in from before this observation (a prior of 1/4)
        lam = min(_MAX_BET, math.sqrt(2 * math.log(2 / self.alpha) / (var * i * math.log(i + 1))))
        # the variance plug-in: z at the running centre (the mean before this one), in B units
        mu = sum(self._xs) / len(self._xs) if self._xs else 0.0
        self._sq += min(1.0, ((x - mu) / b) ** 2)
        self._xs.append(x)
        bisect.insort(self._sorted, x)
        return x, b, lam

    def _wealth_slice(self, bets: Sequence[tuple[float, float, float]]) -> None:
        """The running intersection: a centre outside [_lo, _hi] is out for good, so only the
        centres still inside are bet on and tested, a block of observations at once (one row
        each: the numpy calls, not the logarithms, are the cost once few centres are left).
        Row by row the same floats as one observation at a time (a cumulative sum adds in order)."""
        import numpy as np

        threshold, step, m = math.log(1 / self.alpha), self._step, self._m
        x, b, lam = (np.array(col)[:, None] for col in zip(*bets, strict=True))
        z = np.clip((x - m) / b, -1.0, 1.0)  # clip(x - m, +-b) / b to the bit (d / b >= 1 where d >= b)
        plus, minus = np.log1p(lam * z), np.log1p(-lam * z)  # |lam z| <= 3/4: the wealth stays positive
        plus[0] += self._log_plus
        minus[0] += self._log_minus
        if len(plus) < 8:  # numpy's cumulative sum down columns is slow on a few long rows
            for r in range(1, len(plus)):
                plus[r] += plus[r - 1]
                minus[r] += minus[r - 1]
        else:
            np.cumsum(plus, axis=0, out=plus)
            np.cumsum(minus, axis=0, out=minus)
        # no centre's wealth can reach the threshold while the stakes' own sum cannot (|z| <= 1):
        # the rows before that need no test
        start = 0
        for _, _, stake in bets:
            self._cap += math.log1p(stake)
            start += self._cap < threshold - _SURE
        first, last = 0, m.size - 1  # the block's columns still inside
        if start < len(bets):
            # hedged = logaddexp(plus, minus) - log 2 lies within log 2 below the larger of the two:
            # logaddexp (~20x a log1p) only where that leaves the test open
            top = np.maximum(plus[start:], minus[start:])
            below = top < threshold - _SURE
            open_ = np.flatnonzero((top < threshold + math.log(2) + _SURE) & ~below)
            if open_.size:
                p, q = plus[start:].reshape(-1)[open_], minus[start:].reshape(-1)[open_]
                below.reshape(-1)[open_] = np.logaddexp(p, q) - math.log(2) < threshold
            for row in below:
                if row[first] and row[last]:
                    continue  # both ends still inside: the interval is as it was
                inside = np.flatnonzero(row[first : last + 1])
                if inside.size:  # none: the interval is left as it was (its truth is out, odds <= alpha)
                    first, last = first + int(inside[0]), first + int(inside[-1])
                    self._lo = max(self._lo, float(m[first]) - step / 2)
                    self._hi = min(self._hi, float(m[last]) + step / 2)
        self._m = m[first : last + 1]
        self._log_plus, self._log_minus = plus[-1, first : last + 1], minus[-1, first : last + 1]

    def _wealth_grid(self, bets: Sequence[tuple[float, float, float]]) -> None:
        """Before the slice: every centre bet on, the hull of those under the threshold intersected
        with the interval so far (a centre outside it that fell back under kept it from moving)."""
        import numpy as np

        m, threshold = self._m, math.log(1 / self.alpha)
        for x, b, lam in bets:
            z = np.clip(x - m, -b, b) / b
            self._log_plus += np.log1p(lam * z)
            self._log_minus += np.log1p(-lam * z)
            hedged = np.logaddexp(self._log_plus, self._log_minus) - math.log(2)
            inside = m[hedged < threshold]
            step = m[1] - m[0]
            if inside.size:
                self._lo = max(self._lo, float(inside[0]) - step / 2)
                self._hi = min(self._hi, float(inside[-1]) + step / 2)

    def interval(self) -> tuple[float, float] | None:
        """The interval as speed-ups (exp of the bounds); None before the first observation."""
        if not self.n:
            return None
        return math.exp(self._lo), math.exp(max(self._lo, self._hi))

    def decision(self, min_speedup: float) -> SpeedDecision:
        cs = self.interval()
        if cs is None:
            return SpeedDecision("undecided", None, None, 0)
        low, high = cs
        decision: Decision = "faster" if low > min_speedup else "not faster" if high < min_speedup else "undecided"
        return SpeedDecision(decision, low, high, self.n)


def decide(
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    min_speedup: float,
    alpha: float = ALPHA,
    scale: Scale = "adaptive",
    intersection: Intersection = "slice",
) -> SpeedDecision:
    """`faster`, `not faster` or `undecided` for paired totals (same order, the units both ran)."""
    return SpeedSequence(alpha, scale, intersection).add(base_ms, cond_ms).decision(min_speedup)
