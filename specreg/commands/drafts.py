"""`specreg drafts TARGET`: which draft (or n-gram method, or head) for this target?

Thin: parse options, call `audit.drafts.find_drafts` (and `audit.draft_bench` for --bench),
render through `views.drafts`. Heavy modules are imported inside the command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands.options import JsonOpt, TimeoutOpt, db_path


def drafts_cmd(
    target: Annotated[
        str,
        typer.Argument(
            metavar="TARGET",
            help="Target GGUF path, pair id, SHA-256 prefix, URL or ORG/REPO[:FILE] on the hub.",
            show_default=False,
        ),
    ],
    dirs: Annotated[
        list[Path] | None,
        typer.Option("--dir", metavar="FOLDER", help="Also look for GGUF files in this folder (repeatable)."),
    ] = None,
    hub: Annotated[
        bool, typer.Option("--hub", help="Also search the hub (headers read by range requests, nothing downloaded).")
    ] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, help="--hub: at most this many repos.")] = 20,
    show_all: Annotated[bool, typer.Option("--all", help="Also list every rejected candidate and why.")] = False,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Rule set (llama.cpp build), e.g. llama.cpp-b11434.")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option("--server", metavar="PATH", help="Judge (and --bench) for this llama-server binary."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Policy TOML whose licence rules are shown (and audited).")
    ] = None,
    bench: Annotated[
        int,
        typer.Option("--bench", metavar="N", min=0, help="Measure the top N head to head (successive halving)."),
    ] = 0,
    budget: Annotated[
        str | None, typer.Option("--budget", metavar="D", help="--bench: the time all rounds may take, e.g. 20m.")
    ] = None,
    tune: Annotated[bool, typer.Option("--tune", help="--bench: tune the draft length of the last survivors.")] = False,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe/--no-probe",
            help="Price the predictions on this machine: start the target and the best local drafts once "
            "each, then run those drafts with the target on three short prompts (all kept in the registry). "
            "--no-probe: hardware-blind ranges.",
        ),
    ] = True,
    workload: Annotated[
        str, typer.Option("--workload", metavar="NAME|FILE", help="--bench: the workload (see `specreg workloads`).")
    ] = "default",
    timeout: TimeoutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rank every draft that may serve TARGET by predicted speed-up; --bench measures the best.

    Candidates: the registry, the local Hugging Face cache, --dir folders and, with --hub, GGUF
    repos of the target's family on the hub (its general.basename and base model). Each is
    judged with the checks of `check pair` under the rules of the server that will run it;
    the n-gram methods (and MTP, for a target with next-n heads) are candidates too. The
    prediction's acceptance comes from runs of the same pair, else of the same families,
    else a prior fitted on every measured pair; its step prices from machine probes of the
    target and the best local drafts (one short server start each, kept in the registry by
    SHA-256, hardware class and build); its range carries acceptance, the probe's spread and
    the step model's error (hardware-blind with --no-probe: any machine).

    --bench N --budget D measures the top N candidates on this machine by successive halving
    (each round halves the field; every run is stored as `bench admitted` stores it), then
    audits the winner and prints its deploy command, or says why none qualifies.
    """
    from specreg.allowance import allowing
    from specreg.audit.drafts import Search, check_limits, find_drafts
    from specreg.audit.policy import load_policy
    from specreg.commands.output import emit_json, warn
    from specreg.commands.views.drafts import Progress, show_report
    from specreg.errors import UsageError
    from specreg.registry.store import Registry
    from specreg.servers.identity import choose_rules

    check_limits(limit)
    if (budget is not None or tune) and not bench:
        raise UsageError("--budget and --tune belong to --bench N", hint="e.g. --bench 4 --budget 20m")
    judged = choose_rules(runtime, server)
    if judged.warning:
        warn([judged.warning])
    pol, source = load_policy(policy)
    search = Search(judged.rules, judged.why, pol, source, tuple(dirs or ()), hub, limit, probe=probe, server=server)
    progress = Progress(enabled=not json_out)
    with Registry(db_path(), show_progress=False) as reg:
        with allowing(timeout):
            report = find_drafts(reg, target, search, progress)
        progress.done()
        if bench:
            from specreg.audit.draft_bench import BenchPlan, bench_drafts
            from specreg.commands.bench import _duration
            from specreg.commands.views.progress import ProgressView

            plan = BenchPlan(bench, _duration(budget), tune, workload, Path(server) if server else None, pol, source)
            with ProgressView() as view:  # each run's progress, and a line every half minute in a log
                report.bench = bench_drafts(reg, report, plan, say=progress.note, observer=view)
    if json_out:
        emit_json(report)
    else:
        show_report(report, show_all=show_all)
    if bench and report.bench is not None and report.bench.deploy_command is None:
        raise typer.Exit(1)
