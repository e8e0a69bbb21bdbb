"""`specreg demo`: the README's first command - the whole pipeline on tiny generated models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands.output import console, safe


def demo_cmd(
    ctx: typer.Context,
    folder: Annotated[Path, typer.Option("--dir", help="Folder for models, registry and report.")] = Path(
        "specreg-demo"
    ),
    db: Annotated[Path | None, typer.Option("--db", help="Registry file (default: DIR/registry.db).")] = None,
) -> None:
    """Write tiny models, register, check, benchmark, audit and report (a few seconds).

    Exit 0 when the pipeline ran (the audit's own verdict is printed), 2 when something broke.

    Example: specreg demo --dir /tmp/specreg-demo
    """
    from specreg.demo import run_demo

    root_db = ctx.parent.params.get("db") if ctx.parent is not None else None  # as typed: a str
    if root_db is not None:
        root_db = Path(root_db)
    out = console()
    result = run_demo(folder, db or root_db, say=lambda line: out.print(safe(line), soft_wrap=True))
    audit = result.audit
    assert audit is not None
    out.print()
    for p in audit.pairs:
        failed = ", ".join(p.failed_gates)
        out.print(f"pair {p.pair_id} {p.method}: " + ("[green]PASS[/]" if p.passed else f"[red]FAIL[/] ({failed})"))
        for g in p.gates:
            if not g.passed:
                out.print(f"    {g.gate}: {safe(g.message)}", soft_wrap=True)
    from specreg.benchmark.statistics import interval_text

    for d in audit.decisions:
        sp = "" if d.speedup is None else f" (speed-up {interval_text(d.speedup, d.speedup_ci95)})"
        out.print(f"deploy for {safe(d.stratum)}: {safe(d.choice)}{safe(sp)}")
    verdict = "[green]PASS[/]" if audit.passed else "[red]FAIL[/]"
    out.print(
        f"\naudit verdict: {verdict} - decided by the measured numbers (tiny random models "
        "may well be slower with speculation)",
        soft_wrap=True,
    )
    out.print(f"report:   {safe(result.report)}", soft_wrap=True)
    out.print(f"registry: {safe(result.db)}", soft_wrap=True)
    out.print(f"models:   {safe(result.folder / 'models')}", soft_wrap=True)
    out.print(f"logs:     {safe(result.folder / 'runs')} (one llama.cpp server log per condition)", soft_wrap=True)
    out.print(
        f"done in {result.seconds:.1f} s; try: specreg --db {safe(result.db)} audit "
        f"--policy {safe(result.folder / 'policy.toml')}",
        soft_wrap=True,
    )
