"""`specreg audit`: the pre-deployment gates per pair, per-stratum decisions, optional report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands._common import JsonOpt, db_path, emit_result
from specreg.errors import EXIT_REJECTED, UsageError


def audit_cmd(
    pair: Annotated[
        list[int] | None, typer.Option("--pair", metavar="ID", help="Pair id to audit (repeatable).")
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Audit every admitted pair (the default).")] = False,
    policy: Annotated[Path | None, typer.Option("--policy", help="Policy TOML file (default: safe built-ins).")] = None,
    rehash: Annotated[
        bool, typer.Option("--rehash", help="Re-hash every file instead of trusting the stat cache.")
    ] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write a report: PATH.md or PATH.html.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check every deployment gate for pairs; exit 0 all pass, 1 any fails, 2 undecided.

    Gates: integrity, verdict, evidence, equivalence, speed, memory, licence, rollback.

    Example: specreg audit --all --policy examples/policy.toml --report audit.html
    """
    if pair and all_:
        raise UsageError("give --pair ID or --all, not both")
    # The result of 5,000 pairs is ~10^5 small acyclic objects: with the cyclic GC running, each
    # collection walks them all again, and re-enabling it while they are alive costs one more
    # full walk. So the GC stays off until the result has been printed and freed.
    from specreg.registry.db import paused_gc

    with paused_gc():
        code = _audit(pair, policy, rehash, report, json_out)
    raise typer.Exit(code)


def _audit(pair: list[int] | None, policy: Path | None, rehash: bool, report: Path | None, json_out: bool) -> int:
    """Run, write and print the audit; returns the exit code (the result dies with this frame)."""
    from specreg.audit.policy import load_policy
    from specreg.audit.run import run_audit
    from specreg.registry.store import Registry

    pol, source = load_policy(policy)
    if report is not None:
        from specreg.report.write import check_report_path

        check_report_path(report)  # a bad report path fails before any work
    with Registry(db_path(), create=False) as reg:
        result = run_audit(
            reg, pol, source, pair_ids=list(pair) if pair else None, rehash=rehash, spread=report is not None
        )
    written: list[Path] = []
    if report is not None:
        from specreg.report.write import write_audit_report

        written = write_audit_report(report, result)
    from specreg.commands._audit_view import print_audit

    emit_result(result, json_out, lambda: print_audit(result), written)
    return 0 if result.passed else EXIT_REJECTED


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_cmd)
