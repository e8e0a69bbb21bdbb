"""Time to a decision, and the decision: the pairs it takes against a fixed-sample oracle (issue 52).

A decision is what `bench --budget` measures for, and its cost is paired requests. Issue 32 made
them less noisy (the server's own timings, a balanced ABBA order, pinning) and sized the
confidence sequence's clip to their spread (sequential.py); issue 52 decides with two one-sided
tests against the bar (decision/bar.py). This prints:

1. **Simulation** (`--sims N` seeded runs a case, numpy across runs, a look after every pair):
   for true speed-ups 1.0x (at the bar itself: the false `faster` rate), and 1.0x, 1.1x,
   1.15x, 1.3x against 1.05x, on normal pairs of a known spread (0.08, 0.13, 0.2), on the
   runner's troubles (the generator of tests/decision/test_sequential.py: drift, slot slope,
   outliers), on A/A pairs whose rounds share a lean (what breaks the tests' independence),
   and on measured pairs resampled (`benchmarks/data/decision_ratios.json`, which
   `--keep-ratios DB` fills from a registry's runs): each method's outcome and the pairs it
   took (median, p90), and the oracle's pairs - a fixed-sample one-sided z-test that knows the
   spread, at the same alpha and 90% power - and their ratio, the figure issue 52 moves.
   Then each method's CPU cost per observation, its interval, and a projection.
2. **Tiny models** (generated GGUFs, the bundled llama.cpp server): `--rounds` fixed rounds of
   the baseline, draft-simple (a 16-layer target, a 1-layer draft: really faster) and
   ngram-mod with a match length no output reaches (it never drafts: a real A/A), in three
   runs: the default settings, `--no-pin`, `--shuffle`. For each run and condition, the
   per-request spread of the log ratios (client clock vs server clock, same requests), and the
   round (and wall seconds) at which issue 32's sequence and bar.py's tests first decide -
   replayed on the very rows measured, a look after every round as `--budget` looks.
3. **SmolLM2** (`--real`): the issue's `bench admitted --workload mt-bench --sample 2 --tune
   --budget 8m` on the real pair (F32 target, Q4_1 draft), or with `--real-draft-max K` one
   fixed draft length on `--sample 1` (issue 52's target), its wall time, decisions and
   `deploy`, and both methods replayed on the same rows.

The machine's load (os.getloadavg) is printed beside every figure: on a shared machine the wall
times move with it; the ratios are measured against a baseline in the same run.

4. **Pinning** (`--pinning`): SmolLM2 k16 against the baseline with `--pin` and `--no-pin`,
   alternated, each ratio against its own run's baseline: what taking a core from the server
   costs draft-simple beside the baseline (pinning.py chose its default from it).
5. **Grid comparison** (`--grid`: tiny models; `--grid-real`: SmolLM2, mt-bench `--sample 2`):
   `--tune --budget` against `--draft-max 2,4,8,16 --repeat 3`, each length's speed-up against
   the baseline of its run, the two runs' wall times (the target: the tuned length at least
   as fast as the grid's best, in under half the grid's time), and where each run's time went:
   its slots by phase (the first pass, deciding the leader, the other lengths, the other
   methods), each split into server start, warm-up, requests and what follows them.

Usage: python benchmarks/bench_decision.py [--sims 400] [--rounds 10] [--skip-tiny] [--real]
       [--real-draft-max K] [--budget 8m] [--busy-share off] [--pinning] [--grid | --grid-real]
       [--grid-budget B] [--keep-ratios DB] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from specreg.decision import bar, budget, sequential
from specreg.testing.modelspec import FAST_ITEMS

SPECREG = [sys.executable, "-m", "specreg"]
ITEMS = FAST_ITEMS  # specreg.testing.modelspec: the tests of --tune use them too


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f} on {os.cpu_count()} CPUs"


# -- 1. simulation: the pairs a decision takes, against a fixed-sample oracle (issue 52) -------------

BAR = 1.05  # the default policy's min_speedup
PER_ROUND = 8  # mt-bench --sample 1: one prompt of each of its 8 strata a round
HORIZON_PAIRS = 40 * PER_ROUND  # budget.HORIZON rounds: past it, "not decidable"
CASES = ((1.0, 1.0), (1.0, BAR), (1.1, BAR), (1.15, BAR), (1.3, BAR))  # (true speed-up, bar)
SPREADS = (0.08, 0.13, 0.2)  # per-pair sd of the log ratio
ORACLE_POWER = 0.9
AT_BAR = 4  # runs at the bar itself, times --sims: a false `faster` rate near 1% wants more than 400


def _sim_round(
    rng: random.Random, prompts: list[float], speedup: float, drift: float, r: int, balanced: bool
) -> tuple[list[float], list[float]]:
    order = ["base", "cond"]
    if not balanced:
        rng.shuffle(order)
    elif r % 2:
        order.reverse()
    base, cond = [], []
    for p in prompts:
        for name in order:
            slot = 1 + 0.03 * order.index(name)
            t = p * drift * slot * math.exp(rng.gauss(0, 0.1)) * (rng.uniform(2, 6) if rng.random() < 0.04 else 1)
            (base if name == "base" else cond).append(t if name == "base" else t / speedup)
    return base, cond


def _troubled(n: int, speedup: float, rounds: int) -> Any:
    """The paired log ratios of the runner's troubles (`_sim_round`: drift across and within
    rounds, 10% noise a request, 1 in 25 an outlier 2-6x slower, the balanced order), run r
    seeded r: the generator tests/decision/test_sequential.py holds the decisions to."""
    import numpy as np

    out = np.empty((n, rounds * PER_ROUND))
    for seed in range(n):
        rng = random.Random(seed)
        prompts = [rng.uniform(50, 400) for _ in range(PER_ROUND)]
        drift, xs = 1.0, []
        for r in range(1, rounds + 1):
            drift *= math.exp(rng.gauss(0, 0.08))
            xs += sequential.log_ratios(*_sim_round(rng, prompts, speedup, drift, r, balanced=True))
        out[seed] = xs
    return out


def _gaussian(n: int, speedup: float, sd: float, seed: int) -> Any:
    """Paired log ratios with a known spread: normal around log(speed-up), and the balanced
    order's 3% slot slope (a round's pairs all lean the way its order does)."""
    import numpy as np

    rng = np.random.default_rng([seed, round(speedup * 1000), round(sd * 1000)])
    x = rng.normal(math.log(speedup), sd, (n, HORIZON_PAIRS))
    lean = np.where(np.arange(HORIZON_PAIRS) // PER_ROUND % 2 == 0, 1.0, -1.0) * math.log(1.03)
    return x + lean


def _slot_shifted(n: int, sd: float, shift: float, seed: int) -> Any:
    """A/A pairs (normal, `sd`) whose rounds each lean by a shared amount: each condition's slot
    of a round runs `shift` (sd, in log) slower or faster as a whole (a neighbour, the machine's
    state), so a round's pairs are not independent - what the tests assume, and what breaks them."""
    import numpy as np

    rng = np.random.default_rng([seed, round(shift * 1000), round(sd * 1000)])
    x = rng.normal(0.0, sd, (n, HORIZON_PAIRS))
    lean = rng.normal(0.0, shift * math.sqrt(2), (n, HORIZON_PAIRS // PER_ROUND))
    return x + lean.repeat(PER_ROUND, axis=1)


def _resampled(xs: Sequence[float], n: int, speedup: float, seed: int) -> Any:
    """Real paired log ratios' deviations from their median, drawn with replacement, each with a
    random sign, around log(speed-up): their spread and tails, made symmetric - the tests'
    premise, exact for an A/A pair (its two requests are exchangeable). On skewed pairs the
    methods' centres differ (the old one's nearer the mean), which is not how fast they decide."""
    import numpy as np

    rng = np.random.default_rng([seed, round(speedup * 1000), len(xs)])
    dev = np.asarray(xs) - float(np.median(xs))
    x = rng.choice(dev, (n, HORIZON_PAIRS)) * rng.choice([-1.0, 1.0], (n, HORIZON_PAIRS))
    return x + math.log(speedup)


def old_stops(x: Any, min_speedup: float) -> list[tuple[str, int]]:
    """Issue 32's confidence sequence (sequential.py) on each row, a look after every pair:
    the decision and the pairs it took (the horizon when undecided). Fed a round at a time; the
    round it decides in is fed again pair by pair (its running interval, once clear of the bar,
    stays clear)."""
    out = []
    for row in x:
        seq, res = sequential.SpeedSequence(), ("undecided", len(row))
        for k in range(0, len(row), PER_ROUND):
            before = seq.copy()
            if seq.add_logs(list(row[k : k + PER_ROUND])).decision(min_speedup).decision != "undecided":
                for j in range(k, k + PER_ROUND):
                    d = before.add_logs([row[j]]).decision(min_speedup).decision
                    if d != "undecided":
                        res = (d, j + 1)
                        break
                break
        out.append(res)
    return out


def _running_spread(x: Any) -> Any:
    """Per row, the robust spread (1.4826 x MAD) of the observations before each one; NaN for
    the first `bar.PRIOR_PAIRS` (clipped at `bar.PRIOR_CLIP`)."""
    import numpy as np

    sp = np.full(x.shape, np.nan)
    for i in range(bar.PRIOR_PAIRS, x.shape[1]):
        med = np.median(x[:, :i], axis=1, keepdims=True)
        sp[:, i] = 1.4826 * np.median(np.abs(x[:, :i] - med), axis=1)
    return sp


def bar_stops(x: Any, min_speedup: float) -> list[tuple[str, int]]:
    """decision/bar.py's two tests on every row at once (numpy across rows), a look after every
    pair: the same arithmetic as `bar.BarTest` (tests/decision/test_bar.py holds them equal)."""
    import numpy as np

    t = math.log(min_speedup)
    sp = _running_spread(x)
    b = np.where(
        np.isnan(sp),
        bar.PRIOR_CLIP,
        np.clip(bar.SPREADS * np.nan_to_num(sp), sequential.FLOOR, math.log(sequential.CLIP)),
    )
    z = np.clip((x - t) / b, -1.0, 1.0)
    lam = np.array(bar.STAKES)
    up = np.cumsum(np.log1p(z[:, :, None] * lam), axis=1)
    down = np.cumsum(np.log1p(-z[:, :, None] * lam), axis=1)
    mix_up = np.logaddexp.reduce(up, axis=2) - math.log(lam.size) >= math.log(1 / bar.ALPHA_FASTER)
    mix_down = np.logaddexp.reduce(down, axis=2) - math.log(lam.size) >= math.log(1 / bar.ALPHA_NOT_FASTER)
    out = []
    for u, d in zip(mix_up, mix_down, strict=True):
        first_u = int(np.argmax(u)) if u.any() else len(u)
        first_d = int(np.argmax(d)) if d.any() else len(d)
        if first_u == first_d == len(u):
            out.append(("undecided", len(u)))
        else:
            out.append(("faster", first_u + 1) if first_u <= first_d else ("not faster", first_d + 1))
    return out


def oracle_pairs(speedup: float, min_speedup: float, sd: float) -> float:
    """The fixed-sample one-sided z-test with the spread known, at the same error rate
    (`bar.ALPHA_FASTER`) and `ORACLE_POWER`: the pairs it needs (inf at the bar itself)."""
    from statistics import NormalDist

    d = abs(math.log(speedup) - math.log(min_speedup))
    if d == 0:
        return math.inf
    z = NormalDist().inv_cdf
    return ((z(1 - bar.ALPHA_FASTER) + z(ORACLE_POWER)) * sd / d) ** 2


def oracle_false_faster(x: Any, min_speedup: float, sd: float, n: int) -> float:
    """The oracle's own false `faster` rate on rows whose centre is the bar: n pairs each, made
    whole pairs of rounds (the balanced order's lean cancels over two)."""
    from statistics import NormalDist

    n = max(2 * PER_ROUND, min(math.ceil(n / (2 * PER_ROUND)) * 2 * PER_ROUND, x.shape[1]))
    crit = math.log(min_speedup) + NormalDist().inv_cdf(1 - bar.ALPHA_FASTER) * sd / math.sqrt(n)
    return float((x[:, :n].mean(axis=1) > crit).mean())


def _q(stops: list[tuple[str, int]], q: float) -> float:
    import numpy as np

    pairs = [p if d != "undecided" else math.inf for d, p in stops]
    return float(np.quantile(pairs, q, method="lower"))


def _pairs_text(v: float) -> str:
    return f">{HORIZON_PAIRS}" if math.isinf(v) else f"{v:.0f}"


def gap_line(label: str, x: Any, speedup: float, min_speedup: float, sd: float) -> list[str]:
    """One case: each method's outcome and the pairs it took (median, p90), against the oracle's."""
    oracle = oracle_pairs(speedup, min_speedup, sd)
    lines = []
    for name, stops in (("old", old_stops(x, min_speedup)), ("bar", bar_stops(x, min_speedup))):
        n = len(stops)
        faster = sum(d == "faster" for d, _ in stops) / n
        nots = sum(d == "not faster" for d, _ in stops) / n
        if math.isinf(oracle):  # at the bar: only the false `faster` rate is asked
            oracle_ff = oracle_false_faster(x, min_speedup, sd, round(oracle_pairs(1.15, BAR, sd)))
            lines.append(
                f"   {label:<24} {name:<4} faster {faster:6.2%} (oracle {oracle_ff:.2%}), not faster {nots:.2%}"
            )
            continue
        med, p90 = _q(stops, 0.5), _q(stops, 0.9)
        lines.append(
            f"   {label:<24} {name:<4} faster {faster:6.1%} not {nots:5.1%}  pairs {_pairs_text(med):>5} / "
            f"{_pairs_text(p90):>5}  oracle {oracle:5.0f}  ratio {med / oracle:5.2f} / {p90 / oracle:5.2f}"
        )
    return lines


def simulate(n: int, ratios: dict[str, list[float]]) -> None:
    """The pairs a decision takes with issue 32's sequence (old) and this one (bar), against the
    oracle, on simulated and on real paired log ratios; a look after every pair (a runner looks
    after every round or part of one, so it stops up to a round later, either method alike)."""

    print(f"1. the pairs a decision takes: {n} seeded runs a case ({n * AT_BAR} at the bar), at most "
          f"{HORIZON_PAIRS} pairs ({load()})")  # fmt: skip
    print(f"   old: issue 32's two-sided sequence (alpha {sequential.ALPHA}); bar: two one-sided tests "
          f"(alpha {bar.ALPHA_FASTER} each side)")  # fmt: skip
    print(f"   oracle: a one-sided z-test of n fixed pairs, the sd known, alpha {bar.ALPHA_FASTER}, power "
          f"{ORACLE_POWER:.0%}; pairs as median / p90; ratio = pairs / oracle")  # fmt: skip
    for sd in SPREADS:
        for speedup, min_speedup in CASES:
            x = _gaussian(n * (AT_BAR if speedup == min_speedup else 1), speedup, sd, seed=52)
            for line in gap_line(f"{speedup}x vs {min_speedup}x sd {sd}", x, speedup, min_speedup, sd):
                print(line)
    print("   the runner's troubles (drift, 3% slot slope, 10% noise a request, 1 in 25 an outlier 2-6x;")
    print("   the oracle knows the spread without the outliers, 0.1 x sqrt 2):")
    for speedup, min_speedup in CASES:
        x = _troubled(n * (AT_BAR if speedup == min_speedup else 1), speedup, HORIZON_PAIRS // PER_ROUND)
        for line in gap_line(f"{speedup}x vs {min_speedup}x", x, speedup, min_speedup, 0.1 * math.sqrt(2)):
            print(line)
    print("   what breaks it: a shared lean of each condition's slot in a round (its pairs no longer independent):")
    for shift in (0.03, 0.05):
        x = _slot_shifted(n * AT_BAR, 0.13, shift, seed=52)
        for line in gap_line(f"1.0x vs 1.0x slot sd {shift}", x, 1.0, 1.0, 0.13):
            print(line)
    for name, xs in ratios.items():
        sd = statistics.stdev(xs)
        print(f"   {name}: {len(xs)} measured pairs, sd {sd:.3f}, robust {sequential.robust_spread(xs):.3f}, "
              f"resampled around each speed-up:")  # fmt: skip
        for speedup, min_speedup in CASES:
            x = _resampled(xs, n * (AT_BAR if speedup == min_speedup else 1), speedup, seed=52)
            for line in gap_line(f"{speedup}x vs {min_speedup}x", x, speedup, min_speedup, sd):
                print(line)
    cost()


def cost(runs: int = 20) -> None:
    """CPU time per observation of issue 32's sequence (its running slice) and of this one (the
    two tests' wealth at the bar), on paired log ratios with a spread of 0.1 around 1.1x (1 in 25
    three times as far), a look after every 8; the interval this one shows, drawn once at the
    end; and one projection (`budget.need`, 7 paths of up to 40 rounds of 8) from 16 such
    pairs against 1.05x."""
    print(f"   cost, CPU ({load()}):")
    for n in (50, 200, 500):
        data = [_noisy(seed, n) for seed in range(runs)]
        t0 = time.process_time()
        for xs in data:
            seq = sequential.SpeedSequence()
            for k in range(0, n, 8):
                seq.add_logs(xs[k : k + 8]).decision(1.05)
        old = (time.process_time() - t0) / (runs * n) * 1e6
        t0 = time.process_time()
        for xs in data:
            test = bar.BarTest()
            for k in range(0, n, 8):
                test.add_logs(xs[k : k + 8]).verdict(1.05)
        new = (time.process_time() - t0) / (runs * n) * 1e6
        t0 = time.process_time()
        for xs in data[:5]:
            bar.BarTest().add_logs(xs).decision(1.05)
        shown = (time.process_time() - t0) / 5 * 1e3
        print(f"   {n:>4} observations: old {old:6.1f} us an observation, bar {new:6.1f} us; bar's interval "
              f"{shown:.1f} ms")  # fmt: skip
    rng = random.Random(7)
    base = [rng.uniform(100, 300) for _ in range(16)]
    cond = [b / 1.1 * math.exp(rng.gauss(0, 0.1)) for b in base]
    took = {}
    for method in ("slice", "bar"):
        t0 = time.process_time()
        for seed in range(runs):
            budget.need("k", base, cond, 1.05, per_round=8, seed=seed, method=method)
        took[method] = (time.process_time() - t0) / runs * 1e3
    print(f"   budget.need from 16 pairs: old {took['slice']:.1f} ms, bar {took['bar']:.1f} ms CPU")


def _noisy(seed: int, n: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.1, 0.1) * (3 if rng.random() < 0.04 else 1) for _ in range(n)]


# -- 2. tiny models -----------------------------------------------------------------------------


def _spread(xs: Sequence[float]) -> tuple[float, float]:
    """(standard deviation, robust spread) of log ratios."""
    return (statistics.stdev(xs) if len(xs) > 1 else math.nan, sequential.robust_spread(xs))


def _by_round(rows: list[dict[str, Any]], cond: str, base: str, clock: str) -> list[tuple[list[float], list[float]]]:
    """Per round, the paired times (baseline, condition) in prompt order, on one clock."""

    def ms(r: dict[str, Any]) -> float | None:
        if clock == "client":
            return r["total_ms"]
        if r.get("prompt_ms") is not None and r.get("predicted_ms") is not None:
            return r["prompt_ms"] + r["predicted_ms"]
        return r["total_ms"]

    out = []
    for rep in sorted({r["repeat"] for r in rows}):
        b = {r["prompt_id"]: ms(r) for r in rows if r["condition"] == base and r["repeat"] == rep and r["ok"]}
        c = {r["prompt_id"]: ms(r) for r in rows if r["condition"] == cond and r["repeat"] == rep and r["ok"]}
        keys = sorted(k for k in b.keys() & c.keys() if b[k] and c[k])
        out.append(([b[k] for k in keys], [c[k] for k in keys]))
    return out


def _round_ends(rows: list[dict[str, Any]]) -> list[float]:
    """Seconds from the run's first request to the end of each round's last request."""
    t0 = min(datetime.fromisoformat(r["started_at"]) for r in rows)
    ends: dict[int, float] = {}
    for r in rows:
        end = (datetime.fromisoformat(r["started_at"]) - t0).total_seconds() + (r["total_ms"] or 0) / 1000
        ends[r["repeat"]] = max(ends.get(r["repeat"], 0.0), end)
    return [ends[k] for k in sorted(ends)]


def replay(
    rounds: list[tuple[list[float], list[float]]], min_speedup: float, method: bar.Method
) -> tuple[str, int | None, Any]:
    """The decision a look after every round makes, and the first round it is not undecided."""
    seq = bar.sequence(method)
    d = seq.decision(min_speedup)
    for i, (b, c) in enumerate(rounds, 1):
        d = seq.add(b, c).decision(min_speedup)
        if d.decision != "undecided":
            return d.decision, i, d.interval
    return "undecided", None, d.interval


def sh(*args: str, db: Path, ok: tuple[int, ...] = (0,), timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "100", "SPECREG_DB": str(db)}
    proc = subprocess.run([*SPECREG, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode not in ok:
        sys.exit(f"specreg {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}{proc.stdout[-2000:]}")
    return proc


def _rows(db: Path, run_id: str) -> list[dict[str, Any]]:
    full = json.loads(sh("runs", "show", run_id, "--json", db=db).stdout)
    return list(full["requests"])


def _x(value: float | None) -> str:
    """A speed-up, or "-" for a condition never measured (not "0.00x")."""
    return "-" if value is None else f"{value:.2f}x"


def _ci(iv: Any) -> str:
    return f"[{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "-"


def _report(label: str, rows: list[dict[str, Any]], conds: list[str], min_speedup: float) -> None:
    ends = _round_ends(rows)
    for cond in conds:
        client = _by_round(rows, cond, "none", "client")
        server = _by_round(rows, cond, "none", "server")
        xs_c = sequential.log_ratios([b for r in client for b in r[0]], [c for r in client for c in r[1]])
        xs_s = sequential.log_ratios([b for r in server for b in r[0]], [c for r in server for c in r[1]])
        (sd_c, rs_c), (sd_s, rs_s) = _spread(xs_c), _spread(xs_s)
        old = replay(server, min_speedup, "slice")
        new = replay(server, min_speedup, "bar")

        def when(res: tuple[str, int | None, Any]) -> str:
            return f"{res[0]} r{res[1]} {ends[res[1] - 1]:.0f}s" if res[1] else f"undecided {_ci(res[2])}"

        centre = math.exp(statistics.median(xs_s)) if xs_s else math.nan
        print(
            f"   {label:<9} {cond:<13} {centre:5.2f}x  sd {sd_c:.3f} -> {sd_s:.3f}  robust {rs_c:.3f} -> {rs_s:.3f}  "
            f"old: {when(old):<26} bar: {when(new)}"
        )


def tiny(rounds: int, folder: Path) -> None:
    from specreg.testing.factory import write_model
    from specreg.testing.modelspec import FAST_DRAFT, FAST_TARGET

    db = folder / "tiny.db"
    target = write_model(folder / "target.gguf", FAST_TARGET)
    draft = write_model(folder / "draft.gguf", FAST_DRAFT)
    wl = folder / "tiny.jsonl"
    wl.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    sh("check", "pair", str(target), str(draft), db=db)
    pid = str(max(int(p["id"]) for p in json.loads(sh("pairs", "--json", db=db).stdout)))
    common = ["--pair", pid, "--workload", str(wl), "--methods", "draft-simple,ngram-mod", "--ngram",
              "mod-n-match=500", "--repeat", str(rounds), "--ctx-size", "1024", "--warmup", "2", "--json"]  # fmt: skip
    print(f"\n2. tiny models: 16-layer target, 1-layer draft; {len(ITEMS)} prompts x {rounds} rounds; decided "
          f"against {BAR}x; ngram-mod never drafts (a real A/A)")  # fmt: skip
    print("   spread: per-request log ratio, client clock -> server clock (same requests); old: issue 32's")
    print("   sequence, bar: decision/bar.py's tests, both on the server clock (a look after every round)")
    for label, extra in (("new", []), ("--no-pin", ["--no-pin"]), ("--shuffle", ["--shuffle"])):
        before = load()
        t0 = time.monotonic()
        proc = sh("bench", "admitted", *common, *extra, db=db, ok=(0, 1))
        (run,) = json.loads(proc.stdout)
        wall = time.monotonic() - t0
        rows = _rows(db, run["info"]["run_id"])
        print(f"   {label}: run {run['info']['run_id']}, {wall:.0f} s wall, {before} before, {load()} after")
        _report(label, rows, ["draft-simple", "ngram-mod"], BAR)


# -- 3. SmolLM2 ---------------------------------------------------------------------------------


def real(budget: str, folder: Path, busy_share: str | None, draft_max: int | None = None) -> None:
    """The issue's run on SmolLM2 (`--sample 2 --tune`), or with `draft_max` one fixed draft
    length on `--sample 1` (issue 52's target: decided either way within the budget)."""
    db = folder / "real.db"
    pid = _smollm2_pair(db)
    args = ["bench", "admitted", "--pair", pid, "--workload", "mt-bench"]
    if draft_max is None:
        args += ["--sample", "2", "--tune", "--budget", budget]
    else:
        args += ["--sample", "1", "--methods", "draft-simple", "--draft-max", str(draft_max), "--budget", budget]
    args += ["--busy-share", busy_share] if busy_share else []
    print(f"\n3. SmolLM2-135M-Instruct F32 <- Q4_1 (draft-simple): specreg {' '.join(args)}")
    print(f"   before: {load()}")
    t0 = time.monotonic()
    proc = sh(*args, "--json", db=db, ok=(0, 1), timeout=7200)
    wall = time.monotonic() - t0
    (run,) = json.loads(proc.stdout)
    notes = [ln for ln in proc.stderr.splitlines() if "plan " in ln or "budget" in ln or "tune" in ln]
    print(f"   wall {wall:.0f} s ({wall / 60:.1f} min) against a budget of {budget}; status {run['info']['status']}; "
          f"after: {load()}")  # fmt: skip
    for line in [*notes[:8], *(["..."] if len(notes) > 16 else []), *notes[max(8, len(notes) - 8) :]]:
        print(f"   | {line.strip()[:110]}")
    rows = _rows(db, run["info"]["run_id"])
    rounds = {c: len({r["repeat"] for r in rows if r["condition"] == c}) for c in {r["condition"] for r in rows}}
    print(f"   rounds per condition: {json.dumps(rounds, sort_keys=True)}")
    for s in run["summaries"]:
        if s["stratum"] != "all" or s["method"] == "none":
            continue
        tuned = s.get("tune") or {}
        print(
            f"   {s['condition']:<18} speed-up {_x(s.get('speedup'))}  decision {_decision(s, rounds)}"
            f"{'  <- chosen' if tuned.get('chosen') else ''}"
        )
        if tuned.get("chosen") and tuned.get("why"):
            print(f"   {'':<18} why: {tuned['why']}")
    conds = sorted(c for c in rounds if c != "none")
    _report("SmolLM2", rows, conds, 1.05)
    dep = sh("deploy", pid, db=db, ok=(0, 1))
    print(f"   specreg deploy {pid}: exit {dep.returncode}")
    for line in (dep.stdout + dep.stderr).strip().splitlines()[:8]:
        print(f"   | {line[:110]}")


GRID = (2, 4, 8, 16)


def _decision(s: dict[str, Any], rounds: dict[str, int]) -> str:
    """A summary's decision as `runs show` words it: decided with its interval, undecided with
    what would decide it."""
    from specreg.decision.budget import undecided_text

    if s.get("decision") == "undecided":
        return undecided_text(rounds.get(s["condition"], 0), s.get("decision_more_rounds"), s.get("decision_budget"))
    return f"{s.get('decision') or '-'} {_ci(s.get('decision_ci'))}"


def _tiny_pair(folder: Path, db: Path) -> tuple[str, Path]:
    from specreg.testing.factory import write_model
    from specreg.testing.modelspec import FAST_DRAFT, FAST_TARGET

    target = write_model(folder / "target.gguf", FAST_TARGET)
    draft = write_model(folder / "draft.gguf", FAST_DRAFT)
    wl = folder / "tiny.jsonl"
    wl.write_text("".join(json.dumps(i) + "\n" for i in ITEMS))
    sh("check", "pair", str(target), str(draft), db=db)
    return str(max(int(p["id"]) for p in json.loads(sh("pairs", "--json", db=db).stdout))), wl


def _timed(db: Path, args: list[str]) -> tuple[dict[str, Any], float, str, str]:
    before = load()
    t0 = time.monotonic()
    proc = sh(*args, "--json", db=db, ok=(0, 1), timeout=7200)
    (run,) = json.loads(proc.stdout)
    return run, time.monotonic() - t0, before, load()


def grid(folder: Path, on_real: bool, budget: str, repeat: int, busy_share: str | None) -> None:
    """The tuned length against a grid: `--tune --budget` on the draft method alone, and the same
    pair measured at every length of `GRID` for `repeat` rounds; each speed-up against the baseline
    of its own run. The target (issue 32): the tuned length measures at least as fast as the
    grid's best, in less than half the grid's time."""
    db = folder / ("grid-real.db" if on_real else "grid-tiny.db")
    if on_real:
        pid, wl = _smollm2_pair(db), "mt-bench"
        extra = ["--sample", "2"]
    else:
        (folder / "grid").mkdir(exist_ok=True)
        pid, wl_path = _tiny_pair(folder / "grid", db)
        # one server thread, as the tests run them: on a shared 2-core machine the build's threads
        # spin against the neighbours (a 32-token request of the tiny target took 15 s)
        wl, extra = str(wl_path), ["--ctx-size", "1024", "--warmup", "2", "--threads", "1"]
    extra += ["--busy-share", busy_share] if busy_share else []
    common = ["bench", "admitted", "--pair", pid, "--workload", wl, "--methods", "draft-simple", *extra]
    print(f"\n5. grid comparison on {'SmolLM2 (mt-bench --sample 2)' if on_real else 'the tiny models'}: "
          f"--tune --budget {budget} against --draft-max {','.join(map(str, GRID))} --repeat {repeat}")  # fmt: skip
    tuned, t_tune, b1, a1 = _timed(db, [*common, "--tune", "--budget", budget])
    grid_run, t_grid, b2, a2 = _timed(db, [*common, "--draft-max", ",".join(map(str, GRID)), "--repeat", str(repeat)])

    def lengths(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {s["condition"]: s for s in run["summaries"] if s["stratum"] == "all" and s["method"] != "none"}

    print(f"   {'run':<6} {'condition':<18} {'speed-up':>9} {'interval':>14} {'decision':>11}")
    chosen = None
    for name, s in sorted(lengths(tuned).items(), key=lambda t: t[1].get("draft_n_max") or 0):
        mark = ""
        if (s.get("tune") or {}).get("chosen"):
            chosen = s
            mark = "  <- tuned" if s.get("decision") != "undecided" else "  <- leads, undecided (no length decided)"
        # an undecided length's anytime-valid interval is the whole clip after a round or two: the
        # bootstrap interval says more about where it stands
        decided = s.get("decision") in ("faster", "not faster")
        iv = (s.get("decision_ci") if decided else None) or s.get("speedup_ci95")
        print(f"   {'tune':<6} {name:<18} {_x(s.get('speedup')):>9} {_ci(iv):>14} {s.get('decision') or '-':>11}{mark}")
    grid_rows = lengths(grid_run)
    best = max((s for s in grid_rows.values() if s.get("speedup")), key=lambda s: s["speedup"], default=None)
    for name, s in sorted(grid_rows.items(), key=lambda t: t[1].get("draft_n_max") or 0):
        mark = "  <- grid best" if s is best else ""
        print(f"   {'grid':<6} {name:<18} {_x(s.get('speedup')):>9} {_ci(s.get('speedup_ci95')):>14} {'-':>11}{mark}")
    print(f"   tune: {t_tune:.0f} s ({b1} before, {a1} after); grid: {t_grid:.0f} s ({b2} before, {a2} after)")
    if chosen is not None and chosen["tune"].get("why"):
        print(f"   tune's choice: {chosen['tune']['why']}")
    for label, run, wall in (("tune", tuned, t_tune), ("grid", grid_run, t_grid)):
        for line in phase_lines(run, wall):
            print(f"   {label} {line}")
    if chosen is None or best is None or not chosen.get("speedup"):
        print("   no tuned length measured, or no grid length: nothing to compare")
        return
    ok_speed = chosen["speedup"] >= best["speedup"]
    # the grid decides no strata: it is compared with the time to the tuned choice (the mark the
    # run kept when its tuning settled, plus the CLI's time outside the run), not with the wall
    # that includes the rounds spent on the chosen length's strata afterwards
    info = tuned["info"]
    run_s = (datetime.fromisoformat(info["finished_at"]) - datetime.fromisoformat(info["started_at"])).total_seconds()
    settled = chosen["tune"].get("settled_s")
    t_choice = t_tune if settled is None else settled + max(0.0, t_tune - run_s)
    said = "never settled: the whole wall" if settled is None else f"settled {settled:.0f} s into the run"
    print(f"   tune: time to the tuned choice {t_choice:.0f} s ({said}); total wall {t_tune:.0f} s "
          f"including {max(0.0, t_tune - t_choice):.0f} s of rounds on the chosen length's strata")  # fmt: skip
    ok_time = t_choice < t_grid / 2
    same = chosen.get("draft_n_max") == best.get("draft_n_max")
    how = "at least as fast" if ok_speed else "slower"
    if same and not ok_speed:  # one length in two runs: what differs is the runs, not the choice
        how = f"slower in its run, the grid's best length itself (grid interval {_ci(best.get('speedup_ci95'))})"
    print(f"   tuned {chosen['condition']} {_x(chosen['speedup'])} vs grid best {best['condition']} "
          f"{_x(best['speedup'])}: {how}; time to the choice {t_choice / t_grid:.0%} of the "
          f"grid's ({'under' if ok_time else 'not under'} half; total wall {t_tune / t_grid:.0%})")  # fmt: skip


def phase_lines(run: dict[str, Any], wall_s: float) -> list[str]:
    """Where a run's time went, by why its slots ran (RoundLoad.phase): slots, seconds, and their
    parts (server start, warm-up, requests, after: counters, id replays, stop); the rest of the
    wall time is outside the slots (the CLI's start, the check of the files, planning, summaries)."""
    parts = ("start_s", "warmup_s", "requests_s", "after_s")
    by: dict[str, list[dict[str, Any]]] = {}
    for c in run["conditions"]:
        for slot in c.get("load") or []:
            by.setdefault(slot.get("phase") or "?", []).append(slot)
    out, inside = [], 0.0
    for phase in ("planned", "first pass", "leader", "lengths", "methods", "strata", "?"):
        slots = by.get(phase)
        if not slots:
            continue
        sums = [sum(x.get(p) or 0.0 for x in slots) for p in parts]
        inside += sum(sums)
        out.append(
            f"{phase + ':':<11} {len(slots):>2} slots {sum(sums):5.1f} s (start {sums[0]:.1f}, warm-up "
            f"{sums[1]:.1f}, requests {sums[2]:.1f}, after {sums[3]:.1f})"
        )
    out.append(f"{'outside:':<11}          {max(0.0, wall_s - inside):5.1f} s (CLI start, checks, planning, summaries)")
    return out


def _smollm2_pair(db: Path) -> str:
    from specreg.testing import realmodel

    target, draft = realmodel.ensure_model("f32"), realmodel.ensure_model("q4_1")
    for path in (target, draft):
        sh("register", str(path), "--license", realmodel.LICENCE, db=db)
    sh("check", "pair", str(target), str(draft), "--json", db=db, ok=(0, 1))
    return str(max(int(p["id"]) for p in json.loads(sh("pairs", "--json", db=db).stdout) if p["draft_sha256"]))


def pinning(folder: Path, sample: int, repeat: int, max_tokens: int) -> None:
    """Does `--pin` (on 2 cores: the server gets 1 thread) cost draft-simple more than the
    baseline? The same fixed-length condition (k16) against the baseline, pinned and not, in
    runs alternated pin / no-pin / pin / no-pin; each ratio against the baseline of its own run."""
    db = folder / "pin.db"
    pid = _smollm2_pair(db)
    common = ["bench", "admitted", "--pair", pid, "--workload", "mt-bench", "--sample", str(sample), "--methods",
              "draft-simple", "--draft-max", "16", "--repeat", str(repeat), "--max-tokens", str(max_tokens),
              "--busy-share", "off", "--json"]  # fmt: skip
    print(f"\n4. --pin on SmolLM2 k16 (mt-bench, --sample {sample}, --repeat {repeat}, --max-tokens {max_tokens}), "
          f"{os.cpu_count()} CPUs")  # fmt: skip
    got: dict[str, list[float]] = {"--pin": [], "--no-pin": []}
    for flag in ("--pin", "--no-pin", "--pin", "--no-pin"):
        before = load()
        proc = sh(*common, flag, db=db, ok=(0, 1), timeout=3600)
        (run,) = json.loads(proc.stdout)
        rows = _rows(db, run["info"]["run_id"])
        pairs = _by_round(rows, "draft-simple", "none", "server")
        xs = sequential.log_ratios([b for r in pairs for b in r[0]], [c for r in pairs for c in r[1]])
        ratio = math.exp(statistics.median(xs)) if xs else math.nan
        base_ms = statistics.median([r["predicted_ms"] / max(1, r.get("output_tokens") or 1) for r in rows
                                     if r["condition"] == "none" and r["ok"] and r.get("predicted_ms")])  # fmt: skip
        threads = run["manifest"]["observation"].get("threads")
        got[flag].append(ratio)
        print(f"   {flag:<9} -t {threads}: k16 {ratio:.2f}x the baseline of its run (median of {len(xs)} paired "
              f"requests); baseline {base_ms:.1f} ms/token; {before} before, {load()} after")  # fmt: skip
    pin, free = statistics.mean(got["--pin"]), statistics.mean(got["--no-pin"])
    print(f"   mean k16 ratio: --pin {pin:.2f}x, --no-pin {free:.2f}x: pinning costs draft-simple "
          f"{(1 - pin / free):.0%} more than the baseline")  # fmt: skip


RATIOS = Path(__file__).resolve().parent / "data" / "decision_ratios.json"


def read_ratios() -> dict[str, list[float]]:
    """The measured paired log ratios section 1 resamples (`--keep-ratios` writes them)."""
    if not RATIOS.exists():
        return {}
    return {name: list(entry["xs"]) for name, entry in json.loads(RATIOS.read_text()).items()}


def keep_ratios(db: Path, min_pairs: int = 24) -> None:
    """Each run's speculative conditions' paired log ratios on the server clock (in the order a
    decision sees them), from a registry, added to `RATIOS` under "model condition (run)" with
    where they came from, for section 1 to resample: real spreads and tails, reproducibly."""
    kept = json.loads(RATIOS.read_text()) if RATIOS.exists() else {}
    for run in json.loads(sh("runs", "--json", db=db).stdout):
        run_id = run.get("run_id") or run["info"]["run_id"]
        full = json.loads(sh("runs", "show", run_id, "--json", db=db).stdout)
        rows = list(full["requests"])
        target = Path(full["manifest"]["target"].get("path") or "target").name
        for cond in sorted({r["condition"] for r in rows} - {"none"}):
            pairs = _by_round(rows, cond, "none", "server")
            xs = sequential.log_ratios([b for r in pairs for b in r[0]], [c for r in pairs for c in r[1]])
            if len(xs) < min_pairs:
                continue
            name = f"{target} {cond} ({run_id})"
            kept[name] = {
                "source": f"specreg bench, run {run_id}, server clock, {len(pairs)} rounds",
                "load": full["info"].get("load_note") or "see the run's `load` per slot",
                "xs": [round(x, 6) for x in xs],
            }
            print(f"   kept {len(xs)} pairs of {name}: median {math.exp(statistics.median(xs)):.2f}x, "
                  f"sd {statistics.stdev(xs):.3f}")  # fmt: skip
    RATIOS.parent.mkdir(exist_ok=True)
    RATIOS.write_text(json.dumps(kept, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument("--real", action="store_true", help="also the SmolLM2 --tune run (minutes)")
    ap.add_argument("--real-draft-max", type=int, default=None, metavar="K",
                    help="--real at one draft length K on --sample 1 instead of --tune")  # fmt: skip
    ap.add_argument("--budget", default="8m")
    ap.add_argument("--busy-share", default=None, help="--busy-share of the SmolLM2 and grid runs (shared: off)")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--pinning", action="store_true", help="also --pin against --no-pin on SmolLM2 (minutes)")
    ap.add_argument("--pin-sample", type=int, default=1)
    ap.add_argument("--pin-repeat", type=int, default=2)
    ap.add_argument("--pin-max-tokens", type=int, default=128)
    ap.add_argument("--grid", action="store_true", help="the tuned length against a 2,4,8,16 grid (tiny models)")
    ap.add_argument("--grid-real", action="store_true", help="the grid comparison on SmolLM2 instead (minutes)")
    ap.add_argument("--grid-budget", default=None, help="--tune's budget there (default: 30s; --grid-real: --budget)")
    ap.add_argument("--grid-repeat", type=int, default=3)
    ap.add_argument("--keep-ratios", type=Path, default=None, metavar="DB",
                    help=f"add the runs of registry DB to {RATIOS.name}, which section 1 resamples")  # fmt: skip
    args = ap.parse_args()
    if args.keep_ratios:
        keep_ratios(args.keep_ratios)
    folder = args.dir or Path(tempfile.mkdtemp(prefix="specreg-bench-decision-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"bench_decision: {load()}; files in {folder}")
    if args.sims:
        simulate(args.sims, read_ratios())
    if not args.skip_tiny:
        tiny(args.rounds, folder)
    if args.real:
        real(args.budget, folder, args.busy_share, args.real_draft_max)
    if args.pinning:
        pinning(folder, args.pin_sample, args.pin_repeat, args.pin_max_tokens)
    if args.grid or args.grid_real:
        budget = args.grid_budget or (args.budget if args.grid_real else "30s")
        grid(folder, args.grid_real, budget, args.grid_repeat, args.busy_share)
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_decision`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "decision"))
