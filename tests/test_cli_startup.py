"""What every `specreg` invocation pays before its command runs: imports and building the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specreg import cli


def test_startup_imports_nothing_heavy() -> None:
    code = (
        "import sys, specreg.cli; "
        "print(sorted(m for m in ('click', 'numpy', 'gguf', 'sqlite_utils', 'huggingface_hub', 'httpx', "
        "'psutil', 'specreg.registry.store', 'specreg.benchmark.runner') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


NAMES = sorted([c.name for c in cli.app.registered_commands] + [g.name for g in cli.app.registered_groups])


@pytest.mark.parametrize("name", NAMES)
def test_only_the_command_being_run_is_built_and_it_behaves_the_same(name: str) -> None:
    only = cli._app_for(["--db", "x.db", name, "--help"])
    assert only is not cli.app
    runner = CliRunner()
    assert runner.invoke(only, [name, "--help"]).output == runner.invoke(cli.app, [name, "--help"]).output


@pytest.mark.parametrize("argv", [[], ["--help"], ["--db", "x.db"], ["no-such-command"], ["--bogus", "pairs"]])
def test_root_options_and_unknown_words_get_the_whole_app(argv: list[str]) -> None:
    assert cli._app_for(argv) is cli.app
