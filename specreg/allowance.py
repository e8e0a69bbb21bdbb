"""What a command allows each remote operation: its `--timeout`, else `SPECREG_TIMEOUT`, else
the default; one owner for the setting, the check of a value a user gave and its error line.

Kept apart from `remote.py` (which enforces it on every HTTP exchange) because every command
that may be given a URL sets it, and most runs are given local files only: `check pair` and
`inspect` of two paths set their allowance without importing the HTTP machinery.
"""

from __future__ import annotations

import contextvars
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from specreg.errors import UsageError
from specreg.text import escape_control

DEFAULT_TIMEOUT_S = 120.0  # one remote operation, when neither --timeout nor SPECREG_TIMEOUT says
TIMEOUT_ENV = "SPECREG_TIMEOUT"
MAX_TIMEOUT_S = 7 * 86400.0


@dataclass(frozen=True)
class Allowance:
    """The seconds one operation may take, and how a user changes them (for the error line)."""

    seconds: float | None  # None: SPECREG_TIMEOUT, else the default
    flag: str


_DEFAULT_ALLOWANCE = Allowance(None, f"{TIMEOUT_ENV}=SECONDS")  # a command without a --timeout
_ALLOWANCE: contextvars.ContextVar[Allowance | None] = contextvars.ContextVar("specreg_remote_allowance", default=None)


def allowance() -> Allowance:
    """The allowance in force: the command's (`allowing`), else one without a --timeout."""
    return _ALLOWANCE.get() or _DEFAULT_ALLOWANCE


def check_seconds(value: float, where: str) -> float:
    """A deadline a user gave: positive, finite, at most a week."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise UsageError(f"{where} {value}: give seconds above 0 (at most {MAX_TIMEOUT_S / 86400:g} days)")
    return float(value)


@contextmanager
def allowing(seconds: float | None, flag: str = "--timeout") -> Iterator[None]:
    """Inside: each remote operation may take `seconds` (None: SPECREG_TIMEOUT or the default),
    and a deadline error tells the user to change it with `flag` (the command's option)."""
    if seconds is not None:
        check_seconds(seconds, flag)
    token = _ALLOWANCE.set(Allowance(seconds, f"{flag} SECONDS"))
    try:
        yield
    finally:
        _ALLOWANCE.reset(token)


def allowed_seconds(default: float = DEFAULT_TIMEOUT_S) -> float:
    """The deadline of an operation starting now: the command's --timeout, else SPECREG_TIMEOUT,
    else `default` (a download passes one sized by the bytes it expects)."""
    given = allowance().seconds
    if given is not None:
        return given
    env = os.environ.get(TIMEOUT_ENV, "").strip()
    if env:
        try:
            return check_seconds(float(env), TIMEOUT_ENV)
        except ValueError:
            raise UsageError(f"{TIMEOUT_ENV}={escape_control(env, limit=40)}: expected seconds, e.g. 300") from None
    return default
