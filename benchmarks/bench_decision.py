"""Time to a decision, and the decision, before and after issue 32 - on the same requests.

Issue 32 made `bench --budget` decide sooner by measuring less noise and spending it better:
the server's own per-request timings instead of the client's wall clock, rounds in a balanced
(ABBA) order, the server pinned to all cores but one, and an anytime-valid interval whose clip
is sized to the spread of the log ratios (sequential.py) at alpha 0.02. This prints:

1. **Simulation** (`--sims N` seeded runs each, the generator of tests/test_bench_sequential.py):
   the A/A false `faster` rate against 1.0x, and how often and after how many rounds a true
   1.15x and 1.3x are decided `faster` against 1.05x, for the old method (fixed +-log 8 clip,
   alpha 0.05, shuffled order) and the new (adaptive clip, alpha 0.02, balanced order).
   Then the sequence's CPU cost per observation: the running slice against the whole grid.
2. **Tiny models** (generated GGUFs, the bundled llama.cpp server): `--rounds` fixed rounds of
   the baseline, draft-simple (a 16-layer target, a 1-layer draft: really faster) and
   ngram-mod with a match length no output reaches (it never drafts: a real A/A), in three
   runs: the new settings, `--no-pin`, `--shuffle`. For each run and condition, the per-request
   spread of the log ratios (client clock vs server clock, same requests), and the round (and
   wall seconds) at which the old method on client clocks and the new on server clocks first
   decide - replayed on the very rows measured, a look after every round as `--budget` looks.
3. **SmolLM2** (`--real`): the issue's `bench admitted --workload mt-bench --sample 2 --tune
   --budget 8m` on the real pair (F32 target, Q4_1 draft), its wall time, decisions and
   `deploy`, and the old method replayed on the same rows.

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
       [--budget 8m] [--busy-share off] [--pinning] [--grid | --grid-real] [--grid-budget B]
       [--dir DIR]
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

from specreg.decision import budget, sequential
from specreg.testing.modelspec import FAST_ITEMS

SPECREG = [sys.executable, "-m", "specreg"]
OLD_ALPHA = 0.05  # before issue 32
ITEMS = FAST_ITEMS  # specreg.testing.modelspec: the tests of --tune use them too


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f}/{five:.2f}/{fifteen:.2f} on {os.cpu_count()} CPUs"


# -- 1. simulation ------------------------------------------------------------------------------


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


def _sim(seed: int, speedup: float, bar: float, new: bool, rounds: int = 20) -> tuple[str, int]:
    rng = random.Random(seed)
    prompts = [rng.uniform(50, 400) for _ in range(8)]
    seq = sequential.SpeedSequence(sequential.ALPHA if new else OLD_ALPHA, "adaptive" if new else "fixed")
    drift = 1.0
    for r in range(1, rounds + 1):
        drift *= math.exp(rng.gauss(0, 0.08))
        d = seq.add(*_sim_round(rng, prompts, speedup, drift, r, balanced=new)).decision(bar)
        if d.decision != "undecided":
            return d.decision, r
    return "undecided", rounds


def simulate(n: int) -> None:
    print(f"1. simulation: {n} seeded runs each, 8 prompts a round, at most 20 rounds ({load()})")
    print(f"   {'case':<22} {'method':<5} {'faster':>7} {'not':>5} {'undec.':>6} {'median rounds':>14}")
    for label, speedup, bar in (
        ("A/A vs 1.0x", 1.0, 1.0),
        ("1.15x vs 1.05x", 1.15, 1.05),
        ("1.3x vs 1.05x", 1.3, 1.05),
    ):
        for new in (False, True):
            res = [_sim(s, speedup, bar, new) for s in range(n)]
            count = {k: sum(1 for d, _ in res if d == k) for k in ("faster", "not faster", "undecided")}
            decided = [r for d, r in res if d != "undecided"]
            med = f"{statistics.median(decided):.0f}" if decided else "-"
            print(
                f"   {label:<22} {'new' if new else 'old':<5} {count['faster'] / n:>7.1%} "
                f"{count['not faster'] / n:>5.1%} {count['undecided'] / n:>6.1%} {med:>14}"
            )
    print("   old: clip +-log 8, alpha 0.05, shuffled order; new: adaptive clip, alpha 0.02, ABBA order")
    cost()


def cost(runs: int = 20) -> None:
    """CPU time per observation of the sequence: the centres still inside the running interval
    (the slice) against every centre of the grid (as before it, but with today's clip, which no
    longer sorts the observations at every step), on paired log ratios with a spread
    of 0.1 around 1.1x (1 in 25 three times as far), a look after every 8; and one
    `budget.need` (7 paths of up to 40 rounds of 8) from 16 such pairs against 1.05x."""
    print(f"   cost of the sequence, CPU per observation ({load()}):")
    for n in (50, 200, 500):
        data = []
        for seed in range(runs):
            rng = random.Random(seed)
            data.append([rng.gauss(0.1, 0.1) * (3 if rng.random() < 0.04 else 1) for _ in range(n)])
        took = {}
        ways: tuple[sequential.Intersection, ...] = ("slice", "grid")
        for way in ways:
            t0 = time.process_time()
            for xs in data:
                seq = sequential.SpeedSequence(intersection=way)
                for k in range(0, n, 8):
                    seq.add_logs(xs[k : k + 8]).decision(1.05)
            took[way] = (time.process_time() - t0) / (runs * n) * 1e6
        print(
            f"   {n:>4} observations: {took['slice']:6.1f} us (slice), {took['grid']:6.1f} us (whole grid): "
            f"{took['grid'] / took['slice']:.1f}x"
        )
    rng = random.Random(7)
    base = [rng.uniform(100, 300) for _ in range(16)]
    cond = [b / 1.1 * math.exp(rng.gauss(0, 0.1)) for b in base]
    t0 = time.process_time()
    for seed in range(runs):
        budget.need("k", base, cond, 1.05, per_round=8, seed=seed)
    print(f"   budget.need from 16 pairs: {(time.process_time() - t0) / runs * 1e3:.1f} ms CPU")


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


def replay(rounds: list[tuple[list[float], list[float]]], bar: float, new: bool) -> tuple[str, int | None, Any]:
    """The decision a look after every round makes, and the first round it is not undecided."""
    seq = sequential.SpeedSequence(sequential.ALPHA if new else OLD_ALPHA, "adaptive" if new else "fixed")
    d = seq.decision(bar)
    for i, (b, c) in enumerate(rounds, 1):
        d = seq.add(b, c).decision(bar)
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


def _report(label: str, rows: list[dict[str, Any]], conds: list[str], bar: float) -> None:
    ends = _round_ends(rows)
    for cond in conds:
        client = _by_round(rows, cond, "none", "client")
        server = _by_round(rows, cond, "none", "server")
        xs_c = sequential.log_ratios([b for r in client for b in r[0]], [c for r in client for c in r[1]])
        xs_s = sequential.log_ratios([b for r in server for b in r[0]], [c for r in server for c in r[1]])
        (sd_c, rs_c), (sd_s, rs_s) = _spread(xs_c), _spread(xs_s)
        old = replay(client, bar, new=False)
        new = replay(server, bar, new=True)

        def when(res: tuple[str, int | None, Any]) -> str:
            return f"{res[0]} r{res[1]} {ends[res[1] - 1]:.0f}s" if res[1] else f"undecided {_ci(res[2])}"

        centre = math.exp(statistics.median(xs_s)) if xs_s else math.nan
        print(
            f"   {label:<9} {cond:<13} {centre:5.2f}x  sd {sd_c:.3f} -> {sd_s:.3f}  robust {rs_c:.3f} -> {rs_s:.3f}  "
            f"old: {when(old):<26} new: {when(new)}"
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
    bar = 1.05
    print(f"\n2. tiny models: 16-layer target, 1-layer draft; {len(ITEMS)} prompts x {rounds} rounds; decided "
          f"against {bar}x; ngram-mod never drafts (a real A/A)")  # fmt: skip
    print("   spread: per-request log ratio, client clock -> server clock (same requests); old: client clock,")
    print("   clip log 8, alpha 0.05; new: server clock, adaptive clip, alpha 0.02 (a look after every round)")
    for label, extra in (("new", []), ("--no-pin", ["--no-pin"]), ("--shuffle", ["--shuffle"])):
        before = load()
        t0 = time.monotonic()
        proc = sh("bench", "admitted", *common, *extra, db=db, ok=(0, 1))
        (run,) = json.loads(proc.stdout)
        wall = time.monotonic() - t0
        rows = _rows(db, run["info"]["run_id"])
        print(f"   {label}: run {run['info']['run_id']}, {wall:.0f} s wall, {before} before, {load()} after")
        _report(label, rows, ["draft-simple", "ngram-mod"], bar)


# -- 3. SmolLM2 ---------------------------------------------------------------------------------


def real(budget: str, folder: Path, busy_share: str | None) -> None:
    db = folder / "real.db"
    pid = _smollm2_pair(db)
    args = ["bench", "admitted", "--pair", pid, "--workload", "mt-bench", "--sample", "2", "--tune", "--budget", budget]
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument("--real", action="store_true", help="also the SmolLM2 --tune run (minutes)")
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
    args = ap.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="specreg-bench-decision-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"bench_decision: {load()}; files in {folder}")
    if args.sims:
        simulate(args.sims)
    if not args.skip_tiny:
        tiny(args.rounds, folder)
    if args.real:
        real(args.budget, folder, args.busy_share)
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
