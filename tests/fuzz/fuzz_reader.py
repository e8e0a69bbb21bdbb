"""Long fuzz run of the GGUF reader (not collected by pytest).

    cd tests && python -m fuzz.fuzz_reader --seconds 300 [--seed 1] [--vocab]

Mutates valid files (and, with --vocab, llama.cpp's small real vocab files) and checks the
oracle of fuzz_common.exercise: success or GGUFError, nothing else. Prints how many inputs
it tried and how they ended; saves any input that breaks the oracle and exits 1.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
import traceback
from pathlib import Path

from fuzz.fuzz_common import exercise, mutate, scratch_dir, seed_files, write_case


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--vocab", action="store_true", help="also mutate llama-spm/phi-3/bert-bge vocab files")
    ap.add_argument("--out", type=Path, default=Path("fuzz-failures"))
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 32)
    rng = random.Random(seed)
    work = scratch_dir()
    seeds = seed_files(work / "seeds")
    if args.vocab:
        from specreg.testing.realvocab import vocab_path

        for name in ("llama-spm", "phi-3", "bert-bge"):
            p = vocab_path(name)
            if p is not None:
                seeds.append(p.read_bytes())
    target = work / "case.gguf"
    outcomes: collections.Counter[str] = collections.Counter()
    tried = failures = 0
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        data = mutate(rng, rng.choice(seeds), seeds)
        write_case(target, data)
        tried += 1
        try:
            outcomes[exercise(target)] += 1
        except Exception:  # the oracle: nothing but GGUFError may escape the reader
            failures += 1
            args.out.mkdir(parents=True, exist_ok=True)
            saved = args.out / f"failure-{seed}-{tried}.gguf"
            saved.write_bytes(data)
            print(f"FAILURE on input {tried} (saved to {saved}):\n{traceback.format_exc()}", file=sys.stderr)
    print(
        f"seed {seed}: tried {tried} inputs in {args.seconds:.0f} s ({tried / args.seconds:.0f}/s), "
        f"{len(seeds)} seed files, {failures} failures"
    )
    for outcome, n in outcomes.most_common(15):
        print(f"  {n:>8}  {outcome}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
