"""How fast a candidate draft would be, before it is measured: acceptance, then the step-cost model.

`specreg drafts` ranks every admitted candidate by a predicted decode speed-up. The acceptance
alpha (per drafted token) comes from the best evidence there is, in this order:

1. **this pair**: runs of exactly this (target, draft, method) in the registry (alpha and the
   draft's decode cost r as those runs measured them, bench_summaries' `all` stratum);
2. **same families**: runs of other pairs whose target and draft are of the same families as
   these (family: the name without size or variant words, and the token list's SHA-256), each
   moved to this candidate's size (its logit(alpha) along the prior's slope b, its r as its
   cost offset plus this candidate's bytes ratio): a family's name carries no size;
3. **prior**: logit(alpha) = a + b*log10(draft/target parameters) + c*[token lists differ].
   Its stated default passes through alpha 0.60 at a 1:100 draft and 0.95 at 1:1 (the same
   weights at another quant), c = -1 (a second tokenizer that llama.cpp admits still splits
   text differently), sigma 0.8 logits: assumptions, not measurements. Every measured
   model-drafted pair in the registry refits it by ridge least squares, the default counting
   as PRIOR_WEIGHT pairs, so a registry with runs soon outweighs it.

The draft cost r, where no run measured it: r = offset + draft/target weight bytes (a decode
reads every weight once), the offset the median of (measured r - bytes ratio) over this
target's other measured pairs when the registry has any run of it (the fixed part of a decode
is the target's and its machine's), else over every measured pair (0 without any). alpha and
r then go through tune.py's step-cost curve (geometric acceptance S(j) = alpha^j, every step
drafting, verify cost at its lower bound 1) and the best draft length k is taken: the
speed-up a `--tune` run would start from.

The error is measured, not assumed: every pair with runs is predicted as if it had none (its
family's other pairs, else the prior refitted without it) and measured / predicted is kept; its
range widens every family and prior prediction. N-gram methods need no draft: their speed-up is
this target's measured one, else the median over same-family targets, else unknown (1.0, with
the range of every n-gram run in the registry, or NGRAM_UNKNOWN_RANGE without any).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specreg.benchmark.plan import tune_curve as tune
from specreg.schemas.drafts import ErrorStat, Prediction, PriorFit
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.gguf import GGUFSummary

DEFAULT_PRIOR = (2.944, 1.269, -1.0)  # logit 0.95 at ratio 1; +1.269 per decade: logit 0.60 at 1:100
DEFAULT_SIGMA = 0.8
PRIOR_WEIGHT = 2.0  # the default counts as this many measured pairs
NGRAM_UNKNOWN_RANGE = (0.8, 1.5)  # no n-gram run anywhere: text repetition decides, unknown here
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


@dataclass
class Measured:
    """Every `all`-stratum summary of one (target, draft, method) that ran to the end."""

    target: str
    draft: str | None
    method: str
    alphas: list[tuple[float, int]] = field(default_factory=list)  # (alpha, drafted tokens)
    costs: list[float] = field(default_factory=list)
    speedups: list[tuple[str, float, tuple[float, float] | None]] = field(default_factory=list)  # (run, x, ci)

    @property
    def alpha(self) -> float | None:
        w = sum(n for _, n in self.alphas)
        return sum(a * n for a, n in self.alphas) / w if w else None

    @property
    def draft_cost(self) -> float | None:
        xs = sorted(self.costs)
        return xs[len(xs) // 2] if xs else None

    @property
    def speedup(self) -> tuple[float, tuple[float, float] | None] | None:
        """The newest run's end-to-end speed-up and interval."""
        if not self.speedups:
            return None
        _, x, ci = max(self.speedups, key=lambda s: s[0])
        return x, ci


def measured_runs(reg: Registry) -> dict[tuple[str, str | None, str], Measured]:
    """Every measured (target, draft, method) from the stored summaries (no request rows read)."""
    out: dict[tuple[str, str | None, str], Measured] = {}
    sql = (
        "SELECT s.run_id, s.target_sha256, s.draft_sha256, json_extract(s.summary_json, '$.method', '$.status', "
        "'$.alpha', '$.drafted', '$.draft_cost', '$.speedup', '$.speedup_ci95') FROM bench_summaries s "
        "WHERE s.stratum = 'all'"
    )
    for run_id, target, draft, fields in reg.conn.execute(sql):
        method, status, alpha, drafted, cost, speedup, ci = json.loads(fields)
        if method == BASELINE or status != "ok" or not isinstance(method, str):
            continue
        key = (target, draft if method in MODEL_DRAFTED and method != "draft-mtp" else None, method)
        m = out.setdefault(key, Measured(*key))
        if isinstance(alpha, (int, float)) and isinstance(drafted, int) and drafted > 0:
            m.alphas.append((float(alpha), drafted))
        if isinstance(cost, (int, float)) and method in MODEL_DRAFTED:
            m.costs.append(float(cost))
        if isinstance(speedup, (int, float)) and speedup > 0:
            pair = (float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None
            m.speedups.append((run_id, float(speedup), pair))
    return out


def curve_best(alpha: float, r: float) -> tuple[int, float]:
    """tune.py's curve for geometric acceptance, every step drafting, verify cost 1: best (k, x)."""
    prof = tune.Profile(tuple(alpha**j for j in tune.LENGTHS), "geometric", 1.0, 1.0, None, max(0.0, r))
    c = tune.curve(prof)
    k = max(c, key=lambda k: (round(c[k], 6), -k))
    return k, c[k]


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


@dataclass
class Book:
    """What the registry's runs say, indexed for predicting many candidates."""

    measured: dict[tuple[str, str | None, str], Measured]
    summaries: dict[str, GGUFSummary]
    points: list[Point]
    prior: PriorFit
    error: ErrorStat
    ngram_range: tuple[float, float]

    def families(self, sha: str | None) -> tuple[str | None, str | None]:
        return family(self.summaries.get(sha)) if sha else (None, None)


def _point(m: Measured, summaries: dict[str, GGUFSummary]) -> Point | None:
    t, d = summaries.get(m.target), summaries.get(m.draft or "")
    alpha = m.alpha
    if alpha is None or t is None or m.method not in MODEL_DRAFTED:
        return None
    if m.method == "draft-mtp":
        ratio = mtp_ratio(t)
        differs = 0.0
        br = ratio
    elif d is None:
        return None
    else:
        ratio, br = size_ratio(t, d), bytes_ratio(t, d)
        differs = float(t.tokenizer.tokens_sha256 != d.tokenizer.tokens_sha256)
    cost = m.draft_cost
    sp = m.speedup
    return Point((m.target, m.draft, m.method), math.log10(ratio), differs, alpha,
                 None if cost is None else cost - br, sp[0] if sp else None)  # fmt: skip


def mtp_ratio(t: GGUFSummary) -> float:
    """An MTP head's share of the target: its next-n layers over all blocks."""
    n = t.speculative.nextn_predict_layers or 1
    return min(1.0, max(1e-4, n / max(1, (t.block_count or n))))


def build_book(reg: Registry) -> Book:
    """Read every measured pair once, fit the prior and measure its error."""
    measured = measured_runs(reg)
    shas = {m.target for m in measured.values()} | {m.draft for m in measured.values() if m.draft}
    recs = reg.get_artifacts(shas, with_summary=True)
    summaries = {sha: r.summary for sha, r in recs.items() if r.summary is not None}
    points = [p for m in measured.values() if (p := _point(m, summaries)) is not None]
    ngram = [s[1] for m in measured.values() if m.method not in MODEL_DRAFTED for s in m.speedups]
    book = Book(measured, summaries, points, fit_prior(points), ErrorStat(n_pairs=0),
                (min(ngram), max(ngram)) if ngram else NGRAM_UNKNOWN_RANGE)  # fmt: skip
    book.error = measure_error(book)
    return book


def _family_alpha(
    book: Book,
    target: str | None,
    draft: str | None,
    method: str,
    at: tuple[float, float],
    prior: PriorFit,
    skip: object = None,
) -> tuple[float, float | None, int] | None:
    """(alpha, r, pairs) over other measured pairs of the same target and draft families, each
    moved to this candidate's size: its logit(alpha) along the prior's slope b by the difference
    in log10 size ratio, its r as its cost offset plus this candidate's weight-bytes ratio
    (`at`: this candidate's log10 size ratio and bytes ratio). A family's name carries no size
    (Cyc-100M and Cyc-1B-copy are one family), so a one-layer draft's alpha and measured r,
    taken as they are for a full-size copy (or the other way round), would mispredict it by far."""
    tf, df = book.families(target), book.families(draft)
    if tf == (None, None):
        return None
    log_ratio, br = at
    alphas, offs = [], []
    for p in book.points:
        t, d, m = p.key
        if p.key == skip or m != method or (t, d) == (target, draft):
            continue
        if book.families(t) != tf or (draft is not None and book.families(d) != df):
            continue
        alphas.append(sigmoid(logit(p.alpha) + prior.b * (log_ratio - p.log_ratio)))
        if p.cost_offset is not None:
            offs.append(p.cost_offset)
    if not alphas:
        return None
    offs.sort()
    return sum(alphas) / len(alphas), max(0.0, offs[len(offs) // 2]) + br if offs else None, len(alphas)


def step_cost(book: Book, target_sha: str | None, br: float, prior: PriorFit, skip: object = None) -> float:
    """A draft decode's cost r in target decodes where no run of this pair measured it: offset +
    draft/target weight bytes. The offset is this target's own (the median over its other
    measured pairs) when the registry has any run of it, else the prior's over every pair: a
    decode's fixed cost (the server's per-step work, kernel launches) is the target's and its
    machine's, not the draft's, and one global offset mixes a tiny target, where it is most of
    a decode, with a real one, where weight reads are."""
    offs = sorted(
        p.cost_offset
        for p in book.points
        if p.key[0] == target_sha and p.key != skip and p.cost_offset is not None and p.key[2] != "draft-mtp"
    )
    if offs:
        return max(0.0, offs[len(offs) // 2]) + br
    return prior.draft_cost_offset + br


def _prior_alpha(prior: PriorFit, log_ratio: float, differs: float) -> tuple[float, float, float]:
    mu = prior.a + prior.b * log_ratio + prior.c * differs
    return sigmoid(mu), sigmoid(mu - prior.sigma), sigmoid(mu + prior.sigma)


def _ratios(target: GGUFSummary, draft: GGUFSummary | None, method: str) -> tuple[float, float, float]:
    """(log10 size ratio, tokens differ, weight-bytes ratio) of a candidate."""
    if method == "draft-mtp" or draft is None:
        r = mtp_ratio(target)
        return math.log10(r), 0.0, r
    return (
        math.log10(size_ratio(target, draft)),
        float(target.tokenizer.tokens_sha256 != draft.tokenizer.tokens_sha256),
        bytes_ratio(target, draft),
    )


def predict(
    book: Book,
    method: str,
    target: GGUFSummary,
    draft: GGUFSummary | None,
    target_sha: str | None,
    draft_sha: str | None,
    *,
    skip: object = None,
    prior: PriorFit | None = None,
) -> Prediction:
    """The candidate's predicted speed-up, from the best evidence there is (module docstring)."""
    if method not in MODEL_DRAFTED:
        return _predict_ngram(book, method, target, target_sha)
    prior = prior or book.prior
    key = (target_sha or "", draft_sha if method != "draft-mtp" else None, method)
    log_ratio, differs, br = _ratios(target, draft, method)
    r_prior = step_cost(book, target_sha, br, prior, skip)
    own = book.measured.get(key) if key != skip else None
    if own is not None and own.alpha is not None:
        alpha, r = own.alpha, own.draft_cost if own.draft_cost is not None else r_prior
        k, x = curve_best(alpha, r)
        sp = own.speedup
        rng = (min(x, sp[1][0]), max(x, sp[1][1])) if sp and sp[1] else (x, x)
        n = len(own.alphas)
        return Prediction(source="this pair", evidence=f"{n} run{'s' if n != 1 else ''} of this pair", alpha=alpha,
                          alpha_range=(alpha, alpha), draft_cost=r, draft_length=k, speedup=x, speedup_range=rng,
                          measured_speedup=sp[0] if sp else None, measured_ci95=sp[1] if sp else None)  # fmt: skip
    fam = _family_alpha(
        book, target_sha, draft_sha if method != "draft-mtp" else None, method, (log_ratio, br), prior, skip
    )
    if fam is not None:
        alpha, r_fam, n = fam
        # the range: the prior's residual spread over the n pairs it rests on (a family pair of
        # another size is moved along the prior's slope, so it is as uncertain as the prior,
        # less so the more pairs agree); a point range put no measured pair inside it
        half = prior.sigma / math.sqrt(n)
        lo_a, hi_a = sigmoid(logit(alpha) - half), sigmoid(logit(alpha) + half)
        r = r_fam if r_fam is not None else r_prior
        source, evidence = "same families", f"{n} pair{'s' if n != 1 else ''} of the same families"
    else:
        alpha, lo_a, hi_a = _prior_alpha(prior, log_ratio, differs)
        r = r_prior
        source, evidence = "prior", f"prior at size ratio {10**log_ratio:.3g}" + (", other tokens" if differs else "")
    k, x = curve_best(alpha, r)
    lo = curve_best(lo_a, r)[1]
    hi = curve_best(hi_a, r)[1]
    e = book.error
    lo, hi = lo * (e.low if e.low is not None else 1.0), hi * (e.high if e.high is not None else 1.0)
    return Prediction(source=source, evidence=evidence, alpha=alpha, alpha_range=(lo_a, hi_a), draft_cost=r,  # type: ignore[arg-type]
                      draft_length=k, speedup=x, speedup_range=(min(lo, x), max(hi, x)))  # fmt: skip


def _predict_ngram(book: Book, method: str, target: GGUFSummary, target_sha: str | None) -> Prediction:
    own = book.measured.get((target_sha or "", None, method))
    if own is not None and own.speedup is not None:
        x, ci = own.speedup
        n = len(own.speedups)
        return Prediction(source="measured n-gram", evidence=f"{n} run{'s' if n != 1 else ''} on this target",
                          speedup=x, speedup_range=ci or (x, x), measured_speedup=x, measured_ci95=ci,
                          alpha=own.alpha)  # fmt: skip
    fam = family(target)
    xs = sorted(
        s[1]
        for m in book.measured.values()
        if m.method == method and m.target != target_sha and family(book.summaries.get(m.target)) == fam
        for s in m.speedups
    )
    if xs and fam != (None, None):
        return Prediction(source="same families", evidence=f"{len(xs)} run(s) on targets of the same family",
                          speedup=xs[len(xs) // 2], speedup_range=(xs[0], xs[-1]))  # fmt: skip
    lo, hi = book.ngram_range
    return Prediction(source="none", evidence="no run of this method on this family: unknown",
                      speedup=1.0, speedup_range=(min(lo, 1.0), max(hi, 1.0)))  # fmt: skip


def measure_error(book: Book) -> ErrorStat:
    """measured / predicted for every measured model-drafted pair, predicted without its own runs."""
    ratios: list[float] = []
    pairs: list[dict[str, object]] = []
    for p in book.points:
        if p.speedup is None:
            continue
        t = book.summaries.get(p.key[0])
        d = book.summaries.get(p.key[1] or "")
        if t is None:
            continue
        others = [q for q in book.points if q.key != p.key]
        pred = predict(book, p.key[2], t, d, p.key[0], p.key[1], skip=p.key, prior=fit_prior(others))
        ratio = p.speedup / pred.speedup if pred.speedup > 0 else None
        if ratio is None:
            continue
        ratios.append(ratio)
        lo, hi = pred.speedup_range
        own = book.measured[p.key].speedup
        ci = own[1] if own else None
        pairs.append({"target": p.key[0], "draft": p.key[1], "method": p.key[2], "predicted": round(pred.speedup, 3),
                      "predicted_range": (round(lo, 3), round(hi, 3)), "measured": round(p.speedup, 3),
                      "measured_ci95": ci, "in_range": lo <= p.speedup <= hi, "source": pred.source,
                      "ratio": round(ratio, 3)})  # fmt: skip
    if not ratios:
        return ErrorStat(n_pairs=0)
    xs = sorted(ratios)
    q = (lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]) if len(xs) >= 10 else None
    low, high = (q(0.1), q(0.9)) if q else (xs[0], xs[-1])
    return ErrorStat(n_pairs=len(xs), low=low, median=xs[len(xs) // 2], high=high, pairs=pairs)
