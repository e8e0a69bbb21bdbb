"""`specreg runs`, `specreg runs show`: read stored benchmark runs (`bench admitted` writes them).

Thin: load from the run store and render through `views.run_list` (the list, `--by-hardware`)
and `views.run_detail` (one run). A command that only reads never creates a registry file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, ReportOpt, db_path
from specreg.commands.output import emit_json, emit_result

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.audit import ModelName
    from specreg.schemas.bench import BenchRun
    from specreg.schemas.machine_probe import MachineProbe

runs_app = typer.Typer(
    help="List benchmark runs, or show one (`runs show RUN_ID`).",
    invoke_without_command=True,
)


def _registry() -> Registry:
    from specreg.registry.store import Registry

    return Registry(db_path(), create=False)


def _load_named(run_id: str) -> tuple[BenchRun, dict[str, str | None], dict[str, MachineProbe]]:
    """A stored run, the registry's general.name of its target and draft (shown beside their
    SHA-256), and their machine probes on the machine, build and flags the run was measured on."""
    from specreg.benchmark.store.runstore import RunStore
    from specreg.servers.machine_key import key_of_run

    with _registry() as reg:
        run = RunStore(reg).load(run_id)
        shas = [s for s in (run.info.target_sha256, run.info.draft_sha256) if s]
        names = {sha: rec.name for sha, rec in reg.get_artifacts(shas).items()}
        if run.manifest is None:
            return run, names, {}
        key = key_of_run(run.manifest)
        return run, names, reg.machine_probes(shas, key.hardware, key.runtime, key.flags)


@runs_app.callback()
def runs(
    ctx: typer.Context,
    by_hardware: Annotated[
        bool, typer.Option("--by-hardware", help="Pairs down, hardware classes across: newest speed-up on each.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """List benchmark runs (oldest first) with their status, hardware class and origin host."""
    if ctx.invoked_subcommand is not None:
        return
    if by_hardware:
        _runs_by_hardware(json_out)
        return
    from specreg.benchmark.store.run_index import run_results
    from specreg.benchmark.store.runstore import RunStore
    from specreg.commands.views.run_list import runs_table

    with _registry() as reg:
        store = RunStore(reg)
        store.reap_orphans()
        items = store.runs()
        results = None if json_out else run_results(reg)
        shas = {s for r in items for s in (r.target_sha256, r.draft_sha256) if s} if not json_out else set()
        names = {sha: rec.name for sha, rec in reg.get_artifacts(shas).items()}
    if json_out:
        emit_json([r.model_dump(mode="json") for r in items])
    else:
        runs_table(items, results, names)


def _runs_by_hardware(json_out: bool) -> None:
    from dataclasses import asdict

    from specreg.commands.views.run_list import hardware_table
    from specreg.servers.hardware import by_hardware

    with _registry() as reg:
        classes, rows = by_hardware(reg)
    if json_out:
        emit_json({"hardware": classes, "pairs": [asdict(r) for r in rows]})
    else:
        hardware_table(classes, rows)


@runs_app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(help="Run id or a unique prefix (see `specreg runs`).")],
    json_out: JsonOpt = False,
    report: ReportOpt = None,
) -> None:
    """Show one run: condition x stratum table (acceptance, speed-up, p50/p95, TTFT, memory, equivalence, errors)."""
    from specreg.commands.views.run_detail import show_run

    run, names, probes = _load_named(run_id)
    written: list[Path] = []
    if report is not None:  # the report module (audit area) draws the plots and writes atomically
        from specreg.report.write import write_run_report_for

        written = write_run_report_for(report, run, _model_names(run))

    def human() -> None:
        show_run(run, names, probes)
        _production(run)

    emit_result(run, json_out, human, written)


def _production(run: BenchRun) -> None:
    """What `specreg watch` kept of the pairs this run was the audited evidence for."""
    from specreg.commands.views.audit import production
    from specreg.watch.windows import production_of_run

    with _registry() as reg:
        production(production_of_run(reg, run.info.run_id))


def _model_names(run: BenchRun) -> dict[str, ModelName]:
    """Name, file and quant of the run's models, for the report to print beside each SHA-256."""
    from specreg.schemas.audit import ModelName

    shas = {run.info.target_sha256, run.info.draft_sha256, *(c.spec.draft_sha256 for c in run.conditions)}
    with _registry() as reg:
        found = reg.get_artifacts(s for s in shas if s)
    return {sha: ModelName.of(rec) for sha, rec in found.items()}
