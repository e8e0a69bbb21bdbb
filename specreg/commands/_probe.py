"""`check pair --probe`: the runtime probe run between the static checks and the recorded verdict."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from specreg.commands.output import say

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
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
) -> list[CheckResult]:
    """Probe the pair (its log under the specreg home) and turn the outcome into checks."""
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
    return probe_checks(result, static, rule_set)
