"""How commands write: the consoles, safe printing of untrusted text, JSON, aligned listings.

Nothing here imports rich at module level: `specreg --help` and `--json` output never need it,
and rich costs more to import than the rest of the start-up. A console is made on first use
for the stream it writes to (so an in-process runner that swaps `sys.stdout`, or a new
`COLUMNS`, gets a console of its own).
"""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from specreg.commands.layout import Col, Line, listing, wrap
from specreg.text import escape_control

if TYPE_CHECKING:
    from rich.console import Console

_made: dict[bool, tuple[TextIO, str | None, Console]] = {}


def _console(stderr: bool) -> Console:
    # while a progress bar is drawn, rich swaps the stream for a proxy of it: the console made for
    # the stream itself is the one drawing the bar, and a line printed through it goes above the
    # bar (a second console would write past the proxy, into the bar's line)
    stream = sys.stderr if stderr else sys.stdout
    stream = getattr(stream, "rich_proxied_file", stream)
    columns = os.environ.get("COLUMNS")
    made = _made.get(stderr)
    if made is not None and made[0] is stream and made[1] == columns:
        return made[2]
    from rich.console import Console

    # stderr: one error = one line, never wrapped by rich (the terminal wraps it)
    con = Console(stderr=stderr, highlight=False, soft_wrap=stderr)
    _made[stderr] = (stream, columns, con)
    return con


def console() -> Console:
    """The console on stdout (results)."""
    return _console(False)


def _plain(stderr: bool) -> TextIO | None:
    """The stream itself when nothing written to it is styled (a pipe, a file): laid-out lines
    go there as they are, and rich is never imported. None for a terminal (or FORCE_COLOR)."""
    stream = sys.stderr if stderr else sys.stdout
    if os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return None
    try:
        return None if stream.isatty() else stream
    except (AttributeError, ValueError):  # a closed or exotic stream: treat as a file
        return stream


def err_console() -> Console:
    """The console on stderr (errors, warnings, progress)."""
    return _console(True)


def safe_plain(text: object) -> str:
    """Untrusted text for output that rich does not parse (`print_listing`): control codes escaped."""
    return escape_control(text)


def safe(text: object) -> str:
    """Untrusted text (names, templates, licences) as inert rich text: markup and control codes escaped."""
    from rich.markup import escape

    return escape(safe_plain(text))


Cell = str | tuple[str, str | None]  # plain text, or (plain text, rich style)


def width(out: Console | None = None, *, stderr: bool = False) -> int:
    """Cells per line: $COLUMNS, else the terminal's width, else 80 (rich's rule)."""
    if out is None and _plain(stderr) is not None:
        columns = os.environ.get("COLUMNS", "")
        return int(columns) if columns.isdigit() and int(columns) > 0 else 80
    return (out or _console(stderr)).width


def show_lines(lines: Iterable[str | Line], out: Console | None = None, *, stderr: bool = False) -> None:
    """Write laid-out plain lines (see `layout`) with their style spans; rich never re-wraps them."""
    items = [(ln, []) if isinstance(ln, str) else ln for ln in lines]
    stream = _plain(stderr) if out is None else (out.file if out.color_system is None else None)
    if stream is not None:  # a pipe or file: nothing to style, so no rich
        stream.write("".join(text + "\n" for text, _ in items))
        stream.flush()
        return
    out = out or _console(stderr)
    from rich.text import Span, Text

    body = Text()
    for i, (text, spans) in enumerate(items):
        at = len(body)
        body.append(text + ("\n" if i < len(items) - 1 else ""))
        body.spans.extend(Span(at + a, at + b, style) for a, b, style in spans)
    out.print(body, soft_wrap=True)


def say(
    text: str,
    *,
    prefix: str = "",
    marks: Sequence[tuple[str, str]] = (),
    style: str | None = None,
    indent: int = 0,
    out: Console | None = None,
    stderr: bool = False,
) -> None:
    """One paragraph of PLAIN text (escaped here) after a `prefix` (ours, not escaped), wrapped at
    word boundaries to the console width, later lines indented by `indent`. `marks` colour words
    of the prefix (`("FAIL", "red")`: its first occurrence); `style` colours the text."""
    lines = wrap(safe_plain(text), width(out, stderr=stderr), indent, prefix)
    first: list[tuple[int, int, str]] = []
    for word, mark in marks:
        at = prefix.find(word)
        if at >= 0:
            first.append((at, at + len(word), mark))
    styled: list[Line] = []
    for i, ln in enumerate(lines):
        spans = list(first) if i == 0 else []
        start = len(prefix) if i == 0 else indent
        if style and len(ln) > start:
            spans.append((start, len(ln), style))
        styled.append((ln, spans))
    show_lines(styled, out, stderr=stderr)


def warn(lines: Iterable[str]) -> None:
    """Things a file has that llama.cpp tolerates (untrusted text): one `warning:` each, on stderr."""
    for line in lines:
        say(line, prefix="warning: ", marks=(("warning:", "yellow"),), indent=2, stderr=True)


def print_listing(
    headers: Sequence[str | Col],
    rows: Iterable[Sequence[Cell]],
    *,
    limits: Sequence[int | None] | None = None,
    right: Collection[int] = (),
    sep: str = "  ",
    out: Console | None = None,
) -> None:
    """A long listing (thousands of pairs, runs, artifacts) as aligned plain columns that fit the
    terminal: columns marked to give way move beneath each row or are shortened (`layout.Col`).

    rich's Table measures, wraps and renders every cell as its own object: too slow for thousands of rows.
    Here the column widths are computed once and the whole listing is written at once. Cells
    are PLAIN text, not markup: untrusted text needs no `safe()` here; control codes are escaped
    and a cell wider than its column is cut at a word boundary with an ellipsis.
    """
    caps = list(limits) if limits is not None else [None] * len(headers)
    cols = [h if isinstance(h, Col) else Col(h, right=i in right, limit=caps[i]) for i, h in enumerate(headers)]
    plain = ([(safe_plain(c), None) if isinstance(c, str) else (safe_plain(c[0]), c[1]) for c in row] for row in rows)
    show_lines(listing(cols, plain, width(out), sep), out)


def emit_json(data: Any) -> None:
    """Print a pydantic model (or plain data) as JSON on stdout, nothing else."""
    from pydantic import BaseModel  # not at startup: `--help` and plain listings need no pydantic

    from specreg.schemas.record import json_bytes, to_python

    if isinstance(data, BaseModel) or (is_dataclass(data) and not isinstance(data, type)):
        # = model_dump_json(indent=2) (a model is written by its own serializer), as UTF-8 bytes
        # straight to stdout: no 40 MB str round trip
        _write_utf8(json_bytes(data, indent=2))
        return
    if isinstance(data, list) and data and isinstance(data[0], BaseModel):
        text = json.dumps([d.model_dump(mode="json") for d in data], indent=2)
    elif isinstance(data, list) and data and is_dataclass(data[0]):
        text = json.dumps([to_python(d) for d in data], indent=2)
    else:
        text = json.dumps(data, indent=2, default=str)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _write_utf8(data: bytes) -> None:
    out = sys.stdout
    buffer = getattr(out, "buffer", None)
    if buffer is not None and codecs.lookup(getattr(out, "encoding", None) or "ascii").name == "utf-8":
        out.flush()  # whatever went through the text layer first stays first
        buffer.write(data)
        buffer.write(b"\n")
        buffer.flush()
    else:
        out.write(data.decode("utf-8") + "\n")
        out.flush()


def emit_result(result: Any, json_out: bool, show: Callable[[], None], report_files: list[Path]) -> None:
    """`--json` prints the model alone; otherwise the human view, then where the report went."""
    if json_out:
        emit_json(result)
        return
    show()
    if report_files:
        say(str(report_files[0]), prefix="report: ", indent=4)
