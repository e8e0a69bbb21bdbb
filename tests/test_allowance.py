"""specreg.allowance: what a command allows each remote operation (--timeout, SPECREG_TIMEOUT,
the default), what remote.operation takes from it, and the error line of a value out of bounds."""

from __future__ import annotations

import pytest
from hubserver import assert_one_line_error, run_cli

from specreg import allowance, remote
from specreg.errors import UsageError


def test_allowances_and_their_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with allowance.allowing(7.5):
        assert allowance.allowed_seconds() == 7.5
        with remote.operation("x") as op:
            assert op.seconds == 7.5 and op.flag == "--timeout SECONDS"
    monkeypatch.setenv(allowance.TIMEOUT_ENV, "12")
    assert allowance.allowed_seconds() == 12
    monkeypatch.setenv(allowance.TIMEOUT_ENV, "soon")
    with pytest.raises(UsageError, match="SPECREG_TIMEOUT=soon: expected seconds"):
        allowance.allowed_seconds()
    for bad in (0, -1, float("nan"), float("inf"), 1e9):
        with pytest.raises(UsageError, match="--timeout"), allowance.allowing(bad):
            pass
    assert_one_line_error(run_cli("inspect", "https://127.0.0.1:9/x.gguf", "--timeout", "0"), "--timeout 0")
