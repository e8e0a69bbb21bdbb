"""`specreg fetch`: download a GGUF from the hub, verify it, register it with its provenance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, LicenseOpt, TimeoutOpt, db_path
from specreg.commands.output import emit_json, err_console, safe, say

if TYPE_CHECKING:
    from specreg.schemas.registry import ArtifactRecord


def show_provenance(rec: ArtifactRecord) -> None:
    """Print where an artifact came from and its licence record (conflicts on stderr)."""
    from specreg.sources.provenance import describe_licence

    p = rec.provenance
    if p.repo:
        say(f"{p.repo}@{p.revision or '?'} {p.filename or ''} (source: {p.source})", prefix="  repo      ", indent=12)
    say(describe_licence(rec.licence), prefix="  licence   ", indent=12)
    for s in rec.licence.sources:
        extra = "".join(f"  {k}: {v}" for k, v in (("name", s.name), ("link", s.link)) if v)
        say(f"{s.value or '-'}{extra}", prefix=f"    {s.source:<10} ", indent=15)
    if rec.licence.conflict:
        err_console().print(
            f"[yellow]warning:[/] licence sources disagree for {rec.sha256[:12]}; "
            f"effective: {safe(rec.licence.effective)} ({safe(rec.licence.effective_source)})"
        )


def fetch_cmd(
    repo: Annotated[str, typer.Argument(help="Hub repo, ORG/NAME.", show_default=False)],
    filename: Annotated[str, typer.Argument(help="File in the repo, e.g. model-Q4_K_M.gguf.", show_default=False)],
    revision: Annotated[
        str | None, typer.Option("--revision", help="Branch, tag or commit (default: main); pinned to its commit.")
    ] = None,
    license: LicenseOpt = None,
    timeout: TimeoutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Download REPO/FILENAME, check its SHA-256 against the hub's, register it with repo, commit and licence.

    The revision is resolved to a commit hash once; the file and the model card are fetched at
    that commit into the Hugging Face cache. The download stops at the size the hub declares for
    the file at that commit, and within --timeout; a SHA-256 mismatch, a deadline or a server
    that sends too much removes the download and registers nothing.
    """
    from specreg.allowance import allowing
    from specreg.registry.store import Registry
    from specreg.sources.provenance import fetch

    with Registry(db_path()) as reg, allowing(timeout):
        rec, path = fetch(reg, repo, filename, revision=revision, license=license)
    if json_out:
        emit_json(rec)
        return
    say(f"{path} (verified against the hub)", prefix=f"{rec.sha256[:12]}  ", indent=14)
    show_provenance(rec)
