"""What every command shares: options, the console, JSON output and safe printing."""

from __future__ import annotations

import codecs
import json
import os
import sys
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Union

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape

from specreg.text import escape_control

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)  # one error = one line, never wrapped

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def safe_plain(text: object) -> str:
    """Untrusted text for output that rich does not parse (`print_listing`): control codes escaped."""
    return escape_control(text)


def safe(text: object) -> str:
    """Untrusted text (names, templates, licences) as inert rich text: markup and control codes escaped."""
    return escape(safe_plain(text))


Cell = Union[str, tuple[str, str | None]]  # plain text, or (plain text, rich style)


def _width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _fit(text: str, width: int) -> str:
    """Cut `text` to `width` terminal cells, marking the cut with an ellipsis."""
    if _width(text) <= width:
        return text
    if text.isascii():
        return text[: width - 1] + "…"
    used = 0
    for i, ch in enumerate(text):  # a wide character takes two cells: never cut one in half
        used += cell_len(ch)
        if used > width - 1:
            return text[:i] + "…"
    return text  # pragma: no cover - the width check above returned already


def print_listing(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    *,
    limits: Sequence[int | None] | None = None,
    right: Collection[int] = (),
    sep: str = "  ",
    out: Console | None = None,
) -> None:
    """A long listing (thousands of pairs, runs, artifacts) as aligned plain columns, one line per row.

    rich's Table measures, wraps and renders every cell as its own object: 3 s for 5,000 pairs.
    Here the column widths are computed once, each row is one line, and the whole listing is
    written at once (with its styles only where the console shows colour). Cells are PLAIN
    text, not markup: untrusted text needs no `safe()` here; control codes are escaped and a
    cell wider than its column's limit is cut with an ellipsis.
    """
    out = out or console
    n = len(headers)
    caps = list(limits) if limits is not None else [None] * n
    table: list[list[tuple[str, str | None]]] = []
    widths = [_width(h) for h in headers]
    for row in rows:
        cells: list[tuple[str, str | None]] = []
        for i, cell in enumerate(row):
            text, style = (cell, None) if isinstance(cell, str) else cell
            text = safe_plain(text)
            cap = caps[i]
            if cap is not None:
                text = _fit(text, cap)
            w = _width(text)
            if w > widths[i]:
                widths[i] = w
            cells.append((text, style))
        table.append(cells)

    def pad(text: str, i: int) -> str:
        gap = widths[i] - _width(text)
        if gap <= 0:
            return text
        return " " * gap + text if i in right else text + " " * gap

    last = n - 1
    lines = [sep.join(pad(h, i) for i, h in enumerate(headers)).rstrip()]
    styled = out.color_system is not None
    spans: list[tuple[int, int, str]] = [(0, len(lines[0]), "bold")] if styled else []
    offset = len(lines[0]) + 1
    for cells in table:
        parts = []
        pos = offset
        for i, (text, style) in enumerate(cells):
            cell = pad(text, i) if i != last or i in right else text  # no trailing blanks
            if style and styled:
                start = pos + (len(cell) - len(text) if i in right else 0)
                spans.append((start, start + len(text), style))
            parts.append(cell)
            pos += len(cell) + len(sep)
        line = sep.join(parts)
        lines.append(line)
        offset += len(line) + 1
    body = "\n".join(lines)
    if not styled:  # a pipe or file: nothing for rich to style, so skip its per-line rendering
        out.file.write(body + "\n")
        out.file.flush()
        return
    from rich.text import Span, Text

    out.print(Text(body, spans=[Span(a, b, st) for a, b, st in spans]), soft_wrap=True)


def warn(path: object, warnings: Iterable[str]) -> None:
    """Print what a file has that llama.cpp tolerates (one `warning:` line each, on stderr)."""
    for w in warnings:
        err_console.print(f"[yellow]warning:[/] {safe(path)}: {safe(w)}")


def db_path() -> Path:
    """Where the registry lives: `--db`, else SPECREG_DB, else the user data directory."""
    from specreg.paths import default_db_path

    override = os.environ.get("SPECREG_DB")
    return Path(override) if override else default_db_path()


def emit_json(data: Any) -> None:
    """Print a pydantic model (or plain data) as JSON on stdout, nothing else."""
    from pydantic import BaseModel  # not at startup: `--help` and plain listings need no pydantic

    if isinstance(data, BaseModel):
        # = model_dump_json(indent=2), as UTF-8 bytes straight to stdout: no 40 MB str round trip
        _write_utf8(data.__pydantic_serializer__.to_json(data, indent=2))
        return
    if isinstance(data, list) and data and isinstance(data[0], BaseModel):
        text = json.dumps([d.model_dump(mode="json") for d in data], indent=2)
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
        console.print(f"report: {safe(report_files[0])}", soft_wrap=True)
