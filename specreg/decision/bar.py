"""The decision against the bar: two one-sided betting tests, and the interval they make (issue 52).

A decision is what `bench --budget` measures for, and its cost is paired requests. The sequence
before this one (sequential.py) was a two-sided confidence sequence whose stakes were tuned for
the width of the interval, clipped at three robust spreads, and it took more pairs to decide
against the bar than a fixed-sample test that knew the spread needs (`benchmarks/bench_decision.py`
measures both against that oracle). Here the decision is what is asked: two one-sided tests of
the centre of the paired log ratios x = log(baseline ms / condition ms) against t = log(min_speedup).

- `faster` rejects "centre <= t" at `ALPHA_FASTER`, `not faster` rejects "centre >= t" at
  `ALPHA_NOT_FASTER`: each error rate is bounded on its own (the one-sided guarantee the audit
  relies on), not as a share of a two-sided rate.
- Each test bets on the clipped deviations z_i(m) = clip(x_i - m, +-B_i) / B_i in [-1, 1]: the
  wealth of the `faster` test is the mean, over the stakes in `STAKES`, of prod (1 + lambda z_i)
  (of prod (1 - lambda z_i) for `not faster`). Where the true centre balances the clipped
  deviations, E z_i(m) <= 0 given the past at any m at or above it (the null of `faster` at m),
  so each stake's wealth is a nonnegative supermartingale, and so is their mean: Ville's
  inequality bounds the chance that it ever reaches 1/alpha by alpha, at every pair, whatever
  decided when to look, stop or go on later. Each
  stake's own wealth grows at the rate its bet suits the effect; the mixture follows the best of
  them, a large stake for an effect far from the bar and a small one near it, for the log of
  their number: no plug-in to learn first.
- The clip B_i is `SPREADS` robust spreads of the observations before x_i (predictable, as
  sequential.py's), not three: a bet on a value in [-1, 1] may stake less than 1, and at three
  spreads the stake a real speed-up wants is above that cap; at one spread the wealth grows
  nearly as fast as an unclipped bet with the spread known would. Each outlier still moves the
  wealth no more than a typical pair. The first `PRIOR_PAIRS` observations, too few to size a clip
  from, are clipped at `PRIOR_CLIP`, a constant (so still predictable): any clip is valid, and
  one near the usual spread lets the first pairs count.
- The interval shown is these same tests inverted: the stakes and the clip do not depend on the
  centre m, and z_i(m) falls as m rises, so the `faster` wealth falls with m and the `not
  faster` wealth rises. The centres rejected so far (at any pair: the running maximum of each
  wealth) are two half-lines; what is left is [low, high], found by bisection, and `faster` is
  exactly low >= bar, `not faster` high <= bar. The interval is the decision's, not another
  statistic beside it, and it holds against any bar (the audit compares it with the policy's).

The validity argument, what it rests on and what breaks it, is in docs/statistics.md.
Bundles decided before this method keep theirs: `decide` and `budget.need` take the method
(exchange/rederive.py draws every run's decisions with the one that made them).
"""

from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from specreg.decision import sequential
from specreg.decision.sequential import Decision, SpeedDecision, log_ratios

ALPHA_FASTER = 0.01  # P(ever `faster` | the true centre is at or below the bar)
ALPHA_NOT_FASTER = 0.01  # P(ever `not faster` | the true centre is at or above the bar)
SPREADS = 1.0  # the clip, in robust spreads of the observations before
PRIOR_PAIRS = 2  # observations clipped at PRIOR_CLIP: too few before them to size a clip from
PRIOR_CLIP = 0.15  # about the per-pair spread of the log ratio on the real SmolLM2 pair (statistics.md)
STAKES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # the mixture's gamblers, evenly weighted
_BOUND = math.log(sequential.CLIP)  # a pair beyond 8x either way counts as 8x: the interval's range is [1/8, 8]
_TOL = 1e-7  # the interval's bounds, in log ratio: far below what is shown

# bar: this module; slice / grid: sequential.py's confidence sequence (runs decided before issue
# 52, and before its running slice), kept so an import draws their decisions as they were made
Method = Literal["bar", "slice", "grid"]
METHOD: Method = "bar"


@dataclass
class _Wealth:
    """Both tests' log-wealth at one centre after `n` observations: each stake's own, and the
    running maximum of the mixture (a centre once rejected stays rejected)."""

    n: int = 0
    up: Any = None  # per stake, log prod (1 + lambda z): the `faster` side
    down: Any = None  # per stake, log prod (1 - lambda z): the `not faster` side
    top_up: float = -math.inf
    top_down: float = -math.inf


@dataclass
class BarTest:
    """The two tests, fed paired log ratios in the order they were measured; valid at every prefix.
    Bar-free: `decision(min_speedup)` tests any bar, `interval()` is every bar's answer at once."""

    xs: list[float] = field(default_factory=list)
    clips: list[float] = field(default_factory=list)  # B_i, each from the observations before it
    _sorted: list[float] = field(default_factory=list)  # xs in order: the clip's spread without a sort
    _at: dict[float, _Wealth] = field(default_factory=dict)  # wealth kept at the centres decided against

    @property
    def n(self) -> int:
        return len(self.xs)

    def copy(self) -> BarTest:
        new = copy.copy(self)
        new.xs, new.clips, new._sorted = list(self.xs), list(self.clips), list(self._sorted)
        new._at = {m: copy.copy(w) for m, w in self._at.items()}
        return new

    def clip(self) -> float:
        """B for the next observation, from the observations before it only (predictable)."""
        if self.n < PRIOR_PAIRS:
            return PRIOR_CLIP
        return min(_BOUND, max(sequential.FLOOR, SPREADS * sequential._sorted_spread(self._sorted)))

    def add(self, base_ms: Sequence[float], cond_ms: Sequence[float]) -> BarTest:
        """Paired totals (the units both conditions ran, in the order they were measured)."""
        return self.add_logs(log_ratios(base_ms, cond_ms))

    def add_logs(self, xs: Sequence[float]) -> BarTest:
        """Log ratios, in the order they were measured."""
        for x in xs:
            x = min(_BOUND, max(-_BOUND, float(x)))
            self.clips.append(self.clip())
            self.xs.append(x)
            bisect.insort(self._sorted, x)
        return self

    def _wealth(self, m: float, keep: bool = False) -> _Wealth:
        """Both wealths at centre m over every observation so far, from the state kept at m if
        any: a block of new observations at once, each stake's wealth a cumulative sum in order
        (the same floats whatever blocks they came in)."""
        import numpy as np

        w = self._at.get(m)
        w = _Wealth(0, np.zeros(len(STAKES)), np.zeros(len(STAKES))) if w is None else copy.copy(w)
        if w.n < self.n:
            x = np.array(self.xs[w.n :])
            z = np.clip((x - m) / np.array(self.clips[w.n :]), -1.0, 1.0)
            lam = np.array(STAKES)
            up = np.log1p(z[:, None] * lam)
            down = np.log1p(-z[:, None] * lam)
            up[0] += w.up
            down[0] += w.down
            np.cumsum(up, axis=0, out=up)
            np.cumsum(down, axis=0, out=down)
            mix_up = np.logaddexp.reduce(up, axis=1) - math.log(len(STAKES))
            mix_down = np.logaddexp.reduce(down, axis=1) - math.log(len(STAKES))
            w = _Wealth(
                self.n, up[-1], down[-1], max(w.top_up, float(mix_up.max())), max(w.top_down, float(mix_down.max()))
            )
        if keep:
            self._at[m] = w
        return w

    def verdict(self, min_speedup: float) -> Decision:
        """The decision against `min_speedup` alone (no interval): what a plan asks after every pair.
        A bar outside [1/8, 8] is decided by the first pair (no centre of pairs counted at most
        8x either way lies beyond it)."""
        t = math.log(min_speedup)
        if self.n and abs(t) > _BOUND:
            return "faster" if t < 0 else "not faster"
        w = self._wealth(t, keep=True)
        if w.top_up >= math.log(1 / ALPHA_FASTER):
            return "faster"
        if w.top_down >= math.log(1 / ALPHA_NOT_FASTER):
            return "not faster"
        return "undecided"

    def interval(self) -> tuple[float, float] | None:
        """[low, high] as speed-ups: the centres neither test has rejected at any pair so far,
        within [1/8, 8]; None before the first observation."""
        if not self.n:
            return None
        up_thr, down_thr = math.log(1 / ALPHA_FASTER), math.log(1 / ALPHA_NOT_FASTER)
        low = self._edge(lambda m: self._wealth(m).top_up >= up_thr, rising=False)
        high = self._edge(lambda m: self._wealth(m).top_down >= down_thr, rising=True)
        return math.exp(low), math.exp(max(low, high))

    @staticmethod
    def _edge(rejected: Callable[[float], bool], rising: bool) -> float:
        """Where a half-line of rejected centres ends, within [-log 8, log 8]: rising False, the
        rejected centres are those below it (the `faster` test); True, those above it."""
        lo, hi = -_BOUND, _BOUND
        if rising:
            if not rejected(hi):
                return hi
            if rejected(lo):
                return lo
        else:
            if not rejected(lo):
                return lo
            if rejected(hi):
                return hi
        while hi - lo > _TOL:
            mid = (lo + hi) / 2
            if rejected(mid) != rising:
                lo = mid
            else:
                hi = mid
        return hi if rising else lo

    def decision(self, min_speedup: float) -> SpeedDecision:
        """The decision against `min_speedup` and the interval it rests on (low >= the bar exactly
        when `faster`, high <= it when `not faster`)."""
        cs = self.interval()
        if cs is None:
            return SpeedDecision("undecided", None, None, 0)
        verdict = self.verdict(min_speedup)
        low, high = cs
        # the bisection stops within _TOL of an edge: the bar's own test says on which side
        if verdict == "faster":
            low = max(low, min_speedup)
        elif verdict == "not faster":
            high = min(high, min_speedup)
        return SpeedDecision(verdict, low, max(low, high), self.n)


def fewest_pairs() -> int:
    """The fewest pairs any decision can rest on: every deviation at the clip, on the decided side
    (each pair multiplies a stake's wealth by at most 1 + lambda). A stratum with p prompts a round
    needs at least this / p rounds of its own, however far its speed-up is from the bar."""
    need = math.log(1 / min(ALPHA_FASTER, ALPHA_NOT_FASTER)) + math.log(len(STAKES))
    n = 1
    while math.log(sum((1 + lam) ** n for lam in STAKES)) < need:
        n += 1
    return n


AnySequence = BarTest | sequential.SpeedSequence


def sequence(method: Method = METHOD) -> AnySequence:
    """An empty sequence of the method that decides (or decided) a run."""
    if method == "bar":
        return BarTest()
    return sequential.SpeedSequence(intersection=method)


def verdict_of(seq: AnySequence, min_speedup: float) -> Decision:
    """The decision of a sequence of either method, without its interval."""
    return seq.verdict(min_speedup) if isinstance(seq, BarTest) else seq.decision(min_speedup).decision


def decide(
    base_ms: Sequence[float], cond_ms: Sequence[float], min_speedup: float, method: Method = METHOD
) -> SpeedDecision:
    """`faster`, `not faster` or `undecided` for paired totals (same order, the units both ran)."""
    return sequence(method).add(base_ms, cond_ms).decision(min_speedup)


def verdict(base_ms: Sequence[float], cond_ms: Sequence[float], min_speedup: float) -> Decision:
    """`decide` without the interval: what the runner asks of each condition between rounds."""
    return BarTest().add(base_ms, cond_ms).verdict(min_speedup)
