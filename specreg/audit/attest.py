"""`audit --sign`: the audit result as an in-toto statement in a DSSE envelope, signed on the deciding machine.

A deployment pipeline that holds the deciding machine's public key checks the envelope (any
DSSE/in-toto verifier will do) and reads the decision from the signed payload itself, so no
separate file can be swapped in beside it. Subjects are the audited model files by SHA-256;
the predicate is the whole audit record (policy, every gate, the decisions, who signed each run
it rests on) with the signer's public key and host.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from specreg import __version__
from specreg.schemas.audit import AuditReport
from specreg.signing.dsse import STATEMENT_TYPE, key_id, open_envelope, public_pem, sign_statement

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

AUDIT_PREDICATE = "https://specreg.dev/attestation/audit/v1"


def audit_statement(report: AuditReport, signer: Signer) -> dict[str, Any]:
    shas = sorted({s for p in report.pairs for s in (p.target_sha256, p.draft_sha256) if s})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": f"models/{s}", "digest": {"sha256": s}} for s in shas],
        "predicateType": AUDIT_PREDICATE,
        "predicate": {
            "audit": report.model_dump(mode="json"),
            "signer": {"keyid": key_id(signer), "public_key": public_pem(signer), "host": socket.gethostname()},
            "signed_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "specreg_version": __version__,
        },
    }


def sign_audit(report: AuditReport, signer: Signer) -> bytes:
    """The signed envelope (JSON bytes) of an audit result."""
    return sign_statement(audit_statement(report, signer), signer)


def open_audit(data: bytes, where: str) -> tuple[str, dict[str, Any]]:
    """(key id, audit record) of a signed audit envelope whose signature verifies; SignatureError otherwise."""
    opened = open_envelope(data, where, AUDIT_PREDICATE)
    return opened.key_id, opened.statement["predicate"]["audit"]


__all__ = ["AUDIT_PREDICATE", "open_audit", "sign_audit"]
