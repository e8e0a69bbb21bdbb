"""Whose evidence the audit believes: runs measured here, and runs a named signer vouched for.

A run imported from another machine is evidence about that machine; with `[trust]
require_signed_evidence` it counts only when one of the policy's `signers` signed it (the
envelopes verified at import, exchange/signing.py). The rest are refused as evidence with one
line naming the run, the bundle it came in and the missing or unknown signer; every run the
audit rests on is described (`RunDigest.attested_by`) so records and reports name its signer.
"""

from __future__ import annotations

import json
from pathlib import Path

from specreg.audit.policy import BUILTIN
from specreg.errors import PolicyError, SignatureError
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy
from specreg.schemas.bench import NodeInfo

LOCAL = "measured on this machine"


def trusted_keys(policy: Policy, source: str) -> dict[str, str]:
    """key id -> signer name for the policy's `[trust] signers` (PEM paths relative to the policy)."""
    if not policy.trust.signers:
        return {}
    from specreg.exchange.dsse import resolve_key_id

    base = None if source == BUILTIN else Path(source).parent
    out: dict[str, str] = {}
    for name, value in policy.trust.signers.items():
        try:
            out[resolve_key_id(value, base)] = name
        except SignatureError as exc:
            raise PolicyError(f"{source}: [trust] signers.{name}: {exc}", hint=exc.hint) from None
    return out


class EvidenceTrust:
    """Per audit: where each imported run came from, who signed it, and what the policy makes of it."""

    def __init__(self, reg: Registry, policy: Policy, source: str) -> None:
        from specreg.exchange.signing import attestations_by_run

        self.require = policy.trust.require_signed_evidence
        self.keys = trusted_keys(policy, source)
        conn = reg.conn
        # run id -> (where it was measured, in words; how it came: "bundle <digest>" or "streamed from Ray")
        self.origins = {
            rid: _origin_words(host, bundle, node, address, resources)
            for rid, host, bundle, node, address, resources in conn.execute(
                "SELECT run_id, host, bundle_digest, node_id, node_address, resources_json FROM run_origins"
            )
        }
        self.signers = attestations_by_run(conn) if self.origins else {}
        self.refused: dict[str, str] = {}  # run id -> the refusal line, for the runs the audit met

    def _named(self, run_id: str) -> list[str]:
        return [self.keys[s.key_id] for s in self.signers.get(run_id, []) if s.key_id in self.keys]

    def refusal(self, run_id: str) -> str | None:
        """Why this run is no evidence under the policy, or None when it is."""
        if not self.require or run_id not in self.origins or self._named(run_id):
            return None
        where, came = self.origins[run_id]
        keys = [s.key_id for s in self.signers.get(run_id, [])]
        who = (
            f"signed only by unknown key {', '.join(k[:16] for k in keys)} (not in [trust] signers)"
            if keys
            else "not signed by any [trust] signer"
        )
        line = f"run {run_id} ({came}, {where}): refused as evidence: {who}"
        self.refused[run_id] = line
        return line

    def describe(self, run_id: str) -> str:
        """Who vouches for the run, in words (audit records and reports)."""
        if run_id not in self.origins:
            return LOCAL
        where, came = self.origins[run_id]
        named = sorted(set(self._named(run_id)))
        keys = sorted({s.key_id for s in self.signers.get(run_id, [])})
        where = f"measured on {where.removeprefix('host ')}, {came}"
        if named:
            return f"signed by {', '.join(named)}; {where}"
        if keys:
            return f"signed by key {', '.join(k[:16] for k in keys)} (no [trust] signer); {where}"
        return f"unsigned; {where}"


def _origin_words(
    host: str, bundle: str | None, node_id: str | None, address: str | None, resources: str | None
) -> tuple[str, str]:
    """(where, how it came) for an imported run: `host H` or the Ray node it ran on; `bundle
    <digest>`, or `streamed from Ray` for a run whose rows came from its node as it measured."""
    if node_id:
        node = NodeInfo(node_id=node_id, host=host, address=address or "", resources=json.loads(resources or "{}"))
        return node.line(), f"bundle {bundle[:16]}" if bundle else "streamed from Ray"
    return f"host {host}", f"bundle {bundle[:16]}" if bundle else "no bundle"


__all__ = ["LOCAL", "EvidenceTrust", "trusted_keys"]
