"""Property: on any mutation of a valid file the reader returns or raises GGUFError, nothing else.

Bounded to a few seconds; tests/fuzz/fuzz_reader.py runs the same oracle for as long as asked.
"""

from __future__ import annotations

import random

import pytest
from fuzz.fuzz_common import INTERESTING, exercise, mutate, scratch_dir, seed_files, write_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_DIR = scratch_dir()
SEEDS = seed_files(_DIR / "seeds")
TARGET = _DIR / "case.gguf"


def _check(data: bytes) -> None:
    write_case(TARGET, data)
    assert isinstance(exercise(TARGET), str)  # any exception other than GGUFError fails the test


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(SEEDS))), rng_seed=st.integers(0, 2**32 - 1))
def test_random_mutations_only_raise_gguf_error(seed: int, rng_seed: int) -> None:
    _check(mutate(random.Random(rng_seed), SEEDS[seed], SEEDS))


@settings(max_examples=150, deadline=None)
@given(seed=st.sampled_from(range(len(SEEDS))), data=st.data())
def test_structured_edits_in_the_header(seed: int, data: st.DataObject) -> None:
    """Hypothesis-chosen edits: an interesting integer written anywhere, then a truncation."""
    buf = bytearray(SEEDS[seed])
    pos = data.draw(st.integers(0, len(buf) - 1))
    width = data.draw(st.sampled_from([1, 4, 8]))
    value = data.draw(st.sampled_from(INTERESTING)) & ((1 << (8 * width)) - 1)
    buf[pos : pos + width] = value.to_bytes(width, "little")
    cut = data.draw(st.integers(0, len(buf)))
    _check(bytes(buf[:cut]))


@pytest.mark.parametrize("seed", range(len(SEEDS)))
def test_every_truncation_of_the_small_seed_headers(seed: int) -> None:
    """Cut at every byte of the first 2 KB: every strict prefix of a valid file is refused cleanly."""
    data = SEEDS[seed]
    results = set()
    for cut in range(0, min(len(data), 2048)):
        write_case(TARGET, data[:cut])
        results.add(exercise(TARGET))
    assert "ok" not in results and results
