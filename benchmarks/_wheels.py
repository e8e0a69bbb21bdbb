"""specreg as users install it, for the benchmarks that time whole processes: a wheel in a venv.

`wheel_venv` builds a wheel of a source tree and installs it into a fresh venv whose dependencies
are the running venv's (its site-packages named in a .pth file: no import hook, no second copy),
so two venvs made from two trees differ in specreg's own code only. `ref_tree` gives the source
tree of a git ref (`git archive`), for `--against REF`: the same command of that commit, timed
alternately with this tree's in the same run.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def wheel_venv(source: Path, venv: Path) -> Path:
    """A venv at `venv` holding specreg installed from a wheel of `source`; its `bin` folder."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheels = venv / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)], check=True
    )
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "specreg_bench_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (wheel,) = wheels.glob("specreg-*.whl")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True)
    return venv / "bin"


def ref_tree(ref: str, dest: Path) -> Path:
    """The files of git ref `ref` of this repository, unpacked under `dest` (which must not exist)."""
    archive = dest.with_suffix(".tar")
    subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", "-o", str(archive), ref], check=True)
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    archive.unlink()
    return dest


def short(ref: str) -> str:
    """`ref` as a short commit id (what the report names), or `ref` itself if git cannot say."""
    out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True, text=True)
    return out.stdout.strip() or ref
