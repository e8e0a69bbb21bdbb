"""`template.*`: the target's chat template, lexed and scanned, never rendered or compiled.

llama-server formats every chat request with the target's template, and other tools that load
the same GGUF render it with Python's jinja2, where `''.__class__.__mro__` reaches the
interpreter. Escape gadgets are errors; links, injected instructions, hidden characters and an
unusual size are warnings; a template that differs from the one shipped next to the file in its
Hugging Face snapshot is information. Every finding names the exact span, escaped.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from pathlib import Path

from specreg.gguf import format as F
from specreg.schemas.checks import CheckResult, Severity
from specreg.text import escape_control
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result
from specreg.validators.template_scan import Finding, ScanCache, scan_template

# Order in which codes are reported, with the severity each carries (one declaration).
TEMPLATE_CODES: dict[str, Severity] = {
    "template.dunder": "error",
    "template.gadget": "error",
    "template.url": "warn",
    "template.injection": "warn",
    "template.invisible": "warn",
    "template.size": "warn",
    "template.lex": "warn",
    "template.model_card": "info",
}
_SPAN_LIMIT = 120
_CARD_MAX_BYTES = 16 << 20


def span_text(text: str) -> str:
    """A span or other template text made inert and short for messages and evidence."""
    return escape_control(text, limit=_SPAN_LIMIT)


def _evidence(found: list[Finding], limit: int) -> dict[str, object]:
    return {
        "n": len(found),
        "first": [  # `first`: the renderers show one finding per line
            {"line": f.line, "col": f.col, "span": span_text(f.span), "what": f.what, "offset": f.offset}
            for f in found[:limit]
        ],
    }


def _card_template(gguf_path: Path) -> tuple[str, str] | None:
    """(file name, template) from the Hugging Face snapshot the GGUF lies in, when it ships one."""
    snapshot = next((p for p in gguf_path.parents if p.parent.name == "snapshots"), None)
    if snapshot is None:
        return None
    for name in ("chat_template.jinja", "tokenizer_config.json"):
        path = snapshot / name
        try:
            if not path.is_file() or path.stat().st_size > _CARD_MAX_BYTES:
                continue
            text = path.read_text("utf-8", errors="replace")
        except OSError:
            continue
        if name.endswith(".jinja"):
            return name, text
        try:
            value = json.loads(text).get("chat_template")
        except (ValueError, AttributeError):
            return None
        if isinstance(value, list):  # [{"name": "default", "template": ...}, ...]
            value = next((v.get("template") for v in value if isinstance(v, dict) and v.get("name") == "default"), None)
        if isinstance(value, str):
            return name, value
    return None


def _model_card(t: Side, template: str) -> CheckResult | None:
    if not isinstance(t.file.path, Path):  # a remote file has no snapshot on disk
        return None
    card = _card_template(t.file.path)
    if card is None:
        return None
    name, text = card
    ev = {
        "source": name,
        "gguf_sha256": hashlib.sha256(template.encode("utf-8", "surrogateescape")).hexdigest(),
        "card_sha256": hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(),
    }
    if text == template:
        return result("template.model_card", "pass", f"same chat template as the snapshot's {name}", **ev)
    same = " (equal apart from surrounding whitespace)" if text.strip() == template.strip() else ""
    return result("template.model_card", "info", f"chat template differs from the snapshot's {name}{same}", **ev)


def check_template(t: Side, rules: RuleSet, scans: ScanCache | None = None) -> list[CheckResult]:
    """Scan the target's `tokenizer.chat_template`; one result per code that found something."""
    raw = t.file.raw_string(F.KEY_CHAT_TEMPLATE)
    if raw is None:
        return [result("template.scan", "info", "target has no chat template (the server falls back to chatml)")]
    template = raw.decode("utf-8", errors="replace")
    scan = scan_template(template, scans)
    limit = rules.advisory.evidence_max_items
    by_code: dict[str, list[Finding]] = defaultdict(list)
    for f in scan.findings:
        by_code[f.code].append(f)
    out: list[CheckResult] = []
    for code, found in ((c, by_code[c]) for c in TEMPLATE_CODES if by_code.get(c)):
        f = found[0]
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        msg = f"{f.what} at line {f.line} col {f.col}: {span_text(f.span)}{more}"
        out.append(result(code, TEMPLATE_CODES[code], msg, **_evidence(found, limit)))
    max_bytes = rules.advisory.template_warn_bytes
    if scan.n_bytes > max_bytes:
        out.append(
            result(
                "template.size",
                "warn",
                f"chat template is {scan.n_bytes:,} bytes; real templates stay under {max_bytes:,}",
                n_bytes=scan.n_bytes,
                warn_bytes=max_bytes,
            )
        )
    if scan.lex_error is not None:
        out.append(
            result(
                "template.lex",
                "warn",
                f"jinja2's lexer rejects the template ({span_text(scan.lex_error)}): scanned as raw text",
                error=span_text(scan.lex_error),
            )
        )
    card = _model_card(t, template)
    if card is not None:
        out.append(card)
    if not any(c.severity in ("warn", "error") for c in out):
        how = f"{scan.n_tokens} tokens lexed" if scan.lexed else "scanned as raw text"
        out.insert(0, result("template.scan", "pass", f"chat template ({scan.n_bytes:,} bytes, {how}): nothing unsafe"))
    return out
