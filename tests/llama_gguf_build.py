"""Build tests/llama_gguf_driver.cpp against ggml's base library from the cached llama.cpp sdist.

The driver is llama.cpp's own tests/test-gguf.cpp (its generator of valid and corrupt GGUF files,
included verbatim) linked with ggml's own GGUF reader, so the differential compares specreg with
the runtime rather than with a Python copy of it. Built once per source and compiler into the
cache next to the sdist (about a minute on 2 loaded cores), reused afterwards; where there is no
C/C++ compiler or the build fails, `driver_or_reason` says why and the tests skip with it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from specreg.testing import realvocab

DRIVER_SOURCE = Path(__file__).with_name("llama_gguf_driver.cpp")
# ggml-base's sources (ggml/src/CMakeLists.txt, add_library(ggml-base ...)); no backend is needed
C_SOURCES = ("ggml.c", "ggml-alloc.c", "ggml-quants.c")
CXX_SOURCES = (
    "ggml.cpp", "ggml-backend.cpp", "ggml-backend-meta.cpp", "ggml-opt.cpp", "ggml-threading.cpp", "gguf.cpp",
)  # fmt: skip
BUILD_TIMEOUT_S = 900.0


def _compiler_version(cxx: str) -> str:
    try:
        return subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _key(src: Path, cc: str, cxx: str) -> str:
    h = hashlib.sha256()
    h.update(DRIVER_SOURCE.read_bytes())
    h.update(_compiler_version(cc).encode() + _compiler_version(cxx).encode())
    for rel in (
        *(f"ggml/src/{name}" for name in (*C_SOURCES, *CXX_SOURCES)),
        "ggml/src/ggml-common.h",
        "ggml/include/ggml.h",
        "ggml/include/gguf.h",
        "tests/test-gguf.cpp",
    ):
        h.update(rel.encode() + b"\0" + (src / rel).read_bytes())
    return h.hexdigest()[:16]


def _run(cmd: list[str], what: str, cwd: Path, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"build took longer than {BUILD_TIMEOUT_S:.0f} s")
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=left)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{Path(cmd[0]).name} {what}: {last}")


def _build(src: Path, out_dir: Path, cc: str, cxx: str) -> Path:
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    ggml = src / "ggml"
    with tempfile.TemporaryDirectory(prefix="build-", dir=out_dir.parent) as tmp:
        work = Path(tmp)
        version_in = (ggml / "src" / "ggml-version.h.in").read_text()
        version = version_in.replace("@GGML_VERSION@", "0.0.0").replace("@GGML_BUILD_COMMIT@", realvocab.VERSION)
        (work / "ggml-version.h").write_text(version)
        inc = ["-I", str(work), "-I", str(ggml / "include"), "-I", str(ggml / "src"), "-I", str(src / "tests")]
        objects = []
        for compiler, std, names in ((cc, "-std=gnu11", C_SOURCES), (cxx, "-std=gnu++17", CXX_SOURCES)):
            for name in names:
                obj = work / f"{name}.o"
                cmd = [compiler, "-O1", std, "-w", *inc, "-c", str(ggml / "src" / name), "-o", str(obj)]
                _run(cmd, name, work, deadline)
                objects.append(str(obj))
        exe = work / "llama-gguf-driver"
        link = [cxx, "-O1", "-std=gnu++17", "-w", *inc, str(DRIVER_SOURCE), *objects, "-o", str(exe)]
        _run([*link, "-lpthread", "-lm"], DRIVER_SOURCE.name, work, deadline)
        staged = out_dir.with_name(out_dir.name + ".part")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir()
        shutil.copy2(exe, staged / exe.name)
        try:
            staged.replace(out_dir)  # atomic: a half-built driver is never found
        except OSError:  # built meanwhile by another session
            shutil.rmtree(staged, ignore_errors=True)
    return out_dir / "llama-gguf-driver"


@functools.cache
def driver_or_reason(src: Path) -> Path | str:
    """The built driver for this llama.cpp tree, or why there is none (once per session)."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cc or not cxx:
        return "no C/C++ compiler (gcc/g++) to build llama.cpp's tests/test-gguf.cpp"
    if not (src / "tests" / "test-gguf.cpp").is_file() or not (src / "ggml" / "src" / "gguf.cpp").is_file():
        return f"{src} lacks tests/test-gguf.cpp or ggml/src/gguf.cpp"
    out_dir = realvocab.cache_root() / f"llama-gguf-driver-{_key(src, cc, cxx)}"
    exe = out_dir / "llama-gguf-driver"
    if exe.is_file():
        return exe
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    try:
        return _build(src, out_dir, cc, cxx)
    except (OSError, RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        return f"building llama.cpp's GGUF driver failed: {exc}"
