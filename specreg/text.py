"""Untrusted text (names, licences, token texts, templates, logs) made inert for any output.

One escaping rule for the terminal, reports, plots and error messages: control characters
(an ANSI escape, NUL, a newline that would turn one error into two), bidi overrides and
zero-width characters (which make a name read differently from what it is) are shown as
`\\xNN` / `\\uNNNN` instead of acting.

Also the small wording rules every view shares: counts with their noun in the right number
(`plural`), rounds named as people count them (`rounds_named`), and a llama.cpp log line
reduced to its message (`log_message`).
"""

from __future__ import annotations

import re
from typing import Any

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


_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _bytes_or_code(m: re.Match[str]) -> str:
    n = ord(m.group())
    # surrogateescape keeps an undecodable byte 0xNN as U+DCNN: show the byte
    return f"\\x{n - 0xDC00:02x}" if 0xDC80 <= n <= 0xDCFF else f"\\u{n:04x}"


def valid_utf8(value: Any) -> Any:
    """`value` (a string, or lists/dicts of them) with lone surrogates - a token text that was not
    valid UTF-8, decoded with surrogateescape - written as `\\xNN` / `\\uNNNN`, so it encodes as
    UTF-8 and survives a JSON round trip. Other values are returned as they are."""
    if isinstance(value, str):
        return _SURROGATE.sub(_bytes_or_code, value) if _SURROGATE.search(value) else value
    if isinstance(value, dict):
        return {valid_utf8(k): valid_utf8(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [valid_utf8(v) for v in value]
    return value


def plural(n: int, word: str, many: str | None = None) -> str:
    """`n` with its noun in the right number: '1 pair', '2 pairs', '1 token text', '0 token texts';
    `many` for an irregular plural ('1 match', many='matches')."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# llama.cpp's log prefix (common/log.cpp): an optional timestamp `M.SS.mmm.uuu`, the level letter, then
# a module's own `tag %12.*s: ` (speculative.cpp's "spec common_specu: ", the server's "srv  load_model: ")
_LOG_PREFIX = re.compile(r"^\s*(?:\d+\.\d{2}\.\d{3}\.\d{3}\s+)?[IWEDT] +(?:[a-z]{2,5} +[^\s:]{1,12}: +)?")


def log_message(line: str) -> str:
    """A llama.cpp log line as its message alone: '0.02.111.646 W spec common_specu: the target and
    draft vocabs are not compatible' -> 'the target and draft vocabs are not compatible'. Colour
    codes go too; a line without the prefix is returned stripped, otherwise unchanged."""
    text = _ANSI.sub("", line).strip()
    return _LOG_PREFIX.sub("", text, count=1).strip() or text


def quant_text(file_type_name: str | None) -> str | None:
    """A GGUF file type as people name the quant: 'MOSTLY_Q4_K_M' -> 'Q4_K_M', 'ALL_F32' -> 'F32'."""
    if not file_type_name or file_type_name.startswith(("UNKNOWN", "GUESSED")):
        return None
    return file_type_name.removeprefix("MOSTLY_").removeprefix("ALL_")


def model_label(
    sha256: str | None, *, name: str | None = None, file: str | None = None, quant: str | None = None
) -> str:
    """A model file as a person tells it from its neighbours: the 12-hex SHA-256 prefix, then
    general.name, the file's base name and the quant where known ('2fc5918b02d7 SmolLM2 135M
    (smollm2.Q4_K_M.gguf)'); the quant is left out when the file name already says it.
    Untrusted text: escape it for the output it goes to."""
    base = file.replace("\\", "/").rsplit("/", 1)[-1] if file else None
    q = quant_text(quant) if quant else None
    if q and base and q.lower() in base.lower():
        q = None
    title = name or base
    extra = [x for x in (base if base != title else None, q) if x]
    head = " ".join(x for x in (sha256[:12] if sha256 else None, title) if x)
    return f"{head} ({', '.join(extra)})" if extra else (head or "unknown model")


def rounds_named(reps: list[int]) -> str:
    """`round 3`, `rounds 3-5`, `rounds 1, 3` for repetitions 2, 2..4, 0 and 2 (people count from 1)."""
    if len(reps) == 1:
        return f"round {reps[0] + 1}"
    if reps == list(range(reps[0], reps[-1] + 1)):
        return f"rounds {reps[0] + 1}-{reps[-1] + 1}"
    return "rounds " + ", ".join(str(r + 1) for r in reps)


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[])")


def whole_sentences(text: str, limit: int = 400) -> str:
    """Another program's message (a Ray error, a traceback's last line) as whole sentences: its
    first paragraph with the whitespace folded, cut after the last sentence that fits in `limit`
    characters, never inside one (the first is kept whole, however long)."""
    first = re.split(r"\n\s*\n|\nTraceback ", text.strip(), maxsplit=1)[0]
    sentences = _SENTENCE_END.split(" ".join(first.split()))
    out = sentences[0]
    for s in sentences[1:]:
        if len(out) + 1 + len(s) > limit:
            break
        out += " " + s
    return out
