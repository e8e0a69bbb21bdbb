"""`specreg audit`: the pre-deployment gates per pair, per-stratum decisions, optional report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, PairOpt, ReportOpt, db_path
from specreg.commands.output import emit_result
from specreg.errors import EXIT_REJECTED, UsageError

if TYPE_CHECKING:
    from securesystemslib.signer import Signer


def audit_cmd(
    pair: PairOpt = None,
    all_: Annotated[bool, typer.Option("--all", help="Audit every admitted pair (the default).")] = False,
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy TOML file (default: safe built-ins).")] = None,
    rehash: Annotated[
        bool, typer.Option("--rehash", help="Hash every file again (the default; kept for scripts).")
    ] = False,
    trust_stat_cache: Annotated[
        bool,
        typer.Option(
            "--trust-stat-cache",
            help="Skip re-hashing files whose stat (size, mtime, ctime, inode) is unchanged; faster, "
            "and reported as such.",
        ),
    ] = False,
    report: ReportOpt = None,
    json_out: JsonOpt = False,
    fmt: Annotated[
        str, typer.Option("--format", help="text, json, or sarif (SARIF 2.1.0: one result per failed gate).")
    ] = "text",
    sign: Annotated[
        Path | None,
        typer.Option(
            "--sign",
            metavar="KEY",
            help="Sign the audit result with this PEM private key into --attestation FILE (extra: specreg[signing]).",
        ),
    ] = None,
    attestation: Annotated[
        Path | None,
        typer.Option("--attestation", metavar="FILE", help="Where --sign writes the signed result (DSSE, JSON)."),
    ] = None,
) -> None:
    """Check every deployment gate for pairs; exit 0 all pass, 1 any fails, 2 undecided.

    Gates: integrity, verdict, template, evidence, equivalence, speed, memory, licence, rollback.
    """
    if pair and all_:
        raise UsageError("give --pair ID or --all, not both")
    if rehash and trust_stat_cache:
        raise UsageError("give --rehash or --trust-stat-cache, not both")
    if fmt not in ("text", "json", "sarif"):
        raise UsageError(f"--format {fmt!r}: choose text, json or sarif")
    if (sign is None) != (attestation is None):
        raise UsageError("--sign KEY and --attestation FILE go together (the key, and where the signed result goes)")
    if attestation is not None and not attestation.parent.is_dir():
        raise UsageError(f"--attestation {attestation}: folder {attestation.parent} does not exist")
    signer = None
    if sign is not None:  # a bad key fails before the audit runs
        from specreg.signing.dsse import load_signer

        signer = load_signer(sign)
    # the integrity gate re-hashes by default: a stat can be made to look unchanged, bytes cannot
    code = _audit(pair, policy, not trust_stat_cache, report, "json" if json_out else fmt, signer, attestation)
    raise typer.Exit(code)


def _audit(
    pair: list[int] | None,
    policy: Path | None,
    rehash: bool,
    report: Path | None,
    fmt: str,
    signer: Signer | None = None,
    attestation: Path | None = None,
) -> int:
    """Run, write and print the audit; returns the exit code (the result dies with this frame)."""
    from specreg.audit.policy import load_policy

    pol, source = load_policy(policy)
    if report is not None:
        from specreg.report.write import check_report_path

        check_report_path(report)  # a bad report path fails before any work
    paths: dict[str, str] = {}
    from specreg.audit.fleet import audit_by_hardware
    from specreg.registry.store import Registry

    with Registry(db_path(), create=False) as reg:
        result = audit_by_hardware(
            reg, pol, source, pair_ids=list(pair) if pair else None, rehash=rehash, spread=report is not None
        )
        from specreg.watch.windows import production

        result.production = production(reg, [p.pair_id for p in result.pairs])  # what `watch` kept of them
        if fmt == "sarif":
            shas = {p.target_sha256 for p in result.pairs} | {p.draft_sha256 for p in result.pairs if p.draft_sha256}
            paths = {sha: rec.paths[0] for sha, rec in reg.get_artifacts(shas).items() if rec.paths}
    written: list[Path] = []
    if signer is not None and attestation is not None:
        from specreg.atomic import write_atomic
        from specreg.audit.attest import sign_audit

        write_atomic(attestation, sign_audit(result, signer))
        written.append(attestation)
    if report is not None:
        from specreg.report.write import write_audit_report

        written = write_audit_report(report, result)
    if fmt == "sarif":
        from specreg.commands.output import console
        from specreg.report.sarif import audit_sarif, dumps

        out = console()
        out.file.write(dumps(audit_sarif(result, paths)) + "\n")
        out.file.flush()
        return 0 if result.passed else EXIT_REJECTED
    from specreg.commands.views.audit import print_audit

    emit_result(result, fmt == "json", lambda: print_audit(result), written)
    return 0 if result.passed else EXIT_REJECTED
