"""`specreg register` and `specreg artifacts`: put GGUF files in the registry and list them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.layout import Col
from specreg.commands.options import JsonOpt, LicenseOpt, RehashOpt, db_path
from specreg.commands.output import Cell, emit_json, err_console, print_listing, safe, say
from specreg.text import quant_text

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.registry import ArtifactRecord


def _verify_signature(f: Path, pem: Path, signature: Path | None) -> dict[str, object]:
    from specreg.signing.model_signature import PROVENANCE_KEY, verify_model

    return {PROVENANCE_KEY: verify_model(f, pem, signature)}


def _signed_as_registered(rec: ArtifactRecord) -> str:
    """Who signed the bytes the registry hashed: the signature was verified over these (a file
    replaced in between keeps its record, which then names no signer, and this says so)."""
    from specreg.errors import SignatureError
    from specreg.signing.model_signature import signature_identity

    who = signature_identity(rec.provenance.extra, rec.sha256)
    if who is None:
        raise SignatureError(
            f"{rec.sha256[:12]}: the file changed between its signature check and its registration; "
            "its record names no signer"
        )
    return who


def _open_registry(*, create: bool = True) -> Registry:
    """Imported late: commands that never open the registry do not pay for it."""
    from specreg.registry.store import Registry

    return Registry(db_path(), create=create)


def register_cmd(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="GGUF files to register.", show_default=False)],
    license: LicenseOpt = None,
    repo: Annotated[str | None, typer.Option("--repo", metavar="ORG/NAME", help="Source repo on the hub.")] = None,
    revision: Annotated[str | None, typer.Option("--revision", metavar="COMMIT", help="Source revision.")] = None,
    rehash: RehashOpt = False,
    verify: Annotated[
        bool, typer.Option("--verify", help="Check the SHA-256 against the hub's for --repo/--revision (online).")
    ] = False,
    verify_signature: Annotated[
        Path | None,
        typer.Option(
            "--verify-signature",
            metavar="PEM",
            help="Verify the file's OpenSSF model signature (FILE.sig or model.sig beside it) with this "
            "public key or CA certificate, offline, and record who signed it (extra: specreg[signing]).",
        ),
    ] = None,
    signature: Annotated[
        Path | None, typer.Option("--signature", metavar="FILE", help="The model signature (Sigstore bundle).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Register GGUF files by SHA-256 (idempotent; the same bytes at a new path add the path).

    A file in the Hugging Face cache is recorded with its repo, commit, filename and model-card
    licence. --verify also checks it against the hub. Each file is registered on its own: one that
    fails is reported and the rest go on (exit 2 at the end, naming the failed files).
    """
    from specreg.errors import SpecregError, UsageError
    from specreg.sources import provenance

    if signature is not None and verify_signature is None:
        raise UsageError("--signature FILE goes with --verify-signature PEM (the key or CA that checks it)")
    if signature is not None and len(files) > 1:
        raise UsageError("--signature FILE names one file's signature: register one file with it")
    records: list[ArtifactRecord] = []
    failed: list[str] = []
    with _open_registry() as reg:
        for f in files:  # each file is its own registration: one bad file does not stop the rest
            before = reg.hash_count
            try:
                signed = _verify_signature(f, verify_signature, signature) if verify_signature else None
                if verify:  # sources/provenance.py: hub LFS SHA-256 at the pinned commit, then register
                    rec = provenance.verify(reg, f, repo=repo, revision=revision, license=license)
                    if signed is not None:
                        rec = provenance.register(reg, f, extra=signed)
                else:
                    rec = provenance.register(
                        reg, f, license=license, repo=repo, revision=revision, rehash=rehash, extra=signed
                    )
                signer = _signed_as_registered(rec) if signed is not None else None
            except SpecregError as exc:
                if len(files) == 1:
                    raise
                failed.append(str(f))
                err_console().print(f"[bold red]error:[/] {safe(str(exc))}", soft_wrap=True)
                continue
            records.append(rec)
            if not json_out:
                how = "hashed" if reg.hash_count > before else "known, not re-hashed"
                say(f"{os.path.abspath(f)} ({how})", prefix=f"{rec.sha256[:12]}  ", indent=14)
                if signer is not None:
                    say(f"model signature verified: signed by {signer}", prefix=" " * 14, indent=14)
            if rec.licence.conflict:
                said = ", ".join(f"{s.source}: {s.value}" for s in rec.licence.sources if s.value)
                err_console().print(
                    f"[yellow]warning:[/] licence sources disagree for {rec.sha256[:12]} ({safe(said)}); "
                    f"effective: {safe(rec.licence.effective)}",
                    soft_wrap=True,
                )
    if json_out:
        emit_json(records)
    if failed:
        raise SpecregError(
            f"{len(failed)} of {len(files)} files not registered: {', '.join(failed)}",
            hint="the others are registered; fix or drop these and run the command again",
        )


def artifacts_cmd(json_out: JsonOpt = False) -> None:
    """List registered artifacts (JSON leaves out the GGUF summaries; see `specreg inspect`)."""
    with _open_registry(create=False) as reg:
        recs = reg.artifacts(with_summary=False)
    if json_out:
        from specreg.schemas.record import to_python

        emit_json([to_python(r, exclude={"summary"}) for r in recs])
        return
    if not recs:
        err_console().print("no artifacts registered yet (specreg register FILE)")
        return

    def lic(r: ArtifactRecord) -> Cell:
        text = r.licence.effective or "-"
        return (text + " (conflict)", "red") if r.licence.conflict else text

    def source(r: ArtifactRecord) -> str:
        p = r.provenance
        return f"{p.repo}@{(p.revision or '?')[:12]}" if p.repo else "-"

    def where(r: ArtifactRecord) -> str:
        if not r.paths:
            return "-"
        return r.paths[0] + (f" (+{len(r.paths) - 1} more)" if len(r.paths) > 1 else "")

    print_listing(
        (
            Col("sha256"),
            Col("name", limit=40, squeeze=12),
            Col("arch", limit=16, squeeze=8),
            Col("quant"),  # what tells two files of one model apart: never cut, never moved
            Col("vocab", right=True),
            Col("licence", limit=32, squeeze=10),
            Col("source", stack=2),
            Col("path", stack=3),
        ),
        (
            (
                r.sha256[:12],
                r.name or "-",
                r.architecture or "-",
                quant_text(r.file_type_name) or r.file_type_name or "-",
                str(r.n_tokens) if r.n_tokens is not None else "-",
                lic(r),
                source(r),
                where(r),
            )
            for r in recs
        ),
    )
