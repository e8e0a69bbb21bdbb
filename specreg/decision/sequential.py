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
"""

from __future__ import annotations

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
_MAX_BET = 0.75  # the largest stake on z in [-1, 1] (Waudby-Smith & Ramdas: c = 1/2 or 3/4)
Scale = Literal["adaptive", "fixed"]  # fixed: the clip of log 8 throughout (before issue 32)


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


class SpeedSequence:
    """The running-intersection betting CS for the centre of the log ratios, fed one observation
    at a time (each is seen once, however often the interval is asked for); valid at every
    prefix of what it was fed. `scale="fixed"` is the method before issue 32 (clip log 8
    throughout), kept so `benchmarks/bench_decision.py` can show what the adaptive clip gains."""

    def __init__(self, alpha: float = ALPHA, scale: Scale = "adaptive") -> None:
        import numpy as np

        self.alpha, self.scale = alpha, scale
        self.n = 0
        self._m = np.linspace(-_BOUND, _BOUND, _GRID)
        self._log_plus = np.zeros(_GRID)
        self._log_minus = np.zeros(_GRID)
        self._lo, self._hi = -_BOUND, _BOUND
        self._xs: list[float] = []
        self._total = self._sq = 0.0  # the plug-in variance of z, in units of each step's clip

    def copy(self) -> SpeedSequence:
        return copy.deepcopy(self)

    def clip(self) -> float:
        """B for the next observation, from the observations before it only (predictable)."""
        if self.scale == "fixed" or self.n < WARM:
            return _BOUND
        return min(_BOUND, max(FLOOR, SCALE * robust_spread(self._xs)))

    def add(self, base_ms: Sequence[float], cond_ms: Sequence[float]) -> SpeedSequence:
        """Paired totals (the units both conditions ran, in the order they were measured)."""
        return self.add_logs(log_ratios(base_ms, cond_ms))

    def add_logs(self, xs: Sequence[float]) -> SpeedSequence:
        """Log ratios, in the order they were measured."""
        import numpy as np

        m, threshold = self._m, math.log(1 / self.alpha)
        for x in xs:
            b = self.clip()
            self.n += 1
            i = self.n
            var = (0.25 + self._sq) / i  # the plug-in from before this observation (a prior of 1/4)
            lam = min(_MAX_BET, math.sqrt(2 * math.log(2 / self.alpha) / (var * i * math.log(i + 1))))
            z = np.clip(x - m, -b, b) / b
            self._log_plus += np.log1p(lam * z)  # |lam z| <= 3/4: the wealth stays positive
            self._log_minus += np.log1p(-lam * z)
            hedged = np.logaddexp(self._log_plus, self._log_minus) - math.log(2)
            inside = m[hedged < threshold]
            step = m[1] - m[0]
            if inside.size:
                self._lo = max(self._lo, float(inside[0]) - step / 2)
                self._hi = min(self._hi, float(inside[-1]) + step / 2)
            # the variance plug-in: z at the running centre (the mean before this one), in B units
            mu = sum(self._xs) / len(self._xs) if self._xs else 0.0
            self._sq += min(1.0, ((x - mu) / b) ** 2)
            self._xs.append(x)
        return self

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
) -> SpeedDecision:
    """`faster`, `not faster` or `undecided` for paired totals (same order, the units both ran)."""
    return SpeedSequence(alpha, scale).add(base_ms, cond_ms).decision(min_speedup)


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
