"""The acceptance prior: what a draft's per-token acceptance is expected to be before it is measured.

logit(alpha) = a + b*log10(draft/target parameters) + c*[token lists differ]. Its stated default
passes through alpha 0.60 at a 1:100 draft and 0.95 at 1:1 (the same weights at another quant),
c = -1 (a second tokenizer that llama.cpp admits still splits text differently), sigma 0.8 logits:
assumptions, not measurements. Every measured model-drafted pair in the registry refits it by
ridge least squares, the default counting as PRIOR_WEIGHT pairs, so a registry with runs soon
outweighs it. The sizes it reads (parameters, weight bytes, an MTP head's share) and a file's
family (name stem and token list) live here too: audit/draft_prediction.py predicts from them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.schemas.drafts import PriorFit

if TYPE_CHECKING:
    from specreg.schemas.gguf import GGUFSummary

DEFAULT_PRIOR = (2.944, 1.269, -1.0)  # logit 0.95 at ratio 1; +1.269 per decade: logit 0.60 at 1:100
DEFAULT_SIGMA = 0.8
PRIOR_WEIGHT = 2.0  # the default counts as this many measured pairs
_CLIP = (0.02, 0.98)  # alpha kept inside for the logit
_SIZE_WORDS = ("instruct", "chat", "base", "it", "gguf")


def logit(p: float) -> float:
    p = min(max(p, _CLIP[0]), _CLIP[1])
    return math.log(p / (1 - p))


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-max(-50.0, min(50.0, x))))


def name_stem(name: str | None) -> str | None:
    """`SmolLM2-135M-Instruct` -> `smollm2`: the family part of a model name."""
    if not name:
        return None
    kept = []
    for w in name.replace("_", "-").replace(" ", "-").split("-"):
        low = w.lower()
        if not low or low in _SIZE_WORDS or (low[:-1].replace(".", "").isdigit() and low[-1] in "kmbt"):
            break
        kept.append(low)
    return "-".join(kept) or None


def family(s: GGUFSummary | None) -> tuple[str | None, str | None]:
    """(name stem, token list SHA-256): two files of one family share both."""
    if s is None:
        return None, None
    return name_stem(s.name), s.tokenizer.tokens_sha256


def weight_bytes(s: GGUFSummary) -> int:
    return max(1, s.file_size - s.data_offset) if s.data_offset else max(1, s.file_size)


def size_ratio(target: GGUFSummary, draft: GGUFSummary) -> float:
    """draft / target parameters (weight bytes when a count is missing), kept within [1e-4, 1]."""
    if target.parameter_count and draft.parameter_count:
        r = draft.parameter_count / target.parameter_count
    else:
        r = weight_bytes(draft) / weight_bytes(target)
    return min(1.0, max(1e-4, r))


def bytes_ratio(target: GGUFSummary, draft: GGUFSummary) -> float:
    return weight_bytes(draft) / weight_bytes(target)


def mtp_ratio(t: GGUFSummary) -> float:
    """An MTP head's share of the target: its next-n layers over all blocks."""
    n = t.speculative.nextn_predict_layers or 1
    return min(1.0, max(1e-4, n / max(1, (t.block_count or n))))


def _solve3(m: list[list[float]], v: list[float]) -> list[float] | None:
    """Gaussian elimination for a 3x3 system (None when singular)."""
    a = [[*row, v[i]] for i, row in enumerate(m)]
    for i in range(3):
        p = max(range(i, 3), key=lambda r: abs(a[r][i]))
        if abs(a[p][i]) < 1e-12:
            return None
        a[i], a[p] = a[p], a[i]
        for r in range(3):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i], strict=True)]
    return [a[i][3] / a[i][i] for i in range(3)]


@dataclass(frozen=True)
class Point:
    """One measured model-drafted pair as the prior sees it."""

    key: tuple[str, str | None, str]
    log_ratio: float
    differs: float
    alpha: float
    cost_offset: float | None
    speedup: float | None


def fit_prior(points: list[Point]) -> PriorFit:
    """Ridge least squares on logit(alpha), shrunk toward DEFAULT_PRIOR with PRIOR_WEIGHT."""
    lam = PRIOR_WEIGHT
    xtx = [[lam if i == j else 0.0 for j in range(3)] for i in range(3)]
    xty = [lam * b for b in DEFAULT_PRIOR]
    for p in points:
        x = (1.0, p.log_ratio, p.differs)
        y = logit(p.alpha)
        for i in range(3):
            xty[i] += x[i] * y
            for j in range(3):
                xtx[i][j] += x[i] * x[j]
    beta = _solve3(xtx, xty) or list(DEFAULT_PRIOR)
    resid = sum((logit(p.alpha) - (beta[0] + beta[1] * p.log_ratio + beta[2] * p.differs)) ** 2 for p in points)
    sigma = math.sqrt((resid + lam * DEFAULT_SIGMA**2) / (len(points) + lam))
    offs = sorted(p.cost_offset for p in points if p.cost_offset is not None)
    how = (
        "the stated default only (no measured pairs here)"
        if not points
        else f"ridge least squares on {len(points)} measured pair(s), the default counting as {PRIOR_WEIGHT:g}"
    )
    return PriorFit(
        a=beta[0], b=beta[1], c=beta[2], sigma=sigma, n_pairs=len(points), how=how,
        draft_cost_offset=max(0.0, offs[len(offs) // 2]) if offs else 0.0, n_cost_pairs=len(offs),
    )  # fmt: skip
