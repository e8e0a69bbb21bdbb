"""Terminal output of `specreg audit`: full tables for a few pairs, counts for thousands.

A table of 5,000 pairs helps nobody and costs seconds to lay out; above `DETAIL_LIMIT` pairs
the terminal gets counts per gate and the failing pairs, and `--json` / `--report` hold the rest.
"""

from __future__ import annotations

import shlex
from collections import Counter

from rich.table import Table

from specreg.commands._common import console, print_listing, safe
from specreg.report.common import hardware_labels, hardware_matrix
from specreg.schemas.audit import GATES, AuditReport, PairAudit

DETAIL_LIMIT = 50
FAILURES_SHOWN = 20


def _verdict_table(report: AuditReport, hw: dict[str, str]) -> None:
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
            f"{p.pair_id} {hw[p.hardware]}" if p.hardware in hw else str(p.pair_id),
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


def _failures(pairs: list[PairAudit], limit: int | None, hw: dict[str, str]) -> None:
    bad = [p for p in pairs if not p.passed]
    for p in bad[:limit]:
        where = f" on {hw[p.hardware]}" if p.hardware in hw else ""
        for g in p.gates:
            if not g.passed:
                console.print(f"pair {p.pair_id}{where} [red]{g.gate}[/]: {safe(g.message)}", soft_wrap=True)
    if limit is not None and len(bad) > limit:
        console.print(f"... and {len(bad) - limit} more failing pairs: see --json or --report")


def _hardware(report: AuditReport, detail: bool) -> dict[str, str]:
    """With several hardware classes: the legend, then pairs x classes (few pairs) or counts per class."""
    if len(report.hardware_classes) < 2:
        return {}
    labels = hardware_labels(report)
    for cls in sorted(labels):
        console.print(f"[dim]{labels[cls]}[/] {safe(cls)}")
    if detail:
        headers, rows = hardware_matrix(report)
        print_listing(headers, rows, limits=(None, None, 24, 24, *([None] * len(labels))), right={0})
        return labels
    table = Table(title="pairs per hardware class")
    for col in ("hw", "pairs", "pass", "fail"):
        table.add_column(col, justify="left" if col == "hw" else "right")
    for cls in sorted(labels):
        mine = [p for p in report.pairs if p.hardware == cls]
        n_pass = sum(p.passed for p in mine)
        table.add_row(labels[cls], str(len(mine)), str(n_pass), str(len(mine) - n_pass))
    console.print(table)
    return labels


def _decisions(report: AuditReport, detail: bool, hw: dict[str, str]) -> None:
    if not report.decisions:
        return
    if detail:
        dec = Table(title="deploy per stratum (best passing condition, else none)")
        for col in ("target", *(["hw"] if hw else []), "stratum", "deploy", "speed-up"):
            dec.add_column(col)
        for d in report.decisions:
            sp = "–" if d.speedup is None else f"{d.speedup:.2f}"
            where = [hw.get(d.hardware or "", "–")] if hw else []
            dec.add_row(safe(d.target_name or d.target_sha256[:12]), *where, safe(d.stratum), safe(d.choice), sp)
        console.print(dec)
        return
    per: Counter[tuple[str, str, str]] = Counter(
        (hw.get(d.hardware or "", "–"), d.stratum, d.choice.split(" (pair")[0]) for d in report.decisions
    )
    console.print("deploy per stratum: number of targets per choice")
    print_listing(  # one line per row: with 20 hardware classes a rich Table of 200 rows costs 0.1 s
        (*(["hw"] if hw else []), "stratum", "deploy", "targets"),
        ((*([label] if hw else []), stratum, choice, str(n)) for (label, stratum, choice), n in sorted(per.items())),
        right={3 if hw else 2},
    )


def print_audit(report: AuditReport) -> None:
    """The verdict (table or counts), each failure's reason, the decisions, the rollback commands."""
    detail = len(report.pairs) <= DETAIL_LIMIT
    hw = hardware_labels(report) if len(report.hardware_classes) > 1 else {}
    if detail:
        _verdict_table(report, hw)
    else:
        _counts(report)
    for note in report.notes[:FAILURES_SHOWN]:
        console.print(f"[dim]note:[/] {safe(note)}", soft_wrap=True)
    _failures(report.pairs, None if detail else FAILURES_SHOWN, hw)
    _hardware(report, detail)
    _decisions(report, detail, hw)
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
