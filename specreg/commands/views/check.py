"""Terminal output of `specreg check pair`: the checks grouped by severity, then the verdict.

One check per paragraph: `pass  vocab.type  message`, the message (and, for a check that did
not pass, its evidence, dimmed) wrapped under itself at word boundaries.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from specreg.commands.layout import pack, shorten
from specreg.commands.output import say
from specreg.commands.output import width as out_width
from specreg.text import model_label, plural
from specreg.validators.consequences import follow_ons

if TYPE_CHECKING:
    from specreg.schemas.checks import CheckResult, PairVerdict
    from specreg.schemas.registry import ArtifactRecord
    from specreg.sources.recheck import RecheckReport

_STYLE = {"pass": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}
_GROUP = {"pass": "pass", "info": "info", "warn": "warn", "error": "fail"}
_CODE_WIDTH = 22  # a longer code puts its message on the next line


_EVIDENCE_LINES = 4  # evidence beyond this many lines is left to --json
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _brief(value: object, room: int) -> str:
    """`value` as JSON in about `room` cells, shortened only between its elements: a list keeps
    its first items and says how many more, an object its first keys; a SHA-256 shows its
    12-hex prefix (the whole value is in --json)."""
    if isinstance(value, str) and _HEX64.fullmatch(value):
        return json.dumps(value[:12] + "…", ensure_ascii=False)
    whole = json.dumps(value, ensure_ascii=False, default=str)
    if len(whole) <= room:
        return whole
    if isinstance(value, list):
        parts: list[str] = []
        for item in value:
            text = _brief(item, max(room // 2, 8))
            if parts and sum(len(p) + 2 for p in parts) + len(text) > room:
                break
            parts.append(text)
        more = len(value) - len(parts)
        return "[" + ", ".join(parts) + (f", … +{more} more" if more else "") + "]"
    if isinstance(value, dict):
        items: list[str] = []
        for k, v in value.items():
            text = f"{json.dumps(k, ensure_ascii=False)}: {_brief(v, max(room // 2, 8))}"
            if items and sum(len(i) + 2 for i in items) + len(text) > room:
                items.append("…")
                break
            items.append(text)
        return "{" + ", ".join(items) + "}"
    if isinstance(value, str):
        return json.dumps(shorten(value, room), ensure_ascii=False)
    return whole


def _evidence(c: CheckResult, width: int) -> list[str]:
    """Evidence as short plain lines: token diffs one per line, then `key=value` items packed
    between items (a value shortened at a JSON boundary, never mid-value), at most a few lines."""
    ev = c.evidence
    lines: list[str] = []
    rest = {k: v for k, v in ev.items() if k != "first"}
    if rest:
        room = max(width - 4, 24)
        items = [f"{k}={_brief(v, room - len(k) - 2)}" for k, v in rest.items()]
        lines += pack([it + ("," if i < len(items) - 1 else "") for i, it in enumerate(items)], width, sep=" ")
    for item in ev.get("first", []) if isinstance(ev.get("first"), list) else []:
        if isinstance(item, dict) and "id" in item and "target" in item:
            lines.append(f"id {item['id']}: target {item['target']!r} | draft {item['draft']!r}")
        elif isinstance(item, dict):
            lines.append(", ".join(f"{k} {v!r}" for k, v in item.items()))
    if len(lines) > _EVIDENCE_LINES + 1:
        lines = [*lines[:_EVIDENCE_LINES], f"... {len(lines) - _EVIDENCE_LINES} more lines of evidence in --json"]
    return lines


def _artifact(role: str, rec: ArtifactRecord) -> None:
    label = model_label(None, name=rec.name, file=rec.paths[0] if rec.paths else None, quant=rec.file_type_name)
    say(label, prefix=f"{role:<8}{rec.sha256[:12]}  ", indent=22)
    from specreg.signing.model_signature import signature_identity

    signer = signature_identity(rec.provenance.extra, rec.sha256)
    if signer is not None:  # an OpenSSF model signature verified at registration, over these bytes
        say(f"model signed by {signer}", prefix=" " * 22, indent=22)


def _check(c: CheckResult, width: int) -> None:
    """One check: `fail  vocab.type  message`, its message hanging under itself, evidence dimmed."""
    sev = c.severity
    head = f"{_GROUP[sev]:<4}  {c.code:<{width}}  "
    hang = 6 + width + 2
    if len(c.code) > width:  # a long code: the message starts on the next line
        say("", prefix=head.rstrip(), marks=[(_GROUP[sev], _STYLE[sev])])
        head = " " * hang
    say(c.message, prefix=head, marks=[(_GROUP[sev], _STYLE[sev])] if head.strip() else [], indent=hang)
    if sev != "pass" and c.evidence:
        for line in _evidence(c, out_width() - hang):
            say(line, prefix=" " * hang, style="dim", indent=hang)


def show_verdict(
    v: PairVerdict,
    target: ArtifactRecord,
    draft: ArtifactRecord | None,
    pair_id: int,
    rules_why: str | None = None,
    *,
    verbose: bool = False,
) -> None:
    """Target, draft, method and rule set (and what chose it); one paragraph per check (evidence
    for the non-passing); the verdict.

    A rejection reads in one screen: its decisive failures first, the checks that only follow
    from one folded into a line (`validators.consequences`), the passes counted; `verbose`
    shows every check in full, passes first, as an admission does."""
    _artifact("target", target)
    if draft is not None:
        _artifact("draft", draft)
    say(v.method + ("  strict: warnings count as errors" if v.strict else ""), prefix="method  ")
    say(v.rule_set + (f" ({rules_why})" if rules_why else ""), prefix="rules   ", indent=8)
    width = min(max((len(c.code) for c in v.checks), default=0), _CODE_WIDTH)
    hang = 6 + width + 2
    n = {s: sum(1 for c in v.checks if c.severity == s) for s in _STYLE}
    if v.admitted or verbose:
        for sev in ("pass", "info", "warn", "error"):
            for c in (c for c in v.checks if c.severity == sev):
                _check(c, width)
    else:
        folded = follow_ons(v.checks)
        hidden = {id(c) for cs in folded.values() for c in cs}
        for sev in ("error", "warn", "info"):
            for c in (c for c in v.checks if c.severity == sev and id(c) not in hidden):
                _check(c, width)
                if c.code in folded:
                    follows = folded[c.code]
                    codes = ", ".join(dict.fromkeys(f.code for f in follows))
                    say(
                        f"{plural(len(follows), 'more check')} follow{'s' if len(follows) == 1 else ''} from "
                        f"{c.code} ({codes}); --verbose shows them",
                        prefix=" " * hang,
                        style="dim",
                        indent=hang,
                    )
        if n["pass"]:
            say(f"{plural(n['pass'], 'check')} passed; --verbose shows them", prefix=" " * 6, style="dim", indent=6)
    counts = f"({n['pass']} pass, {n['info']} info, {n['warn']} warn, {n['error']} fail) - pair {pair_id}"
    word, style = ("ADMITTED", "bold green") if v.admitted else ("REJECTED", "bold red")
    say(counts, prefix=word, marks=[(word, style)])


def recheck_json(report: RecheckReport, why: str) -> dict[str, object]:
    """`pairs --recheck --json`: the rules, the counts, and every verdict that would change."""
    return {
        "rule_set": report.rules.id,
        "chosen_by": why,
        "pairs": len(report.pairs),
        "re_read": report.read,
        "changed": [
            {
                "pair_id": r.pair.id,
                "method": r.pair.method,
                "rule_set": r.pair.rule_set,
                "admitted": r.pair.admitted,
                "would_admit": r.admitted,
                "checks": [{"code": c.code, "old": c.old, "new": c.new, "message": c.message} for c in r.checks],
                "causes": r.causes,
                "problem": r.problem,
            }
            for r in report.changed
        ],
    }


def show_recheck(report: RecheckReport, why: str) -> None:
    """One paragraph per verdict that would change: the checks that change it and the rule changes."""
    n = len(report.pairs)
    changed = report.changed
    say(f"{n} pair(s) judged again under {report.rules.id} ({why}): {report.read} read again, "
        f"the others from their stored summaries; {len(changed)} verdict(s) would change")  # fmt: skip
    for r in changed:
        p = r.pair
        names = " / ".join(x for x in (p.target_name or p.target_sha256[:12], p.draft_name) if x)
        before = "admitted" if p.admitted else "rejected"
        if r.problem is not None:
            say(f"{before} under {p.rule_set}; cannot judge it again: {r.problem}",
                prefix=f"pair {p.id}  {p.method}  {names}: ", indent=4)  # fmt: skip
            continue
        after = "admitted" if r.admitted else "rejected"
        style = "red" if r.newly_rejected else "green"
        say(f"{before} under {p.rule_set} -> {after}", prefix=f"pair {p.id}  {p.method}  {names}: ",
            marks=[(f"-> {after}", style)], indent=4)  # fmt: skip
        for c in r.checks:
            say(c.message, prefix=f"  {c.code}: {c.old or 'not run'} -> {c.new or 'not run'}: ", indent=6)
        for cause in r.causes[:5]:
            say(cause, prefix="  because: ", indent=6)
        if len(r.causes) > 5:
            say(f"and {len(r.causes) - 5} more rule change(s)", prefix="  because: ", indent=6)
