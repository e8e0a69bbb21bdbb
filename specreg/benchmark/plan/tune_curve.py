"""`--tune`'s step-cost curve: the predicted speed-up at every draft length from one profile.

Its own module because `specreg drafts` ranks every candidate through it and needs nothing
else of the tuner: `tune.py` (the tuner, which measures) pulls in the run's schemas and
statistics, a large share of `drafts`' start-up. `tune.py` re-exports
these names; this is their one owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from specreg.benchmark.store import stepcost

LENGTHS = range(1, 33)  # the candidates predicted: --spec-draft-n-max 1..32

ProfileSource = Literal["per-position", "geometric"]


@dataclass(frozen=True)
class Profile:
    """What one group of the first pass says about every draft length."""

    survival: tuple[float, ...]  # S(1..K): share of drafting steps whose j-th drafted token was accepted
    source: ProfileSource
    draft_share: float  # f: target steps that carried a draft, per target step
    decode_ms: float  # t_d, the baseline's
    prompt_ms: float | None  # t_p, the baseline's (None: v = 1, its lower bound)
    draft_cost: float  # r, one draft-model decode in baseline decodes
    # end to end, over the units both ran: the baseline's total and decode time, and the first
    # pass's time outside its decode (prompt, drafting set-up, HTTP), which no k changes
    base_total_ms: float = 0.0
    base_decode_ms: float = 0.0
    other_ms: float = 0.0
    # v(k) for k = 1.. measured by the target's machine probe (stepcost.probe_prices); where it
    # holds no k, v is priced from the run's own prompt time (its lower bound)
    verify: tuple[float, ...] = ()

    def verify_cost(self, k: int) -> float:
        """v(k): the probe's where it has one, else max(1, (k+1) t_p / t_d), else 1."""
        if 0 < k <= len(self.verify):
            return self.verify[k - 1]
        return stepcost.verify_cost(k, self.decode_ms, self.prompt_ms) if self.prompt_ms is not None else 1.0

    def accepted(self, k: int) -> float:
        """sum_{j<=k} S(j), the curve continued past its end at its second half's ratio."""
        s = self.survival
        head = sum(s[:k])
        if k <= len(s) or not s or s[-1] <= 0:
            return head
        half = len(s) // 2
        ref = s[half - 1] if half >= 1 else 1.0
        span = len(s) - half
        q = min(1.0, (s[-1] / ref) ** (1.0 / span)) if ref > 0 and span > 0 else 0.0
        extra = k - len(s)
        tail = s[-1] * (q * extra if q >= 1.0 else q * (1.0 - q**extra) / (1.0 - q))
        return head + tail

    def predict(self, k: int) -> float | None:
        """T(k) / cost(k): the decode speed-up at draft length k."""
        f, r = self.draft_share, self.draft_cost
        v = self.verify_cost(k)
        cost = (1.0 - f) + f * v + (f * k + 1.0) * r
        return (1.0 + f * self.accepted(k)) / cost if cost > 0 else None

    def predict_end_to_end(self, k: int) -> float | None:
        """The decode prediction carried to what is measured, the whole request: the baseline's
        total over the first pass's time outside decode plus the baseline's decode sped up."""
        p = self.predict(k)
        if p is None or p <= 0 or self.base_total_ms <= 0:
            return None
        return self.base_total_ms / (self.other_ms + self.base_decode_ms / p)


def curve(profile: Profile, *, end_to_end: bool = False) -> dict[int, float]:
    """Every candidate's predicted speed-up (the decode phase's, or carried to the whole request)."""
    at = profile.predict_end_to_end if end_to_end else profile.predict
    return {k: p for k in LENGTHS if (p := at(k)) is not None}
