"""Output that fits the terminal: `layout` (wrap, shorten, pack, listing) and `print_listing`."""

from __future__ import annotations

import io
import re

from rich.cells import cell_len
from rich.console import Console

from specreg.commands.layout import Col, command_lines, listing, pack, shorten, wrap
from specreg.commands.output import print_listing

CUT_WORD = re.compile(r"[A-Za-z0-9]…|…[A-Za-z0-9]")  # an ellipsis touching a letter or digit cut a word


def _render(*args: object, color: bool = False, width: int = 80, **kw: object) -> str:
    buf = io.StringIO()
    out = Console(file=buf, force_terminal=color, color_system="standard" if color else None, width=width)
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


def test_untrusted_cells_are_inert_and_cut_between_words() -> None:
    hostile = "[bold red]x[/] \x1b[2J\nsecond line"
    rows = [(hostile, "1"), ("é" * 50, "2"), ("表" * 30, "3"), ("Qwen2.5 Coder 32B Instruct", "4")]
    text = _render(("name", "n"), rows, limits=(20, None))
    lines = text.splitlines()
    assert len(lines) == 5 and "\x1b" not in text  # one line per row, control codes escaped
    assert lines[1].startswith("[bold red]x[/] …")  # markup literal, cut after a whole word
    assert lines[2].startswith("…  ")  # one long word: never half of it
    assert lines[3].startswith("表" * 9 + "…")  # CJK has no spaces: a cut between characters is whole
    assert lines[4].startswith("Qwen2.5 Coder 32B …")
    assert not CUT_WORD.search(text)
    starts = {cell_len(ln[: ln.rindex(n)]) for ln, n in zip(lines[1:], "1234", strict=True)}
    assert len(starts) == 1  # every row's second column starts at the same terminal cell


def test_styles_only_where_the_console_shows_colour() -> None:
    rows = [("1", ("admitted", "green")), ("2", ("rejected", "red"))]
    plain = _render(("id", "verdict"), rows)
    assert "\x1b" not in plain and "admitted" in plain
    coloured = _render(("id", "verdict"), rows, color=True)
    assert "\x1b[32madmitted\x1b[0m" in coloured and "\x1b[31mrejected\x1b[0m" in coloured


def test_separator_and_empty_listing() -> None:
    assert _render(("a", "b"), [("x", "y")], sep=" │ ").splitlines() == ["a │ b", "x │ y"]
    assert _render(("a", "b"), []).splitlines() == ["a  b"]


def test_a_narrow_terminal_stacks_then_squeezes_columns() -> None:
    cols = [
        Col("id", right=True),
        Col("name", squeeze=8),
        Col("method"),
        Col("path", stack=2),
        Col("when", stack=1),
    ]
    rows = [
        [
            ("7", None),
            ("SmolLM2 135M Instruct Q8_0", None),
            ("draft-simple", None),
            ("/models/a/very/long/folder/name/smollm2-135m-instruct-q8_0.gguf", None),
            ("2026-01-02 03:04", None),
        ]
    ]
    wide = [text for text, _ in listing(cols, rows, 200)]
    assert wide[0].split() == ["id", "name", "method", "path", "when"] and len(wide) == 2
    narrow = [text for text, _ in listing(cols, rows, 40)]
    assert narrow[0].split() == ["id", "name", "method"]  # path and when moved beneath the row
    assert all(cell_len(ln) <= 40 and ln == ln.rstrip() for ln in narrow)
    assert "SmolLM2 135M …  draft-simple" in narrow[1] and not CUT_WORD.search("\n".join(narrow))
    beneath = " ".join(narrow[2:])
    assert "path /models/a/very/long/" in beneath and "when 2026-01-02 03:04" in beneath


def test_wrap_breaks_at_spaces_then_inside_paths_and_keeps_the_prefix() -> None:
    text = "p95 96.3 ms > limit 23.6 ms, see /very/long/path/to/some/model-file-name-q4_k_m.gguf now"
    lines = wrap(text, 40, 4, prefix="pair 1 speed:")
    assert lines[0].startswith("pair 1 speed: p95 96.3 ms")
    assert all(cell_len(ln) <= 40 and ln == ln.rstrip() for ln in lines)
    assert all(ln.startswith("    ") for ln in lines[1:])
    assert "/very/long/path/to/some/model-file-name-q4_k_m.gguf" in "".join(ln.strip() for ln in lines)
    assert wrap("a\nb", 80, 2) == ["a", "  b"] and wrap("", 80) == [""]


def test_pack_and_commands_never_split_an_item() -> None:
    items = ["runtime bundled xllamacpp 2026.10.11549", "workload default", "repeat 3", "concurrency 1", "seed 42"]
    lines = pack(items, 40, indent=2)
    assert all(cell_len(ln) <= 40 for ln in lines)
    assert all(item in lines_ for item in items for lines_ in ["\n".join(lines)])
    cmd = command_lines(["llama-server", "-m", "/m/target.gguf", "-md", "/m/draft.gguf", "--port", "8080"], 30)
    assert all(ln.endswith(" \\") for ln in cmd[:-1]) and all(cell_len(ln) <= 30 for ln in cmd)
    assert " ".join(ln.removesuffix(" \\").strip() for ln in cmd).split() == [
        "llama-server",
        "-m",
        "/m/target.gguf",
        "-md",
        "/m/draft.gguf",
        "--port",
        "8080",
    ]


def test_shorten_marks_every_cut() -> None:
    assert shorten("short", 10) == "short"
    assert shorten("SmolLM2-135M-Instruct", 12) == "SmolLM2-…"
    assert shorten("abcdefghijk", 5) == "…"
