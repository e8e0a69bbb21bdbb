"""Helpers for the pair-check tests: write real tiny GGUFs, open them with the real reader, check."""

from __future__ import annotations

from pathlib import Path

from specreg.gguf.reader import open_gguf
from specreg.schemas.checks import CheckResult
from specreg.testing import ModelSpec, write_model
from specreg.validators.pair import check_pair
from specreg.validators.ruleset import load_rule_set

BASE = ModelSpec()
RULES = load_rule_set()


def run_pair(
    tmp: Path, target: ModelSpec, draft: ModelSpec | None, method: str, *, strict: bool = False
) -> list[CheckResult]:
    """Write both specs to disk and run every check for `method`."""
    t = open_gguf(write_model(tmp / "target.gguf", target))
    d = None if draft is None else open_gguf(write_model(tmp / "draft.gguf", draft))
    return check_pair(t, d, method, rule_set=RULES, strict=strict)


def codes(checks: list[CheckResult], *severities: str) -> set[str]:
    return {c.code for c in checks if c.severity in severities}


def errors(checks: list[CheckResult]) -> set[str]:
    return codes(checks, "error")


def one(checks: list[CheckResult], code: str) -> CheckResult:
    found = [c for c in checks if c.code == code]
    assert len(found) == 1, f"expected one {code}, got {[c.code for c in checks]}"
    return found[0]
