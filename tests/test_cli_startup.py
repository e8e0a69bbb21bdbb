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


def test_an_ending_process_skips_the_last_cycle_hunt_once() -> None:
    """gc.freeze runs at exit (after the handlers registered before start-up), however often start-up ran."""
    code = (
        "import atexit, gc\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0))\n"
        "from specreg import cli\n"
        "cli.startup(['pairs']); cli.startup(['--help'])\n"
        "print('frozen', gc.get_freeze_count() > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["frozen False", "frozen True"]


def test_the_console_script_runs_short_commands_without_the_cycle_collector(tmp_path: Path) -> None:
    """specreg/entry.py switches the collector off before the first import; `cli.startup()` turns
    it back on for the commands that run long, and only for those."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('GC', gc.isenabled()))\n"
        "from specreg.entry import main\n"
        "sys.argv = ['specreg', *sys.argv[1:]]\n"
        "main()\n"
    )
    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db")}
    from specreg.registry.store import Registry

    Registry(tmp_path / "r.db").close()
    for argv, enabled in ((["pairs"], False), (["runs"], True), (["--version"], False)):
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"GC {enabled}" in proc.stdout, (argv, proc.stdout)
    assert cli.LONG_RUNNING.issubset(cli.NAMES)


def _pair_files(folder: Path) -> tuple[Path, Path]:
    """A tiny target and a draft that differs from it only in its weights: a pair `check pair` admits."""
    from specreg.testing import ModelSpec, write_model

    return write_model(folder / "t.gguf", ModelSpec()), write_model(folder / "d.gguf", ModelSpec(seed=3))


def test_the_console_script_leaves_pydantic_plugin_lookup_out_unless_asked_for(tmp_path: Path) -> None:
    """`check pair` imports no pydantic at all (schemas/record.py); `--json` does (its output is
    pydantic's), and entry.py has turned pydantic's plugins off and stands in for its loader:
    `importlib.metadata` (and `email`) stay out. A PYDANTIC_DISABLE_PLUGINS of the user's own
    keeps pydantic's loader, which looks plugins up as it always does."""
    t, d = _pair_files(tmp_path)
    code = (
        "import atexit, sys\n"
        "mods = ('importlib.metadata', 'email')\n"
        "loader = lambda: sys.modules.get('pydantic.plugin._loader')\n"
        "atexit.register(lambda: print('LOADED', sorted(m for m in mods if m in sys.modules),"
        " 'pydantic' in sys.modules, loader() and type(loader().get_plugins()).__name__))\n"
        "from specreg.entry import main\n"
        "sys.argv = ['specreg', *sys.argv[1:]]\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["SPECREG_DB"] = str(tmp_path / "r.db")
    for own, json_out, expected in (
        (None, [], "LOADED [] False tuple"),
        (None, ["--json"], "LOADED [] True tuple"),
        ("", ["--json"], "LOADED ['email', 'importlib.metadata'] True dict_values"),
    ):
        run_env = env if own is None else {**env, "PYDANTIC_DISABLE_PLUGINS": own}
        argv = ["check", "pair", str(t), str(d), *json_out]
        proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=run_env)
        assert proc.returncode in (0, 1), proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == expected, proc.stdout


def test_long_running_commands_turn_the_collector_back_on() -> None:
    import gc

    try:
        gc.disable()
        cli.startup(["check", "pair", "--help"])
        assert not gc.isenabled()
        cli.startup(["bench", "admitted", "--help"])
        assert gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("name", ["xllamacpp", "pydantic", "typer", "specreg", "nvidia-ml-py", "no-such-package-x"])
def test_dist_info_folder_names_give_the_versions_importlib_metadata_gives(name: str) -> None:
    from importlib.metadata import PackageNotFoundError, version

    from specreg.distinfo import installed_version

    try:
        expected: str | None = version(name)
    except PackageNotFoundError:
        expected = None
    assert installed_version(name) == expected


# What `check pair` and `inspect` load when they run (not only their `--help`): the start-up
# targets (benchmarks/bench_startup.py) hold only while these stay out.
RUN_HEAVY = ("pydantic", "numpy", "httpx", "huggingface_hub", "psutil", "xllamacpp", "matplotlib", "rich", "gguf")


@pytest.mark.parametrize("argv", [["inspect", "{t}"], ["check", "pair", "{t}", "{d}"]])
def test_inspect_and_check_pair_run_without_heavy_imports(argv: list[str], tmp_path: Path) -> None:
    t, d = _pair_files(tmp_path)
    code = (
        "import sys\n"
        "from specreg.cli import main\n"
        "try:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        f"print(sorted(m for m in {RUN_HEAVY!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db")}
    args = [a.format(t=t, d=d) for a in argv]
    for _ in range(2):  # files new to the registry, then registered
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().splitlines()[-1] == "[]", proc.stdout


def test_the_console_scripts_audit_ends_without_teardown_and_says_all_it_had_to(tmp_path: Path) -> None:
    """`specreg audit` from the console script leaves its result for the process's exit
    (specreg/teardown.py): the process ends at once after its output (no atexit handler runs:
    the marker's), with the same bytes on stdout and the same exit code as a process that tears
    down as usual. In-process (`cli.main`, as in these tests) nothing is kept."""
    t, d = _pair_files(tmp_path)
    env = {**os.environ, "SPECREG_DB": str(tmp_path / "r.db"), "COLUMNS": "80"}
    checked = subprocess.run(
        [sys.executable, "-m", "specreg", "check", "pair", str(t), str(d)], capture_output=True, text=True, env=env
    )
    assert checked.returncode == 0, checked.stderr
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('TORN DOWN', file=sys.stderr))\n"
        "import specreg.teardown as t\n"
        "if sys.argv[1] == 'usual': t.arm = lambda: None\n"
        "from specreg.entry import main\n"
        "sys.argv = ['specreg', *sys.argv[2:]]\n"
        "main()\n"
    )
    argv = ["audit", "--all", "--json"]
    runs = {
        how: subprocess.run([sys.executable, "-c", code, how, *argv], capture_output=True, text=True, env=env)
        for how in ("quick", "usual")
    }
    quick, usual = runs["quick"], runs["usual"]
    assert quick.returncode == usual.returncode == 1, (quick.stderr, usual.stderr)  # no run: evidence fails
    said, usual_said = json.loads(quick.stdout), json.loads(usual.stdout)  # the whole document, each
    assert said.pop("created_at") and usual_said.pop("created_at")  # when each ran: the one difference
    assert said == usual_said and said["pairs"], quick.stdout[-300:]
    assert "TORN DOWN" not in quick.stderr and "TORN DOWN" in usual.stderr
    from specreg import teardown

    assert not teardown._armed and not teardown._kept  # in-process: never armed, nothing kept
