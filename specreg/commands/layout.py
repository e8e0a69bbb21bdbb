"""Plain text that fits a terminal: wrapping, cutting and packing at word boundaries.

Every human view is laid out here as plain lines of at most `width` terminal cells, with no
trailing blanks and no word cut: a line breaks at a space (or, inside a path or other long
token, after a `/`, `-`, `_`, `,` or `.`), and a cell cut to fit its column ends at such a
boundary with `…`. The views add colour afterwards; rich never re-wraps these lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

ELLIPSIS = "…"
_BREAK_AFTER = "/-_,.:=|"  # a long token (a path, a list) may wrap after these
_CUT_AFTER = "/-,;:)|"  # a cut may end after these (never after a letter, digit or `_`)
_TOKEN = re.compile(r"(\S+)( *)")  # a word and the spaces after it


def cells(text: str) -> int:
    """Terminal cells `text` takes (a wide character takes two)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def _prefix_within(text: str, width: int) -> int:
    """Length of the longest prefix of `text` that fits in `width` cells."""
    if text.isascii():
        return min(len(text), width)
    from rich.cells import cell_len

    used = 0
    for i, ch in enumerate(text):
        used += cell_len(ch)
        if used > width:
            return i
    return len(text)


def _break_point(token: str, limit: int) -> int:
    """Where to break a long `token` (0 < position <= limit): after its last `/` in the second half
    of the room (a path breaks between folders), else after its last boundary, else at limit."""
    for marks, low in (("/", limit // 2), (_BREAK_AFTER, 0)):
        for i in range(limit, low, -1):
            if token[i - 1] in marks and i < len(token):
                return i
    return max(limit, 1)


def shorten(text: str, width: int) -> str:
    """`text` in at most `width` cells; a cut ends at a word boundary and is marked with `…`."""
    if cells(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    room = _prefix_within(text, width - 1)
    for i in range(room, 0, -1):  # keep whole words: cut after a space, a boundary or a wide (CJK) character
        if text[i - 1] == " " or text[i - 1] in _CUT_AFTER or (not text[i - 1].isascii() and cells(text[i - 1]) == 2):
            return text[:i] + ELLIPSIS
    return ELLIPSIS  # one long word: show that something is there, never half of it


def wrap(text: str, width: int, indent: int = 0, prefix: str = "") -> list[str]:
    """`prefix` (kept as it is) then `text` as lines of at most `width` cells, broken at spaces
    (or after `/-_,.` inside a long token); later lines are indented by `indent` spaces.
    Newlines in `text` start new (indented) lines."""
    out: list[str] = []
    for para in text.split("\n"):
        out.extend(_wrap_line(para, width, prefix if not out else " " * indent, indent))
    return out


def _wrap_line(text: str, width: int, lead: str, indent: int) -> list[str]:
    """Greedy fill; the spacing between words on one line is kept as written."""
    lines: list[str] = []
    line = lead
    bare = True  # nothing but the lead on `line` yet
    gap = " " if lead and not lead.endswith(" ") else ""
    for word, space in _TOKEN.findall(text.strip()):
        if not bare or gap:
            joint = gap or " "
            if cells(line) + len(joint) + cells(word) <= width:
                line, bare, gap = line + joint + word, False, space
                continue
            room = width - cells(line) - len(joint)
            if cells(word) > width - indent and room >= 8:  # a path longer than a line: start it here
                cut = _break_point(word, _prefix_within(word, room))
                line, word = line + joint + word[:cut], word[cut:]
            lines.append(line)
            line, bare = " " * indent, True
        room = max(width - cells(line), 8)
        while cells(word) > room:  # a token wider than a whole line: break it after a boundary
            cut = _break_point(word, _prefix_within(word, room))
            lines.append(line + word[:cut])
            line, word = " " * indent, word[cut:]
            room = max(width - indent, 8)
        line, bare, gap = line + word, False, space
    lines.append(line.rstrip())
    return lines


def pack(items: Iterable[str], width: int, *, sep: str = "  ", indent: int = 0) -> list[str]:
    """Items (`workload default`, `seed 42`, ...) on as few lines as fit, never split between
    lines unless an item alone is wider than a line; later lines indented by `indent`."""
    lines: list[str] = []
    line = ""
    for item in items:
        if not item:
            continue
        if not line:
            line = " " * (indent if lines else 0) + item
        elif cells(line) + len(sep) + cells(item) <= width:
            line += sep + item
        else:
            lines.append(line)
            line = " " * indent + item
    if line:
        lines.append(line)
    return [ln for piece in lines for ln in (wrap(piece, width, indent) if cells(piece) > width else [piece])]


def command_lines(argv: Sequence[str], width: int, indent: int = 4) -> list[str]:
    """A shell command (already quoted words) wrapped with ` \\` continuations, so it pastes."""
    lines: list[str] = []
    line = ""
    for word in argv:
        if line and cells(line) + 1 + cells(word) + 2 > width:
            lines.append(line + " \\")
            line = " " * indent + word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines


@dataclass(frozen=True)
class Col:
    """A listing column and how it gives way on a narrow terminal."""

    header: str
    right: bool = False
    limit: int | None = None  # widest the column ever is (longer cells are shortened)
    squeeze: int | None = None  # narrowest it may be shortened to when the line is too wide
    stack: int = 0  # > 0: may leave the table for a `header value` line beneath each row, highest first


Styled = tuple[str, str | None]  # a cell's plain text and its rich style (None: plain)
Line = tuple[str, list[tuple[int, int, str]]]  # a line and its style spans (start, end, style)


def _fit_columns(cols: Sequence[Col], widths: list[int], width: int, sep: int) -> tuple[list[int], list[int]]:
    """Which columns stay in the table and which are stacked, and the width of each column."""
    table = list(range(len(cols)))
    stacked: list[int] = []

    def total() -> int:
        return sum(widths[i] for i in table) + sep * (len(table) - 1)

    while total() > width:
        movable = [i for i in table if cols[i].stack > 0]
        if not movable:
            break
        out = max(movable, key=lambda i: (cols[i].stack, i))
        table.remove(out)
        stacked.append(out)
    excess = total() - width
    for i in sorted(table, key=lambda i: widths[i] - (cols[i].squeeze or widths[i]), reverse=True):
        floor = max(cols[i].squeeze or widths[i], cells(cols[i].header))
        take = min(max(excess, 0), max(widths[i] - floor, 0))
        widths[i] -= take
        excess -= take
    stacked.sort()
    return table, stacked


def listing(cols: Sequence[Col], rows: Iterable[Sequence[Styled]], width: int, sep: str = "  ") -> list[Line]:
    """Rows laid out as aligned columns in `width` cells: less important columns move beneath
    each row (`Col.stack`), then wide ones are shortened at word boundaries (`Col.squeeze`)."""
    body: list[list[Styled]] = []
    widths = [cells(c.header) for c in cols]
    for row in rows:
        cells_ = []
        for i, (text, style) in enumerate(row):
            limit = cols[i].limit
            if limit is not None:
                text = shorten(text, limit)
            widths[i] = max(widths[i], cells(text))
            cells_.append((text, style))
        body.append(cells_)
    natural = list(widths)
    table, stacked = _fit_columns(cols, widths, width, len(sep))
    for i in table:
        if widths[i] < natural[i]:  # squeezed: cut its cells now, and keep only the width they need
            for row in body:
                row[i] = (shorten(row[i][0], widths[i]), row[i][1])
            widths[i] = max([cells(cols[i].header)] + [cells(row[i][0]) for row in body])
    last = table[-1] if table else -1

    def pad(text: str, i: int) -> tuple[str, int]:
        """The cell at its column's width, and where its text starts in it."""
        text = shorten(text, widths[i])
        gap = widths[i] - cells(text)
        if cols[i].right:
            return " " * gap + text, gap
        return (text if i == last else text + " " * gap), 0

    header = sep.join(pad(cols[i].header, i)[0] for i in table).rstrip()
    lines: list[Line] = [(header, [(0, len(header), "bold")])]
    # stacked cells go under the second column when the first is narrow (an id, a hash), else at 4
    indent = widths[table[0]] + len(sep) if table and widths[table[0]] + len(sep) <= 16 else 4
    for row in body:
        parts: list[str] = []
        spans: list[tuple[int, int, str]] = []
        pos = 0
        for i in table:
            text, style = row[i]
            cell, start = pad(text, i)
            if style:
                spans.append((pos + start, pos + len(cell.rstrip()), style))
            parts.append(cell)
            pos += len(cell) + len(sep)
        lines.append((sep.join(parts).rstrip(), spans))
        extra = [(cols[i].header, row[i][0], row[i][1]) for i in stacked if row[i][0] not in ("", "-")]
        lines.extend(_stacked(extra, width, indent))
    return lines


def _stacked(items: list[tuple[str, str, str | None]], width: int, indent: int) -> list[Line]:
    """(header, value, style) items beneath a row as `header value`, packed; a styled cell keeps
    its style there (a mismatch that moved beneath its row still stands out)."""
    packed = pack([f"{header} {value}" for header, value, _ in items], width - indent)
    out: list[Line] = [(" " * indent + ln, []) for ln in packed]
    at_line, at = 0, 0
    for header, value, style in items:
        text = f"{header} {value}"
        while at_line < len(out):
            found = out[at_line][0].find(text, at)
            if found >= 0:
                if style:  # the value, not its header
                    out[at_line][1].append((found + len(header) + 1, found + len(text), style))
                at = found + len(text)
                break
            at_line, at = at_line + 1, 0
    return out
