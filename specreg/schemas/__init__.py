"""Pydantic models shared across specreg (no I/O, imports nothing of ours)."""

from specreg.schemas.checks import (
    DRAFT_METHODS,
    SELF_METHODS,
    CheckResult,
    Method,
    PairVerdict,
    Severity,
)
from specreg.schemas.gguf import (
    GGUFSummary,
    LicenceFields,
    ProvenanceFields,
    SpeculativeMeta,
    TensorInfo,
    TokenizerSummary,
)

__all__ = [
    "DRAFT_METHODS",
    "SELF_METHODS",
    "CheckResult",
    "GGUFSummary",
    "LicenceFields",
    "Method",
    "PairVerdict",
    "ProvenanceFields",
    "Severity",
    "SpeculativeMeta",
    "TensorInfo",
    "TokenizerSummary",
]
