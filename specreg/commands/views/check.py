"""Terminal output of `specreg check pair`: the checks grouped by severity, then the verdict.

One check per paragraph: `pass  vocab.type  message`, the message (and, for a check that did
not pass, its evidence, dimmed) wrapped under itself at word boundaries.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from specreg.commands.layout import shorten
from specreg.commands.output import say

if TYPE_CHECKING:
    from specreg.schemas.checks import CheckResult, PairVerdict
    from specreg.schemas.registry import ArtifactRecord

_STYLE = {"pass": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}
_GROUP = {"pass": "pass", "info": "info", "warn": "warn", "error": "fail"}
_CODE_WIDTH = 22  # a longer code puts its message on the next line


def _evidence(c: CheckResult) -> list[str]:
    """Evidence as short plain lines: token diffs one per line, otherwise key=value."""
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
        lines.insert(0, shorten(text, 400))
    return lines


def _artifact(role: str, rec: ArtifactRecord) -> None:
    say(rec.name or (rec.paths or ["-"])[0], prefix=f"{role:<8}{rec.sha256[:12]}  ", indent=22)


def show_verdict(v: PairVerdict, target: ArtifactRecord, draft: ArtifactRecord | None, pair_id: int) -> None:
    """Target, draft, method and rule set; one paragraph per check (evidence for the non-passing); the verdict."""
    _artifact("target", target)
    if draft is not None:
        _artifact("draft", draft)
    say(
        f"{v.method}  rule set {v.rule_set}" + ("  strict: warnings count as errors" if v.strict else ""),
        prefix="method  ",
    )
    width = min(max((len(c.code) for c in v.checks), default=0), _CODE_WIDTH)
    hang = 6 + width + 2
    for sev in ("pass", "info", "warn", "error"):
        for c in (c for c in v.checks if c.severity == sev):
            head = f"{_GROUP[sev]:<4}  {c.code:<{width}}  "
            if len(c.code) > width:  # a long code: the message starts on the next line
                say("", prefix=head.rstrip(), marks=[(_GROUP[sev], _STYLE[sev])])
                head = " " * hang
            say(c.message, prefix=head, marks=[(_GROUP[sev], _STYLE[sev])] if head.strip() else [], indent=hang)
            if sev != "pass" and c.evidence:
                for line in _evidence(c):
                    say(line, prefix=" " * hang, style="dim", indent=hang)
    n = {s: sum(1 for c in v.checks if c.severity == s) for s in _STYLE}
    counts = f"({n['pass']} pass, {n['info']} info, {n['warn']} warn, {n['error']} fail) - pair {pair_id}"
    word, style = ("ADMITTED", "bold green") if v.admitted else ("REJECTED", "bold red")
    say(counts, prefix=word, marks=[(word, style)])
