"""The `specreg` command: the list of commands in pipeline order, and the one mapping of errors to lines."""

from __future__ import annotations

import atexit
import copy
import gc
import os
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from specreg.commands import artifacts, audit, bench, check, demo, deploy, export, fetch, inspect
from specreg.commands.options import DbOpt, HelpCommand
from specreg.errors import EXIT_UNDECIDED, SpecregError

try:  # typer >= 0.29 vendors click as typer._click: its usage errors are not click's classes
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - a typer that uses click itself
    from click import ClickException  # type: ignore[assignment]

# Every command, in the order of the pipeline (the order `--help` lists them), with the line
# `--help` shows for it: a function is a command, a Typer a group of subcommands. Adding a
# command is adding its line here.
COMMANDS: list[tuple[str, Callable[..., Any] | typer.Typer, str]] = [
    ("inspect", inspect.inspect_cmd, "Show what a GGUF file says about itself."),
    ("register", artifacts.register_cmd, "Register GGUF files by SHA-256, with licence and source."),
    ("fetch", fetch.fetch_cmd, "Download a GGUF from the hub, verify and register it."),
    ("artifacts", artifacts.artifacts_cmd, "List registered artifacts."),
    ("check", check.check_app, "Admit or reject a target/draft pair (check pair)."),
    ("pairs", check.pairs_cmd, "List checked pairs with their verdicts."),
    ("bench", bench.bench_app, "Benchmark admitted pairs on a real llama.cpp server."),
    ("runs", bench.runs_app, "List benchmark runs, or show one."),
    ("audit", audit.audit_cmd, "Check every deployment gate for admitted pairs."),
    ("deploy", deploy.deploy_cmd, "Print the pinned llama-server command for an audited pair."),
    ("export", export.export_cmd, "Write runs and verdicts to a bundle, or a pair to an ML-BOM."),
    ("import", export.import_cmd, "Merge result bundles from other machines into this registry."),
    ("demo", demo.demo_cmd, "The whole pipeline on tiny generated models."),
]


class _PipelineOrder(TyperGroup):
    """Lists the commands in the order of `COMMANDS` (typer puts plain commands before groups)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for name, _, _ in COMMANDS if name in self.commands]


app = typer.Typer(
    name="specreg",
    cls=_PipelineOrder,
    help="Decide which speculative-decoding setups for llama.cpp are safe and worth deploying.\n\n"
    "The registry (and the servers' logs beside it) lives in $SPECREG_HOME, default "
    "~/.local/share/specreg; --db or $SPECREG_DB names another registry file.\n\n"
    "Example: specreg check pair target.gguf draft.gguf && specreg bench admitted && specreg audit",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(show: bool) -> None:
    """`--version`: specreg's version and the bundled llama.cpp runtime's, from the installed
    packages' metadata (importing xllamacpp would load llama.cpp itself)."""
    if not show:
        return
    from importlib.metadata import PackageNotFoundError, version

    try:
        runtime = f"xllamacpp {version('xllamacpp')} (llama.cpp, run as specreg-llama-server)"
    except PackageNotFoundError:
        runtime = "xllamacpp not installed: pass --server PATH to bench"
    sys.stdout.write(f"specreg {version('specreg')}\nbundled runtime: {runtime}\n")
    raise typer.Exit()


@app.callback()
def _root(
    db: DbOpt = None,
    _show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the versions of specreg and its runtime."
        ),
    ] = False,
) -> None:
    """specreg: admit, benchmark and audit speculative-decoding pairs for llama.cpp."""
    if db is not None:
        os.environ["SPECREG_DB"] = str(db)


for _name, _target, _summary in COMMANDS:
    if isinstance(_target, typer.Typer):
        for _sub in _target.registered_commands:  # subcommands too get the house help format
            _sub.cls = HelpCommand
        app.add_typer(_target, name=_name, short_help=_summary)
    else:
        app.command(_name, cls=HelpCommand, short_help=_summary)(_target)


def _command_name(argv: list[str]) -> str | None:
    """The command word of `argv` (after the root's own `--db FILE`); None for root options."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--db":
            i += 2
        elif arg.startswith("--db="):
            i += 1
        elif arg.startswith("-"):
            return None  # --help and friends (or a typo): the whole app answers
        else:
            return arg
    return None


def startup(argv: list[str]) -> typer.Typer:
    """Every start-up measure in one place; returns the app to run for `argv`.

    1. Only the command being run is built: typer turns every registered command into a click
       command (evaluating each signature's annotations) before it runs one, ~10 ms for all of
       them; `--version` builds none. An unknown word or another root option gets the whole
       app, which names the choices.
    2. An ending process skips the interpreter's last hunt for reference cycles: it walks every
       object still alive (pydantic's schemas, typer's, rich's), ~50 ms of every command. Frozen
       objects are skipped; atexit handlers and weakref finalizers still run.
    """
    atexit.unregister(gc.freeze)  # once, however often this runs (tests run many commands in one process)
    atexit.register(gc.freeze)
    name = _command_name(argv)
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if name is None and "--version" in argv and "--help" not in argv:
        commands, groups = [], []  # the version needs no command at all
    elif name is None or not (commands or groups):
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def _trace(debug: bool) -> None:
    if debug:
        import traceback

        traceback.print_exc()


def _fail(message: str, hint: str | None, code: int) -> int:
    from specreg.commands.output import err_console, safe

    err_console().print(f"[bold red]error:[/] {safe(message)}")
    if hint:
        err_console().print(f"[dim]hint: {safe(hint)}[/]")
    return code


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line per failure, a traceback only with SPECREG_DEBUG=1."""
    debug = os.environ.get("SPECREG_DEBUG") == "1"
    args = sys.argv[1:] if argv is None else argv
    try:
        rv = startup(args)(args=args, prog_name="specreg", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except SpecregError as exc:
        _trace(debug)
        code = _fail(exc.message, exc.hint, exc.exit_code)
    except typer.Exit as exc:
        code = exc.exit_code
    except ClickException as exc:  # a usage error typer found (unknown option, bad choice, ...)
        ctx = getattr(exc, "ctx", None)
        hint = f"see '{ctx.command_path} --help'" if ctx is not None else None
        code = _fail(exc.format_message(), hint, EXIT_UNDECIDED)
    except typer.Abort:
        code = _fail("aborted", None, 130)
    except KeyboardInterrupt:
        code = _fail("interrupted", None, 130)
    except Exception as exc:  # what the core did not wrap: a database or OS error is one line, a bug a traceback
        import sqlite3  # imported here: a command that never opened a database pays nothing for it

        if isinstance(exc, sqlite3.Error):
            _trace(debug)
            hint = "check --db / SPECREG_DB and free disk space"
            code = _fail(f"registry database error: {exc}", hint, EXIT_UNDECIDED)
        elif isinstance(exc, OSError):
            _trace(debug)
            where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
            code = _fail(f"{where}{exc.strerror or exc}", None, EXIT_UNDECIDED)
        else:
            raise
    sys.exit(code)


if __name__ == "__main__":
    main()
