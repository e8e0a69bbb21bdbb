"""Trust in signers: the keys a policy's `[trust] signers` names, by key id.

A signer is named by a PEM public key file (relative to the policy's folder) or by a key id
(signing/dsse.py). The audit and `import --policy` both ask this one table whom to believe;
a key's own say-so (the name or host inside a statement) never counts.
"""

from __future__ import annotations

from pathlib import Path

from specreg.errors import PolicyError, SignatureError


def trusted_keys(signers: dict[str, str], base: Path | None, source: str) -> dict[str, str]:
    """key id -> signer name for a policy's `[trust] signers`; `base`: the policy's folder
    (None for the built-in policy), `source`: the policy's name in an error."""
    if not signers:
        return {}
    from specreg.signing.dsse import resolve_key_id

    out: dict[str, str] = {}
    for name, value in signers.items():
        try:
            out[resolve_key_id(value, base)] = name
        except SignatureError as exc:
            raise PolicyError(f"{source}: [trust] signers.{name}: {exc}", hint=exc.hint) from None
    return out


__all__ = ["trusted_keys"]
