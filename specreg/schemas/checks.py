"""Checks and verdicts: a verdict is admitted iff no check has severity error."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from specreg.schemas.base import BaseModel
from specreg.schemas.methods import Method
from specreg.text import valid_utf8

Severity = Literal["pass", "info", "warn", "error"]


class CheckResult(BaseModel):
    """One rule applied to one pair; `code` is stable and documented in the README."""

    code: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = Field(default_factory=dict)

    @field_validator("message", "evidence")
    @classmethod
    def _valid_utf8(cls, value: Any) -> Any:
        # token texts from a hostile file may hold undecodable bytes: stored and printed as \xNN
        return valid_utf8(value)


class PairVerdict(BaseModel):
    """The outcome of `check pair`, as stored in the registry."""

    admitted: bool
    method: Method
    target_sha256: str
    draft_sha256: str | None = None
    rule_set: str
    strict: bool = False
    checks: list[CheckResult]
    created_at: datetime | None = None
