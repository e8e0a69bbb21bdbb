"""Shared fixtures: every test gets its own specreg home; `reg` is a fresh registry file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from specreg.registry.store import Registry

# This machine is shared: others' load would set aside every round of the runs not about it
# (benchmark/store/contention.py), session fixtures' included, so it is off for the whole session and
# its children; the contention tests (benchmark/store/test_contention.py) pass --busy-share themselves.
os.environ["SPECREG_BUSY_SHARE"] = "off"

# Fixture modules (tests/ is on sys.path): one real benchmark run shared by the audit and report
# tests, llama.cpp's vocab files and source (skip when offline), SmolLM2 as a real trained model
# (skips when offline), the standard workloads' wheels (skip when offline), the loopback Hugging Face hub.
pytest_plugins = [
    "_audit_world",
    "_watch_world",
    "realvocab_fixture",
    "realmodel_fixture",
    "standard_workloads_fixture",
    "hubserver",
]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: no error where it is not installed
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto` (pyproject's addopts): one per core this process may use (its CPU
    affinity, not the machine's count). A run naming test files or test ids runs in this process:
    starting workers costs more than it saves on a few tests (run `-n 2` to force them).
    PYTEST_XDIST_AUTO_NUM_WORKERS overrides, as in pytest-xdist itself."""
    forced = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if forced.isdigit():
        return int(forced)
    named = [a for a in config.option.file_or_dir or [] if not Path(a.split("::")[0]).is_dir()]
    return 0 if named else len(os.sched_getaffinity(0))


# The modules that take longest (real servers, whole processes; `--durations`) start first, so that
# no worker is left running one of them alone at the end (pyproject's addopts turn off xdist's own
# order, most tests first, which put the one-test demo last).
LONGEST_FIRST = (
    "test_demo.py",  # builds the shared demo (demo_world) that commands/test_examples.py reads later
    "watch/test_watcher.py",
    "servers/test_hostile_server.py",
    "report/test_html_browser.py",
    "e2e/test_fuzz_oracle.py",
    "benchmark/run/test_probe.py",
    "benchmark/store/test_contention.py",
    "benchmark/run/test_runner_budget.py",
    "benchmark/test_busy.py",
    "benchmark/run/test_runner.py",
    "audit/test_drafts.py",
    "validators/test_memory_served.py",
    "benchmark/run/test_resume.py",
    "benchmark/store/test_digest_cache.py",
    "sources/test_hub_fetch.py",
    "commands/test_bench.py",
    "watch/test_scrape_hostile.py",
    "exchange/test_bundle.py",
    "test_cli_startup.py",
    "audit/test_deploy.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    here = Path(__file__).parent

    def key(item: pytest.Item) -> int:  # a module's path from tests/
        where = item.path.relative_to(here).as_posix() if item.path.is_relative_to(here) else item.path.name
        return rank.get(where, len(rank))

    items.sort(key=key)  # stable: the rest keep their order


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
