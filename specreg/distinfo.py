"""Installed packages' versions, read from their `.dist-info` folder names on `sys.path`.

`importlib.metadata.version()` gives the same answer, but importing it loads `email`, `zipfile`
and friends on every `check pair` (the bundled server's build chooses the rule set) and every
`--version` (benchmarks/bench_startup.py times both).
A wheel install always leaves `<name>-<version>.dist-info` in a `sys.path` folder, so a scan of
those folders' names answers without opening a file; anything else (an egg, a zipped path, an
unusual layout) falls back to `importlib.metadata`.
"""

from __future__ import annotations

import os
import re
import sys


def _normal(name: str) -> str:
    """PEP 503 normalisation, with `_` as wheel folder names spell it."""
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_version(name: str) -> str | None:
    """The installed version of distribution `name`; None when it is not installed."""
    want = _normal(name)
    for entry in sys.path:
        try:
            with os.scandir(entry or ".") as it:
                names = [e.name for e in it if e.name.endswith(".dist-info")]
        except OSError:  # a zip, a missing folder
            continue
        for folder in names:
            dist, sep, version = folder[: -len(".dist-info")].rpartition("-")
            if sep and _normal(dist) == want:
                return version
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(name)
    except PackageNotFoundError:
        return None
