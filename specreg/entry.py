"""The `specreg` console script: the cycle collector is off from the first import.

A `specreg` process that inspects or checks a pair lives a fraction of a second and builds no
garbage cycles worth collecting, yet Python's cycle collector runs every few hundred
allocations while typer, pydantic and jinja2 define their classes, walking every object made
so far and freeing nothing (`benchmarks/bench_startup.py`, quiet machine: `check pair` on two
registered vocab files 726 ms of CPU, 788 ms with the collector on: 1.09x). It is switched off here, before any of
them is imported, and `cli.startup()` switches it back on for the commands that run long
(benchmarks, the demo, bundles, downloads, audits of whole fleets). Kept out of `specreg.cli`
so that importing the CLI (tests, embedders) changes nothing about their process.

Pydantic looks for plugins when it builds the first model's validator: `importlib.metadata`
is imported and every installed distribution's entry points are read (~10 ms of CPU before
`check pair` has read a byte, in a venv of a few hundred packages). specreg defines its models
for itself and uses no pydantic plugin, so the console script says so; a user who wants one
sets PYDANTIC_DISABLE_PLUGINS (even to an empty value) and the setting is theirs.
"""

from __future__ import annotations

import gc
import os


def main() -> None:
    gc.disable()
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from specreg.cli import main as run

    run()
