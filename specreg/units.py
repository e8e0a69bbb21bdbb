"""Quantities (bytes, durations), said one way in every message, table and record.

Sizes reach users from many places (a budget, a draft's weights, a server's peak RSS, a table
column); one set of helpers keeps "92.1 MiB" from reading "96.6 MB" or "0.09 GiB" elsewhere.
Ratios likewise: a draft-size ratio of 2.5533 reads the same, to two significant figures, in the
terminal and in every report.
"""

from __future__ import annotations

MIB = 1 << 20
GIB = 1 << 30


def to_mib(n: int | None) -> float | None:
    """Bytes as a float number of MiB (records and gates compare MiB); None stays None."""
    return None if n is None else n / MIB


def size_text(n: int) -> str:
    """Bytes in the unit that reads best: 426 KiB, 92.1 MiB, 513 MiB, 14.2 GiB."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"
    return f"{n} B"


def mib_text(n: int | None, *, signed: bool = False, grouped: bool = False) -> str:
    """Bytes as a MiB figure for a column headed 'MiB' (one decimal); '-' when unknown."""
    if n is None:
        return "-"
    spec = ("+" if signed else "") + ("," if grouped else "") + ".1f"
    return format(n / MIB, spec)


_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """A duration as the options take it (`8m`, `1.5h`, a number with `s`, or plain seconds) ->
    seconds; ValueError with the accepted forms."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h)?\s*", text.lower())
    if not m:
        raise ValueError(f"{text!r}: expected a duration such as 8m, 90s or 1.5h")
    if float(m.group(1)) <= 0:  # a well-formed zero: the form is right, the amount is not
        raise ValueError(f"{text!r}: must be more than 0, e.g. 8m, 90s or 1.5h")
    return float(m.group(1)) * _DURATION_UNITS[m.group(2) or ""]


def sig_text(value: float, digits: int = 2) -> str:
    """`value` to `digits` significant figures, never in exponent form: 2.5533 -> 2.6, 0.0345 -> 0.035,
    85.27 -> 85, 1234 -> 1,200 (trailing zeros kept where they are significant: 1.0, 0.50)."""
    import math

    if value == 0 or not math.isfinite(value):
        return f"{value:.{max(digits - 1, 0)}f}" if value == 0 else str(value)
    exp = math.floor(math.log10(abs(value)))
    places = digits - 1 - exp
    rounded = round(value, places)
    if rounded and math.floor(math.log10(abs(rounded))) > exp:  # 9.96 -> 10: one place fewer
        places -= 1
    return f"{rounded:,.{max(places, 0)}f}"


def ratio_text(value: float | None, *, digits: int = 2, none: str = "-") -> str:
    """A ratio (a speed-up, a size ratio) to two significant figures, then `x`; `none` when unknown."""
    return none if value is None else f"{sig_text(value, digits)}x"


def apart_text(a: float, b: float, *, places: int = 2, most: int = 6) -> tuple[str, str]:
    """`a` and `b` with the fewest decimal places (at least `places`) at which they print
    differently, so that a comparison shown between them reads true: 1.0493 < 1.05 printed at two
    places would read "1.05 < 1.05". Equal values (or ones apart only past `most` places)
    print at `places`. `b` (the bar a policy sets) loses its trailing zeros: 1.05, not 1.050."""

    def bar(text: str) -> str:
        return text.rstrip("0").rstrip(".") if "." in text else text

    for p in range(places, most + 1):
        x, y = f"{a:.{p}f}", f"{b:.{p}f}"
        if x != y:
            return x, bar(y)
    return f"{a:.{places}f}", bar(f"{b:.{places}f}")
