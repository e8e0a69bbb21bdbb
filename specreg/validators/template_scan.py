"""A static scan of a chat template: jinja2's lexer splits it into tokens, nothing is rendered.

`jinja2.Environment().lexer.tokeniter()` only runs regular expressions over the text; no
template is compiled, no expression evaluated. The rules then look at the token stream: code
(names, operators, string literals inside `{{ }}` / `{% %}`) for sandbox escapes, literal text
(template data and string literals) for links, injected instructions and hidden characters.
Each finding carries the exact source span, its line and column.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Final, Protocol

from specreg.schemas.checks import Severity

# Longer templates are scanned as raw text (regexes over the whole text, every part treated as
# code): lexing megabytes in Python would let a hostile file make a check slow.
MAX_LEX_CHARS: Final = 1 << 20

# CPython internals that escape payloads walk through (frames, generators, functions, code).
_INTERNAL_ATTRS: Final = frozenset(
    {
        "mro",
        "func_globals",
        "func_code",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "f_back",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_code",
        "tb_frame",
        "tb_next",
        "co_code",
        "im_func",
        "im_self",
    }
)
# jinja2 globals whose internals lead to Python's globals; a chat template never needs them.
_GADGET_GLOBALS: Final = frozenset({"lipsum", "cycler", "joiner", "namespace"})
_NO_LEGIT_USE: Final = frozenset({"lipsum"})  # referenced at all: there is no chat use for it


class _Pattern:
    """A rule's regular expression, compiled on its first use: a `check pair` whose template was
    scanned before (the registry keeps scans) imports this module for a kept scan's shape only,
    and compiling the rules' patterns was most of that import."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    @cached_property
    def rx(self) -> re.Pattern[str]:
        return re.compile(*self._source)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.rx.fullmatch(text)

    def search(self, text: str) -> re.Match[str] | None:
        return self.rx.search(text)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.rx.finditer(text)


_DUNDER = _Pattern(r"__\w+__")
_IDENT = _Pattern(r"[A-Za-z_]\w*")
# an escaped backslash (group 1 empty) is consumed first, so "\\\\x5f" is not read as an escape
_ESCAPE = _Pattern(r"\\(?:\\|(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|N\{[^}]*\}|[0-7]{1,3}))")

_URL_CHARS = "[^\\s'\"<>{}|\\\\^`\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]"
_URL = _Pattern(rf"\b(?:https?|ftp|file)://{_URL_CHARS}+|\bwww\.[A-Za-z0-9-]+\.[A-Za-z]{{2,}}{_URL_CHARS}*", re.I)
_EMAIL = _Pattern(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
# Phrases that address the model against its user or its instructions; a default system prompt
# ("You are a helpful assistant", tool-use rules) does not match.
_INSTRUCTION = _Pattern(
    r"\b(?:ignore|disregard|forget|override)\s+(?:all\s+|any\s+|the\s+|your\s+)*"
    r"(?:previous|prior|above|earlier|preceding|original|system)\s+(?:instructions?|prompts?|messages?|rules?)"
    r"|\b(?:do\s+not|don'?t|never)\s+(?:reveal|disclose|mention|tell\s+(?:the\s+user|anyone)\s+about)\s+"
    r"(?:this|these|the|your)\s+(?:system\s+prompt|instructions?|prompt|hidden\s+\w+)"
    r"|\b(?:secret|hidden|covert)\s+(?:instructions?|system\s+prompt|prompt|directives?)"
    r"|\byou\s+are\s+now\s+(?:in\s+)?(?:developer\s+mode|dan|jailbroken|unrestricted)\b"
    r"|\bjailbreak(?:ed|ing)?\b",
    re.I,
)
# Characters that hide or reorder text: zero-width, bidi controls, word joiners, BOM, soft hyphen,
# Mongolian vowel separator, Unicode tag characters (ASCII smuggling), C0/C1 controls but tab/CR/LF.
_INVISIBLE = _Pattern(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f]+"
)
_TEXT_TYPES: Final = frozenset({"data", "comment", "comment_begin", "comment_end", "linecomment"})
_JOIN_OPS: Final = frozenset({"~", "+", "*"})


@dataclass(frozen=True)
class Finding:
    """One rule that matched: where (offset/line/col), the exact source span, and why."""

    code: str
    severity: Severity
    what: str
    offset: int
    line: int
    col: int
    span: str


@dataclass
class Scan:
    """The scan of one template: findings in source order, and how it was read."""

    n_chars: int
    n_bytes: int
    lexed: bool
    n_tokens: int = 0
    lex_error: str | None = None
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class _Tok:
    type: str
    value: str
    offset: int


class _Source:
    """The template text with line starts, for offset -> (line, col)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, offset: int) -> tuple[int, int]:
        from bisect import bisect_right

        i = bisect_right(self.line_starts, offset) - 1
        return i + 1, offset - self.line_starts[i] + 1


def decode_string(raw: str) -> str:
    """A string literal's value, decoded the way jinja2's lexer does it (never evaluated)."""
    body = raw[1:-1]
    try:
        return body.encode("ascii", "backslashreplace").decode("unicode-escape")
    except UnicodeDecodeError:
        return body


@cache
def _lexer() -> Any:
    """jinja2's lexer at jinja2's defaults (`Environment()`, which llama.cpp's template engine
    follows); jinja2 is imported by the first scan that lexes, never by one the registry kept."""
    import jinja2

    return jinja2.Environment().lexer


def _tokens(text: str) -> list[_Tok]:
    """jinja2's raw token stream (no whitespace tokens) with the offset of every token."""
    out: list[_Tok] = []
    pos = 0
    for _line, kind, value in _lexer().tokeniter(text, None):
        at = text.find(value, pos) if value else pos
        if at < 0:  # cannot happen for jinja2's lexer (values are slices); keep the scan going
            at = pos
        pos = at + len(value)
        if kind != "whitespace":
            out.append(_Tok(kind, value, at))
    return out


class _Scanner:
    def __init__(self, text: str) -> None:
        self.src = _Source(text)
        self.findings: list[Finding] = []

    def add(self, code: str, severity: Severity, what: str, offset: int, end: int) -> None:
        line, col = self.src.where(offset)
        self.findings.append(Finding(code, severity, what, offset, line, col, self.src.text[offset:end]))

    # -- code rules --------------------------------------------------------------------------
    def code(self, toks: list[_Tok]) -> None:
        """Rules over the tokens inside tags; tag delimiters stay in `toks` as separators."""
        for i, t in enumerate(toks):
            prev = toks[i - 1] if i else None
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if t.type == "name":
                self._name(t, prev, nxt)
            elif t.type == "string":
                self._string(t, prev, toks[i - 2] if i >= 2 else None, nxt, toks[i + 1 : i + 4])
        self._attr_args(toks)

    def _name(self, t: _Tok, prev: _Tok | None, nxt: _Tok | None) -> None:
        name = t.value
        dot = prev is not None and prev.type == "operator" and prev.value == "."
        start, end = (prev.offset if dot and prev else t.offset), t.offset + len(name)
        if _DUNDER.fullmatch(name):
            how = "attribute access to" if dot else "reference to"
            self.add("template.dunder", "error", f"{how} dunder name {name}", start, end)
        elif dot and name in _INTERNAL_ATTRS:
            called = " call" if nxt is not None and nxt.value == "(" else ""
            self.add("template.dunder", "error", f"Python internal attribute .{name}{called}", start, end)
        elif dot and name.startswith("_"):
            self.add("template.gadget", "error", f"private attribute .{name}", start, end)
        elif not dot and name in _NO_LEGIT_USE:
            self.add("template.gadget", "error", f"jinja2 global {name} (its __globals__ reach Python)", start, end)
        elif not dot and name in _GADGET_GLOBALS and nxt is not None and nxt.value in (".", "["):
            self.add("template.gadget", "error", f"internals of the jinja2 global {name}", t.offset, nxt.offset + 1)

    def _string(self, t: _Tok, prev: _Tok | None, before: _Tok | None, nxt: _Tok | None, after: list[_Tok]) -> None:
        raw, value = t.value, decode_string(t.value)
        end = t.offset + len(raw)
        in_attr = prev is not None and prev.value == "(" and before is not None and before.value == "attr"
        key = prev is not None and prev.value == "["
        joined = (prev is not None and prev.value in _JOIN_OPS) or (nxt is not None and nxt.value in _JOIN_OPS)
        hidden = [
            m.group() for m in _ESCAPE.finditer(raw) if m.group(1) and _IDENT.fullmatch(decode_string(f'"{m.group()}"'))
        ]
        if _DUNDER.search(value) and (_DUNDER.fullmatch(value) or in_attr or key or joined):
            how = "attr() with" if in_attr else "subscript with" if key else "string literal"
            self.add("template.dunder", "error", f"{how} dunder name {value!r}", t.offset, end)
        elif (in_attr or key) and value in _INTERNAL_ATTRS:
            self.add("template.dunder", "error", f"attr()/subscript with Python internal {value!r}", t.offset, end)
        elif value and set(value) == {"_"} and joined:
            what = f"underscores {value!r} joined with other strings (a dunder name built in pieces)"
            self.add("template.dunder", "error", what, t.offset, end)
        elif hidden:
            what = f"identifier characters spelled as escapes ({', '.join(hidden[:3])}): a hidden name"
            self.add("template.dunder", "error", what, t.offset, end)
        elif (in_attr or key) and len(value) > 1 and value.startswith("_") and _IDENT.fullmatch(value):
            self.add("template.gadget", "error", f"attr()/subscript with private name {value!r}", t.offset, end)
        elif "%c" in value and any(a.value in ("format", "%") for a in after):
            self.add("template.dunder", "error", "'%c' format string: characters built from numbers", t.offset, end)

    def _attr_args(self, toks: list[_Tok]) -> None:
        """`|attr(x)` with anything but one plain string literal: the name is built at render time."""
        for i in range(1, len(toks) - 2):
            t = toks[i]
            if t.type != "name" or t.value != "attr" or toks[i - 1].value != "|" or toks[i + 1].value != "(":
                continue
            arg, close = toks[i + 2], toks[i + 3] if i + 3 < len(toks) else None
            if arg.type == "string" and close is not None and close.value == ")":
                continue
            depth, j = 0, i + 1
            for j in range(i + 1, len(toks)):  # to the matching ")" (or the end of the tag)
                depth += {"(": 1, ")": -1}.get(toks[j].value, 0)
                if depth == 0 or toks[j].type.endswith("_end"):
                    break
            last = toks[j] if toks[j].value == ")" else toks[j - 1]
            end = last.offset + len(last.value)
            self.add("template.gadget", "error", "attr() with a computed name", toks[i - 1].offset, end)

    # -- literal-text rules --------------------------------------------------------------------
    def literal(self, text: str, offset: int, quoted: bool) -> None:
        base = offset + (1 if quoted else 0)
        body = text[1:-1] if quoted else text
        for m in _URL.finditer(body):
            self.add("template.url", "warn", "URL in literal text", base + m.start(), base + m.end())
        for m in _EMAIL.finditer(body):
            self.add("template.url", "warn", "e-mail address in literal text", base + m.start(), base + m.end())
        for m in _INSTRUCTION.finditer(body):
            self.add("template.injection", "warn", "instruction-like literal text", base + m.start(), base + m.end())

    def invisible(self, text: str) -> None:
        for m in _INVISIBLE.finditer(text):
            cps = ", ".join(f"U+{ord(c):04X}" for c in m.group()[:4])
            self.add("template.invisible", "warn", f"invisible or bidi character(s) {cps}", m.start(), m.end())

    # -- fallback ------------------------------------------------------------------------------
    def raw(self, text: str) -> None:
        """No token stream (too long, or not lexable): every part of the text is treated as code."""
        for m in re.finditer(r"\.?\s*(__\w+__)", text):
            self.add("template.dunder", "error", f"dunder name {m.group(1)}", m.start(), m.end())
        for m in re.finditer(r"\.\s*(_\w*|" + "|".join(sorted(_INTERNAL_ATTRS)) + r")\b", text):
            if not _DUNDER.fullmatch(m.group(1)):
                self.add("template.gadget", "error", f"attribute .{m.group(1)}", m.start(), m.end())
        for m in re.finditer(r"\blipsum\b", text):
            self.add("template.gadget", "error", "jinja2 global lipsum", m.start(), m.end())
        self.literal(text, 0, quoted=False)


class ScanCache(Protocol):
    """Scans kept by the template's SHA-256 and `scanner_id()` (the registry keeps them)."""

    def get(self, template_sha256: str, scanner: str) -> Scan | None: ...

    def put(self, template_sha256: str, scanner: str, scan: Scan) -> None: ...


@cache
def scanner_id() -> str:
    """What a scan depends on besides the template: this module's rules and jinja2's lexer.
    Both source files hashed (without importing jinja2): a change to either makes every
    cached scan a miss."""
    spec = importlib.util.find_spec("jinja2")  # a top-level name: found, not imported
    digest = hashlib.sha256(Path(__file__).read_bytes())
    if spec is not None and spec.origin:
        digest.update(Path(spec.origin).with_name("lexer.py").read_bytes())
    return digest.hexdigest()[:16]


def scan_to_json(scan: Scan) -> str:
    return json.dumps(asdict(scan), ensure_ascii=False, separators=(",", ":"))


def scan_from_json(text: str) -> Scan | None:
    """A scan written by `scan_to_json`; None if it is not one (a damaged cache entry is a miss)."""
    try:
        raw = json.loads(text)
        findings = [Finding(**f) for f in raw.pop("findings")]
        scan = Scan(**raw, findings=findings)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    ints = (scan.n_chars, scan.n_bytes, scan.n_tokens, *(x for f in findings for x in (f.offset, f.line, f.col)))
    strs = (*(x for f in findings for x in (f.code, f.severity, f.what, f.span)),)
    if not all(type(x) is int for x in ints) or not all(type(x) is str for x in strs) or type(scan.lexed) is not bool:
        return None
    return scan


def scan_template(template: str, cache: ScanCache | None = None) -> Scan:
    """Lex `template` with jinja2 (nothing rendered) and apply every rule; findings in source order.
    `cache`: scans of templates seen before (by SHA-256), so a re-check lexes nothing."""
    if cache is None:
        return _scan(template)
    key = hashlib.sha256(template.encode("utf-8", "surrogateescape")).hexdigest()
    found = cache.get(key, scanner_id())
    if found is None:
        found = _scan(template)
        cache.put(key, scanner_id(), found)
    return found


def _scan(template: str) -> Scan:
    text = re.sub(r"\r\n?", "\n", template)  # the lexer's own newline normalisation
    scan = Scan(n_chars=len(text), n_bytes=len(template.encode("utf-8", "surrogateescape")), lexed=False)
    sc = _Scanner(text)
    toks: list[_Tok] | None = None
    if len(text) <= MAX_LEX_CHARS:
        from jinja2 import TemplateSyntaxError

        try:
            toks = _tokens(text)
        except TemplateSyntaxError as exc:
            scan.lex_error = f"line {exc.lineno}: {exc.message}"
    if toks is None:
        sc.raw(text)
    else:
        scan.lexed, scan.n_tokens = True, len(toks)
        sc.code([t for t in toks if t.type not in _TEXT_TYPES])
        for t in toks:
            if t.type == "data":
                sc.literal(t.value, t.offset, quoted=False)
            elif t.type == "string":
                sc.literal(t.value, t.offset, quoted=True)
    sc.invisible(text)
    scan.findings = sorted(sc.findings, key=lambda f: (f.offset, f.code))
    return scan
