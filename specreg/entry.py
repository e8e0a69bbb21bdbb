"""The `specreg` console script: the cycle collector is off from the first import.

A `specreg` process that inspects or checks a pair lives a fraction of a second and builds no
garbage cycles worth collecting, yet Python's cycle collector runs every few hundred
allocations while typer, pydantic and jinja2 define their classes, walking every object made
so far and freeing nothing (`benchmarks/bench_startup.py`, quiet machine: `check pair` on two
registered vocab files 726 ms of CPU, 788 ms with the collector on: 1.09x). It is switched off here, before any of
them is imported, and `cli.startup()` switches it back on for the commands that run long
(benchmarks, the demo, bundles, downloads, audits of whole fleets). Kept out of `specreg.cli`
so that importing the CLI (tests, embedders) changes nothing about their process.
"""

from __future__ import annotations

import gc


def main() -> None:
    gc.disable()
    from specreg.cli import main as run

    run()
