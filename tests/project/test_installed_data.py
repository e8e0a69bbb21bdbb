"""What users install: every file git tracks under specreg/ ships, and the data files work from there.

In the default suite this checks the packaging rules (pyproject's package-data globs, packages
found by setuptools) against `git ls-files`. tools/check_wheel.py (the last step of the README's
test command) builds the wheel, installs it into a fresh venv and runs this file there too, from
outside the source tree, with SPECREG_WHEEL_CHECK naming the tracked files: then every one of
them must be in the installed package, and specreg must be imported from the install.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

import specreg

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = Path(specreg.__file__).resolve().parent
MANIFEST = os.environ.get("SPECREG_WHEEL_CHECK")  # JSON list of tracked paths below specreg/


def _tracked() -> list[str]:
    """Paths (relative to specreg/) that git tracks: from the wheel check's manifest, else git."""
    if MANIFEST:
        return json.loads(Path(MANIFEST).read_text())
    try:
        out = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "specreg"], capture_output=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: nothing to compare the package with")
    return [p.removeprefix("specreg/") for p in out.decode().split("\0") if p]


@pytest.mark.skipif(MANIFEST is None, reason="only in the installed wheel (tools/check_wheel.py)")
def test_specreg_is_the_installed_wheel_and_has_every_tracked_file() -> None:
    assert "site-packages" in INSTALLED.parts, f"specreg imported from {INSTALLED}, not from the wheel"
    tracked = _tracked()
    assert tracked and "__init__.py" in tracked
    missing = [rel for rel in tracked if not (INSTALLED / rel).is_file()]
    assert missing == [], f"tracked under specreg/ but not installed from the wheel: {missing}"


@pytest.mark.skipif(MANIFEST is not None, reason="the source tree's packaging rules (the wheel is checked itself)")
def test_packaging_rules_cover_every_tracked_file() -> None:
    """setuptools ships .py files of packages (directories with __init__.py) and package-data
    globs: a tracked file neither covers is missing from the wheel."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = config["package-data"]["specreg"]
    tracked = _tracked()
    dirs = {str(p) for rel in tracked if rel.endswith(".py") for p in Path(rel).parents}  # and their ancestors
    not_packages = sorted(d for d in dirs if f"{d}/__init__.py".removeprefix("./") not in tracked)
    assert not_packages == [], f"folders of .py files without __init__.py (not in the wheel): {not_packages}"
    uncovered = [
        rel
        for rel in tracked
        if not rel.endswith(".py")
        and not any(fnmatch.fnmatch(rel, g) and rel.count("/") == g.count("/") for g in globs)
    ]
    assert uncovered == [], f"add to [tool.setuptools.package-data] in pyproject.toml: {uncovered}"
    assert config["packages"]["find"]["include"] == ["specreg*"]


def test_builtin_workloads_load_from_the_package() -> None:
    from specreg.benchmark.workloads.jsonl import STRATA, load_workload

    wl = load_workload("default")
    assert {it.stratum for it in wl.items} == set(STRATA)
    for stratum in STRATA:
        assert (INSTALLED / "benchmark" / "workloads" / f"{stratum}.jsonl").is_file()
        assert load_workload(stratum).items


def test_shipped_rule_sets_load_from_the_package() -> None:
    from specreg.validators.ruleset import RULE_SET_DEFAULT, known_rule_sets, load_rule_set

    assert RULE_SET_DEFAULT in known_rule_sets()
    for name in known_rule_sets():
        assert load_rule_set(name).id.startswith(name)


def test_example_policy_loads_from_the_package(tmp_path: Path) -> None:
    from specreg.audit.policy import example_policy_text, load_policy

    shipped = INSTALLED / "audit" / "policy.example.toml"
    assert example_policy_text() == shipped.read_text("utf-8")
    policy, source = load_policy(shipped)
    assert source.endswith("policy.example.toml") and policy.licence.require_revision is True
    copy = tmp_path / "policy.toml"
    copy.write_text(example_policy_text())
    assert load_policy(copy)[0] == policy


def test_typed_marker_ships() -> None:
    assert (INSTALLED / "py.typed").is_file()
