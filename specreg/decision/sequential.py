"""Measuring until decided: an anytime-valid decision on a condition's speed-up.

`bench admitted --budget 8m` adds rounds until every condition is decided against the policy's
`min_speedup`, and looks at the data after every round. A fixed-sample interval (the bootstrap
of `statistics.py`) checked after each round would be wrong more often the more rounds it is
checked after: the chance that it *ever* clears the bar by luck grows with every look. So the
decision here is made with a **confidence sequence**: intervals that hold at every round at
once, P(the true value ever leaves them) <= alpha, however often one looks and stops.

Which one, and why:
- The observations are the paired per-request log speed-ups x = log(baseline ms / condition ms)
  of the units (prompt, repetition) both conditions ran; pairing inside a round cancels slow
  drift (a warming machine, a neighbour) that would otherwise land on whichever ran later.
- The sequence is Waudby-Smith & Ramdas' hedged-capital betting CS ("Estimating means of bounded
  random variables by betting", JRSS-B 2023: predictable plug-in bets, the hedged process
  K = (K+ + K-)/2, itself a martingale), run on the **clipped deviations** of Wang & Ramdas'
  "Huber-robust confidence sequences" (AISTATS 2023): for every candidate centre m (a log
  speed-up on a grid), z_i(m) = clip(x_i - m, +-B_i) / B_i lies in [-1, 1], a gambler stakes
  lambda_i in [0, 3/4] on z_i being positive (K+) or negative (K-), and m is excluded once the
  hedged wealth reaches 1/alpha. Ville's inequality bounds the chance that this ever happens
  to the true centre by alpha, provided the stakes and the clip are **predictable** (fixed from
  the observations before x_i) and the true centre m* balances the clipped deviations,
  E[clip(x_i - m*, +-B)] = 0 for every B - which holds when the paired log ratio is symmetric
  about its centre. Under A/A that is exact: the two requests of a pair are exchangeable, so
  log(b/c) and log(c/b) have one distribution. Under a real speed-up it is the assumption
  (the same noise on both sides of the ratio); the centre is then the median and mean of x.
- **Why the clip adapts** (issue 32): the old fixed clip, +-log 8 mapped to [0, 1], put the
  measured speed-ups (log ratios of 0.05-0.3 with a per-request spread of ~0.1) in a sliver
  near the middle of the unit interval; a bet must keep the wealth positive for any value in
  [0, 1], so the stakes were capped at 3/4 / m ~ 1.5 on deviations of ~0.01 and the wealth
  grew at a few thousandths per request: on SmolLM2 an 8-minute budget decided nothing. Here
  B_i = clip(`SCALE` * the robust spread (1.4826 x the median absolute deviation) of the
  observations before x_i, `FLOOR`, log 8): about three spreads, so a typical deviation is a
  third of the range and the bets grow the wealth at the rate the spread allows (the number of
  pairs a decision needs falls from ~2 log(1/alpha) (log 8)^2 / (3/4 d)^2-ish to ~2 log(1/alpha)
  sd^2 / d^2 for a distance d from the bar). Outliers (a request 2-6x slower) are clipped at
  three spreads instead of 8x, so they move the wealth no more than a typical request. The
  first `WARM` observations use B = log 8 (nothing to size from yet).
- The decision against the threshold t = log(min_speedup): `faster` when the whole interval
  lies above t, `not faster` when it lies below, `undecided` otherwise. Under "not faster"
  (true centre <= t) deciding `faster` needs the interval to miss the truth: probability <= alpha.

Why stopping after any pair, and measuring the `--tune` leader first, keep it valid (issue 32:
the runner measures the tuned length against its baseline before the other conditions, and a
round the budget has no room for in part, so a decision may rest on a part of a round):
- Each condition has its own sequence, fed its paired log ratios in the order the pairs were
  completed. The wealth of the true centre is a nonnegative supermartingale in that order
  whatever decides *when* the next pair comes: the runner's choices (which condition to
  measure next, how many prompts of a round, when to stop) depend only on what was measured
  before, so they are stopping times and a predictable selection, and Ville's inequality holds
  at every one of them. Not measuring a condition for a while only pauses its sequence.
- A pair is one prompt at one repetition seed on both sides; a part of a round takes the same
  first prompts (one of each stratum in turn) on both, so every observation is a whole pair.
  Within a pair, which side ran first follows the balanced order (`conditions.balanced_order`),
  so a drift lands on each side equally often across rounds - the symmetry the clipped
  deviations assume. A partial round is shorter, so less drift falls inside it, not more.
- Which candidate is the leader is chosen from the data (the best measured). Its own
  sequence still holds at any stopping time; the chance that *some* candidate's interval
  misses its truth is at most alpha times the number of candidates (three at one level), a
  bound the `--tune` decision inherits (it is made on the leader and on each candidate's
  interval against it).

Measured on simulated timings (the generator of `tests/test_bench_sequential.py`: 8 prompts a
round, drift across rounds (log-normal steps, sd 0.08) and within them (3% a slot), 10% noise,
1 request in 25 an outlier 2-6x slower; a look after every round, stopping when decided, at most
20 rounds; `benchmarks/bench_decision.py --skip-tiny`, 400 seeded runs each), against the method
before issue 32 (clip log 8, alpha 0.05, a shuffled order):
- A/A against 1.0x: 1 of 400 decided `faster` (0.25%; before: 0.25%), 3 `not faster`;
- a true 1.15x against 1.05x: `faster` in 91% after a median of 8 rounds (before: 46%, 14);
- a true 1.3x against 1.05x: `faster` in 100% after a median of 3 rounds (before: 99.8%, 8).
alpha is 0.02 so that the one-sided false `faster` rate stays at or below 1% even though the
requests of one slot are not independent (a slot's position in its round moves them together):
at alpha 0.05 and a shuffled order the same A/A simulation gave 3% false `faster`.

What it costs (an import draws every run's decisions again, `--budget` plans on copies of the
sequences): the interval is a running intersection, so a centre outside it never comes back in;
only the centres still inside are bet on and tested (after ~10 observations a few dozen of the
1601, then a handful). The stakes and clips depend on the observations, not on the wealth, so a
block of observations is one array per numpy call (row by row the same floats as one at a time),
logaddexp (~20x a log1p) is taken only where the larger wealth leaves the test open, and the clip's
MAD is read off the observations kept in order instead of sorting them each time. Before, every
centre was updated and the interval was the grid's hull of the centres under the threshold: a
centre already outside whose wealth fell back under could keep an edge from moving, and where the
sequence missed its truth altogether the hull collapsed to a point. The slice is the exact running
intersection (the same or tighter, as valid); where it empties, the last interval stays. On the
simulations above every one of the 2,400 runs decides alike at the same round, and 5,700 looks at
random sequences give the same interval to the last bit; only an emptied interval differs
(`intersection="grid"` keeps the old way for bundles written with it, exchange/rederive.py).
Measured (2 cores, load 0.1-0.2, CPU time, a look after every 8 observations of spread 0.1 around
1.1x): 17 us an observation over 50, 12.5 over 200, 17 over 500 (before: 38, 72, 81; at load 4-6
21-39, 17-26, 18-23 against 45-71, 60-88, 89-108); a `rounds_to_decide` from 8-32 pairs 11-18 ms
(before: 47-58). Over 50 observations the first ~10 dominate: until a wealth can reach the
threshold every centre is still inside. `benchmarks/bench_decision.py` prints the cost.
"""

from __future__ import annotations

import bisect
import copy
import math
import random
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
    by the few requests that ran 2-6x slower."""
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
    prefix of what it was fed. `scale="fixed"` is the method before issue 32 (clip log 8
    throughout), kept so `benchmarks/bench_decision.py` can show what the adaptive clip gains.
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


def rounds_to_decide(
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    min_speedup: float,
    *,
    per_round: int,
    max_rounds: int,
    paths: int = 7,
    seed: int = 0,
    pool: Sequence[float] = (),
    fresh: bool = False,
) -> int | None:
    """About how many more rounds of `per_round` pairs this condition needs to be decided, if it
    goes on as measured: future rounds are drawn (with replacement) from the log ratios measured
    so far and fed to a copy of the sequence, `paths` times; the median of the rounds each path
    took (0: decided already; None: not within `max_rounds` on most paths - the measured speed-up
    is within its noise of the bar). A plan, not a decision: the decision is only ever made on
    what is measured. `pool`: more log ratios with the same spread (neighbour draft lengths,
    re-centred on this condition's mean) to draw the future rounds from. `fresh`: the condition
    has measured nothing yet; `base_ms`/`cond_ms` stand in for it (the `--tune` first pass,
    re-centred on the length's prediction), so its sequence starts empty and they are only drawn
    from."""
    xs = log_ratios(base_ms, cond_ms)
    seq = SpeedSequence() if fresh else SpeedSequence().add_logs(xs)
    if not fresh and seq.decision(min_speedup).decision != "undecided":
        return 0
    if len(xs) < 2 or per_round < 1:
        return None
    rng = random.Random(seed)
    draw = [*xs, *pool]
    took: list[float] = []
    for _ in range(paths):
        s = seq.copy()
        for r in range(1, max_rounds + 1):
            s.add_logs([rng.choice(draw) for _ in range(per_round)])
            if s.decision(min_speedup).decision != "undecided":
                took.append(r)
                break
        else:
            took.append(math.inf)
    took.sort()
    mid = took[len(took) // 2]
    return None if math.isinf(mid) else int(mid)
