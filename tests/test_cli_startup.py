"""What every `specreg` invocation pays before its command runs: imports and building the CLI.

`cli.startup()` holds every start-up measure; these tests pin each one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specreg import cli


def test_startup_imports_nothing_heavy() -> None:
    code = (
        "import sys, specreg.cli; "
        "print(sorted(m for m in ('click', 'numpy', 'gguf', 'sqlite_utils', 'huggingface_hub', 'httpx', "
        "'psutil', 'specreg.registry.store', 'specreg.benchmark.run.runner') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("name", cli.NAMES)
def test_only_the_command_being_run_is_built_and_it_behaves_the_same(name: str) -> None:
    only = cli.startup(["--db", "x.db", name, "--help"])
    assert only is not cli.app
    assert [c.name for c in only.registered_commands + only.registered_groups] == [name]
    runner = CliRunner()
    assert runner.invoke(only, [name, "--help"]).output == runner.invoke(cli.app, [name, "--help"]).output


# Each command imports its own stage and nothing of the others' (a fresh process per command).
NOT_IMPORTED = {
    "inspect": ("pydantic", "specreg.registry.store", "specreg.validators.pair", "specreg.benchmark", "jinja2"),
    "check": ("specreg.benchmark.run.runner", "specreg.audit", "specreg.report", "numpy", "httpx", "psutil"),
    "pairs": ("specreg.benchmark.run.runner", "specreg.audit", "specreg.report", "numpy", "jinja2"),
    "artifacts": ("specreg.benchmark", "specreg.audit", "specreg.validators.pair", "numpy", "jinja2"),
}


@pytest.mark.parametrize("name", sorted(NOT_IMPORTED))
def test_a_command_imports_only_its_own_stage(name: str) -> None:
    code = (
        "import sys\n"
        "from specreg import cli\n"
        f"cli.startup([{name!r}, '--help'])\n"
        f"print(sorted(m for m in {NOT_IMPORTED[name]!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--help"],
        ["--db", "x.db"],
        ["no-such-command"],
        ["--bogus", "pairs"],
        ["--version", "--help"],
        ["chek"],
        ["--db", "x.db", "--help"],
    ],
)
def test_root_options_and_unknown_words_get_the_index_which_answers_as_the_whole_app(argv: list[str]) -> None:
    index = cli.startup(argv)
    assert index is cli.index_app() and index is not cli.app
    runner = CliRunner()
    for width in ("40", "80", "140"):
        got, full = (runner.invoke(app, argv, env={"COLUMNS": width}) for app in (index, cli.app))
        assert (got.exit_code, got.output) == (full.exit_code, full.output), (argv, width)
        assert type(got.exception) is type(full.exception) and str(got.exception) == str(full.exception)


def test_the_version_builds_no_command() -> None:
    only = cli.startup(["--version"])
    assert only is not cli.app and not only.registered_commands and not only.registered_groups


# What `--help` and `--version` must never load: every one costs tens of milliseconds (pydantic
# builds schemas, rich lays out, xllamacpp loads llama.cpp) and none of them is needed to answer.
HEAVY = (
    "specreg.schemas.bench",
    "specreg.schemas.audit",
    "specreg.schemas.checks",
    "specreg.schemas.registry",
    "pydantic",
    "rich",
    "matplotlib",
    "numpy",
    "httpx",
    "huggingface_hub",
    "xllamacpp",
    "psutil",
    "sqlite3",
)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_import_nothing_heavy(flag: str) -> None:
    code = (
        "import sys\n"
        "from specreg.cli import main\n"
        f"try:\n    main([{flag!r}])\nexcept SystemExit:\n    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
    assert ("Usage: specreg" if flag == "--help" else "specreg ") in proc.stdout


def test_version_names_specreg_and_the_bundled_runtime() -> None:
    from importlib.metadata import version

    out = subprocess.run(
        [sys.executable, "-m", "specreg.cli", "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        f"specreg {version('specreg')}",
        f"bundled runtime: xllamacpp {version('xllamacpp')} (llama.cpp, run as specreg-llama-server)",
    ]


def _pair_files(folder: Path) -> tuple[Path, Path]:
    """A tiny target and a draft that differs from it only in its weights: a pair `check pair` admits."""
    from specreg.testing import ModelSpec, write_model

    return write_model(folder / "t.gguf", ModelSpec()), write_model(folder / "d.gguf", ModelSpec(seed=3))


def test_the_console_script_keeps_installed_pydantic_plugins_out_unless_the_user_asks(tmp_path: Path) -> None:
    """A pydantic plugin installed in the environment would see every validation of facts read
    from untrusted files: `specreg` turns plugins off (PYDANTIC_DISABLE_PLUGINS), and a setting
    of the user's own (here: empty, every plugin on) is kept. `pairs` validates the verdicts it
    reads from the registry (`check pair` itself builds no validator)."""
    t, d = _pair_files(tmp_path)
    plugins = tmp_path / "plugins"
    info = plugins / "spy_plugin-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spy-plugin\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    seen = tmp_path / "seen.txt"
    (plugins / "spy_plugin.py").write_text(
        "import os\n"
        "class _Spy:\n"
        "    def new_schema_validator(self, schema, schema_type, *args, **kwargs):\n"
        "        with open(os.environ['SPY_SEEN'], 'a') as f:\n"
        "            f.write(repr(schema_type) + '\\n')\n"
        "        return None, None, None\n"
        "plugin = _Spy()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    path = os.pathsep.join([str(plugins), *filter(None, [os.environ.get("PYTHONPATH")])])
    env |= {"SPECREG_DB": str(tmp_path / "r.db"), "PYTHONPATH": path, "SPY_SEEN": str(seen)}
    for own in (None, ""):
        seen.unlink(missing_ok=True)
        run_env = env if own is None else {**env, "PYDANTIC_DISABLE_PLUGINS": own}
        for argv in (["check", "pair", str(t), str(d), "--json"], ["pairs", "--json"]):
            proc = subprocess.run([sys.executable, "-m", "specreg", *argv], capture_output=True, text=True, env=run_env)
            assert proc.returncode in (0, 1), proc.stderr
        assert json.loads(proc.stdout)[0]["admitted"] is True
        assert seen.exists() == (own is not None), own  # the user's own setting: the plugin sees the records


# What `check pair` and `inspect` load when they run (not only their `--help`): the start-up
# budgets (benchmarks/bench_startup.py) hold only while these stay out. `inspect` reads a file and
# stores nothing. `check pair` of files new to the registry writes its records with pydantic-core's
# serializer and returns what it wrote: no pydantic validator is built (nor pydantic imported);
# a check of registered files reads back rows as specreg wrote them, which needs no validator
# either (a damaged row would be validated by pydantic). Neither imports the HTTP machinery
# (specreg.remote) for local files: a command's --timeout is set through specreg.allowance.
RUN_HEAVY = (
    "pydantic",
    "numpy",
    "httpx",
    "huggingface_hub",
    "psutil",
    "xllamacpp",
    "matplotlib",
    "rich",
    "gguf",
    "specreg.remote",
)


@pytest.mark.parametrize(
    ("argv", "new", "registered"),
    [
        (["inspect", "{t}"], RUN_HEAVY, RUN_HEAVY),
        (["check", "pair", "{t}", "{d}"], RUN_HEAVY, RUN_HEAVY),
    ],
)
def test_inspect_and_check_pair_run_without_heavy_imports(
    argv: list[str], new: tuple[str, ...], registered: tuple[str, ...], tmp_path: Path
) -> None:
    t, d = _pair_files(tmp_path)
    code = (
        "import sys\n"
        "from specreg.cli import main\n"
        "try:\n    main(sys.argv[2:])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "print(sorted(m for m in sys.argv[1].split(',') if m in sys.modules))\n"
    )
    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db")}
    args = [a.format(t=t, d=d) for a in argv]
    for heavy in (new, registered):  # files new to the registry, then registered
        proc = subprocess.run(
            [sys.executable, "-c", code, ",".join(heavy), *args], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout
