"""Checks and verdicts: a verdict is admitted iff no check has severity error."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from specreg.schemas.methods import Method
from specreg.text import valid_utf8

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

Severity = Literal["pass", "info", "warn", "error"]


class _Utf8:
    """Token texts from a hostile file may hold undecodable bytes (lone surrogates, from
    surrogateescape): stored and printed as `\\xNN` (text.valid_utf8). Only Python input can hold
    them - JSON text with a lone surrogate or invalid UTF-8 is refused by the parser - so checks
    read back from the registry (tens of thousands in a fleet audit) skip the repair: no Python
    call per field. `CheckResult(...)` in code repairs its arguments itself (its __init__)."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema

        schema = handler(source)
        return core_schema.json_or_python_schema(
            json_schema=schema, python_schema=core_schema.no_info_after_validator_function(valid_utf8, schema)
        )


@dataclass(init=False, kw_only=True)
class CheckResult:
    """One rule applied to one pair; `code` is stable and documented in the docs' check list.

    Its own __init__ repairs the texts (see _Utf8); pydantic's validation does not call it."""

    code: str
    severity: Severity
    message: Annotated[str, _Utf8]
    evidence: Annotated[dict[str, Any], _Utf8] = field(default_factory=dict)

    def __init__(self, *, code: str, severity: Severity, message: str, evidence: dict[str, Any] | None = None) -> None:
        self.code = code
        self.severity = severity
        self.message = valid_utf8(message)
        self.evidence = valid_utf8(evidence) if evidence else {}


@dataclass(kw_only=True)
class PairVerdict:
    """The outcome of `check pair`, as stored in the registry."""

    admitted: bool
    method: Method
    target_sha256: str
    draft_sha256: str | None = None
    rule_set: str
    strict: bool = False
    checks: list[CheckResult]
    created_at: datetime | None = None
