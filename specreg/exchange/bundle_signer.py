"""Signing a result bundle: the in-toto statement over its runs and artifacts, and the envelope added.

`specreg export --sign` and `specreg sign` come here; verifying what arrives is
exchange/bundle_signatures.py (which the import path uses, so it imports nothing of this module
or of exchange/bundle). A bundle's verdicts are signed with it: the statement binds pairs.jsonl,
whose lines carry them (and each verdict relayed from elsewhere its origin).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg import __version__
from specreg.exchange.bundle import ExportResult, export_bundle, this_host
from specreg.exchange.bundle_format import NOTHING_SIGNED, Bundle, open_bundle, run_member
from specreg.exchange.bundle_signatures import (
    BUNDLE_PREDICATE,
    RECORD_MEMBERS,
    artifact_shas,
    envelope_name,
    verify_bundle,
)
from specreg.registry.migrations import migrations
from specreg.signing.dsse import STATEMENT_TYPE, key_id, public_pem, sign_statement

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

    from specreg.registry.store import Registry


def _run_facts(bundle: Bundle, run_id: str) -> dict[str, Any]:
    """Runtime, method, models and rule set of one bundled run, read best-effort from its run.json
    (the run's digest, a subject, already covers every byte of it)."""
    from specreg.benchmark.store.digest import runtime_identity
    from specreg.schemas.bench import RunManifest

    recs = bundle.records(run_member(run_id, "run.json"))
    rec = recs[0] if recs else {}
    runtime = None
    with contextlib.suppress(ValueError):  # an older or foreign manifest: unnamed, the digest still binds it
        runtime = runtime_identity(RunManifest.model_validate(rec.get("manifest")))
    pair = rec.get("pair")
    pair = pair if isinstance(pair, dict) else {}
    return {
        "runtime": runtime,
        "method": rec.get("method"),
        "target_sha256": rec.get("target_sha256"),
        "draft_sha256": rec.get("draft_sha256"),
        "rule_set": pair.get("rule_set"),
        "status": rec.get("status"),
    }


def statement_for(bundle: Bundle, signer: Signer) -> dict[str, Any]:
    """The in-toto Statement v1 a signature over `bundle` makes (see the module docstring)."""
    h = bundle.header
    subjects: list[dict[str, Any]] = [{"name": f"runs/{r.run_id}", "digest": {"sha256": r.digest}} for r in h.runs]
    subjects += [{"name": f"artifacts/{s}", "digest": {"sha256": s}} for s in sorted(artifact_shas(bundle))]
    members = {m.name: m.sha256 for m in h.members}
    subjects += [{"name": f"bundle/{n}", "digest": {"sha256": members[n]}} for n in RECORD_MEMBERS if n in members]
    runs = []
    for r in h.runs:
        facts = _run_facts(bundle, r.run_id)
        runs.append(
            {
                "run_id": r.run_id,
                "digest": r.digest,
                "measured_on": r.origin.host,
                "specreg_version": r.origin.specreg_version,
                "hardware": r.hardware,
                **facts,
            }
        )
    rule_sets = sorted(
        {str(p.get("rule_set")) for p in bundle.records("pairs.jsonl") if p.get("rule_set")}
        | {str(r["rule_set"]) for r in runs if r.get("rule_set")}
    )
    return {
        "_type": STATEMENT_TYPE,
        "subject": subjects,
        "predicateType": BUNDLE_PREDICATE,
        "predicate": {
            "bundle": {"digest": h.digest, "created_at": h.created_at, "origin": h.origin.model_dump(mode="json")},
            "runs": runs,
            "rule_sets": rule_sets,
            "signer": {"keyid": key_id(signer), "public_key": public_pem(signer), "host": this_host().host},
            "signed_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "specreg_version": __version__,
        },
    }


def sign_bundle(src: str | Path, signer: Signer, dest: str | Path | None = None) -> tuple[Path, str]:
    """Verify the bundle at `src` and every envelope it carries, then write it with one more
    envelope (this key's, replacing an older one by the same key) to `dest` (default: `src`
    itself, atomically). Returns (path, key id). A bundle that would be refused on import (its
    members, or an envelope that does not verify) is never signed."""
    bundle = open_bundle(src, migrations.names(), then=NOTHING_SIGNED)
    verify_bundle(bundle)
    kid = key_id(signer)
    envelope = sign_statement(statement_for(bundle, signer), signer)
    out = Path(dest) if dest is not None else Path(src)
    name = envelope_name(kid)
    fd, tmp_name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        if name in bundle.envelopes:  # re-signing with the same key: a zip cannot drop a member in place
            with zipfile.ZipFile(src) as old, zipfile.ZipFile(tmp, "w") as new:
                for info in old.infolist():
                    if info.filename != name:
                        new.writestr(info, old.read(info))
        else:
            shutil.copyfile(src, tmp)
        with zipfile.ZipFile(tmp, "a") as zf:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, envelope)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out, kid


def export_signed(reg: Registry, path: str | Path, signer: Signer, **what: Any) -> tuple[ExportResult, str]:
    """`export --sign`: the bundle written beside `path`, signed into `path` (an unsigned copy
    never sits at `path`). Returns the export result and the key id."""
    out = Path(path)
    fd, name = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".unsigned")
    os.close(fd)
    try:
        res = export_bundle(reg, name, **what)
        _, kid = sign_bundle(name, signer, out)
    finally:
        Path(name).unlink(missing_ok=True)
    res.path = out
    return res, kid


__all__ = ["export_signed", "sign_bundle", "statement_for"]
