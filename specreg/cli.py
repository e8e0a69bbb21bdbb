"""The `specreg` command: the list of commands in pipeline order, and the one mapping of errors to lines."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import cache
from types import FrameType
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from specreg.commands.examples import epilog
from specreg.commands.options import DbOpt, HelpCommand, use_db
from specreg.errors import EXIT_UNDECIDED, SpecregError

# Every command, in the order of the pipeline (the order `--help` lists them), with where it
# lives (`module:attribute` under specreg.commands: a function is a command, a Typer a group of
# subcommands) and the line `--help` shows for it. Adding a command is adding its line here.
# A command's module is imported only when that command runs (or the whole app is asked for):
# each pulls in its own stage (registry, benchmark, audit), and `specreg inspect` needs none.
COMMANDS: list[tuple[str, str, str]] = [
    ("inspect", "inspect:inspect_cmd", "Show what a GGUF file says about itself."),
    ("register", "artifacts:register_cmd", "Register GGUF files by SHA-256, with licence and source."),
    ("fetch", "fetch:fetch_cmd", "Download a GGUF from the hub, verify and register it."),
    ("artifacts", "artifacts:artifacts_cmd", "List registered artifacts."),
    ("check", "check:check_app", "Admit or reject a target/draft pair (check pair)."),
    ("pairs", "check:pairs_cmd", "List checked pairs with their verdicts (--recheck: under other rules)."),
    ("drafts", "drafts:drafts_cmd", "Which draft for this target? Every candidate judged and ranked (--bench)."),
    ("rules", "rules:rules_app", "List the rule sets per llama.cpp build, or diff two."),
    ("workloads", "workloads:workloads_app", "List the built-in and standard workloads, or fetch one."),
    ("bench", "bench:bench_app", "Benchmark admitted pairs on a real llama.cpp server."),
    ("runs", "runs:runs_app", "List benchmark runs, or show one."),
    ("audit", "audit:audit_cmd", "Check every deployment gate for admitted pairs."),
    ("deploy", "deploy:deploy_cmd", "Print the pinned llama-server command for an audited pair."),
    ("watch", "watch:watch_cmd", "Watch a deployed llama-server against its audited evidence."),
    ("export", "export:export_cmd", "Write runs and verdicts to a bundle, or a pair to an ML-BOM."),
    ("sign", "sign:sign_cmd", "Sign a result bundle (in-toto statement in a DSSE envelope)."),
    ("import", "export:import_cmd", "Merge result bundles from other machines into this registry."),
    ("demo", "demo:demo_cmd", "The whole pipeline on tiny generated models."),
]
NAMES = [name for name, _, _ in COMMANDS]


def load(ref: str) -> Callable[..., Any] | typer.Typer:
    """The command function or sub-app `ref` (`module:attribute`) names, importing its module."""
    module, attr = ref.split(":")
    target: Callable[..., Any] | typer.Typer = getattr(importlib.import_module(f"specreg.commands.{module}"), attr)
    return target


class _PipelineOrder(TyperGroup):
    """Lists the commands in the order of `COMMANDS` (typer puts plain commands before groups)."""

    def list_commands(self, ctx: Any) -> list[str]:
        return [name for name, _, _ in COMMANDS if name in self.commands]


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="specreg",
        cls=_PipelineOrder,
        help="Decide which speculative-decoding setups for llama.cpp are safe and worth deploying.\n\n"
        "The registry (and the servers' logs beside it) lives in $SPECREG_HOME, default "
        "~/.local/share/specreg; --db or $SPECREG_DB names another registry file.",
        epilog=epilog(""),
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
    from importlib.metadata import version

    from specreg.servers.identity import BUNDLED_PACKAGE, bundled_version

    release = bundled_version()
    if release is None:
        runtime = "xllamacpp not installed: pass --server PATH to bench"
    else:
        runtime = f"{BUNDLED_PACKAGE} {release} (llama.cpp, run as specreg-llama-server)"
    sys.stdout.write(f"specreg {version('specreg')}\nbundled runtime: {runtime}\n")
    raise typer.Exit()


def _root(
    ctx: typer.Context,
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
        use_db(ctx, db)


def build(names: Iterable[str] | None = None) -> typer.Typer:
    """The app with the named commands (every command when None), importing only their modules."""
    app = _new_app()
    app.callback()(_root)
    wanted = set(NAMES if names is None else names)
    for name, ref, summary in COMMANDS:
        if name not in wanted:
            continue
        target = load(ref)
        if isinstance(target, typer.Typer):
            for sub in target.registered_commands:  # subcommands too get the house help format
                sub.cls = HelpCommand
                sub.epilog = epilog(f"{name} {sub.name}")
            app.add_typer(target, name=name, short_help=summary, epilog=epilog(name))
        else:
            app.command(name, cls=HelpCommand, short_help=summary, epilog=epilog(name))(target)
    return app


@cache
def whole_app() -> typer.Typer:
    """Every command, built (`specreg.cli.app`: the docs, the tests and embedders use it)."""
    return build()


def _unbuilt() -> None:
    """Stands in for a command in `index_app`: never run (a run gets its own app, `startup`)."""


@cache
def index_app() -> typer.Typer:
    """Every command listed, none built: what root `--help`, an unknown word or a root option is
    answered with. The listing needs each command's name and summary line only; building the
    commands (importing their modules, turning every signature's annotations into click
    parameters, the larger part of `specreg --help`'s time) says no more.
    A test compares its answers with the whole app's."""
    app = _new_app()
    app.callback()(_root)
    for name, _, summary in COMMANDS:
        app.command(name, short_help=summary, add_help_option=False)(_unbuilt)
    return app


def __getattr__(name: str) -> Any:
    """`specreg.cli.app`: the whole app, built on first use (tests and embedders use it)."""
    if name == "app":
        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    """The app to run for `argv`: only the command being run is imported and built.

    Each command module pulls in its own stage (registry, benchmark, audit), and typer turns
    every registered command into a click command (evaluating each signature's annotations)
    before it runs one; `--version` builds none. Root `--help`, an unknown word or another root
    option gets the index (every command listed, none built), which names the choices.
    """
    name = _command_name(argv)
    if name is None and "--version" in argv and "--help" not in argv:
        return build([])  # the version needs no command at all
    if name is None or name not in NAMES:
        return index_app()
    return build([name])


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


def _interrupt(_sig: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM stops a command the way Ctrl-C does: a KeyboardInterrupt unwinds it, so every server
    it started is stopped where it was started (`finally`), a run is saved as cancelled, and the
    exit is 130 - not the default death that leaves the servers running under init. The one
    place for every command (benchmarks, the demo, drafts --bench, a probe); only the main thread
    may set a handler, so an embedder's thread keeps the default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one line per failure, a traceback only with SPECREG_DEBUG=1."""
    debug = os.environ.get("SPECREG_DEBUG") == "1"
    # specreg uses no pydantic plugin, and one installed in the environment would see (and could
    # alter) the validation of facts read from untrusted files; a setting of the user's is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    args = sys.argv[1:] if argv is None else argv
    # `--db FILE` reaches the commands as SPECREG_DB (`_root`); it is this command's, not the
    # process's: an embedder's (or a test's) next `main()` without --db uses its own registry.
    db_before = os.environ.get("SPECREG_DB")
    try:
        with _sigterm_as_interrupt():
            rv = startup(args)(args=args, prog_name="specreg", standalone_mode=False)
        code = rv if isinstance(rv, int) else 0
    except SpecregError as exc:
        _trace(debug)
        code = _fail(exc.message, exc.hint, exc.exit_code)
    except typer.Exit as exc:
        code = exc.exit_code
    except typer.TyperException as exc:  # a usage error typer found (unknown option, bad choice, ...)
        ctx = getattr(exc, "ctx", None)
        if ctx is not None and exc.format_message() == ctx.get_help():
            # `specreg`, `specreg rules`: no arguments asks for the help, printed as typer and `hf` print it
            sys.stderr.write(exc.format_message() + "\n")
            code = exc.exit_code
        else:
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
    finally:
        if db_before is None:
            os.environ.pop("SPECREG_DB", None)
        else:
            os.environ["SPECREG_DB"] = db_before
    sys.exit(code)


if __name__ == "__main__":
    main()
