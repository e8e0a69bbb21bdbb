"""Checks and verdicts: a verdict is admitted iff no check has severity error."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, GetCoreSchemaHandler
from pydantic_core import core_schema

from specreg.schemas.base import BaseModel
from specreg.schemas.methods import Method
from specreg.text import valid_utf8

Severity = Literal["pass", "info", "warn", "error"]


class _Utf8:
    """Token texts from a hostile file may hold undecodable bytes (lone surrogates, from
    surrogateescape): stored and printed as `\\xNN` (text.valid_utf8). Only Python input can hold
    them - JSON text with a lone surrogate or invalid UTF-8 is refused by the parser - so checks
    read back from the registry (tens of thousands in a fleet audit) skip the repair: no Python
    call per field."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        schema = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=schema, python_schema=core_schema.no_info_after_validator_function(valid_utf8, schema)
        )


class CheckResult(BaseModel):
    """One rule applied to one pair; `code` is stable and documented in the README."""

    code: str
    severity: Severity
    message: Annotated[str, _Utf8]
    evidence: Annotated[dict[str, Any], _Utf8] = Field(default_factory=dict)


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
