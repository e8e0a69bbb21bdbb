"""Mismatch triage: the baseline's own top candidates where a greedy output first differs.

Greedy speculative decoding is meant to reproduce the baseline token for token, but the target
scores a draft in a batch (verification) where the baseline scored one token at a time, and
the two computations round differently. Where the baseline's top two tokens were nearly tied,
that difference alone can flip the choice: a *near tie*, the known numerical effect of batched
verification, not a fault. Where the baseline was confident and the condition still chose
another token, something really changed: a *confident divergence*.

The record holds facts (log-probabilities from the baseline server, `n_probs` on /completion,
pre-sampling: the softmax over every logit); the class is drawn from them against a margin, so
an audit can judge with its policy's margin (`quality.near_tie_margin`) what a run stored.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, Field

TriageClass = Literal["near tie", "divergence", "unclassified"]
# ln p(baseline's token) - ln p(condition's token) at or below this: a near tie. 0.1 nats is a
# probability ratio of 0.905: the two tokens' probabilities within about 10% of each other.
NEAR_TIE_MARGIN = 0.1
TOP_CANDIDATES = 20  # n_probs asked for: the floor it leaves bounds an unlisted token's probability


class TopToken(BaseModel):
    """One of the baseline's top candidates at a position."""

    id: int
    text: str
    logprob: float


class Triage(BaseModel):
    """A mismatched row's first differing token, judged on the baseline's distribution there."""

    position: int | None = None  # token index of the first difference (None: not known)
    base_id: int | None = None  # the baseline's token there
    base_text: str | None = None
    base_logprob: float | None = None
    row_id: int | None = None  # the condition's token there
    row_text: str | None = None
    row_logprob: float | None = None  # None: not among the baseline's top candidates
    floor: float | None = None  # the lowest listed log-probability: an unlisted token's is below it
    top: list[TopToken] = Field(default_factory=list)  # the baseline's top candidates, best first
    note: str | None = None  # why it could not be judged (then it is "unclassified")

    def gap(self) -> float | None:
        """ln p(baseline's token) - ln p(condition's token); for a token below the listed ones a
        lower bound (the gap to the floor); None when it cannot be said."""
        if self.note is not None or self.base_logprob is None:
            return None
        if self.row_logprob is not None:
            return abs(self.base_logprob - self.row_logprob)
        return None if self.floor is None else self.base_logprob - self.floor

    def kind(self, margin: float = NEAR_TIE_MARGIN) -> TriageClass:
        """A near tie only when the condition's token is listed within `margin`; a divergence when
        even its bound is past it; otherwise (not judged, or an unlisted token whose bound is
        within the margin) unclassified, which counts as a divergence wherever it is judged."""
        g = self.gap()
        if g is None:
            return "unclassified"
        if self.row_logprob is not None:
            return "near tie" if g <= margin else "divergence"
        return "divergence" if g > margin else "unclassified"

    def text(self, margin: float = NEAR_TIE_MARGIN) -> str:
        """One line: the class, both tokens with their probabilities and the gap against the margin."""
        k = self.kind(margin)
        if self.note is not None:
            return f"unclassified: {self.note}"
        base = f"baseline {_tok(self.base_text, self.base_id)} p {_p(self.base_logprob)}"
        if self.row_logprob is not None:
            row = f"this {_tok(self.row_text, self.row_id)} p {_p(self.row_logprob)}"
        else:
            row = f"this {_tok(self.row_text, self.row_id)} p < {_p(self.floor)} (not in the top {len(self.top)})"
        g = self.gap()
        cmp = "" if g is None else f"; log gap {g:.3f} {'<=' if g <= margin else '>'} {margin:g}"
        at = f"token {self.position}: " if self.position is not None else ""
        return f"{k}, {at}{base}, {row}{cmp}"


def worst(triages: list[Triage | None]) -> Triage | None:
    """The most severe of several rows' triages, for one prompt of one condition, under any margin:
    an untriaged row (None) first (nothing says it was a tie), then one that could not be judged,
    then a token the baseline did not list, then the largest gap."""
    if not triages or any(t is None for t in triages):
        return None

    def severity(t: Triage) -> tuple[int, float]:
        g = t.gap()
        return (2, 0.0) if g is None else (1 if t.row_logprob is None else 0, g)

    return max((t for t in triages if t is not None), key=severity)


def _p(logprob: float | None) -> str:
    if logprob is None:
        return "?"
    p = math.exp(logprob)
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _tok(text: str | None, tid: int | None) -> str:
    import json

    shown = json.dumps(text, ensure_ascii=False) if text is not None else "?"
    return f"{shown} (id {tid})" if tid is not None else shown
