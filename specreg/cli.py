"""The `specreg` command: the list of commands in pipeline order, and the one mapping of errors to lines."""

from __future__ import annotations

import atexit
import copy
import gc
import os
import sqlite3
import sys
import traceback
from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperGroup

from specreg.commands import artifacts, audit, bench, check, demo, fetch, inspect
from specreg.commands.options import DbOpt
from specreg.errors import EXIT_UNDECIDED, SpecregError

try:  # typer >= 0.29 vendors click as typer._click: its usage errors are not click's classes
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - a typer that uses click itself
    from click import ClickException  # type: ignore[assignment]

# Every command, in the order of the pipeline (the order `--help` lists them): a function is a
# command, a Typer a group of subcommands. Adding a command is adding its line here.
COMMANDS: list[tuple[str, Callable[..., Any] | typer.Typer]] = [
    ("inspect", inspect.inspect_cmd),
    ("register", artifacts.register_cmd),
    ("fetch", fetch.fetch_cmd),
    ("artifacts", artifacts.artifacts_cmd),
    ("check", check.check_app),
    ("pairs", check.pairs_cmd),
    ("bench", bench.bench_app),
    ("runs", bench.runs_app),
    ("audit", audit.audit_cmd),
    ("demo", demo.demo_cmd),
]


class _PipelineOrder(TyperGroup):
    """Lists the commands in the order of `COMMANDS` (typer puts plain commands before groups)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for name, _ in COMMANDS if name in self.commands]


app = typer.Typer(
    name="specreg",
    cls=_PipelineOrder,
    help="Decide which speculative-decoding setups for llama.cpp are safe and worth deploying.\n\n"
    "Example: specreg check pair target.gguf draft.gguf && specreg bench admitted && specreg audit",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(db: DbOpt = None) -> None:
    """specreg: admit, benchmark and audit speculative-decoding pairs for llama.cpp."""
    if db is not None:
        os.environ["SPECREG_DB"] = str(db)


for _name, _target in COMMANDS:
    if isinstance(_target, typer.Typer):
        app.add_typer(_target, name=_name)
    else:
        app.command(_name)(_target)


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
       them. An unknown word or a root option gets the whole app, which names the choices.
    2. An ending process skips the interpreter's last hunt for reference cycles: it walks every
       object still alive (pydantic's schemas, typer's, rich's), ~50 ms of every command. Frozen
       objects are skipped; atexit handlers and weakref finalizers still run.
    """
    atexit.unregister(gc.freeze)  # once, however often this runs (tests run many commands in one process)
    atexit.register(gc.freeze)
    name = _command_name(argv)
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if name is None or not (commands or groups):
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


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
        if debug:
            traceback.print_exc()
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
    except sqlite3.Error as exc:
        if debug:
            traceback.print_exc()
        code = _fail(f"registry database error: {exc}", "check --db / SPECREG_DB and free disk space", EXIT_UNDECIDED)
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        code = _fail(f"{where}{exc.strerror or exc}", None, EXIT_UNDECIDED)
    sys.exit(code)


if __name__ == "__main__":
    main()
