"""Honest numbers for one speed-up: a paired bootstrap interval and a check against acceptance.

Speed-up is the median, over (prompt, repetition) units, of the baseline's total ms over the
condition's: a request and its baseline twin ran the same prompt in the same round, so a slow
moment (a busy neighbour, a cold cache) that hits both cancels in their ratio. The 95% interval
resamples those units with replacement and is reproducible: the generator is seeded from the
run's seed and the group's name.

Acceptance bounds what speculation can do. A step that drafted yields E[L] tokens, E[L] =
(1 − α^(k+1)) / (1 − α) for a per-token acceptance α and draft length k (the seeds' formula;
from the measured per-position curve where one exists); over all target steps, those that
drafted nothing included, a step yields T = N / (N − A) tokens (N output tokens, A accepted).
Every step costs at least one target decode, so no speed-up above T comes from speculation: an
interval whose low end is above T (zero accepted tokens and "faster" is the plain case) is
flagged unexplained, something else, such as a cold baseline or a shorter output, made the
difference. The speed-up acceptance predicts, T / step cost, is priced in `stepcost`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.schemas.bench import Difference, LengthSource

if TYPE_CHECKING:
    import numpy as np

LEVEL = 0.95
MIN_UNITS = 2  # one pair of requests has no spread: no interval


def _seed(seed: int, label: str) -> list[int]:
    """Entropy for numpy's SeedSequence: the run's seed and a stable hash of the group's name."""
    digest = hashlib.sha256(label.encode("utf-8")).digest()
    return [seed & 0xFFFFFFFF, int.from_bytes(digest[:4], "big"), int.from_bytes(digest[4:8], "big")]


def _ratios(base_ms: Sequence[float], cond_ms: Sequence[float]) -> np.ndarray:
    import numpy as np

    if len(base_ms) != len(cond_ms):
        raise ValueError("paired samples must have the same length")
    base, cond = np.asarray(base_ms, dtype=float), np.asarray(cond_ms, dtype=float)
    keep = cond > 0
    return base[keep] / cond[keep]


def paired_speedup(base_ms: Sequence[float], cond_ms: Sequence[float]) -> float | None:
    """Median of baseline / condition over paired units (>1: the condition is faster); None without data."""
    import numpy as np

    ratios = _ratios(base_ms, cond_ms)
    return float(np.median(ratios)) if ratios.size else None


def bootstrap_ci(
    base_ms: Sequence[float],
    cond_ms: Sequence[float],
    *,
    seed: int,
    label: str,
    resamples: int = 2000,
    level: float = LEVEL,
) -> tuple[float, float] | None:
    """Percentile interval of the paired speed-up, resampling units (prompt x repetition).

    `base_ms[i]` and `cond_ms[i]` are one unit (same prompt, same repetition). None with fewer
    than MIN_UNITS units. Same inputs, seed and label: the same interval, bit for bit.
    """
    ratios = _ratios(base_ms, cond_ms)
    n = int(ratios.size)
    if n < MIN_UNITS:
        return None
    import numpy as np

    rng = np.random.default_rng(_seed(seed, label))
    medians = np.median(ratios[rng.integers(0, n, size=(resamples, n))], axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(medians, [tail, 100.0 - tail])
    return float(low), float(high)


def difference(ci: tuple[float, float] | None) -> Difference | None:
    """How to read an interval: above 1 faster, below 1 slower, containing 1.0 no measurable difference."""
    if ci is None:
        return None
    low, high = ci
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return "no measurable difference"


NO_DIFFERENCE_MARK = "~"  # in narrow table cells; a legend line under the table says what it means
NO_DIFFERENCE_LEGEND = "~ no measurable difference: the 95% interval contains 1.0"


def interval_text(speedup: float | None, ci: tuple[float, float] | None, *, short: bool = False) -> str:
    """The speed-up and its interval to two decimals (`RATIOx [LOW, HIGH]`), followed by `no
    measurable difference` when the interval holds 1; `-` when not measured.

    `short` (table cells at 80 columns) marks no measurable difference with `~` instead of the words."""
    if speedup is None:
        return "-"
    if ci is None:
        return f"{speedup:.2f}x (no interval)"
    text = f"{speedup:.2f}x [{ci[0]:.2f}, {ci[1]:.2f}]"
    if difference(ci) != "no measurable difference":
        return text
    return f"{text} {NO_DIFFERENCE_MARK}" if short else f"{text} no measurable difference"


# ---- acceptance ----------------------------------------------------------------------------


def expected_accepted_length(alpha: float, k: float) -> float:
    """E[L] = (1 − α^(k+1)) / (1 − α): tokens per verification step (accepted drafts + 1)."""
    if k <= 0 or alpha <= 0:
        return 1.0
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1.0)) / (1.0 - alpha)


def alpha_from_rate(rate: float, k: float) -> float:
    """The per-token acceptance α whose expected accepted share of k drafted tokens is `rate`.

    A step stops at its first rejection, so accepted / drafted = (α + α² + … + α^k) / k, which
    is not α itself; solved by bisection (the left side grows with α).
    """
    if rate <= 0 or k <= 0:
        return 0.0
    if rate >= 1:
        return 1.0

    def share(a: float) -> float:
        return (expected_accepted_length(a, k) - 1.0) / k

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if share(mid) < rate else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Consistency:
    """What acceptance says about a measured speed-up."""

    alpha: float | None
    draft_length: float | None
    expected_accepted_length: float | None
    source: LengthSource | None
    tokens_per_step: float | None
    step_cost: float | None
    predicted_speedup: float | None
    unexplained: bool | None
    reason: str | None


def consistency(
    *,
    drafted: int | None,
    accepted: int | None,
    draft_length: float | None,
    per_position: dict[int, int] | None,
    steps: int | None,
    tokens_per_step: float | None,
    step_cost: float | None,
    ci: tuple[float, float] | None,
) -> Consistency:
    """E[L] (from the per-position curve when given, else the formula; 1 when nothing was drafted),
    the predicted speed-up T / step cost, and whether the interval's low end lies above T, the
    tokens per target step (unexplained; E[L] stands in when T is unknown)."""
    k = draft_length if draft_length and draft_length > 0 else None
    if drafted is None or accepted is None:  # the server reported no draft counts: nothing to say
        return Consistency(None, k, None, None, None, None, None, None, None)
    alpha: float | None = None
    source: LengthSource | None = "formula"
    el: float | None
    if drafted == 0:  # nothing drafted here: every step yields one token, α is undefined
        el, what = 1.0, "0 tokens drafted"
    else:
        rate = accepted / drafted
        alpha = alpha_from_rate(rate, k) if k else None
        what = f"{accepted} of {drafted} drafted tokens accepted"
        if per_position and steps:
            el, source = 1.0 + sum(per_position.values()) / steps, "per-position"
        elif k is not None and alpha is not None:
            el = expected_accepted_length(alpha, k)
        else:
            el, source = None, None
    predicted = tokens_per_step / step_cost if tokens_per_step and step_cost else None
    bound = tokens_per_step if tokens_per_step is not None else el
    unexplained = None if ci is None or bound is None else ci[0] > bound + 1e-9
    reason = None
    if ci is not None and bound is not None and unexplained:
        places = 2 if round(ci[0], 2) > round(bound, 2) else 4  # 1.003 above 1.00 must not read "1.00 > 1.00"
        reason = (
            f"{what}: at most {bound:.{places}f} tokens per target step, yet the interval's low end is "
            f"{ci[0]:.{places}f}; the speed-up does not come from speculation"
        )
    return Consistency(alpha, k, el, source, tokens_per_step, step_cost, predicted, unexplained, reason)
