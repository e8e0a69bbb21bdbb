"""`specreg deploy PAIR_ID`: the exact llama-server command the audit vouches for, or why there is none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specreg.commands.options import JsonOpt, db_path
from specreg.commands.output import emit_json, safe_plain, width
from specreg.errors import EXIT_REJECTED, UsageError

if TYPE_CHECKING:
    from specreg.schemas.audit import DeployCommand


def deploy_cmd(
    pair_id: Annotated[int, typer.Argument(metavar="PAIR_ID", help="The pair to deploy (see `specreg pairs`).")],
    stratum: Annotated[
        str | None, typer.Option("--stratum", metavar="NAME", help="Deploy for one workload stratum (e.g. chat).")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", metavar="N", help="Requests in flight (default: the audited one).")
    ] = None,
    server: Annotated[
        str | None, typer.Option("--server", metavar="PATH", help="llama-server binary (default: llama-server).")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", metavar="N", help="Add --port N to the command.")] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", metavar="FILE", help="Policy TOML file (default: safe built-ins).")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Print the pinned llama-server command for a pair that passes the audit.

    The command is the measured condition, the models' SHA-256 digests with a verify line, and the
    rollback command without speculation. Exit 0 with the command, 1 when the audit fails
    (the failing gates are listed), 2 when it cannot decide.
    """
    if port is not None and not 1 <= port <= 65535:
        raise UsageError("--port must be between 1 and 65535")
    if concurrency is not None and concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    from specreg.audit.policy import load_policy
    from specreg.audit.run import audit_for_deploy, pinned_plan
    from specreg.registry.store import Registry

    pol, source = load_policy(policy)
    with Registry(db_path(), create=False) as reg:
        report, request = audit_for_deploy(reg, pair_id, pol, source)
        plan = pinned_plan(
            reg, report, pair_id, request, stratum=stratum, concurrency=concurrency, program=server, port=port
        )
    if json_out:
        emit_json(plan)
    else:
        _show(plan, source)
    raise typer.Exit(0 if plan.deployable else EXIT_REJECTED)


def _speedup(plan: DeployCommand) -> str:
    if plan.speedup is None:
        return "speed-up not measured"
    text = f"speed-up {plan.speedup:.2f}x"
    ci = plan.speedup_ci95
    if ci:
        text += f" (95% CI {ci[0]:.2f}-{ci[1]:.2f})"
        if ci[0] <= 1.0 <= ci[1]:
            text = f"no measurable difference ({text})"
    where = f"stratum {plan.stratum}" if plan.stratum else "whole workload"
    conc = f", concurrency {plan.concurrency}" if plan.concurrency is not None else ""
    return f"{text}, {where}{conc}"


def _show(plan: DeployCommand, policy_source: str) -> None:
    from specreg.audit.deploy import verify_lines, wrap_command
    from specreg.commands.output import say, show_lines

    cols = max(40, min(width(), 120))

    def block(title: str, lines: list[str]) -> None:
        show_lines(["", title, *(safe_plain(line) for line in lines)])  # shell lines as they are

    head = f"pair {plan.pair_id} {plan.method}: "
    evidence = [f"measured: {f'run {plan.run_id}' if plan.run_id else 'no run'}", f"policy: {policy_source}"]
    if plan.rule_set:
        evidence.insert(1, f"rules: {plan.rule_set} (the verdict's)")
    if not plan.deployable:
        say("the audit fails", prefix=head + "not deployable, ", marks=[("not deployable", "red")])
        show_lines([safe_plain(line) for line in evidence])
        for g in plan.failed_gates:
            say(g.message, prefix=f"  {g.gate}: ", indent=4)
        for note in plan.notes:
            say(note, prefix="  note: ", indent=4)
        if plan.rollback_argv:
            block("keep serving without speculation (the measured baseline):", wrap_command(plan.rollback_argv, cols))
        return
    say("deployable", prefix=head, style="green")
    if plan.sampler:
        mode = f", draft sampling {plan.draft_sampling}" if plan.draft_sampling else ""
        evidence.append(f"sampler: {plan.sampler}{mode} (measured there, pinned below)")
    show_lines([safe_plain(line) for line in evidence])
    say(_speedup(plan))
    for note in plan.notes:
        say(note, prefix="note: ", indent=2)
    block("1. check the model files (SHA-256 pinned by the registry):", verify_lines(plan.sha256))
    block("2. start the server:", wrap_command(plan.argv or [], cols))
    if plan.rollback_argv:
        block("rollback (no speculation, the measured baseline):", wrap_command(plan.rollback_argv, cols))
