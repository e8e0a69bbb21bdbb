"""A CycloneDX 1.6 ML-BOM of an audited deployment (`specreg export --format cyclonedx PAIR_ID`).

The target and the draft are components of type machine-learning-model: SHA-256, size, SPDX
licence, provenance (hub repo at its commit as a purl and URLs), and the model facts specreg
read (architecture, quantisation, tokenizer fingerprints). The deployment itself is the BOM's
subject (metadata.component): its method and rule set, the audit result per gate (per hardware
class when the runs came from several) and the pinned speculative and rollback commands.
Built with cyclonedx-python-lib, so the output follows the schema the library validates against.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime

from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, Property, XsUri
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.model.tool import ToolRepository
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from specreg import __version__
from specreg.schemas.audit import AuditReport, PairAudit
from specreg.schemas.registry import ArtifactRecord
from specreg.signing.model_signature import PROVENANCE_KEY, signature_identity
from specreg.text import escape_control

try:  # cyclonedx-python-lib 11.x moved it here (the old location warns)
    from cyclonedx.contrib.license.factories import LicenseFactory
except ImportError:  # pragma: no cover - an older cyclonedx-python-lib
    from cyclonedx.factory.license import LicenseFactory

NS = "specreg"


def _props(pairs: list[tuple[str, object]]) -> list[Property]:
    return [Property(name=f"{NS}:{k}", value=escape_control(v)) for k, v in pairs if v is not None and v != ""]


def _signed(rec: ArtifactRecord) -> dict[str, object]:
    """The OpenSSF model signature verified at registration, when it covers these bytes."""
    sig = rec.provenance.extra.get(PROVENANCE_KEY)
    return sig if isinstance(sig, dict) and signature_identity(rec.provenance.extra, rec.sha256) else {}


def _model(rec: ArtifactRecord, role: str) -> Component:
    prov, summary = rec.provenance, rec.summary
    tok = summary.tokenizer if summary else None
    purl = None
    refs: list[ExternalReference] = []
    if prov.repo and "/" in prov.repo:
        org, name = prov.repo.split("/", 1)
        purl = PackageURL(type="huggingface", namespace=org, name=name, version=prov.revision)
        refs.append(ExternalReference(type=ExternalReferenceType.VCS, url=XsUri(f"https://huggingface.co/{prov.repo}")))
        if prov.revision and prov.filename:
            url = f"https://huggingface.co/{prov.repo}/resolve/{prov.revision}/{prov.filename}"
            refs.append(ExternalReference(type=ExternalReferenceType.DISTRIBUTION, url=XsUri(url)))
    licences = []
    if rec.licence.effective:
        licences.append(LicenseFactory().make_from_string(escape_control(rec.licence.effective)))
    return Component(
        type=ComponentType.MACHINE_LEARNING_MODEL,
        name=escape_control(rec.name or prov.filename or rec.sha256[:12]),
        version=prov.revision or None,
        bom_ref=f"model-{role}-{rec.sha256}",
        hashes=[HashType(alg=HashAlgorithm.SHA_256, content=rec.sha256)],
        licenses=licences,
        purl=purl,
        external_references=refs,
        properties=_props(
            [
                ("role", role),
                ("size_bytes", rec.size),
                ("format", "gguf"),
                ("architecture", rec.architecture),
                ("quantization", rec.file_type_name),
                ("provenance", f"{prov.repo}@{prov.revision}" if prov.repo else None),
                ("provenance.source", prov.source),
                ("model_signature.identity", signature_identity(prov.extra, rec.sha256)),
                ("model_signature.method", _signed(rec).get("method")),
                ("licence.source", rec.licence.effective_source),
                ("licence.conflict", "true" if rec.licence.conflict else None),
                ("tokenizer.model", tok.model if tok else None),
                ("tokenizer.pre", tok.pre if tok else None),
                ("tokenizer.n_tokens", tok.n_tokens if tok else None),
                ("tokenizer.tokens_sha256", tok.tokens_sha256 if tok else None),
                ("tokenizer.merges_sha256", tok.merges_sha256 if tok else None),
                ("tokenizer.chat_template_sha256", tok.chat_template_sha256 if tok else None),
            ]
        ),
    )


def _audit_props(audits: list[PairAudit], several: bool) -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for a in audits:
        pre = f"audit[{a.hardware}]" if several and a.hardware else "audit"
        out.append((f"{pre}:result", "pass" if a.passed else "fail"))
        out.append((f"{pre}:run_id", a.run_id))
        out.append((f"{pre}:hardware", a.hardware))
        out += [(f"{pre}:gate:{g.gate}", f"{'pass' if g.passed else 'FAIL'}: {g.message}") for g in a.gates]
        if a.speculative_command:
            out.append((f"{pre}:deploy.command", shlex.join(a.speculative_command)))
        if a.rollback_command:
            out.append((f"{pre}:rollback.command", shlex.join(a.rollback_command)))
    return out


def ml_bom(report: AuditReport, target: ArtifactRecord, draft: ArtifactRecord | None) -> Bom:
    """The BOM of one audited pair (every PairAudit in `report` is that pair, one per hardware class)."""
    first = report.pairs[0]
    models = [_model(target, "target")] + ([_model(draft, "draft")] if draft else [])
    name = f"{first.method} {target.name or target.sha256[:12]}" + (
        f" <- {draft.name or draft.sha256[:12]}" if draft else " (self-speculation)"
    )
    subject = Component(
        type=ComponentType.APPLICATION,
        name=escape_control(f"speculative decoding: {name}"),
        version=f"pair-{first.pair_id}",
        bom_ref=f"deployment-pair-{first.pair_id}",
        properties=_props(
            [
                ("pair_id", first.pair_id),
                ("method", first.method),
                ("rule_set", report.rule_set),
                ("policy", report.policy_source),
                ("audit:passed", "true" if all(a.passed for a in report.pairs) else "false"),
                *_audit_props(report.pairs, len(report.pairs) > 1),
            ]
        ),
    )
    tools = ToolRepository(components=[Component(type=ComponentType.APPLICATION, name="specreg", version=__version__)])
    bom = Bom(
        metadata=BomMetaData(component=subject, tools=tools, timestamp=datetime.now(UTC)),
        components=models,
    )
    bom.register_dependency(subject, models)
    return bom


def ml_bom_json(report: AuditReport, target: ArtifactRecord, draft: ArtifactRecord | None) -> str:
    """The BOM as CycloneDX 1.6 JSON."""
    return JsonV1Dot6(ml_bom(report, target, draft)).output_as_string(indent=2)
