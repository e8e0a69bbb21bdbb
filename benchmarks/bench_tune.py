"""`--tune` against the full grid, on a real trained pair: SmolLM2-135M-Instruct F32 target, its Q4_1 draft.

One invocation, two `bench admitted` runs of draft-simple on the same workload:
1. the grid: every draft length of `--grid` (default 2,4,8,16) over every stratum, `--repeat` rounds;
2. `--tune --budget B`: a first pass at k16, the predicted best and its neighbours head to head.
Printed: the grid's best speed-up (all strata) with its interval and the grid's wall time; the
tuned choice's speed-up and wall time; whether the choice lies within the grid best's interval;
each candidate's prediction (made before it ran) against what it measured, and the first pass's
curve against the grid's measurements; what `deploy` (default policy) prints for the tuned run.
Wall times are what a user waits; on a shared machine they move with the load, so the load
average and the CPU seconds of the runs (servers included) are printed beside them.

Usage: python benchmarks/bench_tune.py [--workload mt-bench] [--sample 2] [--grid 2,4,8,16]
       [--repeat 3] [--tune-repeat 1] [--budget 8m] [--max-tokens N] [--threads N] [--warmup N]
       [--quick] [--dir DIR]
The grid runs `--repeat` rounds (3: what the default policy asks for); `--tune` stops when its
best is decided, after at least `--tune-repeat` rounds per candidate, or when `--budget` ends.
`--quick`: --sample 1 --max-tokens 32 --warmup 2 --budget 6m (a reduced variant for busy machines).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specreg.testing import realmodel

SPECREG = [sys.executable, "-m", "specreg"]


def sh(*args: str, db: Path, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "120")}
    proc = subprocess.run([*SPECREG, "--db", str(db), *args], capture_output=True, text=True, env=env)
    if proc.returncode not in ok:
        sys.exit(f"specreg {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout[-2000:]}")
    return proc


def cpu_s() -> float:
    """CPU seconds of every finished child (the CLI and the servers it waited for)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def timed(*args: str, db: Path) -> tuple[dict[str, Any], float, float]:
    """One `bench admitted --json` run: the run, its wall seconds and CPU seconds."""
    t0, c0 = time.monotonic(), cpu_s()
    proc = sh("bench", "admitted", *args, "--json", db=db, ok=(0, 1))
    (run,) = json.loads(proc.stdout)
    return run, time.monotonic() - t0, cpu_s() - c0


def _ci(s: dict[str, Any]) -> str:
    ci = s.get("speedup_ci95")
    sp = s.get("speedup")
    return "-" if sp is None else f"{sp:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _whole(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """draft length -> the draft-simple summary over all strata."""
    return {
        s["draft_n_max"]: s
        for s in run["summaries"]
        if s["stratum"] == "all" and s["method"] == "draft-simple" and s["draft_n_max"] is not None
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mt-bench")
    ap.add_argument("--sample", type=int, default=2)
    ap.add_argument("--grid", default="2,4,8,16")
    ap.add_argument("--repeat", type=int, default=3, help="the grid's rounds (the default policy's minimum)")
    ap.add_argument("--tune-repeat", type=int, default=1, help="--tune's floor of rounds per candidate")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--budget", default=None, help="--tune's budget [8m; --quick: 6m]")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="--sample 1 --max-tokens 32 --warmup 2 --budget 6m")
    ap.add_argument("--dir", type=Path, default=None, help="keep registry, logs and reports here")
    args = ap.parse_args()
    if args.quick:
        args.sample, args.max_tokens, args.warmup = 1, args.max_tokens or 32, 2
    args.budget = args.budget or ("6m" if args.quick else "8m")

    t0 = time.monotonic()
    target, draft = realmodel.ensure_model("f32"), realmodel.ensure_model("q4_1")
    folder = args.dir or Path(tempfile.mkdtemp(prefix="specreg-bench-tune-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "registry.db"
    for path in (target, draft):
        sh("register", str(path), "--license", realmodel.LICENCE, db=db)
    verdict = json.loads(sh("check", "pair", str(target), str(draft), "--json", db=db, ok=(0, 1)).stdout)
    if not verdict["admitted"]:
        sys.exit("the SmolLM2 pair was not admitted: " + json.dumps(verdict)[:500])
    pairs = json.loads(sh("pairs", "--json", db=db).stdout)
    pid = str(max(int(p["id"]) for p in pairs if p["draft_sha256"] == verdict["draft_sha256"]))
    load0 = os.getloadavg()
    print(f"model: {realmodel.PACKAGE} {realmodel.VERSION}, F32 target <- Q4_1 draft (draft-simple), pair {pid}")
    print(f"machine: {os.cpu_count()} logical CPUs, load average {load0[0]:.2f} / {load0[2]:.2f} (1 / 15 min) at start")
    common = ["--pair", pid, "--workload", args.workload, "--sample", str(args.sample), "--methods", "draft-simple"]
    common += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
    common += ["--threads", str(args.threads)] if args.threads else []
    common += ["--warmup", str(args.warmup)] if args.warmup is not None else []
    print(
        f"flags: {' '.join(common)}; grid --repeat {args.repeat}; "
        f"tune --repeat {args.tune_repeat} --budget {args.budget}"
    )

    grid, grid_wall, grid_cpu = timed(*common, "--draft-max", args.grid, "--repeat", str(args.repeat), db=db)
    load1 = os.getloadavg()
    tuned, tune_wall, tune_cpu = timed(
        *common, "--tune", "--budget", args.budget, "--repeat", str(args.tune_repeat), db=db
    )
    load2 = os.getloadavg()

    g = _whole(grid)
    print(
        f"\ngrid: run {grid['info']['run_id']} ({grid['info']['status']}), k in {{{args.grid}}}, {args.repeat} rounds"
    )
    for k, s in sorted(g.items()):
        print(f"  k{k:<3} {_ci(s):24} acceptance {s.get('acceptance') or 0:.1%}  decision {s.get('decision')}")
    measured = {k: s for k, s in g.items() if s.get("speedup") is not None}
    best_k = max(measured, key=lambda k: measured[k]["speedup"]) if measured else None
    t = _whole(tuned)
    cands = {k: s for k, s in t.items() if s.get("tune") and s["tune"]["role"] == "candidate"}
    chosen = next((s for s in cands.values() if s["tune"]["chosen"]), None)
    first = next((s for s in t.values() if s.get("tune") and s["tune"].get("curve")), None)
    print(f"\ntuned: run {tuned['info']['run_id']} ({tuned['info']['status']}), --budget {args.budget}")
    if first is not None:
        curve = {int(k): v for k, v in first["tune"]["curve"].items()}
        top = max(curve, key=lambda k: curve[k])
        print(
            f"  first pass {first['condition']}: {_ci(first)}; {first['tune']['profile']} profile; "
            f"best predicted k{top}"
        )
        print("  first pass's curve (end to end) against the grid's measurements:")
        for k, s in sorted(g.items()):
            if k in curve and s.get("speedup"):
                err = (curve[k] - s["speedup"]) / s["speedup"]
                print(f"    k{k:<3} predicted {curve[k]:.2f}x  grid measured {_ci(s):24} error {err:+.0%}")
    print("  candidates (prediction made before each ran; error = (predicted - measured) / measured):")
    for k, s in sorted(cands.items()):
        p, pd = s["tune"]["predicted_speedup"], s["tune"]["predicted_decode_speedup"]
        err = f"{(p - s['speedup']) / s['speedup']:+.0%}" if p and s.get("speedup") else "-"
        mark = "  <- chosen" if s["tune"]["chosen"] else ""
        print(f"    k{k:<3} predicted {p or 0:.2f}x (decode {pd or 0:.2f}x)  measured {_ci(s):24} error {err}{mark}")
    full = json.loads(sh("runs", "show", tuned["info"]["run_id"], "--json", db=db).stdout)
    rounds = {
        c: len({r["repeat"] for r in full["requests"] if r["condition"] == c})
        for c in [x["condition"] for x in cands.values()]
    }
    print(f"  decided: {chosen['tune']['decided'] if chosen else '-'}; rounds per candidate: {rounds}")

    print("\nresult (all strata):")
    if best_k is not None:
        b = measured[best_k]
        print(f"  grid best   k{best_k:<3} {_ci(b):24} wall {grid_wall:6.0f} s  cpu {grid_cpu:6.0f} s")
    if chosen is not None:
        c = chosen
        print(f"  tuned       k{c['draft_n_max']:<3} {_ci(c):24} wall {tune_wall:6.0f} s  cpu {tune_cpu:6.0f} s")
    if best_k is not None and chosen is not None and measured[best_k].get("speedup_ci95"):
        lo, hi = measured[best_k]["speedup_ci95"]
        within = lo <= chosen["speedup"] <= hi
        share = f"{tune_wall / grid_wall:.2f}x the grid's wall, {tune_cpu / max(grid_cpu, 1e-9):.2f}x its CPU"
        print(f"  tuned choice within the grid best's interval: {'yes' if within else 'NO'}; time {share}")
    dep = sh("deploy", pid, db=db, ok=(0, 1))
    print(f"\nspecreg deploy {pid} (default policy; both runs are evidence), exit {dep.returncode}:")
    print((dep.stdout + dep.stderr).rstrip())
    print(f"\nload average: start {load0[0]:.2f}, after the grid {load1[0]:.2f}, end {load2[0]:.2f} (1 min); "
          f"15 min {load2[2]:.2f}; total {time.monotonic() - t0:.0f} s; registry and logs in {folder}")  # fmt: skip
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_tune`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "tune"))
