"""Issue 46's remote inputs, each in a fresh `specreg` process against the loopback hub: an endless
model list, a trickled GGUF, a slow model list, a slow model-info answer, a self-linking next page,
a download that trickles after 200 MB. Each must end with one `error:` line naming the host within
its deadline + 2 s (process start included), its peak RSS less than 200 MB above a bare
interpreter's, and the registry and the Hugging Face cache byte for byte as they were.

Each waits out a deadline in a process of its own (RSS is what is measured), so the file is
`slow`; tests/e2e/test_fuzz_oracle.py runs the same inputs in-process, shorter, in the default suite.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _hostile_helpers import one_error_line, specreg
from hubserver import FakeFile, FakeHub, gguf_bytes, hub, online  # noqa: F401

from specreg.testing import ModelSpec, write_model

pytestmark = pytest.mark.slow

DEADLINE = 3.0
TARGET = ModelSpec(name="Tiny-135M-Instruct", base_model="Tiny 135M")


def tree_digest(*roots: Path) -> dict[str, str]:
    """Every file and folder under `roots` with its bytes' SHA-256 (folders: 'dir')."""
    out: dict[str, str] = {}
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            for d in dirs:
                out[os.path.join(dirpath, d)] = "dir"
            for f in files:
                p = os.path.join(dirpath, f)
                with open(p, "rb") as fh:
                    out[p] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


@pytest.fixture
def world(online: FakeHub, tmp_path: Path) -> tuple[FakeHub, Path]:  # noqa: F811
    """The loopback hub with one family repo the search finds; the target on disk."""
    online.add_commit("acme/Tiny-135M-GGUF", {"m.gguf": gguf_bytes()})
    online.repos["acme/Tiny-135M-GGUF"].tags = ["gguf"]
    # a registry and a cache that hold something already (one fetched file)
    db = Path(os.environ["SPECREG_DB"])
    proc = specreg("fetch", "acme/Tiny-135M-GGUF", "m.gguf", db=db)
    assert proc.returncode == 0, proc.stderr
    target = write_model(tmp_path / "target.gguf", TARGET)
    assert specreg("register", str(target), db=db).returncode == 0
    # files changed just now are hashed again by each command (racy stats), which writes: an hour
    # old, one drafts run settles them, and drafts writes nothing more
    old = time.time() - 3600
    for path in [target, *Path(os.environ["HF_HOME"]).rglob("*.gguf")]:
        os.utime(path, (old, old))
    assert specreg("drafts", str(target), "--no-probe", db=db).returncode == 0
    return online, target


def _spawn(*args: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """`specreg ARGS` in a fresh process: its outcome, when it ended (time.monotonic) and its peak
    RSS: its own VmHWM, read while it runs (ru_maxrss would carry this test process's RSS at fork)."""
    env = dict(os.environ, COLUMNS="80")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specreg.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    peak = 0
    status = Path(f"/proc/{proc.pid}/status")
    while proc.poll() is None and time.monotonic() - t0 < 60:
        with contextlib.suppress(OSError, ValueError, StopIteration):
            line = next(ln for ln in status.read_text().splitlines() if ln.startswith("VmHWM:"))
            peak = max(peak, int(line.split()[1]) << 10)
        time.sleep(0.02)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    return subprocess.CompletedProcess(args, proc.returncode, out, err), time.monotonic(), peak


def _start(*args: str) -> int:
    """Peak RSS of `specreg ARGS` failing at once (exit 2): the process's own before the remote
    operation, taken off the peak of the same command against a hostile server."""
    proc, _, peak = _spawn(*args)
    assert proc.returncode == 2, proc.stderr
    return peak


def _run(hub_: FakeHub, *args: str, start: int, deadline: float = DEADLINE) -> tuple[str, float, int]:
    """`specreg ARGS --timeout DEADLINE` in a fresh process: its error line, the seconds from the
    hub's first request to the process's end (the operation starts just before that request; the
    process's start is not counted), its RSS growth (peak less `start`); the registry and the HF
    cache must not change."""
    db = Path(os.environ["SPECREG_DB"])
    roots = (Path(os.environ["HF_HOME"]), db.parent)
    before = tree_digest(*roots)
    seen = len(hub_.requests)
    proc, end, peak = _spawn(*args, "--timeout", f"{deadline:g}")
    wall, rss = end - hub_.requests[seen].at, peak - start
    line = one_error_line(proc, "127.0.0.")
    after = tree_digest(*roots)
    assert after == before, {
        k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)
    }
    assert wall <= deadline + 2, (wall, line)
    assert rss < 200 << 20, (rss >> 20, line)
    print(f"{args[0]}: {wall:.2f} s, RSS +{rss >> 20} MiB (peak {peak >> 20} MiB): {line}")
    return line, wall, rss


def _hub_start(hub_: FakeHub, target: Path) -> int:
    """`drafts TARGET --hub` against a hub whose model list announces 10 GB: the same command,
    failing as soon as it reaches the hub."""
    hub_.listing = "announce-10gb"
    try:
        return _start("drafts", str(target), "--hub", "--timeout", f"{DEADLINE:g}")
    finally:
        hub_.listing = None


def test_endless_model_list(world: tuple[FakeHub, Path]) -> None:
    hub_, target = world
    start = _hub_start(hub_, target)
    hub_.listing = "endless"
    line, _, _ = _run(hub_, "drafts", str(target), "--hub", start=start)
    assert "sent more than its cap" in line and "--limit 20" in line


def test_trickled_gguf(world: tuple[FakeHub, Path]) -> None:
    hub_, _ = world
    f = FakeFile(gguf_bytes(seed=3), trickle_after=300)
    hub_.add_commit("acme/trickle", {"trickle.gguf": f})
    start = _start("drafts", f"{hub_.cdn}/blobs/{'0' * 64}", "--timeout", f"{DEADLINE:g}")
    line, _, _ = _run(hub_, "drafts", f"{hub_.cdn}/blobs/{f.sha256}", start=start)
    assert f"within {DEADLINE:g} s (--timeout SECONDS allows more)" in line


@pytest.mark.parametrize("where", ["model list", "model info"])
def test_slow_hub_answers(world: tuple[FakeHub, Path], where: str) -> None:
    hub_, target = world
    start = _hub_start(hub_, target)
    if where == "model list":
        hub_.listing = "trickle"
    else:
        hub_.repos["acme/Tiny-135M-GGUF"].info_mode = "trickle"
    line, _, _ = _run(hub_, "drafts", str(target), "--hub", start=start)
    assert "the hub search did not finish within" in line


def test_self_linking_next_page(world: tuple[FakeHub, Path]) -> None:
    hub_, target = world
    start = _hub_start(hub_, target)
    hub_.listing = "self-link"
    line, _, _ = _run(hub_, "drafts", str(target), "--hub", start=start)
    assert "next page to a page already read" in line
    assert len([p for p in hub_.paths() if p == "/api/models"]) <= 4  # the baseline's and this one's


def test_fetch_that_trickles_after_200_mb(world: tuple[FakeHub, Path], tmp_path: Path) -> None:
    hub_, _ = world
    big = tmp_path / "big.gguf"
    big.write_bytes(gguf_bytes())
    with open(big, "r+b") as f:
        f.truncate(256 << 20)  # sparse: a real header, then zeros
    hub_.add_commit("acme/big-GGUF", {"big.gguf": FakeFile(path=big, trickle_after=200 << 20)})
    start = _start("fetch", "acme/big-GGUF", "nope.gguf", "--timeout", "8")
    line, _, _ = _run(hub_, "fetch", "acme/big-GGUF", "big.gguf", start=start, deadline=8)
    assert "the download of" in line and "nothing of the download was kept" in line
