"""Verdicts from elsewhere: evidence about another machine, never an admission written here.

A result bundle may carry verdicts another machine made (table imported_verdicts, m016). They
are kept - who made them (host, specreg version), when, under which rule set, from which bundle
- and shown beside the pair ("admitted elsewhere, not checked here"), but `pairs.admitted`, what
`bench admitted` and the runner read, is made of this machine's own checks alone: an import
never writes it. Only admitted pairs may be benchmarked here, and that rule must not rest on
whoever wrote the last bundle (a pair not checked here has no files here to run anyway).

The audit alone may let a verdict from elsewhere stand, and only under a policy: one that a
signer in its `[trust] signers` signed, under a rule set this build knows (audit/trust.py, on
the attestations recorded at import, signing/attestations.py). A host name in a bundle is only
what whoever wrote the bundle says; a signature is who vouches for it.
"""

from __future__ import annotations

from specreg.schemas.registry import PairRecord


def not_checked_here(pair: PairRecord) -> str | None:
    """Why a pair that another machine admitted is not admitted here, or None when it is not such
    a pair (it was checked here, or nothing admitted it elsewhere)."""
    e = pair.elsewhere
    if pair.checked_here or e is None or not e.admitted:
        return None
    return (
        f"admitted elsewhere ({e.host}, specreg {e.specreg_version}, {e.created_at[:19]}), not checked here: "
        f"run `specreg check pair` on its files"
    )


__all__ = ["not_checked_here"]
