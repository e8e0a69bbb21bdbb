"""Shared fixtures: every test gets its own specreg home; `reg` is a fresh registry file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specreg.registry.store import Registry

# This machine is shared: others' load would set aside every round of the runs not about it
# (benchmark/contention.py), session fixtures' included, so it is off for the whole session and
# its children; the contention tests (test_bench_contention.py) pass --busy-share themselves.
os.environ["SPECREG_BUSY_SHARE"] = "off"

# Fixture modules (tests/ is on sys.path): one real benchmark run shared by the audit and report
# tests, llama.cpp's vocab files and source (skip when offline), SmolLM2 as a real trained model
# (skips when offline), the standard workloads' wheels (skip when offline), the loopback Hugging Face hub.
pytest_plugins = ["_audit_world", "realvocab_fixture", "realmodel_fixture", "standard_workloads_fixture", "hubserver"]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SPECREG_HOME / SPECREG_DB at a fresh folder so tests never touch a real home."""
    home = tmp_path_factory.mktemp("specreg-home")
    monkeypatch.setenv("SPECREG_HOME", str(home))
    monkeypatch.setenv("SPECREG_DB", str(home / "registry.db"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    return home


@pytest.fixture()
def reg(tmp_path: Path) -> Iterator[Registry]:
    """A fresh registry file in the test's folder, closed afterwards."""
    with Registry(tmp_path / "registry.db", show_progress=False) as r:
        yield r
