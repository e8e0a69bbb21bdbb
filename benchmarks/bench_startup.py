"""Start-up: whole `specreg` processes against `python -c pass` and the peer `gguf-parser`, in one run.

Every case is a fresh process (imports, CLI build, work, exit), run alternately with the others,
median of N (default 5). Wall time is what a user waits; CPU time (user + system of the child)
is printed beside it because it is steadier on a shared machine. Ratios are against references
measured in the same run.

Both tools run as users install them: each from its wheel, in a venv of its own. The peer is
`pip install gguf-parser` (made once under the specreg cache); specreg is a wheel built from
this working tree and installed into a fresh venv whose dependencies are those of the running
venv (a path in a .pth file, benchmarks/_wheels.py). The development venv's editable install
is timed as well: its import hook (setuptools' editable finder) costs every Python process in
that venv before any code of ours runs, so it is shown, not compared.

- `specreg --version` / `--help`: time over bare `python -c pass` of the same interpreter
  (target: <= 100 ms);
- `specreg inspect FILE` (SmolLM2-135M Q4_1 when cached, ggml-vocab-qwen2, and any EXTRA file):
  against `python -m gguf_parser FILE` (target: faster), unregistered and registered, and
  against `python -c "import pydantic, typer"` (target: <= 1.3x: the two imports it cannot avoid);
- `specreg check pair qwen2 qwen35`: with both files registered, with a registry that does not
  know them (hashing and registering both; budget: <= 2.0x `python -c "import pydantic, typer"`),
  and with no registry at all (a first run: the registry is created too); beside it, check pair of
  two generated files of a few hundred tokens, new to the registry: the part that does not grow
  with the vocab.

`--against REF` builds the wheel of git ref REF (e.g. the commit before a change) into a venv
of its own and times every specreg case of it too, alternately with this tree's, each side with
its own registry: the cost or gain of a change is one ratio per command, measured in one run.

Usage: python benchmarks/bench_startup.py [--repeat 5] [--no-peer] [--against REF] [EXTRA.gguf ...]
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

try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_startup`, the root is
    from _wheels import REPO, ref_tree, short, wheel_venv
except ImportError:
    from benchmarks._wheels import REPO, ref_tree, short, wheel_venv

from specreg.testing.realvocab import cache_root, ensure_vocab_files, vocab_path

PEER = "gguf-parser==0.1.1"
BIN = Path(sys.executable).parent
CHECK_BUDGET = 2.0  # check pair of files new to the registry, over `python -c "import pydantic, typer"`


@dataclass
class Case:
    name: str
    argv: list[str]
    db: str = "shared"  # shared (files registered) | empty (a registry without them) | fresh (none yet) | none
    home: Path | None = None  # the side's own folder (its registry); None: the run's
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
    home = case.home or home
    env = {**env, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "registry.db")}
    if case.db in ("empty", "fresh"):
        db = home / f"{case.db}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        if case.db == "empty":
            shutil.copyfile(home / "empty-template.db", db)
        env["SPECREG_DB"] = str(db)
    elif case.db == "none":
        env["SPECREG_DB"] = str(home / "none" / "registry.db")
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


def specreg_cases(
    specreg: str, files: list[Path], check: list[str], prefix: str, home: Path | None, small: list[str] | None = None
) -> list[Case]:
    """The cases that time one specreg installation (`prefix` names its side in the report)."""
    cases = [
        Case(f"{prefix}specreg --version", [specreg, "--version"], home=home),
        Case(f"{prefix}specreg --help", [specreg, "--help"], home=home),
    ]
    for f in files:
        cases.append(Case(f"{prefix}inspect {f.name}", [specreg, "inspect", str(f)], db="none", home=home))
        cases.append(Case(f"{prefix}inspect {f.name} (registered)", [specreg, "inspect", str(f)], home=home))
    cases += [
        Case(f"{prefix}check pair (registered)", [specreg, *check], home=home),
        Case(f"{prefix}check pair (files new to the registry)", [specreg, *check], db="empty", home=home),
        Case(f"{prefix}check pair (no registry yet)", [specreg, *check], db="fresh", home=home),
    ]
    if small:  # the same command where the files hold a few hundred tokens: what does not grow with the vocab
        cases.append(Case(f"{prefix}check pair, small vocab (new files)", [specreg, *small], db="empty", home=home))
    return cases


def prepare(bin_dir: Path, home: Path, files: list[Path], env: dict[str, str]) -> None:
    """A side's registry with the files registered, and an empty one to copy for `db="empty"`."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**env, "SPECREG_HOME": str(home), "SPECREG_DB": str(home / "registry.db")}
    make = "import sys; from specreg.registry.store import Registry; Registry(sys.argv[1]).close()"
    # from the side's own folder: `python -c` puts the working directory first on sys.path, and from
    # a checkout that is this tree's specreg, not the side's
    template = str(home / "empty-template.db")
    subprocess.run([str(bin_dir / "python"), "-c", make, template], env=env, check=True, cwd=home)
    subprocess.run([str(bin_dir / "specreg"), "register", *map(str, files)], env=env, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-peer", action="store_true", help="skip gguf-parser (no PyPI access)")
    ap.add_argument("--against", metavar="REF", help="also time git ref REF's specreg (its wheel), alternately")
    ap.add_argument("extra", nargs="*", type=Path, help="more GGUF files to inspect against the peer")
    args = ap.parse_args()

    ensure_vocab_files()
    qwen2, qwen35 = vocab_path("qwen2"), vocab_path("qwen35")
    assert qwen2 is not None and qwen35 is not None, "llama.cpp vocab files missing"
    smollm2 = cache_root().parent / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    files = [*([smollm2] if smollm2.exists() else []), qwen2, *args.extra]
    peer = None if args.no_peer else peer_python()
    ref = short(args.against) if args.against else None
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        home = Path(tmp)
        wheel_bin = wheel_venv(REPO, home / "specreg-wheel-venv")
        specreg, dev = str(wheel_bin / "specreg"), str(BIN / "specreg")
        check = ["check", "pair", str(qwen2), str(qwen35)]
        from specreg.testing import ModelSpec, write_model

        tiny = ModelSpec(name="Tiny-1B")
        small = ["check", "pair", str(write_model(home / "tiny-target.gguf", tiny)),
                 str(write_model(home / "tiny-draft.gguf", tiny.but(n_layer=1, name="Tiny-100M")))]  # fmt: skip
        cases = [
            Case("python -c pass", [str(wheel_bin / "python"), "-c", "pass"]),
            Case("python -c 'import pydantic, typer'", [str(wheel_bin / "python"), "-c", "import pydantic, typer"]),
            Case("dev venv: python -c pass", [sys.executable, "-c", "pass"]),
        ]
        if peer is not None:
            cases.append(Case("peer venv: python -c pass", [str(peer), "-c", "pass"]))
            cases += [Case(f"gguf-parser {f.name}", [str(peer), "-m", "gguf_parser", str(f)]) for f in files]
        cases += [Case(f"dev venv: inspect {f.name}", [dev, "inspect", str(f)], db="none") for f in files]
        cases.append(Case("dev venv: check pair (registered)", [dev, *check]))
        cases += specreg_cases(specreg, files, check, "", None, small)
        env = {**os.environ, "COLUMNS": "80"}
        env.pop("SPECREG_DEBUG", None)
        # "quiet machine, .pyc files present": a PYTHONDONTWRITEBYTECODE of the caller's (some CI
        # images set it) would have the dev venv compile every changed module on every start
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        prepare(wheel_bin, home, [*files, qwen35], env)
        if args.against:
            ref_bin = wheel_venv(ref_tree(args.against, home / "ref-source"), home / "ref-wheel-venv")
            prepare(ref_bin, home / "ref", [*files, qwen35], env)
            cases += specreg_cases(str(ref_bin / "specreg"), files, check, f"{ref}: ", home / "ref", small)
        for case in cases:  # warm the page cache and the .pyc files; not counted
            run_once(case, env, home)
            case.wall.clear()
            case.cpu.clear()
        for _ in range(args.repeat):
            for case in cases:
                run_once(case, env, home)
    report(cases, files, args.repeat, ref)


def report(cases: list[Case], files: list[Path], repeat: int, ref: str | None) -> None:
    med = {c.name: (statistics.median(c.wall) * 1000, statistics.median(c.cpu) * 1000) for c in cases}
    print(f"whole processes, alternating, median of {repeat}; {os.cpu_count()} CPUs; ms")
    print(f"{'case':<50} {'wall':>7} {'cpu':>7}")
    for c in cases:
        wall, cpu = med[c.name]
        print(f"{c.name[:50]:<50} {wall:7.1f} {cpu:7.1f}")
    print()
    if ref is not None:
        print(f"this tree against {ref} (its wheel, same run): ms, and this tree's time over {ref}'s")
        print(f"{'command':<42} {'wall':>7} {ref[:7]:>7} {'ratio':>6} {'cpu':>7} {ref[:7]:>7} {'ratio':>6}")
        for c in cases:
            theirs = med.get(f"{ref}: {c.name}")
            if theirs is None:
                continue
            (wall, cpu), (rwall, rcpu) = med[c.name], theirs
            row = f"{c.name[:42]:<42} {wall:7.1f} {rwall:7.1f} {wall / rwall:5.2f}x"
            print(f"{row} {cpu:7.1f} {rcpu:7.1f} {cpu / rcpu:5.2f}x")
        print()
    base_wall = med["python -c pass"][0]
    verdicts: list[tuple[str, bool]] = []
    for name in ("specreg --version", "specreg --help"):
        wall = med[name][0]
        verdicts.append((f"{name}: {wall:.0f} ms, {wall - base_wall:+.0f} over python -c pass (<= 100)", wall <= 100))
    for f in files:
        peer = med.get(f"gguf-parser {f.name}")
        for name in (f"inspect {f.name}", f"inspect {f.name} (registered)"):
            ours = med[name]
            if peer is not None:
                verdicts.append(
                    (
                        f"{name}: {ours[0] / peer[0]:.2f}x gguf-parser's wall, {ours[1] / peer[1]:.2f}x its CPU (< 1)",
                        ours[0] < peer[0],
                    )
                )
    floor = med["python -c 'import pydantic, typer'"][0]
    for f in files:
        wall = med[f"inspect {f.name}"][0]
        verdicts.append((f"inspect {f.name}: {wall:.0f} ms (<= 200)", wall <= 200))
        verdicts.append(
            (f"inspect {f.name}: {wall / floor:.2f}x python -c 'import pydantic, typer' (<= 1.3)", wall <= 1.3 * floor)
        )
    name = "check pair (files new to the registry)"
    wall = med[name][0]
    verdicts.append(
        (
            f"{name}: {wall / floor:.2f}x python -c 'import pydantic, typer' (<= {CHECK_BUDGET})",
            wall <= CHECK_BUDGET * floor,
        )
    )
    small = med.get("check pair, small vocab (new files)")
    if small is not None:  # not the budget's case: shows what of it is the vocab's walk and hashing
        print(f"check pair, small vocab (new files): {small[0]:.0f} ms, {small[0] / floor:.2f}x "
              f"python -c 'import pydantic, typer' (the budget's case walks qwen2's and qwen35's vocab)")  # fmt: skip
    print(f"floors: python -c pass {base_wall:.0f} ms, import pydantic, typer {floor:.0f} ms")
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'MISS'}  {text}")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_startup`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "startup"))
