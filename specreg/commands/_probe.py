"""`check pair --probe`: the runtime probe run between the static checks and the recorded verdict.

Beside "did it draft" it reports what the pair costs on this machine (`probe.cost`): the
target's and the draft's machine probes (benchmark/run/machine_probe.py, kept in the registry),
and what that request's acceptance, priced by them, predicts for the best draft length here.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from specreg.commands.output import say

if TYPE_CHECKING:
    from pathlib import Path

    from specreg.benchmark.run.probe import ProbeResult
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.checks import CheckResult

# A template these codes flag is never handed to a server, even one that does not render it in Python.
_UNSAFE_TEMPLATE = ("template.dunder", "template.gadget")


def run_probe(
    target: GGUFFile,
    draft: GGUFFile | None,
    method: str,
    static: list[CheckResult],
    rule_set: str,
    server: str | None,
    *,
    show: bool,
    reg: Registry | None = None,
) -> list[CheckResult]:
    """Probe the pair (its log under the specreg home) and turn the outcome into checks; with
    `reg`, the machine probes of both files too (`probe.cost`)."""
    from pathlib import Path

    from specreg.benchmark.run.probe import probe, probe_checks
    from specreg.paths import data_dir
    from specreg.schemas.checks import CheckResult

    if not all(isinstance(f.path, Path) for f in (target, draft) if f is not None):
        msg = "not probed: a remote file is metadata only (fetch it to probe: specreg fetch)"
        return [CheckResult(code="probe.runtime", severity="info", message=msg)]
    unsafe = [c.code for c in static if c.code in _UNSAFE_TEMPLATE and c.severity == "error"]
    if unsafe:
        msg = f"not probed: the target's chat template is unsafe ({', '.join(unsafe)})"
        return [CheckResult(code="probe.runtime", severity="info", message=msg)]
    folder = data_dir() / "probes"
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{method}.log"
    if show:
        say(f"probing {method} on the server (log: {log}) ...", stderr=True)
    result = probe(target.path, draft.path if draft is not None else None, method, log, server=server)
    out = probe_checks(result, static, rule_set)
    if reg is not None and result.status == "drafted":  # what drafting costs here, once it is known to draft
        if show:
            say("probing what each model costs on this machine ...", stderr=True)
        out.append(cost_check(reg, target, draft, method, result, server, folder))
    return out


def _sha(reg: Registry, f: GGUFFile) -> str:
    from pathlib import Path

    from specreg.registry.hashing import sha256_file

    assert isinstance(f.path, Path)
    return f.sha256 or reg.known_sha256(f.path) or sha256_file(f.path)


def cost_check(
    reg: Registry,
    target: GGUFFile,
    draft: GGUFFile | None,
    method: str,
    result: ProbeResult,
    server: str | None,
    log_dir: Path,
) -> CheckResult:
    """`probe.cost` (info): each model's machine probe (kept ones read back), and the speed-up
    this request's acceptance predicts here at the best draft length."""
    from specreg.audit.draft_prediction import curve_best, verdict
    from specreg.benchmark.run import machine_probe as mp
    from specreg.benchmark.store.statistics import alpha_from_rate
    from specreg.benchmark.store.stepcost import probe_prices
    from specreg.schemas.checks import CheckResult
    from specreg.schemas.methods import MODEL_DRAFTED
    from specreg.servers.launcher import bundled_command, external_command
    from specreg.servers.machine_key import machine_key
    from specreg.servers.pinning import server_pinning

    cmd = external_command(server) if server else bundled_command()
    pinning = server_pinning(None, True)
    key = machine_key(cmd, pinning)
    files = [(_sha(reg, target), target.path)]
    if draft is not None and method in MODEL_DRAFTED:
        files.append((_sha(reg, draft), draft.path))
    got = mp.ensure(reg, files, key, cmd, pinning, log_dir=log_dir)  # type: ignore[arg-type]
    t = got.probes.get(files[0][0])
    if t is None:
        msg = "not priced: " + ("; ".join(got.failures) or "the target could not be probed")
        return CheckResult(code="probe.cost", severity="info", message=msg)
    d = got.probes.get(files[1][0]) if len(files) > 1 else None
    prices = probe_prices(t, d, 32)
    t_d = sorted(t.decode_ms())[len(t.rounds) // 2]
    parts = [f"target {t_d:.1f} ms/token"]
    if prices is not None:
        parts.append(f"a verify step of 6 tokens {prices.verify[4]:.1f} decodes")
    if prices is not None and prices.draft is not None:
        parts.append(f"a draft decode {prices.draft:.2f} of a target decode")
    msg = "on this machine: " + ", ".join(parts)
    evidence: dict[str, object] = {
        "machine": key.text(),
        "probes": [p.model_dump(mode="json") for p in got.probes.values()],
    }
    if prices is not None and prices.draft is not None and result.drafted and result.accepted is not None:
        k_run = result.drafted / result.steps if result.steps else 1.0
        alpha = alpha_from_rate(result.accepted / result.drafted, k_run)
        k, x = curve_best(alpha, prices.draft, prices.verify)
        word = verdict("machine probe", x, x) or ""
        msg += f"; at this request's acceptance (a {alpha:.2f}) the best k {k} predicts {x:.2f}x: {word}"
        evidence |= {"alpha": round(alpha, 4), "draft_length": k, "predicted_speedup": round(x, 4)}
    if got.measured:
        msg += f" ({len(got.measured)} probe(s), {got.seconds():.1f} s)"
    return CheckResult(code="probe.cost", severity="info", message=msg, evidence=evidence)
