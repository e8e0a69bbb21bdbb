"""Whose evidence the audit believes: runs measured here, and runs a named signer vouched for.

A run imported from another machine is evidence about that machine; with `[trust]
require_signed_evidence` it counts only when one of the policy's `signers` signed it (the
envelopes verified at import, exchange/bundle_signatures.py). The rest are refused as evidence with one
line naming the run, the bundle it came in and the missing or unknown signer; every run the
audit rests on is described (`RunDigest.attested_by`) so records and reports name its signer.
"""

from __future__ import annotations

from specreg.audit.policy import policy_folder
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy
from specreg.signing.signers import trusted_keys

LOCAL = "measured on this machine"


class EvidenceTrust:
    """Per audit: where each imported run came from, who signed it, and what the policy makes of it."""

    def __init__(self, reg: Registry, policy: Policy, source: str) -> None:
        from specreg.signing.attestations import attestations_by_run

        self.require = policy.trust.require_signed_evidence
        self.keys = trusted_keys(policy.trust.signers, policy_folder(source), source)
        conn = reg.conn
        self.origins = {
            rid: (host, bundle)
            for rid, host, bundle in conn.execute("SELECT run_id, host, bundle_digest FROM run_origins")
        }
        self.signers = attestations_by_run(conn) if self.origins else {}
        self.refused: dict[str, str] = {}  # run id -> the refusal line, for the runs the audit met

    def _named(self, run_id: str) -> list[str]:
        return [self.keys[s.key_id] for s in self.signers.get(run_id, []) if s.key_id in self.keys]

    def refusal(self, run_id: str) -> str | None:
        """Why this run is no evidence under the policy, or None when it is."""
        if not self.require or run_id not in self.origins or self._named(run_id):
            return None
        host, bundle = self.origins[run_id]
        keys = [s.key_id for s in self.signers.get(run_id, [])]
        who = (
            f"signed only by unknown key {', '.join(k[:16] for k in keys)} (not in [trust] signers)"
            if keys
            else "not signed by any [trust] signer"
        )
        line = f"run {run_id} (bundle {bundle[:16]}, host {host}): refused as evidence: {who}"
        self.refused[run_id] = line
        return line

    def describe(self, run_id: str) -> str:
        """Who vouches for the run, in words (audit records and reports)."""
        if run_id not in self.origins:
            return LOCAL
        host, bundle = self.origins[run_id]
        named = sorted(set(self._named(run_id)))
        keys = sorted({s.key_id for s in self.signers.get(run_id, [])})
        where = f"measured on {host}, bundle {bundle[:16]}"
        if named:
            return f"signed by {', '.join(named)}; {where}"
        if keys:
            return f"signed by key {', '.join(k[:16] for k in keys)} (no [trust] signer); {where}"
        return f"unsigned; {where}"


__all__ = ["LOCAL", "EvidenceTrust"]
