"""Wall time of `specreg check pair` on real 150k-token vocab files, in a fresh process each time.

Includes interpreter start, imports, registering (hashing) the files, reading both headers,
all checks, recording the verdict and printing. Target: < 0.5 s.

    python benchmarks/bench_check.py [--runs 5] [--models DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAIRS = (
    ("qwen2", "qwen35", "same token texts (fingerprints equal, nothing decoded)"),
    ("llama-bpe", "qwen2", "different vocabs (both 128k/152k token lists decoded and compared)"),
    ("llama-spm", "phi-3", "sizes differ by 64 (decoded, admitted)"),
)


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(args: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the child, exit code); CPU time is robust to a busy machine."""
    cpu0, start = _cpu(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "specreg", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"specreg failed ({proc.returncode}): {proc.stderr.strip()}")
    return wall, cpu, proc.returncode


def _in_process(t: Path, d: Path, runs: int) -> tuple[float, float]:
    """(read both headers, run every draft-simple check) in this process, median seconds."""
    from specreg.gguf.reader import open_gguf
    from specreg.validators.pair import check_pair
    from specreg.validators.ruleset import load_rule_set

    rules = load_rule_set()
    reads, checks = [], []
    for _ in range(runs):
        start = time.perf_counter()
        tf, df = open_gguf(t), open_gguf(d)
        mid = time.perf_counter()
        check_pair(tf, df, "draft-simple", rule_set=rules)
        reads.append(mid - start)
        checks.append(time.perf_counter() - mid)
    return statistics.median(reads), statistics.median(checks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--models", type=Path, help="a folder of ggml-vocab-*.gguf (default: llama.cpp's, fetched once)")
    opts = ap.parse_args()
    if opts.models is None:
        from specreg.testing.realvocab import ensure_vocab_files

        opts.models = ensure_vocab_files()
    measured = 0
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "SPECREG_HOME": home, "SPECREG_DB": str(Path(home) / "registry.db")}
        print(
            f"{'pair':24} {'verdict':9} {'first (hashing)':>16} {'warm wall':>10} {'warm cpu':>9} "
            f"{'read':>7} {'checks':>7}  (medians; read/checks in-process)"
        )
        for target, draft, what in PAIRS:
            t = opts.models / f"ggml-vocab-{target}.gguf"
            d = opts.models / f"ggml-vocab-{draft}.gguf"
            if not (t.is_file() and d.is_file()):
                print(f"{target} / {draft}: vocab files not found under {opts.models}, skipped")
                continue
            args = ["check", "pair", str(t), str(d), "--method", "draft-simple"]
            first, _, rc = _run(args, env)
            warm = [_run(args, env) for _ in range(opts.runs)]
            verdict = "admitted" if rc == 0 else "rejected"
            wall = statistics.median(w[0] for w in warm)
            cpu = statistics.median(w[1] for w in warm)
            read, check = _in_process(t, d, opts.runs)
            measured += 1
            print(
                f"{target + ' / ' + draft:24} {verdict:9} {first:>15.3f}s {wall:>9.3f}s {cpu:>8.3f}s "
                f"{read:>6.3f}s {check:>6.3f}s  {what}"
            )
        if not measured:  # nothing to write to the performance page
            raise SystemExit(f"no vocab pair found under {opts.models}")
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare = time.perf_counter() - start
        helps = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "specreg", "--help"], check=True, stdout=subprocess.DEVNULL)
            helps.append(time.perf_counter() - start)
        note = (
            "; PYTHONDONTWRITEBYTECODE is set: specreg's sources are compiled on every run"
            if os.environ.get("PYTHONDONTWRITEBYTECODE")
            else ""
        )
        print(f"(bare interpreter start: {bare:.3f}s; `specreg --help`: {statistics.median(helps):.3f}s{note})")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_check`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "check"))
