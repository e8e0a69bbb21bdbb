"""README.md keeps up with the code: every command, its help, and every check code the code emits.

The README is the user's reference (STYLE: "a test that every command has help and appears in the
docs"). A command added to `cli.COMMANDS`, or a check code added to a validator, without its README
text fails here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specreg import cli

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text("utf-8")
PACKAGE = ROOT / "specreg"
# Where checks are made: the validators, the memory budget, the runtime probe (and its CLI half).
CHECK_SOURCES = [*sorted((PACKAGE / "validators").glob("*.py")), PACKAGE / "benchmark/probe.py"]
CHECK_SOURCES.append(PACKAGE / "commands/_probe.py")
CODE = re.compile(
    r"(vocab|arch|file|draft|target|eagle3|dflash|dspark|mtp|structure|template|memory|probe)\.[a-z0-9_]+"
)


def _glance() -> str:
    """The first code block of the "Commands at a glance" section."""
    section = README.split("## Commands at a glance", 1)[1]
    return section.split("```", 2)[1]


def test_the_glance_block_lists_every_command_in_pipeline_order() -> None:
    listed = re.findall(r"^specreg ([a-z]+)", _glance(), flags=re.M)
    names = [name for name, _, _ in cli.COMMANDS]
    assert listed == names, "README 'Commands at a glance' is out of order, incomplete or names a command that is gone"


def _commands() -> list[list[str]]:
    out: list[list[str]] = []
    for name, ref, _ in cli.COMMANDS:
        target = cli.load(ref)
        if isinstance(target, typer.Typer):
            out += [[name], *([name, str(sub.name)] for sub in target.registered_commands)]
        else:
            out.append([name])
    return out


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_every_command_has_help_with_an_example_and_a_readme_section(argv: list[str]) -> None:
    result = CliRunner().invoke(cli.app, [*argv, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "Example: specreg " in result.output
    assert f"specreg {' '.join(argv)}" in README
    for option in re.findall(r"^\s+(?:-[a-z]+, )?(--[a-z0-9-]+)", result.output, flags=re.M):
        if option != "--help":
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", README), f"{argv}: {option} not in README"


def _emitted_codes() -> set[str]:
    """Every check code written as a string literal where checks are made (f-strings: their prefixes)."""
    codes: set[str] = set()
    for path in CHECK_SOURCES:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CODE.fullmatch(node.value):
                codes.add(node.value)
    return codes


def test_the_code_scan_finds_the_codes_it_should() -> None:
    codes = _emitted_codes()  # a scan that finds nothing would pass the test below
    assert {"vocab.tokens", "eagle3.d2t", "template.dunder", "memory.budget", "probe.agreement"} <= codes
    assert len(codes) > 40


def test_every_check_code_has_a_row_in_the_check_code_tables() -> None:
    rows = set(re.findall(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)` \|", README, flags=re.M))
    missing = sorted((_emitted_codes() | {"vocab.bos", "vocab.eos"}) - rows)  # bos/eos: f"vocab.{tok}"
    assert not missing, f"check codes without a README row: {missing}"


def test_ci_runs_exactly_the_readme_test_command_which_ends_with_the_wheel_check() -> None:
    blocks = re.findall(r"```bash\n(.*?)\n```", README.split("## The two commands", 1)[1], re.S)
    demo, test = blocks[0].strip(), blocks[1].strip()
    assert "pip install -q . " in demo and "-e" not in demo  # users install the wheel, not an editable tree
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == test
    assert test.endswith("&& .venv/bin/python tools/check_wheel.py") and (ROOT / "tools" / "check_wheel.py").is_file()
