"""Verdicts from elsewhere: evidence about another machine, never an admission here.

A result bundle may carry verdicts another machine made (table imported_verdicts, m016). They
are kept - who made them (host, specreg version), when, under which rule set, from which bundle
- and shown beside the pair ("admitted elsewhere, not checked here"), but the verdict a pair
stands on here is made of this machine's own checks alone: `bench admitted`, the runner and the
audit's verdict gate read `pairs.admitted`, which an import never writes. Only admitted pairs may
be benchmarked, and that rule must not rest on whoever wrote the last bundle.

`trusted` is the one place a later change (signed evidence) lets a policy accept another
machine's verdict; until then it accepts none, because a host name in a bundle is only what
whoever wrote the bundle says.
"""

from __future__ import annotations

from specreg.schemas.registry import Elsewhere, PairRecord


def trusted(elsewhere: Elsewhere | None, signers: frozenset[str] = frozenset()) -> bool:
    """Whether another machine's verdict may stand in for a check here: never yet (nothing in a
    bundle proves who wrote it). `signers`: the keys a policy trusts, once bundles are signed."""
    del elsewhere, signers
    return False


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


__all__ = ["not_checked_here", "trusted"]
