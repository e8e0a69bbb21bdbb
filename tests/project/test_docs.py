"""The documentation site keeps up with the code: commands, options, check codes, policy keys, pages.

The reference lives in docs/ (MkDocs, mkdocs.yml at the root). A command or option added without
regenerating the CLI reference, a check code a validator emits without its row in docs/check.md,
a policy key without its row (and its real default) in docs/policy.md, a page left out of the
navigation or a broken link fails here, as `mkdocs build --strict` fails in CI.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from pydantic import BaseModel
from typer.testing import CliRunner

from specreg import cli
from specreg.schemas.audit import Policy

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PACKAGE = ROOT / "specreg"
# Where checks are made: the validators, the memory budget, the runtime probe (and its CLI half).
CHECK_SOURCES = [*sorted((PACKAGE / "validators").glob("*.py")), PACKAGE / "benchmark/run/probe.py"]
CHECK_SOURCES.append(PACKAGE / "commands/_probe.py")
CODE = re.compile(
    r"(vocab|arch|file|draft|target|eagle3|dflash|dspark|mtp|structure|template|memory|probe)\.[a-z0-9_]+"
)
PAGES = [
    "index",
    "getting-started",
    "check",
    "registry",
    "gguf",
    "rules",
    "bench",
    "audit",
    "policy",
    "bundles",
    "statistics",
    "security",
    "performance",
    "cli",
    "development",
]


def _gen() -> Any:
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_cli_docs
    finally:
        sys.path.pop(0)
    return gen_cli_docs


def _commands() -> list[list[str]]:
    out: list[list[str]] = []
    for name, ref, _ in cli.COMMANDS:
        target = cli.load(ref)
        if isinstance(target, typer.Typer):
            out += [[name], *([name, str(sub.name)] for sub in target.registered_commands)]
        else:
            out.append([name])
    return out


# ---- the site ------------------------------------------------------------------------------


def test_every_page_exists_and_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text("utf-8")
    for page in PAGES:
        assert (DOCS / f"{page}.md").is_file(), page
        assert f" {page}.md\n" in nav, f"{page}.md is not in mkdocs.yml's nav"
    assert "name: material" in nav


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link or anchor, a missing page or one outside the navigation fails the build."""
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "policy" / "index.html").is_file()


# ---- the CLI reference, generated from the typer app ------------------------------------------


def test_the_cli_reference_is_what_the_generator_writes() -> None:
    assert (DOCS / "cli.md").read_text("utf-8") == _gen().render(), "docs/cli.md is stale: python tools/gen_cli_docs.py"


def _section(page: str, title: str) -> str:
    parts = re.split(r"^## ", page, flags=re.M)
    for part in parts:
        if part.split("\n", 1)[0] == title:
            return part
    raise AssertionError(f"docs/cli.md has no section '## {title}'")


def _options(argv: list[str]) -> list[str]:
    """Every option name the command takes, from click's own parameter list."""
    group: Any = typer.main.get_command(cli.app)
    ctx = group.make_context("specreg", ["--help"], resilient_parsing=True)
    cmd: Any = group
    for word in argv:
        cmd = cmd.get_command(ctx, word)
    names: list[str] = []
    for p in cmd.params:  # typer vendors click (typer._click): no isinstance against click's classes
        if p.param_type_name == "option" and not getattr(p, "hidden", False):
            names += [n for n in [*p.opts, *p.secondary_opts] if n.startswith("-")]
    return names


@pytest.mark.parametrize("argv", _commands(), ids=" ".join)
def test_every_command_and_option_is_in_the_cli_reference(argv: list[str]) -> None:
    page = (DOCS / "cli.md").read_text("utf-8")
    section = _section(page, " ".join(["specreg", *argv]))
    options = _options(argv)
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", section), f"{argv}: {option} not in docs/cli.md"
    result = CliRunner().invoke(cli.app, [*argv, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "Examples" in result.output, f"{argv}: --help has no examples"


def test_the_option_walk_finds_the_options_it_should() -> None:
    found = {o for argv in _commands() for o in _options(argv)}  # a walk that finds nothing passes above
    assert {"--method", "--strict", "--budget", "--concurrency", "--policy", "--stratum", "--real"} <= found


def test_the_cli_reference_lists_the_commands_in_pipeline_order() -> None:
    titles = re.findall(r"^## (specreg.*)$", (DOCS / "cli.md").read_text("utf-8"), flags=re.M)
    assert titles == ["specreg", *(" ".join(["specreg", *argv]) for argv in _commands())]


# ---- check codes ----------------------------------------------------------------------------


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
    page = (DOCS / "check.md").read_text("utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)` \|", page.split("## Check codes", 1)[1], flags=re.M))
    missing = sorted((_emitted_codes() | {"vocab.bos", "vocab.eos"}) - rows)  # bos/eos: f"vocab.{tok}"
    assert not missing, f"check codes without a row in docs/check.md: {missing}"


# ---- policy keys ----------------------------------------------------------------------------


def _policy_keys(model: type[BaseModel], prefix: str = "") -> dict[str, Any]:
    """Every dotted key of the policy model with its default."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _policy_keys(ann, f"{prefix}{name}.")
        else:
            out[f"{prefix}{name}"] = field.get_default(call_default_factory=True)
    return out


def _shown(value: Any) -> str:
    """A default as the policy page writes it: TOML literals, `unset` for None."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list | tuple):
        return f"`{json.dumps(list(value))}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    return f"`{value}`"


def test_every_policy_key_is_documented_with_its_real_default() -> None:
    rows = {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^\| `([a-z0-9_.]+)` \| ([^|]+) \|", (DOCS / "policy.md").read_text("utf-8"), flags=re.M)
    }
    keys = _policy_keys(Policy)
    assert len(keys) > 25  # the walk found the nested tables
    for key, default in keys.items():
        assert key in rows, f"policy key {key} has no row in docs/policy.md"
        shown = _shown(default)
        if isinstance(default, float):  # 10.0 may be written 10.0, 0.10 as 0.10
            assert float(rows[key].strip("`")) == default, f"{key}: docs say {rows[key]}, the model {default}"
        else:
            assert rows[key] == shown, f"{key}: docs say {rows[key]}, the model {shown}"
    assert not set(rows) - set(keys), f"docs/policy.md documents keys the model lacks: {sorted(set(rows) - set(keys))}"
