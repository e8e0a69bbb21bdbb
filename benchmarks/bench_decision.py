"""Time to a decision, and the decision, before and after issue 32 - on the same requests.

Issue 32 made `bench --budget` decide sooner by measuring less noise and spending it better:
the server's own per-request timings instead of the client's wall clock, rounds in a balanced
(ABBA) order, the server pinned to all cores but one, and an anytime-valid interval whose clip
is sized to the spread of the log ratios (sequential.py) at alpha 0.02. This prints:

1. **Simulation** (`--sims N` seeded runs each, the generator of tests/test_bench_sequential.py):
   the A/A false `faster` rate against 1.0x, and how often and after how many rounds a true
   1.15x and 1.3x are decided `faster` against 1.05x, for the old method (fixed +-log 8 clip,
   alpha 0.05, shuffled order) and the new (adaptive clip, alpha 0.02, balanced order).
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

Usage: python benchmarks/bench_decision.py [--sims 400] [--rounds 10] [--skip-tiny] [--real]
       [--budget 8m] [--busy-share off] [--dir DIR]
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

from specreg.decision import sequential

SPECREG = [sys.executable, "-m", "specreg.cli"]
OLD_ALPHA = 0.05  # before issue 32
FAST_PAIR = {"n_embd": 384, "n_ff": 1536, "n_ctx": 1024, "block_scale": 0.02, "head_seed": 7}
ITEMS = [
    {"id": "rep-1", "stratum": "repetitive", "max_tokens": 32, "prompt": "a b c a b c a b c"},
    {"id": "rep-2", "stratum": "repetitive", "max_tokens": 32, "prompt": "key: value\nkey: value\nkey:"},
    {"id": "chat-1", "stratum": "chat", "max_tokens": 32, "prompt": "Why test a server before production?"},
    {"id": "chat-2", "stratum": "chat", "max_tokens": 32, "prompt": "Question: what is a draft model?\nAnswer:"},
]


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
    from specreg.testing.factory import ModelSpec, write_model

    db = folder / "tiny.db"
    target = write_model(folder / "target.gguf", ModelSpec(n_layer=16, **FAST_PAIR))  # type: ignore[arg-type]
    draft = write_model(folder / "draft.gguf", ModelSpec(n_layer=1, name="small-draft", **FAST_PAIR))  # type: ignore[arg-type]
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
    from specreg.testing import realmodel

    db = folder / "real.db"
    target, draft = realmodel.ensure_model("f32"), realmodel.ensure_model("q4_1")
    for path in (target, draft):
        sh("register", str(path), "--license", realmodel.LICENCE, db=db)
    sh("check", "pair", str(target), str(draft), "--json", db=db, ok=(0, 1))
    pid = str(max(int(p["id"]) for p in json.loads(sh("pairs", "--json", db=db).stdout) if p["draft_sha256"]))
    args = ["bench", "admitted", "--pair", pid, "--workload", "mt-bench", "--sample", "2", "--tune", "--budget", budget]
    args += ["--busy-share", busy_share] if busy_share else []
    print(f"\n3. SmolLM2-135M-Instruct F32 <- Q4_1 (draft-simple): specreg {' '.join(args)}")
    print(f"   before: {load()}")
    t0 = time.monotonic()
    proc = sh(*args, "--json", db=db, ok=(0, 1), timeout=7200)
    wall = time.monotonic() - t0
    (run,) = json.loads(proc.stdout)
    notes = [ln for ln in proc.stderr.splitlines() if "plan " in ln or "budget" in ln or "tune " in ln]
    print(f"   wall {wall:.0f} s ({wall / 60:.1f} min) against a budget of {budget}; status {run['info']['status']}; "
          f"after: {load()}")  # fmt: skip
    for line in notes[-12:]:
        print(f"   | {line.strip()[:110]}")
    rows = _rows(db, run["info"]["run_id"])
    rounds = {c: len({r["repeat"] for r in rows if r["condition"] == c}) for c in {r["condition"] for r in rows}}
    print(f"   rounds per condition: {json.dumps(rounds, sort_keys=True)}")
    for s in run["summaries"]:
        if s["stratum"] != "all" or s["method"] == "none":
            continue
        tuned = s.get("tune") or {}
        print(
            f"   {s['condition']:<18} speed-up {s.get('speedup') or 0:.2f}x  decision {s.get('decision')} "
            f"{_ci(s.get('decision_ci'))}{'  <- chosen' if tuned.get('chosen') else ''}"
        )
    conds = sorted(c for c in rounds if c != "none")
    _report("SmolLM2", rows, conds, 1.05)
    dep = sh("deploy", pid, db=db, ok=(0, 1))
    print(f"   specreg deploy {pid}: exit {dep.returncode}")
    for line in (dep.stdout + dep.stderr).strip().splitlines()[:8]:
        print(f"   | {line[:110]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument("--real", action="store_true", help="also the SmolLM2 --tune run (minutes)")
    ap.add_argument("--budget", default="8m")
    ap.add_argument("--busy-share", default=None, help="the SmolLM2 run's --busy-share (a shared machine: off)")
    ap.add_argument("--dir", type=Path, default=None)
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
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_decision`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "decision"))
