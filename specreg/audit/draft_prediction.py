"""How fast a candidate draft would be, before it is measured: acceptance, then the step-cost model.

`specreg drafts` ranks every admitted candidate by a predicted decode speed-up. The acceptance
alpha (per drafted token) comes from the best evidence there is, in this order:

1. **this pair**: runs of exactly this (target, draft, method) in the registry (alpha and the
   draft's decode cost r as those runs measured them, bench_summaries' `all` stratum; the
   verify step from the target's machine probe where there is one, as for every candidate);
2. **pair probe**: this pair run with the target on a few short prompts on this machine
   (benchmark/run/pair_probe.py): its acceptance and the speed-up it measured at its draft
   length, the prediction staying at that length;
3. **same families**: runs of other pairs whose target and draft are of the same families as
   these (family: the name without size or variant words, and the token list's SHA-256), each
   moved to this candidate's size (its logit(alpha) along the prior's slope b, its r as its
   cost offset plus this candidate's bytes ratio): a family's name carries no size;
4. **prior**: the acceptance prior of audit/acceptance_prior.py, refitted on every measured
   model-drafted pair in the registry.

The step prices, where no run of this pair measured them, come from the machine probes
(benchmark/run/machine_probe.py: each model started alone on this machine, this build, these
flags): v(k), the target's batch of k+1 tokens over its decode, and r, the draft's decode over
the target's (`stepcost.probe_prices`). Without a draft probe r = offset + draft/target weight
bytes (a decode reads every weight once), the offset the median of (measured r - bytes ratio)
over this target's other measured pairs when the registry has any run of it, else over every
measured pair (0 without any); without a target probe v(k) = 1, its lower bound (a GPU's). alpha,
r and v go through tune.py's step-cost curve (geometric acceptance S(j) = alpha^j, every step
drafting) and the best draft length k is taken: the speed-up a `--tune` run would start from.

The range carries every unknown at that k: acceptance (two of the prior's sigmas, a family's spread,
or this pair's runs), the prices (the probe's repetitions, fastest to slowest; without a probe,
hardware-blind: v(k) anywhere from 1, a GPU's verify, to k+1, a CPU's that costs a decode per
token, and r from the bytes ratio to 1, a decode as slow as the target's), and the step model
itself (MODEL_SPREAD, a stated assumption, until the registry's measured pairs measure it).
Its low end is the low acceptance at the high prices, its high end the other way round, each
times the model's spread.

The error is measured, not assumed: every pair with runs is predicted as if it had none (its
family's other pairs, else the prior refitted without it) and measured / predicted is kept,
priced as the candidates are (with probes: the pairs whose files have probes on this machine,
against their runs on this hardware class); it is the step model's spread once ten pairs
measure it, and widens the stated one before. N-gram methods need no draft: their speed-up is
this target's measured one, else the median over same-family targets, else unknown (1.0, with
the range of every n-gram run in the registry, or NGRAM_UNKNOWN_RANGE without any).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specreg.audit.acceptance_prior import (
    Point,
    bytes_ratio,
    family,
    fit_prior,
    logit,
    mtp_ratio,
    sigmoid,
    size_ratio,
)
from specreg.benchmark.plan import tune_curve as tune
from specreg.benchmark.store import stepcost
from specreg.schemas.drafts import CostSource, ErrorStat, Prediction, PriorFit
from specreg.schemas.methods import BASELINE, MODEL_DRAFTED

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.gguf import GGUFSummary
    from specreg.schemas.machine_probe import MachineProbe, PairProbe
    from specreg.servers.machine_key import MachineKey

NGRAM_UNKNOWN_RANGE = (0.8, 1.5)  # no n-gram run anywhere: text repetition decides, unknown here
# The step model's own error (measured end to end against a decode-phase model; the draft's and
# the verify step's work it prices as single decodes and prompt batches), before ten measured
# pairs measure it: an assumption, stated on the statistics page.
MODEL_SPREAD = (0.8, 1.15)
MODEL_SPREAD_PAIRS = 10  # measured pairs from which their spread replaces MODEL_SPREAD
# How far either side of the prior's logit(alpha) the acceptance range reaches, in sigmas: two, so
# that the range holds about as many pairs as a 95% interval would (one sigma left a fresh
# registry's measured pairs below the probed range as often as inside it).
ALPHA_Z = 2.0
# A pair probe (benchmark/run/pair_probe.py) measures this pair's acceptance on a few short prompts
# that are not the user's workload: its acceptance range keeps at least PROBE_SIGMA logits either side
# (times ALPHA_Z), a stated assumption on the statistics page.
PROBE_SIGMA = 0.4


@dataclass
class Measured:
    """Every `all`-stratum summary of one (target, draft, method) that ran to the end."""

    target: str
    draft: str | None
    method: str
    alphas: list[tuple[float, int]] = field(default_factory=list)  # (alpha, drafted tokens)
    costs: list[float] = field(default_factory=list)
    speedups: list[tuple[str, float, tuple[float, float] | None]] = field(default_factory=list)  # (run, x, ci)
    hardware: dict[str, str | None] = field(default_factory=dict)  # run -> its hardware class

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

    def speedup_on(self, hardware: str) -> tuple[float, tuple[float, float] | None] | None:
        """The newest run's on one hardware class."""
        mine = [s for s in self.speedups if self.hardware.get(s[0]) == hardware]
        if not mine:
            return None
        _, x, ci = max(mine, key=lambda s: s[0])
        return x, ci


def measured_runs(reg: Registry) -> dict[tuple[str, str | None, str], Measured]:
    """Every measured (target, draft, method) from the stored summaries (no request rows read)."""
    from specreg.servers.hardware import run_hardware

    hardware = run_hardware(reg)
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
            m.hardware[run_id] = hardware.get(run_id)
    return out


def _profile(alpha: float, r: float, verify: tuple[float, ...]) -> tune.Profile:
    return tune.Profile(tuple(alpha**j for j in tune.LENGTHS), "geometric", 1.0, 1.0, None, max(0.0, r),
                        verify=verify)  # fmt: skip


def curve_best(alpha: float, r: float, verify: tuple[float, ...] = ()) -> tuple[int, float]:
    """tune.py's curve for geometric acceptance, every step drafting, verify cost v(k) (default
    1, its lower bound): the best (k, x)."""
    c = tune.curve(_profile(alpha, r, verify))
    k = max(c, key=lambda k: (round(c[k], 6), -k))
    return k, c[k]


def speed_at(k: int, alpha: float, r: float, verify: tuple[float, ...] = ()) -> float:
    """The same curve at one draft length."""
    return _profile(alpha, r, verify).predict(k) or 0.0


@dataclass(frozen=True)
class Costs:
    """One candidate's step prices, each with its low and high, and where they came from."""

    source: CostSource
    r: float
    r_low: float
    r_high: float
    verify: tuple[float, ...]  # v(k), k = 1..32
    verify_low: tuple[float, ...]
    verify_high: tuple[float, ...]


def costs_for(prices: stepcost.Prices | None, r_weights: float, bytes_ratio: float) -> Costs:
    """The probes' prices where there are; the rest hardware-blind: v(k) from 1 (a GPU's verify
    step) to k+1 (a CPU's, a decode per token), r from the bytes ratio to 1 (a draft decode as
    slow as the target's, as the fixed cost of a small model's decode makes it)."""
    ks = tune.LENGTHS
    r_blind = (r_weights, min(r_weights, bytes_ratio), max(r_weights, 1.0))
    if prices is None:
        ones = tuple(1.0 for _ in ks)
        return Costs("hardware-blind", *r_blind, ones, ones, tuple(float(k + 1) for k in ks))
    if prices.draft is None or prices.draft_low is None or prices.draft_high is None:
        return Costs("target probe", *r_blind, prices.verify, prices.verify_low, prices.verify_high)
    return Costs("machine probe", prices.draft, prices.draft_low, prices.draft_high, prices.verify,
                 prices.verify_low, prices.verify_high)  # fmt: skip


def verdict(costs: CostSource | str, low: float, high: float) -> str | None:
    """What the range says about this machine; nothing for a hardware-blind one (a pair probe
    measured the machine, whatever priced the steps)."""
    if costs == "hardware-blind":
        return None
    if high < 1.0:
        return "not faster on this machine"
    if low > 1.0:
        return "faster on this machine"
    return "either way on this machine"


@dataclass
class Book:
    """What the registry's runs say, indexed for predicting many candidates."""

    measured: dict[tuple[str, str | None, str], Measured]
    summaries: dict[str, GGUFSummary]
    points: list[Point]
    prior: PriorFit
    error: ErrorStat
    ngram_range: tuple[float, float]
    machine: MachineKey | None = None  # this machine's key when predictions are priced by probes
    probes: dict[str, MachineProbe] = field(default_factory=dict)  # SHA-256 -> its probe on `machine`
    pair_probes: dict[tuple[str, str | None, str], PairProbe] = field(default_factory=dict)  # (target, draft, method)

    def families(self, sha: str | None) -> tuple[str | None, str | None]:
        return family(self.summaries.get(sha)) if sha else (None, None)

    def prices(self, target: str | None, draft: str | None) -> stepcost.Prices | None:
        """The step prices the probes of these files give on this machine (None: no target probe)."""
        t = self.probes.get(target or "") if self.machine is not None else None
        if t is None:
            return None
        return stepcost.probe_prices(t, self.probes.get(draft or ""), len(tune.LENGTHS))

    def model_spread(self) -> tuple[float, float]:
        """The step model's spread: MODEL_SPREAD widened by the measured error, which replaces it
        from MODEL_SPREAD_PAIRS measured pairs on."""
        e = self.error
        if not e.n_pairs or e.low is None or e.high is None:
            return MODEL_SPREAD
        if e.n_pairs >= MODEL_SPREAD_PAIRS:
            return e.low, e.high
        return min(MODEL_SPREAD[0], e.low), max(MODEL_SPREAD[1], e.high)


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


def build_book(reg: Registry, machine: MachineKey | None = None, probes: dict[str, MachineProbe] | None = None) -> Book:
    """Read every measured pair once, fit the prior and measure its error. With `machine`, the
    predictions are priced by machine probes: `probes` (the candidates') and every probe the
    registry keeps on that machine for a measured pair's files."""
    measured = measured_runs(reg)
    shas = {m.target for m in measured.values()} | {m.draft for m in measured.values() if m.draft}
    recs = reg.get_artifacts(shas, with_summary=True)
    summaries = {sha: r.summary for sha, r in recs.items() if r.summary is not None}
    points = [p for m in measured.values() if (p := _point(m, summaries)) is not None]
    ngram = [s[1] for m in measured.values() if m.method not in MODEL_DRAFTED for s in m.speedups]
    book = Book(measured, summaries, points, fit_prior(points), ErrorStat(n_pairs=0),
                (min(ngram), max(ngram)) if ngram else NGRAM_UNKNOWN_RANGE)  # fmt: skip
    if machine is not None:
        book.machine = machine
        book.probes = reg.machine_probes(shas, machine.hardware, machine.runtime, machine.flags) | (probes or {})
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
    return sigmoid(mu), sigmoid(mu - ALPHA_Z * prior.sigma), sigmoid(mu + ALPHA_Z * prior.sigma)


def pair_alpha(probe: PairProbe) -> tuple[float, float, float] | None:
    """(alpha, low, high) from a pair probe's draft counts, as a run's are read (accepted over
    drafted at the mean draft length, statistics.alpha_from_rate); the range is the prompts'
    spread in logits, at least PROBE_SIGMA, times ALPHA_Z. None when nothing was drafted."""
    from specreg.benchmark.store.statistics import alpha_from_rate

    def alpha(drafted: int, accepted: int, steps: int | None) -> float | None:
        if drafted <= 0:
            return None
        return alpha_from_rate(accepted / drafted, drafted / steps if steps else float(probe.draft_length))

    whole = alpha(*probe.counts())
    if whole is None:
        return None
    each = [logit(a) for r in probe.requests if (a := alpha(r.drafted, r.accepted, r.steps)) is not None]
    mu = logit(whole)
    sd = math.sqrt(sum((x - mu) ** 2 for x in each) / (len(each) - 1)) if len(each) > 1 else 0.0
    half = ALPHA_Z * max(sd, PROBE_SIGMA)
    return whole, sigmoid(mu - half), sigmoid(mu + half)


def _from_pair_probe(probe: PairProbe, c: Costs) -> Prediction | None:
    """The prediction a pair probe gives, at the draft length it ran: the decode speed-up it
    measured there (the median over its prompts: what the step model leaves out, a second
    tokenizer's translation, the server's per-step work, is in it). Its range holds every
    prompt's ratio, decode only and end to end (a workload's prompt phase from none to the
    probe's), and the step model's reading of the acceptance range at that length (scaled to
    the measured point), times MODEL_SPREAD: a few short prompts are not a workload. The
    probe's length is the one a prediction from the prior chose; `bench --tune` searches the
    others."""
    got = pair_alpha(probe)
    k = probe.draft_length
    at_k = speed_at(k, got[0], c.r, c.verify) if got is not None else 0.0
    if got is None or at_k <= 0:
        return None
    alpha, lo_a, hi_a = got
    xs = sorted(r.speedup for r in probe.requests)
    x = xs[len(xs) // 2]
    f = x / at_k  # the step model scaled to what the probe measured at k
    seen = xs + [r.end_to_end for r in probe.requests]
    lo = min(*seen, speed_at(k, lo_a, c.r, c.verify) * f) * MODEL_SPREAD[0]
    hi = max(*seen, speed_at(k, hi_a, c.r, c.verify) * f) * MODEL_SPREAD[1]
    drafted, accepted, _ = probe.counts()
    evidence = f"run with the target on {len(xs)} prompts: {accepted} of {drafted} drafted tokens accepted"
    return Prediction(source="pair probe", evidence=evidence, alpha=alpha, alpha_range=(lo_a, hi_a), draft_cost=c.r,
                      verify_cost=c.verify[k - 1], draft_length=k, speedup=x, speedup_range=(lo, hi), costs=c.source,
                      verdict=verdict("pair probe", lo, hi))  # fmt: skip


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
    draft_sha = draft_sha if method != "draft-mtp" else None
    key = (target_sha or "", draft_sha, method)
    log_ratio, differs, br = _ratios(target, draft, method)
    r_prior = step_cost(book, target_sha, br, prior, skip)
    own = book.measured.get(key) if key != skip else None
    if own is not None and own.alpha is not None:
        alpha, r = own.alpha, own.draft_cost if own.draft_cost is not None else r_prior
        prices = book.prices(target_sha, draft_sha)  # the verify step as this machine's probe prices it
        k, x = curve_best(alpha, r, prices.verify if prices is not None else ())
        sp = own.speedup
        rng = (min(x, sp[1][0]), max(x, sp[1][1])) if sp and sp[1] else (x, x)
        n = len(own.alphas)
        return Prediction(source="this pair", evidence=f"{n} run{'s' if n != 1 else ''} of this pair", alpha=alpha,
                          alpha_range=(alpha, alpha), draft_cost=r, draft_length=k, speedup=x, speedup_range=rng,
                          costs="measured runs", measured_speedup=sp[0] if sp else None,
                          measured_ci95=sp[1] if sp else None)  # fmt: skip
    probed = book.pair_probes.get(key) if key != skip else None
    if probed is not None:
        c = costs_for(book.prices(target_sha, draft_sha), r_prior, br)
        got = _from_pair_probe(probed, c)
        if got is not None:
            return got
    fam = _family_alpha(book, target_sha, draft_sha, method, (log_ratio, br), prior, skip)
    if fam is not None:
        alpha, r_fam, n = fam
        # the range: the prior's residual spread over the n pairs it rests on (a family pair of
        # another size is moved along the prior's slope, so it is as uncertain as the prior,
        # less so the more pairs agree); a point range put no measured pair inside it
        half = ALPHA_Z * prior.sigma / math.sqrt(n)
        lo_a, hi_a = sigmoid(logit(alpha) - half), sigmoid(logit(alpha) + half)
        r_weights = r_fam if r_fam is not None else r_prior
        source, evidence = "same families", f"{n} pair{'s' if n != 1 else ''} of the same families"
    else:
        alpha, lo_a, hi_a = _prior_alpha(prior, log_ratio, differs)
        r_weights = r_prior
        source, evidence = "prior", f"prior at size ratio {10**log_ratio:.3g}" + (", other tokens" if differs else "")
    c = costs_for(book.prices(target_sha, draft_sha), r_weights, br)
    k, x = curve_best(alpha, c.r, c.verify)
    m_lo, m_hi = book.model_spread()
    lo = min(x, speed_at(k, lo_a, c.r_high, c.verify_high) * m_lo)
    hi = max(x, speed_at(k, hi_a, c.r_low, c.verify_low) * m_hi)
    return Prediction(source=source, evidence=evidence, alpha=alpha, alpha_range=(lo_a, hi_a), draft_cost=c.r,  # type: ignore[arg-type]
                      verify_cost=c.verify[k - 1], draft_length=k, speedup=x, speedup_range=(lo, hi), costs=c.source,
                      verdict=verdict(c.source, lo, hi))  # fmt: skip


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
    """measured / predicted for every measured model-drafted pair, predicted without its own runs
    and priced as the candidates are: with a machine (`book.machine`), only the pairs whose target
    has a probe on it, against their newest run on its hardware class (a run elsewhere says
    nothing of this machine's prices); without, every pair, hardware-blind, against its newest run."""
    ratios: list[float] = []
    pairs: list[dict[str, object]] = []
    for p in book.points:
        t = book.summaries.get(p.key[0])
        d = book.summaries.get(p.key[1] or "")
        if t is None:
            continue
        if book.machine is not None:
            if book.prices(p.key[0], p.key[1]) is None:
                continue
            own = book.measured[p.key].speedup_on(book.machine.hardware)
        else:
            own = book.measured[p.key].speedup
        if own is None:
            continue
        measured, ci = own
        others = [q for q in book.points if q.key != p.key]
        pred = predict(book, p.key[2], t, d, p.key[0], p.key[1], skip=p.key, prior=fit_prior(others))
        if pred.speedup <= 0:
            continue
        ratio = measured / pred.speedup
        ratios.append(ratio)
        lo, hi = pred.speedup_range
        pairs.append({"target": p.key[0], "draft": p.key[1], "method": p.key[2], "predicted": round(pred.speedup, 3),
                      "predicted_range": (round(lo, 3), round(hi, 3)), "draft_length": pred.draft_length,
                      "measured": round(measured, 3), "measured_ci95": ci, "in_range": lo <= measured <= hi,
                      "source": pred.source, "costs": pred.costs, "ratio": round(ratio, 3)})  # fmt: skip
    costs = "machine probes" if book.machine is not None else "hardware-blind"
    if not ratios:
        return ErrorStat(n_pairs=0, costs=costs)
    xs = sorted(ratios)
    q = (lambda f: xs[min(len(xs) - 1, max(0, round(f * (len(xs) - 1))))]) if len(xs) >= 10 else None
    low, high = (q(0.1), q(0.9)) if q else (xs[0], xs[-1])
    return ErrorStat(n_pairs=len(xs), low=low, median=xs[len(xs) // 2], high=high, pairs=pairs, costs=costs)
