"""What every bench view shares: the marks, the colour of a status, and how a number reads.

Live progress, run lists and a run's detail are three views of one run; they say `✗` for an
output that differs and colour a status the same way, so a reader moving between them reads
them alike. Declared once here, not once per view.
"""

from __future__ import annotations

MISMATCH_MARK = "\u2717"  # ✗: an output that differs from the baseline (with colour, where there is colour)
WARN_MARK = "!"  # a number to read with care (a warm-up that never settled)
STATUS_STYLE = {  # a run's or a condition's status, coloured
    "ok": "green",
    "complete": "green",
    "failed": "bold red",
    "incomplete": "yellow",
    "contended": "yellow",
    "cancelled": "yellow",
    "aborted": "red",
    "skipped": "dim",
    "running": "cyan",
    "pending": "dim",
}


def ms_text(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def num_text(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def pct_text(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"
