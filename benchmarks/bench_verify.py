"""Re-verifying registered files (what `audit` does by default): hashed together vs one by one.

    python benchmarks/bench_verify.py [--files 4] [--size-mb 200] [--small 300] [--repeats 3] [--dir /tmp]

Writes `--files` GGUFs of `--size-mb` each (a tiny real model followed by random bytes) and
`--small` copies of a tiny model (under hashing.POOL_MIN_SIZE: hashed on the calling thread)
in a temporary folder, registers them, warms the page cache, then alternates
`Registry.verify_artifacts(rehash=True)` with hashing.HASH_WORKERS = 1 (the reference: every
file hashed one after the other on the calling thread) and with the default pool (min(4, CPUs)
threads). Same results each way is asserted. Everything it creates is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specreg.registry import hashing
from specreg.registry.store import Registry
from specreg.schemas.registry import ArtifactRecord
from specreg.testing import ModelSpec, write_model

BLOCK = 16 << 20


def make_files(folder: Path, n: int, size: int) -> list[Path]:
    """`n` valid GGUFs (readers ignore bytes after the tensor data) padded to `size` bytes."""
    out = []
    for i in range(n):
        path = write_model(folder / f"big-{i}.gguf", ModelSpec(seed=100 + i, name=f"big-{i}"))
        with open(path, "ab") as f:
            left = size - path.stat().st_size
            while left > 0:
                f.write(os.urandom(min(left, BLOCK)))
                left -= BLOCK
        out.append(path)
    return out


def make_small(folder: Path, n: int) -> list[Path]:
    """`n` copies of one tiny model: one artifact with `n` paths, each re-hashed on verify."""
    first = write_model(folder / "small-0.gguf", ModelSpec(seed=7, name="small"))
    out = [first]
    for i in range(1, n):
        out.append(folder / f"small-{i}.gguf")
        shutil.copyfile(first, out[-1])
    return out


def warm(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(BLOCK):
                pass


def race(reg: Registry, recs: list[ArtifactRecord], repeats: int) -> dict[str, list[float]]:
    """Alternate the one-by-one reference and the pool, so that neither gets a cooler machine."""
    runs: dict[str, list[float]] = {"one by one": [], "pool": []}
    results = []
    default = hashing.HASH_WORKERS
    for _ in range(repeats):
        for label, workers in (("one by one", 1), ("pool", default)):
            hashing.HASH_WORKERS = workers
            try:
                t = time.perf_counter()
                results.append(reg.verify_artifacts(recs, rehash=True))
                runs[label].append(time.perf_counter() - t)
            finally:
                hashing.HASH_WORKERS = default
    assert all(r == results[0] for r in results) and all(ok for ok, _ in results[0].values()), results[0]
    return runs


def report(title: str, total_bytes: int, runs: dict[str, list[float]]) -> None:
    ref, pool = runs["one by one"], runs["pool"]
    print(f"{title}: {total_bytes / 1e6:,.0f} MB")
    for label, r in runs.items():
        print(f"  {label:12} best {min(r):7.3f} s  median {statistics.median(r):7.3f} s")
    print(
        f"  speed-up vs one by one: best {min(ref) / min(pool):.2f}x, "
        f"median {statistics.median(ref) / statistics.median(pool):.2f}x"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--size-mb", type=float, default=200)
    ap.add_argument("--small", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to put the temporary files")
    args = ap.parse_args()
    print(f"CPUs: {os.cpu_count()}, hashing.HASH_WORKERS: {hashing.HASH_WORKERS}")
    with tempfile.TemporaryDirectory(prefix="specreg-bench-verify-", dir=args.dir) as tmp:
        folder = Path(tmp)
        big = make_files(folder, args.files, int(args.size_mb * 1e6))
        small = make_small(folder, args.small) if args.small else []
        warm(big + small)
        with Registry(folder / "reg.db", show_progress=False) as reg:
            big_recs = [reg.add_artifact(p) for p in big]
            small_recs = [reg.add_artifact(p) for p in small][:1]
            report(
                f"{len(big)} files of {args.size_mb:g} MB",
                sum(p.stat().st_size for p in big),
                race(reg, big_recs, args.repeats),
            )
            if small:
                report(
                    f"{len(small)} files of {small[0].stat().st_size / 1e3:.0f} kB (below the pool's minimum)",
                    sum(p.stat().st_size for p in small),
                    race(reg, small_recs, args.repeats),
                )
    return 0


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_verify`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "verify"))
