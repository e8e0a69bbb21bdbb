"""Start-up: whole `specreg` processes against `python -c pass` and the peer `gguf-parser`, in one run.

Every case is a fresh process (imports, CLI build, work, exit), run alternately with the others,
median of N (default 5). Wall time is what a user waits; CPU time (user + system of the child)
is printed beside it because it is steadier on a shared machine. Ratios are against references
measured in the same run:

- `specreg --version` / `--help`: time over bare `python -c pass` (target: <= 100 ms);
- `specreg inspect FILE`: against `python -m gguf_parser FILE` (the PyPI package `gguf-parser`,
  installed once into this benchmark's own venv under the specreg cache, never into specreg's);
- `specreg check pair qwen2 qwen35`: a fresh process with a new registry, so it registers (hashes)
  both files too (target: <= 250 ms); and again with both files already registered.

Usage: python benchmarks/bench_startup.py [--repeat 5] [--no-peer] [EXTRA.gguf ...]
The vocab files come from llama.cpp's source (fetched once, see specreg.testing.realvocab).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from specreg.testing.realvocab import cache_root, ensure_vocab_files, vocab_path

PEER = "gguf-parser==0.1.1"
BIN = Path(sys.executable).parent


@dataclass
class Case:
    name: str
    argv: list[str]
    fresh_db: bool = False  # a new, empty registry before every run (a "cold" first check)
    no_db: bool = False  # no registry at all (inspecting a file nobody registered)
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    codes: set[int] = field(default_factory=set)


def peer_python() -> Path:
    """The python of a venv holding only gguf-parser (made once, beside the vocab cache)."""
    venv = cache_root().parent / "bench-peer-venv"
    py = venv / "bin" / "python"
    if not (venv / ".gguf-parser-installed").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", PEER], check=True)
        (venv / ".gguf-parser-installed").write_text(PEER + "\n")
    return py


def run_once(case: Case, env: dict[str, str], home: Path) -> None:
    if case.fresh_db:
        (home / "fresh.db").unlink(missing_ok=True)
        for suffix in ("-wal", "-shm"):
            (home / f"fresh.db{suffix}").unlink(missing_ok=True)
        env = {**env, "SPECREG_DB": str(home / "fresh.db")}
    if case.no_db:
        env = {**env, "SPECREG_DB": str(home / "none" / "registry.db")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(case.argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1 = a rejected pair, still a finished command
        raise SystemExit(f"{case.name}: exit {proc.returncode}: {proc.stderr.decode(errors='replace')[-400:]}")
    case.codes.add(proc.returncode)
    case.wall.append(wall)
    case.cpu.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip gguf-parser (no PyPI access)")
    ap.add_argument("extra", nargs="*", type=Path, help="more GGUF files to inspect against the peer")
    args = ap.parse_args()

    ensure_vocab_files()
    qwen2, qwen35 = vocab_path("qwen2"), vocab_path("qwen35")
    assert qwen2 is not None and qwen35 is not None, "llama.cpp vocab files missing"
    specreg = str(BIN / "specreg")
    py = sys.executable
    cases = [
        Case("python -c pass", [py, "-c", "pass"]),
        Case("specreg --version", [specreg, "--version"]),
        Case("specreg --help", [specreg, "--help"]),
    ]
    files = [qwen2, *args.extra]
    peer = None if args.no_peer else peer_python()
    for f in files:
        cases.append(Case(f"specreg inspect {f.name}", [specreg, "inspect", str(f)], no_db=True))
        cases.append(Case(f"specreg inspect {f.name} (registered)", [specreg, "inspect", str(f)]))
        if peer is not None:
            cases.append(Case(f"gguf-parser {f.name}", [str(peer), "-m", "gguf_parser", str(f)]))
    check = [specreg, "check", "pair", str(qwen2), str(qwen35)]
    cases.append(Case("check pair qwen2 qwen35 (new registry)", check, fresh_db=True))
    cases.append(Case("check pair qwen2 qwen35 (registered)", check))

    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        home = Path(tmp)
        env = {**os.environ, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "registry.db"), "COLUMNS": "80"}
        env.pop("SPECREG_DEBUG", None)
        for case in cases:  # warm the page cache and the .pyc files; not counted
            run_once(case, env, home)
            case.wall.clear()
            case.cpu.clear()
        for _ in range(args.repeat):
            for case in cases:
                run_once(case, env, home)
    report(cases, files, args.repeat)


def report(cases: list[Case], files: list[Path], repeat: int) -> None:
    med = {c.name: (statistics.median(c.wall) * 1000, statistics.median(c.cpu) * 1000) for c in cases}
    base_wall, base_cpu = med["python -c pass"]
    print(f"whole processes, alternating, median of {repeat}; COLUMNS=80; {os.cpu_count()} CPUs")
    print(f"{'case':<44} {'wall ms':>8} {'cpu ms':>8} {'over python (wall/cpu)':>23}")
    for c in cases:
        wall, cpu = med[c.name]
        print(f"{c.name:<44} {wall:8.1f} {cpu:8.1f} {wall - base_wall:+11.1f} {cpu - base_cpu:+11.1f}")
    print()
    verdicts: list[tuple[str, bool]] = []
    for name in ("specreg --version", "specreg --help"):
        over = med[name][0] - base_wall
        verdicts.append((f"{name}: {over:+.1f} ms over `python -c pass` (target <= +100 ms)", over <= 100))
    for f in files:
        peer = med.get(f"gguf-parser {f.name}")
        for name in (f"specreg inspect {f.name}", f"specreg inspect {f.name} (registered)"):
            ours = med[name]
            if peer is not None:
                verdicts.append(
                    (
                        f"{name.removeprefix('specreg ')}: {ours[0] / peer[0]:.2f}x gguf-parser's wall time "
                        f"({ours[1] / peer[1]:.2f}x its CPU time); target < 1",
                        ours[0] < peer[0],
                    )
                )
    for name in ("check pair qwen2 qwen35 (new registry)", "check pair qwen2 qwen35 (registered)"):
        wall = med[name][0]
        verdicts.append((f"{name}: {wall:.0f} ms (target <= 250 ms)", wall <= 250))
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'MISS'}  {text}")


if __name__ == "__main__":
    main()
