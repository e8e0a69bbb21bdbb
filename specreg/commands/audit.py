"""`specreg audit`: the pre-deployment gates per pair, per-stratum decisions, optional report."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from specreg.commands._common import JsonOpt, console, db_path, emit_json, safe
from specreg.errors import EXIT_REJECTED, UsageError
from specreg.schemas.audit import GATES, AuditReport


def print_audit(report: AuditReport) -> None:
    """The verdict table, each failure's reason, the decisions and the rollback commands."""
    table = Table(title=f"audit: {'PASS' if report.passed else 'FAIL'}  (policy: {safe(report.policy_source)})")
    for col in ("pair", "method", "target", "draft", *GATES, "result"):
        table.add_column(col, no_wrap=col in ("pair", "result"))
    for p in report.pairs:
        cells = []
        for name in GATES:
            g = p.gate(name)
            cells.append("–" if g is None else ("[green]pass[/]" if g.passed else "[red]FAIL[/]"))
        draft = safe(p.draft_name or (p.draft_sha256 or "")[:12]) if p.draft_sha256 else "(self)"
        table.add_row(str(p.pair_id), p.method, safe(p.target_name or p.target_sha256[:12]), draft,
                      *cells, "[green]PASS[/]" if p.passed else "[red]FAIL[/]")
    console.print(table)
    for note in report.notes:
        console.print(f"[dim]note:[/] {safe(note)}", soft_wrap=True)
    for p in report.pairs:
        for g in p.gates:
            if not g.passed:
                console.print(f"pair {p.pair_id} [red]{g.gate}[/]: {safe(g.message)}", soft_wrap=True)
    if report.decisions:
        dec = Table(title="deploy per stratum (best passing condition, else none)")
        for col in ("target", "stratum", "deploy", "speed-up"):
            dec.add_column(col)
        for d in report.decisions:
            sp = "–" if d.speedup is None else f"{d.speedup:.2f}"
            dec.add_row(safe(d.target_name or d.target_sha256[:12]), safe(d.stratum), safe(d.choice), sp)
        console.print(dec)
    shown: set[str] = set()
    for p in report.pairs:
        if p.rollback_command and p.target_sha256 not in shown:
            shown.add(p.target_sha256)
            console.print(f"rollback ({safe(p.target_name or p.target_sha256[:12])}): "
                          f"{safe(shlex.join(p.rollback_command))}", soft_wrap=True)


def audit_cmd(
    pair: Annotated[Optional[list[int]], typer.Option("--pair", help="Pair id to audit (repeatable).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Audit every admitted pair (the default).")] = False,
    policy: Annotated[Optional[Path], typer.Option("--policy", help="Policy TOML file (default: safe built-ins).")] = None,
    rehash: Annotated[bool, typer.Option("--rehash", help="Re-hash every file instead of trusting the stat cache.")] = False,
    report: Annotated[Optional[Path], typer.Option("--report", help="Write a report: PATH.md or PATH.html.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Check every deployment gate for pairs; exit 0 all pass, 1 any fails, 2 undecided.

    Gates: integrity, verdict, evidence, equivalence, speed, memory, licence, rollback.

    Example: specreg audit --all --policy examples/policy.toml --report audit.html
    """
    from specreg.registry.audit import run_audit
    from specreg.registry.policy import load_policy
    from specreg.registry.store import Registry

    if pair and all_:
        raise UsageError("give --pair ID or --all, not both")
    pol, source = load_policy(policy)
    if report is not None:
        from specreg.report import check_report_path

        check_report_path(report)  # a bad report path fails before any work
    with Registry(db_path()) as reg:
        result = run_audit(reg, pol, source, pair_ids=list(pair) if pair else None, rehash=rehash,
                           spread=report is not None)
    written: list[Path] = []
    if report is not None:
        from specreg.report import write_audit_report

        written = write_audit_report(report, result)
    if json_out:
        emit_json(result)
    else:
        print_audit(result)
        for f in written[:1]:
            console.print(f"report: {safe(f)}", soft_wrap=True)
    raise typer.Exit(0 if result.passed else EXIT_REJECTED)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit_cmd)
