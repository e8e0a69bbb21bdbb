"""What the registry stores about artifacts, their licences, provenance and admitted pairs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from specreg.schemas.checks import CheckResult, Method
from specreg.schemas.gguf import GGUFSummary

LicenceSourceKind = Literal["user", "model_card", "gguf"]

if TYPE_CHECKING:
    _Summary = GGUFSummary | None
else:
    # Pydantic would build a schema for the whole summary (a tree of dataclasses, ~8 ms) only to
    # skip its validation; nothing serializes a record's summary through pydantic (gguf.as_dict
    # does), so at run time the field is declared as anything (validated where it is made: read
    # from the file by the reader, or from JSON by summary_from_json).
    _Summary = Any

# Highest first: what a person states on the command line beats the model card, which beats
# the (often copied, often stale) `general.license` inside the GGUF file.
LICENCE_PRECEDENCE: tuple[LicenceSourceKind, ...] = ("user", "model_card", "gguf")


@dataclass(kw_only=True)
class LicenceSource:
    """One statement of a licence, as found in one place (untrusted text)."""

    source: LicenceSourceKind
    value: str | None = None
    name: str | None = None
    link: str | None = None


@dataclass(kw_only=True)
class LicenceRecord:
    """Every licence statement for an artifact, the one that wins and whether they disagree."""

    sources: list[LicenceSource] = field(default_factory=list)
    effective: str | None = None
    effective_source: LicenceSourceKind | None = None
    conflict: bool = False


@dataclass(kw_only=True)
class Provenance:
    """Where the file came from: a hub repo and revision when known, and who said so."""

    repo: str | None = None
    revision: str | None = None
    filename: str | None = None
    source: str | None = None  # "user", "hf_cache", "hub", ... ; None when unknown
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class ArtifactRecord:
    """One registered GGUF file, identified by the SHA-256 of its bytes.

    List views (`Registry.artifacts(with_summary=False)`) leave `summary` as None so that
    long lists stay fast; the flat columns (name, architecture, ...) are always filled.
    """

    sha256: str
    size: int
    paths: list[str] = field(default_factory=list)
    name: str | None = None
    architecture: str | None = None
    file_type: int | None = None
    file_type_name: str | None = None
    n_tokens: int | None = None
    summary: _Summary = None
    licence: LicenceRecord = field(default_factory=LicenceRecord)
    provenance: Provenance = field(default_factory=Provenance)
    registered_at: datetime
    updated_at: datetime


@dataclass(kw_only=True)
class Elsewhere:
    """The latest verdict another machine made on a pair (imported in a bundle): evidence about
    that machine, never this machine's admission (registry/evidence.py)."""

    host: str
    specreg_version: str
    admitted: bool
    created_at: str
    n: int = 1  # imported verdicts on record for the pair


@dataclass(kw_only=True)
class PairRecord:
    """A (target, draft, method, rule set) pair with the verdict it stands on.

    The pair id is stable across re-checks; every verdict is kept (`n_verdicts`). The fields
    here describe the standing verdict (`verdict_id`): the latest normal one, else the latest
    strict one. A `--strict` check does not replace a normal verdict; its latest outcome is
    `strict_admitted` (None: never checked strictly).
    """

    id: int
    target_sha256: str
    draft_sha256: str | None = None
    method: Method
    rule_set: str
    admitted: bool
    strict: bool = False
    checks: list[CheckResult] = field(default_factory=list)
    verdict_id: int | None = None  # None: no verdict made on this machine yet (only imported ones)
    strict_admitted: bool | None = None
    strict_verdict_id: int | None = None
    n_verdicts: int = 1
    target_name: str | None = None
    draft_name: str | None = None
    created_at: datetime
    updated_at: datetime
    elsewhere: Elsewhere | None = None  # the latest imported verdict, if any

    @property
    def checked_here(self) -> bool:
        """Whether this machine's own checks made the verdict the pair stands on."""
        return self.verdict_id is not None
