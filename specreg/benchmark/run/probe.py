"""`check pair --probe`: load the pair on a real server, make one short request, see whether it drafted.

The static rules say what llama.cpp should do; the probe asks the runtime. It reuses the
benchmark's launcher, condition flags, client, `/metrics` counters and log reading, so a probe
is one benchmark condition cut down to one request. The outcome is runtime evidence recorded
with the verdict (`probe.runtime`); a static verdict the runtime contradicts gets
`probe.agreement`: the rule set is out of date for this runtime.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from specreg.benchmark.plan.conditions import ServerOptions, server_args
from specreg.benchmark.run.client import LlamaClient
from specreg.errors import ServerError, ServerStartError
from specreg.schemas.bench import ConditionSpec, WorkloadItem
from specreg.schemas.checks import CheckResult
from specreg.schemas.methods import MODEL_DRAFTED
from specreg.servers.launcher import ServerCommand, ServerProcess, bundled_command, external_command, launch
from specreg.servers.metrics import parse_metrics, spec_counters
from specreg.servers.serverlog import abort_lines, head_text, last_lines, refusal_lines, tail_text
from specreg.text import log_message

ProbeStatus = Literal["drafted", "not_drafted", "inconclusive", "refused", "load_failed", "crashed", "failed"]
FAILED: frozenset[str] = frozenset({"not_drafted", "refused", "load_failed", "crashed", "failed"})
# Repetitive text, so that n-gram methods find something to draft from within a few tokens.
PROMPT = WorkloadItem(
    id="probe",
    stratum="probe",
    max_tokens=48,
    prompt="key: value\nname: model\nkey: value\nname: draft\nkey: value\nname: target\nkey: value\nname:",
)
# Error checks that do not claim llama.cpp refuses the pair: a runtime that drafts anyway agrees.
_NOT_RUNTIME = ("template.", "memory.budget")


class ProbeResult(BaseModel):
    """What the runtime did with the pair: loaded it? drafted? and the lines that say so."""

    status: ProbeStatus
    method: str
    drafted: int | None = None
    accepted: int | None = None
    steps: int | None = None  # target steps that carried a draft (/metrics), so drafted / steps = mean k
    runtime: str
    argv: list[str] = Field(default_factory=list)
    log_path: str | None = None
    lines: list[str] = Field(default_factory=list)
    message: str
    seconds: float = 0.0


def _runtime(cmd: ServerCommand) -> str:
    if cmd.kind == "bundled":
        import xllamacpp

        return f"bundled xllamacpp {xllamacpp.__version__}"
    return f"external {cmd.path}"


def _ask(server: ServerProcess, method: str) -> tuple[ProbeStatus, int | None, int | None, int | None, str]:
    """One request; (status, drafted, accepted, steps, message) from /metrics (per-request timings
    as fallback, which count no steps)."""
    with LlamaClient(server.base_url, timeout_s=60.0, max_connections=2) as client:
        before = parse_metrics(client.metrics_text())
        done = client.complete(PROMPT, max_tokens=PROMPT.max_tokens, seed=42)
        if not server.alive():
            return "crashed", None, None, None, f"the server exited (code {server.proc.returncode}) during the request"
        if not done.ok:
            return "failed", None, None, None, f"the request failed: {done.error}"
        counters = spec_counters(before, parse_metrics(client.metrics_text()))
    timings = done.timings
    drafted = counters.drafted if counters else int(timings.get("draft_n") or 0)
    accepted = counters.accepted if counters else int(timings.get("draft_n_accepted") or 0)
    steps = counters.steps if counters and counters.steps else None
    if drafted:
        said = f"drafted {drafted} tokens, {accepted} accepted ({accepted / drafted:.0%}), in one request"
        return "drafted", drafted, accepted, steps, said
    if method in MODEL_DRAFTED:  # drafts on every step; n-gram methods only once text repeats
        return "not_drafted", 0, 0, None, f"drafted nothing in {done.output_tokens or 0} generated tokens"
    return "inconclusive", 0, 0, None, "drafted nothing in one short request (an n-gram method needs repetition)"


def probe(
    target: str | Path,
    draft: str | Path | None,
    method: str,
    log_path: Path,
    *,
    server: str | None = None,
    ctx_size: int = 1024,
    start_timeout_s: float = 120.0,
) -> ProbeResult:
    """Start the server for `method` on the pair, one request, stop it; never raises for what the server does."""
    cmd = external_command(server) if server else bundled_command()
    spec = ConditionSpec(name="probe", method=method, draft_path=str(draft) if draft else None)
    args = server_args(spec, str(target), ServerOptions(ctx_size=ctx_size, parallel=1, seed=42))
    common: dict[str, Any] = {
        "method": method,
        "runtime": _runtime(cmd),
        "argv": cmd.argv(args),
        "log_path": str(log_path),
    }
    t0 = time.monotonic()
    try:
        proc = launch(cmd, args, log_path, start_timeout_s=start_timeout_s)
    except ServerStartError as exc:
        text = head_text(log_path)
        lines = list(dict.fromkeys(refusal_lines(text) or abort_lines(text) or exc.lines))
        status: ProbeStatus = "crashed" if "exit code -" in exc.message else "load_failed"  # killed by a signal
        message = f"{exc.message}; {log_message(lines[0])}" if status == "crashed" and lines else exc.message
        seconds = round(time.monotonic() - t0, 2)
        return ProbeResult(status=status, lines=lines[-12:], message=message, seconds=seconds, **common)
    steps: int | None = None
    try:
        status, drafted, accepted, steps, message = _ask(proc, method)
    except ServerError as exc:
        status, drafted, accepted, message = "failed", None, None, exc.message
    finally:
        proc.stop()
    refused = refusal_lines(head_text(log_path))
    if refused and status != "drafted":
        status, message = "refused", "the server dropped speculation: " + log_message(refused[0])
    lines = refused
    if status in FAILED and not lines:  # quote why, else the last lines
        lines = list(dict.fromkeys(abort_lines(head_text(log_path)))) or last_lines(tail_text(log_path, 20), 8)
        if status == "crashed" and lines:
            message += f"; {log_message(lines[0])}"
    return ProbeResult(
        status=status,
        drafted=drafted,
        accepted=accepted,
        steps=steps,
        lines=lines[-12:],
        message=message,
        seconds=round(time.monotonic() - t0, 2),
        **common,
    )


def probe_checks(result: ProbeResult, static: list[CheckResult], rule_set: str) -> list[CheckResult]:
    """`probe.runtime` (what the runtime did) and, when it contradicts the static rules, `probe.agreement`."""
    ev = result.model_dump(exclude={"message"})
    if result.status == "drafted":
        runtime = CheckResult(code="probe.runtime", severity="pass", message=result.message, evidence=ev)
    elif result.status == "inconclusive":
        runtime = CheckResult(code="probe.runtime", severity="info", message=result.message, evidence=ev)
    else:
        runtime = CheckResult(code="probe.runtime", severity="error", message=result.message, evidence=ev)
    claims = [c for c in static if c.severity == "error" and not c.code.startswith(_NOT_RUNTIME)]
    admitted = not any(c.severity == "error" for c in static)
    out = [runtime]
    where = f"rule set {rule_set} is out of date for runtime {result.runtime}"
    if admitted and result.status in FAILED:
        msg = f"the static rules admit the pair, but the runtime says {result.status}: {where}"
        out.append(CheckResult(code="probe.agreement", severity="warn", message=msg, evidence={"static": "admitted"}))
    elif claims and result.status == "drafted":
        codes = sorted({c.code for c in claims})
        msg = f"the static rules reject the pair ({', '.join(codes)}), but the runtime drafted: {where}"
        out.append(CheckResult(code="probe.agreement", severity="warn", message=msg, evidence={"static": codes}))
    return out
