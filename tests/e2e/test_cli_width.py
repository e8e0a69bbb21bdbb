"""Every human output reads at 80 and 120 columns: no line wider, no word cut, no trailing blanks.

The commands run on the shared real benchmark world (tests/_audit_world.py): a registry with
artifacts, admitted and rejected pairs (one draft with a hostile name), one real run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from _audit_world import AuditWorld, specreg
from rich.cells import cell_len

CUT_WORD = re.compile(r"[A-Za-z0-9]…|…[A-Za-z0-9]")  # an ellipsis touching a letter or digit cut a word
PYTHONISMS = re.compile(r"\b(True|False|None)\b|<(str|int|float|path|list\[\w+\])>")


def _commands(world: AuditWorld) -> dict[str, tuple[str, ...]]:
    return {
        "artifacts": ("artifacts",),
        "pairs": ("pairs",),
        "runs": ("runs",),
        "runs show": ("runs", "show", world.run_id),
        "audit --all": ("audit", "--all"),
        "check pair": ("check", "pair", str(world.target), str(world.near_miss)),
        "inspect": ("inspect", str(world.draft)),
        "register": ("register", str(world.target)),
    }


def _check(text: str, width: int, what: str) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{what}: {cell_len(line)} > {width} cells: {line!r}"
        assert line == line.rstrip(), f"{what}: trailing blanks: {line!r}"
        assert not CUT_WORD.search(line), f"{what}: a word cut: {line!r}"
        assert not PYTHONISMS.search(line), f"{what}: Python in the output: {line!r}"


@pytest.fixture
def run_at(audit_world: AuditWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    db = audit_world.copy(tmp_path / "registry.db")

    def run(columns: int, *argv: str) -> str:
        monkeypatch.setenv("COLUMNS", str(columns))
        code, out, err = specreg(*argv, db=db)
        assert code in (0, 1), (argv, code, err)
        return out

    return run


@pytest.mark.parametrize("columns", [80, 120])
def test_every_view_fits(audit_world: AuditWorld, run_at: Callable[..., str], columns: int) -> None:
    for what, argv in _commands(audit_world).items():
        out = run_at(columns, *argv)
        assert out.strip(), what
        _check(out, columns, f"{what} at {columns}")


def test_help_fits_and_names_arguments_plainly(run_at: Callable[..., str]) -> None:
    for argv in (
        (),
        ("inspect",),
        ("register",),
        ("fetch",),
        ("check", "pair"),
        ("pairs",),
        ("bench", "admitted"),
        ("runs", "show"),
        ("audit",),
        ("demo",),
    ):
        out = run_at(80, *argv, "--help")
        _check(out, 80, f"{' '.join(argv)} --help")
        assert "{" not in out.splitlines()[0], out  # usage shows TARGET [DRAFT], not {TARGET}


def test_listings_show_twelve_digit_hashes_and_names(audit_world: AuditWorld, run_at: Callable[..., str]) -> None:
    out = run_at(80, "pairs")
    shas = set(re.findall(r"\b[0-9a-f]{12,64}\b", out))
    assert shas and all(len(s) == 12 for s in shas), shas
    assert "<script>" in run_at(120, "artifacts")  # the hostile name is shown, inert


def test_runs_on_an_empty_registry_says_so(tmp_path: Path) -> None:
    from specreg.registry.store import Registry

    Registry(tmp_path / "registry.db").close()  # an empty registry (a missing --db file is an error)
    code, out, err = specreg("runs", db=tmp_path / "registry.db")
    assert code == 0 and out == "" and err.strip() == "no benchmark runs yet (specreg bench admitted)"


def test_a_slow_tail_names_its_limit() -> None:
    from specreg.audit.gates import speed_gate
    from specreg.schemas.audit import ConditionDigest, Policy, RunDigest, StratumRow

    run = RunDigest(
        run_id="r",
        status="complete",
        conditions=[ConditionDigest(label="none", spec_type="none"), ConditionDigest(label="d", spec_type="draft")],
        strata=[
            StratumRow(condition="none", stratum="chat", p95_total_ms=23.6 / 1.1, speedup=1.0),
            StratumRow(condition="d", stratum="chat", p95_total_ms=96.3, speedup=2.0),
        ],
    )
    gate = speed_gate(run, run.conditions[1], Policy(), 1)
    assert not gate.passed
    assert "p95 96.3 ms > limit 23.6 ms (baseline p95 21.5 ms + 10%)" in gate.message
