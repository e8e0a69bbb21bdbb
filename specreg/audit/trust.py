"""Whose evidence the audit believes: runs and verdicts made here, and those a named signer vouched for.

A run imported from another machine is evidence about that machine; with `[trust]
require_signed_evidence` it counts only when one of the policy's `signers` signed it (the
envelopes verified at import, exchange/bundle_signatures.py). The rest are refused as evidence
with one line naming the run, the bundle it came in and the missing or unknown signer; every
run the audit rests on is described (`RunDigest.attested_by`) so records and reports name its
signer.

A verdict imported from another machine stands here as that signer's verdict when an envelope
the policy trusts covered it (signing/attestations.py) and it was made under a rule set this
build knows: so a central registry audits a fleet's pairs from signed bundles alone, without
the model files. A check made here always wins (a pair with a verdict of its own never reads an
imported one); unsigned verdicts, and verdicts signed only by keys the policy does not name,
stay evidence about the machine that made them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from specreg.audit.policy import policy_folder
from specreg.registry.pairs import load_checks, unreadable
from specreg.registry.store import Registry
from specreg.schemas.audit import Policy
from specreg.schemas.bench import NodeInfo
from specreg.schemas.registry import PairRecord
from specreg.signing.attestations import SignedVerdict
from specreg.signing.signers import trusted_keys

LOCAL = "measured on this machine"


@dataclass(frozen=True)
class Standing:
    """A verdict another machine made that stands here: signed by keys the policy trusts."""

    signers: tuple[str, ...]  # the policy's names for those keys
    verdict: SignedVerdict

    @property
    def by(self) -> str:
        return ", ".join(self.signers)

    def said(self) -> str:
        """`admitted by lab-a, signed` (what pairs, the audit and the report show)."""
        return f"{'admitted' if self.verdict.admitted else 'rejected'} by {self.by}, signed"

    def origin(self) -> str:
        v = self.verdict
        return f"made on {v.host}, specreg {v.specreg_version}, {v.created_at[:19]}; bundle {v.bundle_digest[:16]}"


class EvidenceTrust:
    """Per audit: where each imported run and verdict came from, who signed it, and what the policy
    makes of it."""

    def __init__(self, reg: Registry, policy: Policy, source: str) -> None:
        from specreg.signing.attestations import attestations_by_run, signed_verdicts

        self.require = policy.trust.require_signed_evidence
        self.keys = trusted_keys(policy.trust.signers, policy_folder(source), source)
        conn = reg.conn
        # run id -> (where it was measured, in words; how it came: "bundle <digest>" or "streamed from Ray")
        self.origins = {
            rid: _origin_words(host, bundle, node, address, resources)
            for rid, host, bundle, node, address, resources in conn.execute(
                "SELECT run_id, host, bundle_digest, node_id, node_address, resources_json FROM run_origins"
            )
        }
        self.signers = attestations_by_run(conn) if self.origins else {}
        self.verdicts = signed_verdicts(conn)  # pair id -> signed imported verdicts (pairs not checked here)
        self.refused: dict[str, str] = {}  # run id -> the refusal line, for the runs the audit met

    # -- verdicts ---------------------------------------------------------------------------------

    def standing(self, pair: PairRecord) -> Standing | None:
        """The signed verdict this pair stands on here, or None (checked here, or no imported verdict
        a trusted key signed under a rule set this build knows). The latest such normal verdict,
        else the latest strict one, as for verdicts made here."""
        from specreg.validators.ruleset import current_rule_set_id

        if pair.checked_here or current_rule_set_id(pair.rule_set) is None:
            return None
        found = [v for v in self.verdicts.get(pair.id, []) if v.key_ids & self.keys.keys()]
        if not found:
            return None
        v = max(found, key=lambda x: (not x.strict, x.created_at, x.verdict_id))
        return Standing(tuple(sorted({self.keys[k] for k in v.key_ids if k in self.keys})), v)

    def as_standing(self, pair: PairRecord) -> PairRecord:
        """The pair as it stands here: on a trusted signed verdict (its outcome and checks) when it
        has one and no verdict of its own, else as recorded."""
        st = self.standing(pair)
        if st is None:
            return pair
        checks = load_checks(st.verdict.checks_json)
        admitted = st.verdict.admitted and checks is not None
        return replace(
            pair,
            admitted=admitted,
            strict=st.verdict.strict,
            checks=checks if checks is not None else [unreadable(f"imported {st.verdict.verdict_id}")],
        )

    def untrusted(self, pair: PairRecord) -> list[str]:
        """Key ids (16 hex) that signed an imported verdict of this pair without standing in the policy."""
        if pair.checked_here:
            return []
        keys = {k for v in self.verdicts.get(pair.id, []) for k in v.key_ids if k not in self.keys}
        return sorted(k[:16] for k in keys)

    def signed_elsewhere(self) -> list[int]:
        """Every pair with a signed imported verdict and no verdict made here."""
        return sorted(self.verdicts)

    # -- runs -------------------------------------------------------------------------------------

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


__all__ = ["LOCAL", "EvidenceTrust", "Standing"]
