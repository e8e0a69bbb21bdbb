"""Terminal output of `specreg audit`: full tables for a few pairs, counts for thousands.

A table of 5,000 pairs helps nobody and costs seconds to lay out; above `DETAIL_LIMIT` pairs
the terminal gets counts per gate and the failing pairs, and `--json` / `--report` hold the rest.
"""

from __future__ import annotations

import shlex
from collections import Counter

from rich.table import Table

from specreg.commands._common import console, safe
from specreg.schemas.audit import GATES, AuditReport, PairAudit

DETAIL_LIMIT = 50
FAILURES_SHOWN = 20


def _verdict_table(report: AuditReport) -> None:
    table = Table(title=f"audit: {'PASS' if report.passed else 'FAIL'}  (policy: {safe(report.policy_source)})")
    for col in ("pair", "method", "target", "draft", *GATES, "result"):
        table.add_column(col, no_wrap=col in ("pair", "result"))
    for p in report.pairs:
        cells = []
        for name in GATES:
            g = p.gate(name)
            cells.append("–" if g is None else ("[green]pass[/]" if g.passed else "[red]FAIL[/]"))
        draft = safe(p.draft_name or (p.draft_sha256 or "")[:12]) if p.draft_sha256 else "(self)"
        table.add_row(
            str(p.pair_id),
            p.method,
            safe(p.target_name or p.target_sha256[:12]),
            draft,
            *cells,
            "[green]PASS[/]" if p.passed else "[red]FAIL[/]",
        )
    console.print(table)


def _counts(report: AuditReport) -> None:
    n_pass = sum(p.passed for p in report.pairs)
    console.print(
        f"audit: {'[green]PASS[/]' if report.passed else '[red]FAIL[/]'} - {len(report.pairs)} pairs, "
        f"{n_pass} pass, {len(report.pairs) - n_pass} fail (policy: {safe(report.policy_source)})"
    )
    failed = Counter(g for p in report.pairs for g in p.failed_gates)
    table = Table(title="pairs failing each gate")
    table.add_column("gate")
    table.add_column("failing pairs", justify="right")
    for name in GATES:
        table.add_row(name, str(failed.get(name, 0)))
    console.print(table)


def _failures(pairs: list[PairAudit], limit: int | None) -> None:
    bad = [p for p in pairs if not p.passed]
    for p in bad[:limit]:
        for g in p.gates:
            if not g.passed:
                console.print(f"pair {p.pair_id} [red]{g.gate}[/]: {safe(g.message)}", soft_wrap=True)
    if limit is not None and len(bad) > limit:
        console.print(f"... and {len(bad) - limit} more failing pairs: see --json or --report")


def _decisions(report: AuditReport, detail: bool) -> None:
    if not report.decisions:
        return
    if detail:
        from specreg.benchmark.statistics import interval_text

        dec = Table(title="deploy per stratum and concurrency: best passing condition, speed-up [95% CI]")
        for col in ("target", "stratum", "conc", "deploy", "draft", "speed-up"):
            dec.add_column(col, no_wrap=col in ("conc", "draft", "speed-up"))
        for d in report.decisions:
            dec.add_row(
                safe(d.target_name or d.target_sha256[:12]),
                safe(d.stratum),
                str(d.concurrency),
                safe(d.choice),
                "-" if d.draft_n_max is None else str(d.draft_n_max),
                safe(interval_text(d.speedup, d.speedup_ci95)),
            )
        console.print(dec)
        return
    per: Counter[tuple[str, int, str]] = Counter(
        (d.stratum, d.concurrency, d.choice.split(" (pair")[0]) for d in report.decisions
    )
    dec = Table(title="deploy per stratum and concurrency: number of targets per choice")
    for col in ("stratum", "conc.", "deploy", "targets"):
        dec.add_column(col)
    for (stratum, conc, choice), n in sorted(per.items()):
        dec.add_row(safe(stratum), str(conc), safe(choice), str(n))
    console.print(dec)


def print_audit(report: AuditReport) -> None:
    """The verdict (table or counts), each failure's reason, the decisions, the rollback commands."""
    detail = len(report.pairs) <= DETAIL_LIMIT
    if detail:
        _verdict_table(report)
    else:
        _counts(report)
    for note in report.notes[:FAILURES_SHOWN]:
        console.print(f"[dim]note:[/] {safe(note)}", soft_wrap=True)
    _failures(report.pairs, None if detail else FAILURES_SHOWN)
    _decisions(report, detail)
    if not detail:
        return
    shown: set[str] = set()
    for p in report.pairs:
        if p.rollback_command and p.target_sha256 not in shown:
            shown.add(p.target_sha256)
            console.print(
                f"rollback ({safe(p.target_name or p.target_sha256[:12])}): {safe(shlex.join(p.rollback_command))}",
                soft_wrap=True,
            )
