"""What a speculative step costs, priced with what the same run measured, and the speed-up it predicts.

Acceptance alone does not say how fast a condition is: a target step that verifies many drafted
tokens costs more than a decode, and a draft model costs its own decodes. This model prices every
target step of a condition in *baseline decode steps*, t_d = the baseline's median
`predicted_ms / predicted_n` (same stratum, same concurrency), from costs measured in the same run:

  counts   N output tokens, A accepted and Dr drafted tokens (the group's requests' `timings`);
           k the condition's mean draft length (its /metrics counters: drafted / drafts);
           S = N − A target steps, of which D = Dr / k carried a draft and U = S − D did not.
  verify   v = max(1, (k + 1) · t_p / t_d)
           A step that checks k drafted tokens evaluates a batch of b = k + 1 tokens. It is never
           cheaper than one decode (a decode on a CPU or a small GPU batch is bound by reading
           the weights, which a batch reads once too), nor than b tokens of the same batched
           forward pass the server timed on the baseline's prompts: t_p = median
           `prompt_ms / prompt_n`. For a small b the first bound holds, for n-gram drafts of
           16-64 tokens the second one does: such a step costs several decodes. Both are lower
           bounds (a small batch uses the cores less well than a long prompt, and it attends to
           a longer context), so the prediction leans optimistic.
  draft    r = one draft-model decode, in baseline decode steps; 0 for n-gram methods (their
           draft is a lookup in the text). A draft model decodes G = Dr + S times: once per
           drafted token, and once per step to take in the target's token and sample the token
           it then stops at. Measured in the same condition: per request, the decode time the
           target's steps leave unexplained, per draft-model decode,
           r_i = (predicted_ms_i / t_d − U_i − D_i·v) / G_i, and r = max(0, median r_i) over all
           the condition's requests (t_d, t_p over all the baseline's; a median, because one
           request slowed by a busy machine would move a sum).
  step     c = (U + D·v + G·r) / S, the mean target step;
  predict  speed-up = N / (U + D·v + G·r) = T / c with T = N / S tokens per target step.

T = 1 + A / S is the seeds' E[L] = (1 − α^(k+1)) / (1 − α) only when every step drafts; n-gram
methods draft only where the text repeats, so E[L] over the steps that drafted can be 40 while T
is 1.1. T is also the bound: were every step one decode and drafting free, the decode phase would
be T times faster and the prompt phase no faster, so an interval whose low end lies above T is
not explained by acceptance. With nothing drafted, T = E[L] = 1 and the prediction is 1 / c.

The prediction is for the decode phase. The measured speed-up is end to end (prompt, decode,
HTTP), so with a long prompt it sits below the prediction. For a draft model r is fitted to the
condition's own decode time, so over `all` the prediction about restates the measured decode
speed-up; per stratum it moves with that stratum's acceptance. Nothing here is a tuned constant.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specreg.schemas.machine_probe import MachineProbe
    from specreg.schemas.request_row import RequestRow


@dataclass(frozen=True)
class Counts:
    """Token counts of one group of requests, with the condition's mean draft length k."""

    tokens: int  # N
    accepted: int  # A
    drafted: int  # Dr
    draft_length: float | None  # k (None: not known, so D cannot be told from U)

    @property
    def target_steps(self) -> int:
        """S = N − A: every target step yields one token of its own plus the drafts it accepts."""
        return max(self.tokens - self.accepted, 0)

    @property
    def tokens_per_step(self) -> float | None:
        """T = N / S; None without a step."""
        return self.tokens / self.target_steps if self.target_steps else None

    @property
    def drafting_steps(self) -> float | None:
        """D = Dr / k, the steps that carried a draft (at most S); None when k is unknown."""
        if self.drafted == 0:
            return 0.0
        if not self.draft_length or self.draft_length <= 0:
            return None
        return min(self.drafted / self.draft_length, float(self.target_steps))


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def decode_ms_per_token(rows: Iterable[RequestRow]) -> float | None:
    """t_d: median `predicted_ms / predicted_n` over successful requests."""
    return _median([r.predicted_ms / r.output_tokens for r in rows if r.ok and r.predicted_ms and r.output_tokens])


def prompt_ms_per_token(rows: Iterable[RequestRow]) -> float | None:
    """t_p: median `prompt_ms / prompt_n` over successful requests (None for runs that did not store it)."""
    return _median([r.prompt_ms / r.prompt_n for r in rows if r.ok and r.prompt_ms and r.prompt_n])


def counts(rows: Iterable[RequestRow], draft_length: float | None) -> Counts:
    """N, A, Dr summed over successful requests; a request without draft counts drafted nothing
    (llama.cpp leaves `draft_n` out of `timings` when it is 0)."""
    ok = [r for r in rows if r.ok and r.output_tokens]
    return Counts(
        tokens=sum(r.output_tokens or 0 for r in ok),
        accepted=sum(r.draft_n_accepted or 0 for r in ok),
        drafted=sum(r.draft_n or 0 for r in ok),
        draft_length=draft_length,
    )


def verify_cost(draft_length: float, decode_ms: float, prompt_ms: float) -> float:
    """v = max(1, (k + 1) · t_p / t_d): a step verifying k drafted tokens, in decode steps."""
    return max(1.0, (draft_length + 1.0) * prompt_ms / decode_ms)


def _target_units(c: Counts, v: float | None) -> float | None:
    """U + D·v: the target's steps in decode steps (None when D, or v for D > 0, is unknown)."""
    d = c.drafting_steps
    if d is None or (d > 0 and v is None):
        return None
    return (c.target_steps - d) + d * (v or 0.0)


def draft_model_decodes(c: Counts) -> int:
    """G = Dr + S."""
    return c.drafted + c.target_steps


def draft_cost(
    c: Counts, measured_decode_ms: float, decode_ms: float, v: float | None, *, clamp: bool = True
) -> float | None:
    """r: the decode time the target steps leave unexplained, per draft-model decode (never below 0
    unless `clamp` is off: one request's estimate, to take a median of); None without a divisor."""
    target = _target_units(c, v)
    g = draft_model_decodes(c)
    if target is None or g <= 0 or decode_ms <= 0:
        return None
    r = (measured_decode_ms / decode_ms - target) / g
    return max(0.0, r) if clamp else r


def fitted_draft_cost(
    rows: Iterable[RequestRow],
    base_rows: Iterable[RequestRow],
    draft_length: float | None,
    verify: float | None = None,
) -> float | None:
    """r of a condition: the median over its requests of each one's r (one slow request on a busy
    machine moves a sum, not a median), with t_d and t_p from all the baseline's requests; `verify`:
    v measured otherwise (a machine probe's), else its lower bound from t_p."""
    base = list(base_rows)
    t_d, t_p = decode_ms_per_token(base), prompt_ms_per_token(base)
    if not t_d:
        return None
    v = (
        verify
        if verify is not None
        else verify_cost(draft_length, t_d, t_p)
        if draft_length and t_p is not None
        else None
    )
    each = []
    for r in rows:
        if r.ok and r.output_tokens and r.predicted_ms is not None:
            one = draft_cost(counts([r], draft_length), r.predicted_ms, t_d, v, clamp=False)
            if one is not None:
                each.append(one)
    mid = _median(each)
    return None if mid is None else max(0.0, mid)


@dataclass(frozen=True)
class Prediction:
    """The priced steps of one group, all in baseline decode steps."""

    tokens_per_step: float | None
    verify_cost: float | None
    draft_cost: float | None
    step_cost: float | None
    predicted_speedup: float | None


def predict(c: Counts, v: float | None, r: float | None, model_drafted: bool) -> Prediction:
    """c = (U + D·v + G·r) / S and the speed-up N / (U + D·v + G·r); r counts only for a draft model."""
    t = c.tokens_per_step
    r_used = r if model_drafted else 0.0
    target = _target_units(c, v)
    if t is None or r_used is None or target is None:
        return Prediction(t, v, r_used, None, None)
    units = target + draft_model_decodes(c) * r_used
    return Prediction(t, v, r_used, units / c.target_steps, c.tokens / units if units > 0 else None)


# -- prices from a machine probe (benchmark/run/machine_probe.py) ---------------------------------
#
# Before a pair has run, the same two prices come from each model measured alone: v(k), a
# verify step of k drafted tokens in target decodes, and r, the draft's decode over the
# target's. A verify step is one forward pass like a decode, over k more tokens: it costs a
# decode step plus k tokens at the batch's price per token, the slope b of the target's prompt
# batch times against their size (Theil-Sen, the median of the pairwise slopes, so one slow size
# moves it little; the intercept is left out, as it holds what a prompt pays and a verify step
# does not: a request's start, the sampler's set-up). A prompt batch computes logits for its
# last token only, a verify step for each token it checks: each of the k costs b s / (1 - s)
# more, s the output matrix's share of the weights (`MachineProbe.output_share`, from the
# header). So v(k) = 1 + k b (1 + s / (1 - s)) / t_d. Contention only ever slows a request, so
# each time is taken at the probe's fastest round, and its spread toward the second fastest: on
# a quiet machine the two agree, on a shared one the range says how far they do not.


def robust_line(points: dict[int, float]) -> tuple[float, float] | None:
    """(a, b) of ms = a + b n through (n tokens -> ms): b the median of the pairwise slopes, a the
    median of ms - b n (Theil-Sen); None with fewer than two sizes."""
    pts = sorted((float(n), ms) for n, ms in points.items() if n > 0 and ms > 0)
    slopes = [(y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(pts) for x2, y2 in pts[i + 1 :] if x2 > x1]
    if not slopes:
        return None
    b = _median(slopes) or 0.0
    return _median([y - b * x for x, y in pts]) or 0.0, b


def _fastest(values: list[float]) -> tuple[float, float] | None:
    """(fastest, second fastest) of some positive times (the one twice when it is alone)."""
    xs = sorted(v for v in values if v > 0)
    return (xs[0], xs[1] if len(xs) > 1 else xs[0]) if xs else None


@dataclass(frozen=True)
class Prices:
    """Step prices in target decodes from machine probes: v(k) for k = 1..len, and the draft's r
    (None without a draft probe), each with its low and high."""

    verify: tuple[float, ...]
    verify_low: tuple[float, ...]
    verify_high: tuple[float, ...]
    draft: float | None = None
    draft_low: float | None = None
    draft_high: float | None = None


def probe_prices(target: MachineProbe, draft: MachineProbe | None, lengths: int) -> Prices | None:
    """v(k) = 1 + k b (1 + s / (1 - s)) / t_d for k = 1..`lengths` and r = the draft's t_d / the
    target's (see above), each at the fastest rounds, low and high toward the second fastest;
    None when the target's probe cannot price a batch."""
    t = _fastest(target.decode_ms())
    sizes = {n for rnd in target.rounds for n in rnd.batch_ms}
    per = {n: f for n in sizes if (f := _fastest([rnd.batch_ms.get(n, 0.0) for rnd in target.rounds]))}
    fast = robust_line({n: f[0] for n, f in per.items()})
    slow = robust_line({n: f[1] for n, f in per.items()})
    if t is None or fast is None or slow is None:
        return None
    s = min(0.9, target.output_share or 0.0)

    def verify(line: tuple[float, float], t_d: float) -> tuple[float, ...]:
        per_token = max(0.0, line[1]) / (1 - s)  # the batch's price per token, with its logits
        return tuple(1.0 + k * per_token / t_d for k in range(1, lengths + 1))

    mid, low, high = verify(fast, t[0]), verify(fast, t[1]), verify(slow, t[0])
    d = _fastest(draft.decode_ms()) if draft is not None else None
    if d is None:
        return Prices(mid, low, high)
    return Prices(mid, low, high, d[0] / t[0], d[0] / t[1], d[1] / t[0])
