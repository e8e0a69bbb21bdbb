"""`print_listing`: the aligned plain-text listing behind `pairs`, `runs` and `artifacts`."""

from __future__ import annotations

import io

from rich.console import Console

from specreg.commands._common import print_listing


def _render(*args: object, color: bool = False, **kw: object) -> str:
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=color, color_system="standard" if color else None, width=80)
    print_listing(*args, out=out, **kw)  # type: ignore[arg-type]
    return buf.getvalue()


def test_columns_align_numbers_right_and_the_last_column_is_not_padded() -> None:
    text = _render(("id", "name", "path"), [("1", "a", "/x"), ("100", "longer name", "/y/z")], right={0})
    assert _render(("a", "n"), [("x", "5"), ("y", "10")], right={1}).splitlines() == ["a   n", "x   5", "y  10"]
    assert text.splitlines() == [
        " id  name         path",
        "  1  a            /x",
        "100  longer name  /y/z",
    ]


def test_untrusted_cells_are_inert_and_capped() -> None:
    hostile = "[bold red]x[/] \x1b[2J\nsecond line"
    text = _render(("name", "n"), [(hostile, "1"), ("é" * 50, "2"), ("表" * 30, "3")], limits=(20, None))
    lines = text.splitlines()
    assert len(lines) == 4 and "\x1b" not in text  # one line per row, control codes escaped
    assert lines[1].startswith("[bold red]x[/] \\x1b…")  # markup literal, escape shown, cut at 20
    assert lines[2].startswith("é" * 19 + "…") and lines[3].startswith("表" * 9 + "…")
    # every row's second column starts at the same terminal cell (wide characters count double)
    from rich.cells import cell_len

    starts = {cell_len(ln[: ln.rindex(n)]) for ln, n in zip(lines[1:], "123", strict=False)}
    assert len(starts) == 1


def test_styles_only_where_the_console_shows_colour() -> None:
    rows = [("1", ("admitted", "green")), ("2", ("rejected", "red"))]
    plain = _render(("id", "verdict"), rows)
    assert "\x1b" not in plain and "admitted" in plain
    coloured = _render(("id", "verdict"), rows, color=True)
    assert "\x1b[32madmitted\x1b[0m" in coloured and "\x1b[31mrejected\x1b[0m" in coloured


def test_separator_and_empty_listing() -> None:
    assert _render(("a", "b"), [("x", "y")], sep=" │ ").splitlines() == ["a │ b", "x │ y"]
    assert _render(("a", "b"), []).splitlines() == ["a  b"]
