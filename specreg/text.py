"""Untrusted text (names, licences, token texts, templates, logs) made inert for any output.

One escaping rule for the terminal, reports, plots and error messages: control characters
(an ANSI escape, NUL, a newline that would turn one error into two), bidi overrides and
zero-width characters (which make a name read differently from what it is) are shown as
`\\xNN` / `\\uNNNN` instead of acting.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")


def _code(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def escape_control(text: object, *, keep: str = "", replace: str | None = None, limit: int | None = None) -> str:
    """`text` with unsafe characters escaped (or replaced by `replace`); `keep` lists characters
    to leave as they are (e.g. newlines in a <pre> block); `limit` shortens first, marking the cut."""
    s = "" if text is None else str(text)
    if limit is not None and len(s) > limit:
        s = s[:limit] + "..."
    return _UNSAFE.sub(
        lambda m: m.group() if m.group() in keep else (_code(m.group()) if replace is None else replace), s
    )
