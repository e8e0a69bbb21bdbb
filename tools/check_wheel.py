"""Test what users install: build the wheel, install it (not editable) into a fresh venv, run it.

The last step of the README's test command (and so of `.ci/run`); run it alone with
`.venv/bin/python tools/check_wheel.py`. From a copy of the files git tracks (the build never
writes into the checkout) it

1. builds the wheel with pip and fails when a file git tracks under specreg/ is not in it;
2. creates a fresh venv and installs the wheel with its test extra (`pip install WHEEL[test]`);
3. from a folder outside the source tree: `specreg --version`, `specreg demo`, then
   `specreg audit --all --policy` with the example policy the wheel installed
   (site-packages/specreg/audit/policy.example.toml);
4. runs the tests that exercise the installed data files (workloads, rule sets, policies, the
   ggml type table; tests/project/test_installed_data.py also checks every tracked file was installed
   and that specreg is imported from the wheel), from a copy of tests/, tools/, examples/ and
   README.md there (no specreg/ beside them, so only the installed package can be imported).

Each step prints its time; a failure prints the step's output and exits 1. Needs the package
index once for the install (pip's cache serves later runs). Usage: check_wheel.py [--keep DIR]
(keep the build, venv and demo in DIR instead of a temporary folder).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the tests that read what the wheel installs (pytest from the copy of tests/, outside the tree)
INSTALLED_TESTS = (
    "tests/project/test_installed_data.py",
    "tests/audit/test_policy.py",
    "tests/validators/test_ruleset.py",
    "tests/benchmark/test_bench_units.py",
    "tests/gguf/test_ggml_types.py",
)
STEP_TIMEOUT_S = 1800.0
PYTEST_INI = """[pytest]
pythonpath = .
markers =
    slow: longer than CI's budget allows; run with -m slow
    realvocab: needs llama.cpp's vocab files (downloaded once into the cache)
addopts = -m 'not slow' -p no:cacheprovider
"""


class CheckFailed(Exception):
    pass


def _step(
    name: str, cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> str:
    """Run one step; its output, or CheckFailed with the output's tail."""
    started = time.monotonic()
    print(f"wheel check: {name} ...", flush=True)
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"{name}: no result within {STEP_TIMEOUT_S:.0f} s") from None
    output = proc.stdout + proc.stderr
    took = time.monotonic() - started
    if proc.returncode not in ok or "Traceback (most recent call last)" in output:
        tail = "\n".join(output.strip().splitlines()[-40:])
        raise CheckFailed(f"{name}: exit {proc.returncode} after {took:.0f} s\n{tail}")
    print(f"wheel check: {name}: ok ({took:.0f} s)", flush=True)
    return output


def _tracked() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CheckFailed(f"cannot list the files git tracks in {ROOT}: {exc}") from None
    return [p for p in out.decode().split("\0") if p]


def _copy_tracked(tracked: list[str], dest: Path, only: tuple[str, ...] = ()) -> None:
    for rel in tracked:
        if only and not rel.startswith(only):
            continue
        src = ROOT / rel
        if src.is_file():  # a tracked file deleted in the working tree is not shipped
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def check(work: Path) -> None:
    tracked = _tracked()
    package_files = [p for p in tracked if p.startswith("specreg/") and (ROOT / p).is_file()]
    src, dist, venv, run = work / "src", work / "dist", work / "venv", work / "run"
    for d in (src, dist, run):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    _copy_tracked(tracked, src)

    quiet = ["-q", "--disable-pip-version-check", "--no-input"]
    _step(
        "build the wheel",
        [sys.executable, "-m", "pip", "wheel", *quiet, "--no-deps", "-w", str(dist), str(src)],
        cwd=work,
    )
    wheels = sorted(dist.glob("specreg-*.whl"))
    if len(wheels) != 1:
        raise CheckFailed(f"expected one specreg wheel in {dist}, found {[w.name for w in wheels]}")
    wheel = wheels[0]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    missing = [p for p in package_files if p not in names]
    if missing:
        raise CheckFailed(f"{wheel.name} lacks files git tracks (package-data in pyproject.toml): {missing}")
    print(f"wheel check: {wheel.name} has all {len(package_files)} tracked files under specreg/", flush=True)

    if venv.exists():
        shutil.rmtree(venv)
    _step("create a fresh venv", [sys.executable, "-m", "venv", str(venv)], cwd=work)
    vpy, vbin = venv / "bin" / "python", venv / "bin"
    _step("install the wheel (not editable)", [str(vpy), "-m", "pip", "install", *quiet, f"{wheel}[test]"], cwd=work)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPECREG_DB", "VIRTUAL_ENV")}
    env.update(SPECREG_HOME=str(run / "home"), PATH=f"{vbin}{os.pathsep}{env.get('PATH', '')}", COLUMNS="80")
    where = _step(
        "import specreg from the install",
        [str(vpy), "-c", "import specreg, pathlib; print(pathlib.Path(specreg.__file__).resolve().parent)"],
        cwd=run,
        env=env,
    )
    installed = Path(where.strip().splitlines()[-1])
    if venv.resolve() not in installed.parents:
        raise CheckFailed(f"specreg was imported from {installed}, not from the fresh venv {venv}")
    _step("specreg --version", [str(vbin / "specreg"), "--version"], cwd=run, env=env)
    demo = run / "demo"
    _step("specreg demo", [str(vbin / "specreg"), "demo", "--dir", str(demo)], cwd=run, env=env)
    policy = installed / "audit" / "policy.example.toml"
    audit = [str(vbin / "specreg"), "--db", str(demo / "registry.db"), "audit", "--all", "--policy", str(policy)]
    out = _step("specreg audit --policy (the installed example)", audit, cwd=run, env=env, ok=(0, 1))
    if "audit:" not in out or "policy.example.toml" not in out:
        raise CheckFailed(f"specreg audit did not report a verdict under the example policy:\n{out[-2000:]}")

    tests = run / "t"
    _copy_tracked(tracked, tests, only=("tests/", "tools/", "examples/", "README.md"))
    (tests / "pytest.ini").write_text(PYTEST_INI)
    manifest = run / "tracked.json"
    manifest.write_text(json.dumps([p.removeprefix("specreg/") for p in package_files]))
    test_env = {**env, "SPECREG_WHEEL_CHECK": str(manifest)}
    pytest = [str(vpy), "-m", "pytest", "-q", "--rootdir", str(tests), *INSTALLED_TESTS]
    out = _step("tests of the installed data files", pytest, cwd=tests, env=test_env)
    print(f"wheel check: {(out.strip().splitlines() or ['?'])[-1]}", flush=True)


def main(argv: list[str]) -> int:
    keep = Path(argv[argv.index("--keep") + 1]).resolve() if "--keep" in argv else None
    started = time.monotonic()
    try:
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            check(keep)
        else:
            with tempfile.TemporaryDirectory(prefix="specreg-wheel-check-") as tmp:
                check(Path(tmp))
    except CheckFailed as exc:
        print(f"wheel check FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"wheel check: passed in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
