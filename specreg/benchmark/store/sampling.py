"""The sampled stage: which baseline a condition is judged against, the greedy stage it rests on,
and the two checks that replace exact match at temperature > 0.

PROTOCOL's two stages: greedy first, where output must equal the baseline's token for token;
then the production sampler, where outputs are random and exact match means nothing. There a
condition is judged by (1) each prompt's `expect` check, pass rates of baseline and condition
compared with an interval, and (2) a distribution check: speculative decoding must not change
what the model says in distribution, so the first generated tokens of every (prompt, seed) of the
condition is compared with the baseline's, position by position over a short prefix, with a
two-sample permutation test (`distribution_test`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.schemas.bench import ConditionRun, ConditionSpec, ConditionSummary, RunManifest, RuntimeInfo
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import RequestRow
from specreg.schemas.sampling import Sampler

if TYPE_CHECKING:
    import sqlite3

    import numpy as np

    from specreg.servers.launcher import ServerCommand

# the distribution check's false-alarm rate (a permutation test's level is exact: see its docstring)
DIST_ALPHA = 0.01
DIST_PERMUTATIONS = 2000
# the first generated tokens compared: the first is sampled before any draft, the next ones are
# where a draft's verification decides; a short prefix keeps each position's categories dense
PREFIX_TOKENS = 4
EXPECT_Z = 1.959963984540054  # 95% two-sided


def arm(spec: ConditionSpec) -> tuple[int, Sampler]:
    """The baseline a condition is measured against: the same concurrency and the same sampler."""
    return (spec.concurrency, spec.sampler)


def greedy_twin(spec: ConditionSpec, specs: Iterable[ConditionSpec]) -> ConditionSpec | None:
    """The greedy condition of a sampled one in the same plan: same method, draft length, params
    and concurrency at temperature 0 (the greedy stage it rests on)."""
    for s in specs:
        if (
            s.temperature == 0
            and s.method == spec.method
            and s.draft_n_max == spec.draft_n_max
            and s.draft_n_min == spec.draft_n_min
            and s.params == spec.params
            and s.concurrency == spec.concurrency
        ):
            return s
    return None


def greedy_problem(status: str, failure: str | None, rows: Sequence[RequestRow]) -> str | None:
    """Why a greedy condition did not keep output equivalence (None: it did, on every compared row)."""
    if status not in ("ok", "running"):
        return f"its greedy stage {status}: {failure or 'no reason recorded'}"
    compared = [r for r in rows if r.matches_baseline is not None]
    if not compared:
        return "its greedy stage compared no output with the baseline"
    bad = [r for r in compared if not r.matches_baseline]
    if bad:
        return f"its greedy stage changed the output ({len(bad)}/{len(compared)} rows, first {bad[0].prompt_id})"
    return None


def _runtime_key(rt: RuntimeInfo) -> tuple[str, str, str | None, str | None]:
    return (rt.kind, rt.version_text, rt.xllamacpp_version, rt.sha256)


@dataclass(frozen=True)
class StoredGreedy:
    """What the stored runs say about a sampled condition's greedy stage: the run that kept
    output equivalence (`run_id`), else the newest run that measured the greedy twin and why it
    does not qualify (`near`, `why`), so a refusal names it instead of saying none is stored."""

    run_id: str | None = None
    near: str | None = None
    why: str | None = None


def stored_greedy(
    conn: sqlite3.Connection, spec: ConditionSpec, target: str, draft: str | None, runtime: RuntimeInfo, workload: str
) -> StoredGreedy:
    """A stored run of the same pair, runtime and prompts whose greedy twin of `spec` kept output
    equivalence (newest first; summaries only, no request rows), or the newest that did not, with why."""

    runs = conn.execute(
        "SELECT run_id, manifest_json FROM bench_runs WHERE target_sha256 = ? AND draft_sha256 IS ? "
        "AND status IN ('complete', 'incomplete') AND manifest_json IS NOT NULL ORDER BY started_at DESC",
        (target, draft),
    ).fetchall()
    near: StoredGreedy | None = None
    for run_id, manifest_json in runs:
        man = RunManifest.model_validate_json(manifest_json)
        other = None
        if _runtime_key(man.runtime) != _runtime_key(runtime):
            other = f"it ran on another runtime ({man.runtime.version_text})"
        elif man.request.workload_sha256 != workload:
            other = f"it ran other prompts (workload {man.request.workload})"
        for (summary_json,) in conn.execute(
            "SELECT summary_json FROM bench_summaries WHERE run_id = ? AND stratum = 'all'", (run_id,)
        ):
            s = ConditionSummary.model_validate(json.loads(summary_json))
            if not (
                s.temperature == 0
                and s.method == spec.method
                and s.draft_n_max == spec.draft_n_max
                and s.params == spec.params
            ):
                continue
            why = other
            if why is None and s.status != "ok":
                why = f"its greedy {s.condition} {s.status}"
            elif why is None and not s.n_compared:
                why = f"its greedy {s.condition} compared no output with the baseline"
            elif why is None and s.n_equal != s.n_compared:
                bad = s.n_compared - s.n_equal
                why = f"its greedy {s.condition} changed the output in {bad} of {s.n_compared} rows"
            if why is None:
                return StoredGreedy(run_id=str(run_id))
            if near is None:
                near = StoredGreedy(near=str(run_id), why=why)
    return near or StoredGreedy()


def unsupported(cmd: ServerCommand, opts: BenchSettings) -> str | None:
    """One line naming a sampling flag this server program does not take (None: it takes them all).

    The bundled server takes what its parser declares and its xllamacpp build can set; a user's
    binary is asked for its `--help`. Refused before any server starts, never silently ignored."""
    wanted = []
    if opts.min_p is not None:
        wanted.append("--min-p")
    if opts.top_p is not None:
        wanted.append("--top-p")
    if opts.top_k is not None:
        wanted.append("--top-k")
    if opts.draft_sampling:
        wanted.append("--spec-draft-sampling")
    if any(t > 0 for t in opts.temperature):
        wanted.append("--temp")
    if not wanted:
        return None
    known = _server_flags(cmd)
    missing = [f for f in wanted if f not in known]
    if not missing:
        return None
    who = "the bundled server (xllamacpp)" if cmd.kind == "bundled" else cmd.path
    return f"{who} does not take {', '.join(missing)}: cannot measure at this sampler"


def _server_flags(cmd: ServerCommand) -> set[str]:
    if cmd.kind == "bundled":
        import xllamacpp

        from specreg.servers.bundled_server import build_parser

        flags = {s for a in build_parser()._actions for s in a.option_strings}
        if not hasattr(xllamacpp.CommonParams().speculative.draft, "probabilistic"):
            flags.discard("--spec-draft-sampling")
        return flags
    import re
    import subprocess

    try:
        out = subprocess.run(cmd.argv(["--help"]), capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    return set(re.findall(r"--[a-z][a-z0-9-]*", (out.stdout + out.stderr)[:1_000_000]))


# ---- the distribution check --------------------------------------------------------------

END = -1  # the output ended before this position (a category of its own)


def prefix(row: RequestRow, n: int = PREFIX_TOKENS) -> tuple[object, ...] | None:
    """A row's first `n` generated token ids, padded with END (its first characters when the ids
    are not on record: a chat request's stream names none)."""
    if not row.ok:
        return None
    items: list[object] = list(row.output_ids[:n]) if row.output_ids else list((row.output_text or "")[:n])
    return tuple(items + [END] * (n - len(items)))


def _chi2(counts_a: np.ndarray, totals: np.ndarray, n_a: int, n: int) -> np.ndarray:
    """Pearson's statistic of the 2 x K table with row A's counts `counts_a` (... x K)."""
    import numpy as np

    n_b = n - n_a
    exp_a = totals * (n_a / n)
    exp_b = totals * (n_b / n)
    diff = counts_a - exp_a  # B's deviation is the negative of A's
    return np.asarray((diff**2 * (1 / exp_a + 1 / exp_b)).sum(axis=-1))


def sampled_stage(
    c: ConditionRun,
    conds: list[ConditionRun],
    rows: Sequence[RequestRow],
    stored: Callable[[ConditionSpec], StoredGreedy],
    told: set[int],
    note: Callable[[str], None],
) -> str | None:
    """Why a sampled condition may not run (None: it may). PROTOCOL's stages in order: a
    speculative condition is measured at temperature > 0 only once its greedy stage kept
    output equivalence, in this run (its greedy twin, which the schedule ran first, among `rows`)
    or in a stored run of the same pair, runtime and prompts (`stored`). `told`: the conditions
    whose stored greedy stage was already named through `note`."""
    spec = c.spec
    if spec.temperature == 0:
        return None
    if spec.method == BASELINE:  # its conditions all refused: the baseline would run for nothing
        partners = [x for x in conds if x is not c and arm(x.spec) == arm(spec) and x.status in ("pending", "running")]
        refused = [why for x in partners if (why := sampled_stage(x, conds, rows, stored, told, note)) is not None]
        if partners and len(refused) == len(partners):
            return f"not run: every condition it is the baseline of was refused ({refused[0]})"
        return None
    twin = greedy_twin(spec, (x.spec for x in conds))
    if twin is not None:
        tc = next(x for x in conds if x.spec.name == twin.name)
        problem = greedy_problem(tc.status, tc.failure, [r for r in rows if r.condition_idx == tc.idx])
        return None if problem is None else f"sampled stage refused: {problem} ({twin.name})"
    found = stored(spec)
    if found.run_id is not None:
        if c.idx not in told:
            told.add(c.idx)
            note(f"{spec.name}: greedy stage kept output equivalence in run {found.run_id}")
        return None
    if found.near is not None:
        return (
            f"sampled stage refused: stored run {found.near} measured its greedy stage, but {found.why}; "
            "add --temperature 0 to measure it again in this run"
        )
    return (
        "sampled stage refused: no greedy stage of this condition kept output equivalence (none in this "
        "run, none stored for this pair, runtime and prompts); add --temperature 0 to measure it first"
    )


@dataclass(frozen=True)
class DistributionTest:
    p: float | None
    prompts: int  # prompts whose outputs differ somewhere in the prefix (the others add nothing)
    samples: int  # outputs compared, both sides
    note: str | None = None


def distribution_test(
    base: dict[str, list[tuple[object, ...]]],
    cond: dict[str, list[tuple[object, ...]]],
    *,
    seed: int = 0,
    permutations: int = DIST_PERMUTATIONS,
) -> DistributionTest:
    """Do the condition's outputs start like the baseline's, in distribution? prompt -> prefixes.

    Test: a stratified permutation test of homogeneity. For each prompt and each position of the
    prefix (the first PREFIX_TOKENS generated tokens), the baseline's and the condition's tokens
    there form a 2 x K table; the statistic is Pearson's chi-square summed over prompts and
    positions, and its null distribution comes from shuffling the baseline/condition labels of
    whole outputs within each prompt (seeded, DIST_PERMUTATIONS times). Why this test: the
    samples are small (an output per repetition per side) and categorical with many rare tokens,
    where the chi-square approximation fails and an exact test of one prompt has no power;
    permuting whole outputs within prompts keeps each prompt's distribution and the dependence
    between positions, needs no large-sample approximation, and has an exact level: when both
    sides draw from the same distribution, (1 + #{permuted >= observed}) / (1 + B) is a valid
    p-value, so the false-alarm rate is at most alpha. (Conditions share each repetition's seed,
    which ties the two sides together: the first token, sampled before any draft, is the same
    on both; ties make the two sides more alike, so the test errs towards not flagging.)
    Marginal distributions per position are what speculative decoding must keep (it keeps the
    joint one), so comparing positions, not whole prefixes as one category, keeps categories
    dense.

    The level and the power are checked on simulated A/A runs and on a sampler built to differ
    (tests/benchmark/store/test_sampling.py; docs/statistics.md). Power grows with repetitions: a few
    prompts x three repetitions flag only gross differences, so the check is no proof of
    equality, a tripwire for a condition that changes what the model says.
    """
    import numpy as np

    ids = sorted(p for p in base.keys() & cond.keys() if base[p] and cond[p])
    rng = np.random.default_rng(seed)
    observed = 0.0
    null = np.zeros(permutations)
    used, samples = 0, 0
    for p in ids:
        pooled = list(base[p]) + list(cond[p])
        n, n_a = len(pooled), len(base[p])
        samples += n
        width = min(len(x) for x in pooled)
        perms: np.ndarray | None = None
        for j in range(width):
            cats = {c: i for i, c in enumerate(dict.fromkeys(repr(x[j]) for x in pooled))}
            if len(cats) < 2:
                continue  # one token at this position on both sides: nothing to tell apart
            if perms is None:  # one shuffle of whole outputs per prompt, shared by its positions
                perms = rng.permuted(np.tile(np.arange(n), (permutations, 1)), axis=1)[:, :n_a]
            onehot = np.eye(len(cats))[[cats[repr(x[j])] for x in pooled]]  # n x K
            totals = onehot.sum(axis=0)
            observed += float(_chi2(onehot[:n_a].sum(axis=0), totals, n_a, n))
            null += _chi2(onehot[perms].sum(axis=1), totals, n_a, n)
        used += perms is not None
    if not ids:
        return DistributionTest(None, 0, 0, "no prompt has outputs on both sides")
    if not used:
        return DistributionTest(1.0, 0, samples, "every output began the same on both sides")
    p_value = (1 + int(np.sum(null >= observed - 1e-9))) / (1 + permutations)
    return DistributionTest(p_value, used, samples)


def prefixes(rows: Iterable[RequestRow], n: int = PREFIX_TOKENS) -> dict[str, list[tuple[object, ...]]]:
    """prompt id -> the prefix of each successful row."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for r in rows:
        f = prefix(r, n)
        if f is not None:
            out.setdefault(r.prompt_id, []).append(f)
    return out


# ---- expect pass rates -------------------------------------------------------------------


def _wilson(k: int, n: int, z: float = EXPECT_Z) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def pass_rate_difference(
    cond_pass: int, cond_n: int, base_pass: int, base_n: int
) -> tuple[float, tuple[float, float]] | None:
    """Condition minus baseline pass rate, with Newcombe's 95% interval (method 10: from the two
    Wilson intervals), which keeps its coverage at rates of 0 or 1 and a few dozen samples, where
    the Wald interval collapses to a point. None without samples on both sides."""
    if not cond_n or not base_n:
        return None
    p1, p2 = cond_pass / cond_n, base_pass / base_n
    l1, u1 = _wilson(cond_pass, cond_n)
    l2, u2 = _wilson(base_pass, base_n)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return d, (max(-1.0, low), min(1.0, high))


def expect_problem(diff: float | None, ci: tuple[float, float] | None, tolerance: float) -> str | None:
    """Why a sampled condition's expect pass rate fails (None: it does not): lower than the
    baseline's by more than `tolerance`, or lower beyond chance (the interval wholly below 0)."""
    if diff is None or ci is None:
        return None
    if diff < -tolerance:
        return f"expect pass rate {diff:+.0%} vs the baseline (tolerance {tolerance:.0%})"
    if ci[1] < 0:
        return f"expect pass rate {diff:+.0%} vs the baseline, 95% interval [{ci[0]:+.0%}, {ci[1]:+.0%}] below 0"
    return None


def sampled_checks(
    s: ConditionSummary, rows: list[RequestRow], base_rows: list[RequestRow], *, seed: int, label: str
) -> None:
    """Fill a sampled summary's expect comparison and distribution check (speculative, T > 0)."""
    if s.method == BASELINE or s.temperature == 0:
        return
    base_checked = [r for r in base_rows if r.expect_ok is not None]
    s.n_base_expect_checked = len(base_checked)
    s.n_base_expect_failed = sum(1 for r in base_checked if not r.expect_ok)
    got = pass_rate_difference(
        s.n_expect_checked - s.n_expect_failed,
        s.n_expect_checked,
        s.n_base_expect_checked - s.n_base_expect_failed,
        s.n_base_expect_checked,
    )
    if got is not None:
        s.expect_diff, s.expect_diff_ci95 = got
    import hashlib

    salt = int.from_bytes(hashlib.sha256(label.encode()).digest()[:4], "big")
    t = distribution_test(prefixes(base_rows), prefixes(rows), seed=seed ^ salt)
    s.dist_p, s.dist_n, s.dist_note = t.p, t.prompts, t.note
    s.dist_flagged = None if t.p is None else t.p < DIST_ALPHA
