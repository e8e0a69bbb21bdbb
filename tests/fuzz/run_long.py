"""The long fuzzing pass over every surface, outside pytest (prints what it tried and found).

    cd tests && nice python -m fuzz.run_long --seconds 1800 [--surface gguf ...] [--seed N] [--every]

Splits the time over the surfaces, draws random cases (fuzz.harness.random_cases), runs them in
batches in child processes under the oracle (fuzz.oracle) and prints, per surface, how many
cases ran, how they ended, and every case that broke the oracle (exit 1 if any did). `--every`
takes whole cross products (every architecture of the rule set, every count, every key).
`pytest -m fuzz` runs the same pass, SPECREG_FUZZ_SECONDS per surface.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
from pathlib import Path

from fuzz.harness import SURFACES, World, random_cases
from fuzz.oracle import failures, run_batch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=600.0, help="in all, split evenly over the surfaces")
    ap.add_argument("--surface", action="append", choices=SURFACES)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--every", action="store_true")
    ap.add_argument("--batch", type=int, default=60, help="cases per child process")
    args = ap.parse_args()
    surfaces = args.surface or list(SURFACES)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    broken = 0
    with tempfile.TemporaryDirectory(prefix="specreg-fuzz-long-") as tmp:
        world = World(Path(tmp) / "world")
        for surface in surfaces:
            deadline = time.monotonic() + args.seconds / len(surfaces)
            codes: collections.Counter[int] = collections.Counter()
            tried, slowest, bad = 0, 0.0, []
            t0 = time.monotonic()
            while time.monotonic() < deadline:
                outcomes = run_batch(random_cases(surface, world, rng, args.batch, every=args.every), Path(tmp) / "run")
                tried += len(outcomes)
                codes.update(o.code for o in outcomes)
                slowest = max([slowest, *(o.cpu_seconds for o in outcomes)])
                bad += failures(outcomes)
            took = time.monotonic() - t0
            print(
                f"{surface:9} {tried:6} cases in {took:5.0f} s, exits {dict(sorted(codes.items()))}, "
                f"most CPU {slowest:.1f} s, {len(bad)} broke the oracle",
                flush=True,
            )
            for text in bad[:10]:
                print("  " + text.replace("\n", "\n    ")[:1500], flush=True)
            broken += len(bad)
    print(f"seed {seed}: {broken} cases broke the oracle")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
