"""Reader speed against gguf.GGUFReader on llama.cpp's real vocab files, in one run.

    python benchmarks/bench_reader.py [NAME ...] [--all] [--repeat 5]

Per file: our open_gguf + summary() (the header walk, typed lookups, tokenizer checks and the
four SHA-256 array fingerprints), best of --repeat; our lazy token_texts() decode; and one
construction of gguf.GGUFReader (its whole parse). The ratio is GGUFReader / ours. Exits 1
when qwen2 or gemma-4 is below the 30x floor.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import gguf

from specreg.gguf.reader import open_gguf
from specreg.gguf.summary import summarize
from specreg.testing.realvocab import ensure_vocab_files

DEFAULT = ["llama-spm", "gpt-2", "qwen2", "llama-bpe", "gemma-4"]
FLOOR = {"qwen2": 30.0, "gemma-4": 30.0}


def _summary(path: Path) -> object:
    return summarize(open_gguf(path))


def _texts(path: Path) -> object:
    return open_gguf(path).token_texts()


def best_of(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"vocab short names (default: {' '.join(DEFAULT)})")
    ap.add_argument("--all", action="store_true", help="every ggml-vocab-*.gguf found")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    models = ensure_vocab_files()
    names = sorted(p.name[11:-5] for p in models.glob("ggml-vocab-*.gguf")) if args.all else args.names or DEFAULT
    print(
        f"{'vocab file':<16} {'MB':>6} {'tokens':>8} {'ours ms':>8} {'texts ms':>9} {'GGUFReader ms':>14} {'ratio':>7}"
    )
    failed = []
    for name in names:
        path: Path = models / f"ggml-vocab-{name}.gguf"
        ours = best_of(partial(_summary, path), args.repeat)
        texts = best_of(partial(_texts, path), max(1, args.repeat // 2))
        ref = best_of(partial(gguf.GGUFReader, path), 1)
        ratio = ref / ours
        n_tokens = summarize(open_gguf(path)).tokenizer.n_tokens
        mark = ""
        if name in FLOOR and ratio < FLOOR[name]:
            failed.append(name)
            mark = f"  < {FLOOR[name]:.0f}x floor"
        print(
            f"{name:<16} {path.stat().st_size / 1e6:>6.1f} {n_tokens:>8} {ours * 1e3:>8.1f} {texts * 1e3:>9.1f} "
            f"{ref * 1e3:>14.0f} {ratio:>6.0f}x{mark}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_reader`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "reader"))
