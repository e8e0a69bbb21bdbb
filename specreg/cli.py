"""The `specreg` command: wires the command modules and maps errors to one-line messages."""

from __future__ import annotations

import atexit
import copy
import gc
import os
import sqlite3
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer

from specreg.commands import _common
from specreg.errors import EXIT_UNDECIDED, SpecregError

try:  # typer 0.29 vendors click as typer._click: its usage errors are not click's classes
    from typer._click.exceptions import ClickException as _TyperClickException
except ImportError:  # pragma: no cover - a typer that uses click itself
    from click import ClickException as _TyperClickException  # type: ignore[assignment]


def _click(name: str) -> tuple[type[BaseException], ...]:
    """click's own exception class `name`, if anything imported click (typer does not: importing
    it only to name its classes would cost every command ~15 ms)."""
    click = sys.modules.get("click")
    cls = getattr(getattr(click, "exceptions", None), name, None)
    return (cls,) if isinstance(cls, type) and issubclass(cls, BaseException) else ()


app = typer.Typer(
    name="specreg",
    help="Decide which speculative-decoding setups for llama.cpp are safe and worth deploying.\n\n"
    "Example: specreg check pair target.gguf draft.gguf && specreg bench admitted && specreg audit",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Registry database file (default: $SPECREG_DB, else the user data dir)."),
    ] = None,
) -> None:
    """specreg: admit, benchmark and audit speculative-decoding pairs for llama.cpp."""
    if db is not None:
        os.environ["SPECREG_DB"] = str(db)


def _register_commands() -> None:
    import importlib
    import pkgutil

    import specreg.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"specreg.commands.{info.name}")
        module.register(app)


_register_commands()


def _command_name(argv: list[str]) -> str | None:
    """The command word of `argv` (after the root's own `--db PATH`); None for root options."""
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


def _app_for(argv: list[str]) -> typer.Typer:
    """The app with only the command being run. typer turns every registered command into a click
    command (evaluating each signature's annotations) before it runs one: ~10 ms for all of them,
    paid by every invocation. An unknown word gets the whole app, which names the choices."""
    name = _command_name(argv)
    commands = [c for c in app.registered_commands if c.name == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if name is None or not (commands or groups):
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


_exit_hook = False


def _fail(message: str, hint: str | None, code: int) -> int:
    _common.err_console.print(f"[bold red]error:[/] {_common.safe(message)}")
    if hint:
        _common.err_console.print(f"[dim]hint: {_common.safe(hint)}[/]")
    return code


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line per failure, a traceback only with SPECREG_DEBUG=1."""
    global _exit_hook
    if not _exit_hook:
        # An ending process need not hunt for reference cycles: the interpreter's last collection
        # walks every object still alive (pydantic's schemas, typer's, rich's): ~50 ms of every
        # command. Frozen objects are skipped; atexit handlers and weakref finalizers still run.
        atexit.register(gc.freeze)
        _exit_hook = True
    debug = os.environ.get("SPECREG_DEBUG") == "1"
    try:
        args = sys.argv[1:] if argv is None else argv
        rv = _app_for(args)(args=args, standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except SpecregError as exc:
        if debug:
            traceback.print_exc()
        code = _fail(exc.message, exc.hint, exc.exit_code)
    except (typer.Exit, *_click("Exit")) as exc:
        code = exc.exit_code  # type: ignore[attr-defined]
    except (_TyperClickException, *_click("ClickException")) as exc:
        exc.show()  # type: ignore[attr-defined]
        code = EXIT_UNDECIDED
    except (typer.Abort, *_click("Abort")):
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
