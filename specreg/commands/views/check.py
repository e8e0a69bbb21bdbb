"""Terminal output of `specreg check pair`: the checks grouped by severity, then the verdict."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rich.table import Table

from specreg.commands.output import console, safe

if TYPE_CHECKING:
    from specreg.schemas.checks import CheckResult, PairVerdict
    from specreg.schemas.registry import ArtifactRecord

_STYLE = {"pass": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}
_GROUP = {"pass": "pass", "info": "info", "warn": "warn", "error": "fail"}


def _evidence(c: CheckResult) -> str:
    """Evidence as short text: token diffs one per line, otherwise key=value."""
    ev = c.evidence
    lines: list[str] = []
    for item in ev.get("first", []) if isinstance(ev.get("first"), list) else []:
        if isinstance(item, dict) and "id" in item and "target" in item:
            lines.append(f"id {item['id']}: target {item['target']!r} | draft {item['draft']!r}")
        elif isinstance(item, dict):
            lines.append(", ".join(f"{k} {v!r}" for k, v in item.items()))
    rest = {k: v for k, v in ev.items() if k != "first"}
    if rest:
        text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in rest.items())
        lines.insert(0, text if len(text) <= 400 else text[:400] + "...")
    return "\n".join(safe(line) for line in lines)  # escape each line, keep the line breaks


def show_verdict(v: PairVerdict, target: ArtifactRecord, draft: ArtifactRecord | None, pair_id: int) -> None:
    """Target, draft, method and rule set; one row per check (evidence for the non-passing); the verdict."""
    table = Table(show_lines=False, pad_edge=False, expand=False, box=None)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("result / evidence", overflow="fold")
    for sev in ("pass", "info", "warn", "error"):
        for c in (c for c in v.checks if c.severity == sev):
            text = safe(c.message)
            if sev != "pass" and c.evidence:
                text += f"\n[dim]{_evidence(c)}[/]"
            table.add_row(f"[{_STYLE[sev]}]{_GROUP[sev]}[/]", safe(c.code), text)
    console().print(f"target  {target.sha256[:12]}  {safe(target.name or (target.paths or ['-'])[0])}", soft_wrap=True)
    if draft is not None:
        console().print(f"draft   {draft.sha256[:12]}  {safe(draft.name or (draft.paths or ['-'])[0])}", soft_wrap=True)
    console().print(f"method  {v.method}   rule set {v.rule_set}{'   strict' if v.strict else ''}")
    console().print(table)
    n = {s: sum(1 for c in v.checks if c.severity == s) for s in _STYLE}
    counts = f"{n['pass']} pass, {n['info']} info, {n['warn']} warn, {n['error']} fail"
    if v.admitted:
        console().print(f"[bold green]ADMITTED[/] ({counts}) - pair {pair_id}")
    else:
        console().print(f"[bold red]REJECTED[/] ({counts}) - pair {pair_id}")
