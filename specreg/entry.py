"""The `specreg` console script: the cycle collector is off from the first import.

A `specreg` process that inspects or checks a pair lives a fraction of a second and builds no
garbage cycles worth collecting, yet Python's cycle collector runs every few hundred
allocations while typer, pydantic and jinja2 define their classes, walking every object made
so far and freeing nothing (`benchmarks/bench_startup.py` prints what it saves `check pair` on
two registered vocab files: 1.09x when that built pydantic models, 0.93-1.20x since it builds
none, the machine's noise). It is switched off here, before any of them is imported, and
`cli.startup()` switches it back on for the commands that run long (benchmarks, the demo,
bundles, downloads, audits of whole fleets). Kept out of `specreg.cli`
so that importing the CLI (tests, embedders) changes nothing about their process.

Pydantic looks for plugins when it builds the first model's validator: `importlib.metadata`
is imported and every installed distribution's entry points are read (~10 ms of CPU before
`pairs` or `audit` has read a byte, in a venv of a few hundred packages; `check pair` no longer
builds one). specreg defines its models
for itself and uses no pydantic plugin, so the console script says so; a user who wants one
sets PYDANTIC_DISABLE_PLUGINS (even to an empty value) and the setting is theirs. With every
plugin off, pydantic's loader module is not even imported: it imports `importlib.metadata` (and
with it `email`, `zipfile`, `csv`, `socket`: ~10 ms of `check pair`) only to look up entry points
it is told not to look up. Its one function, `get_plugins`, answers () under that setting, and so
does the stand-in put in its place here (`_no_plugin_loader`).
"""

from __future__ import annotations

import gc
import os
import sys
import types

_LOADER = "pydantic.plugin._loader"  # the one module pydantic looks its plugins up in


def _no_plugin_loader() -> None:
    """Stand in for pydantic's plugin loader while every plugin is off (see the module's docstring)."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") != "__all__" or _LOADER in sys.modules:
        return
    loader = types.ModuleType(_LOADER, "specreg's stand-in: PYDANTIC_DISABLE_PLUGINS=__all__, no plugin is loaded")
    loader.get_plugins = tuple  # type: ignore[attr-defined]  # () like pydantic's under that setting
    sys.modules[_LOADER] = loader


def main() -> None:
    gc.disable()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    _no_plugin_loader()
    from specreg import teardown
    from specreg.cli import main as run

    teardown.arm()
    try:
        run()
    except SystemExit as exc:  # cli.main always ends so: a large result kept is not freed (teardown.py)
        teardown.end(exc.code)
