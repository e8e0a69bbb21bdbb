"""Options that several commands share, declared once as `Annotated` aliases, and where `--db` points.

Each alias carries its flag, metavar and help, so a command's signature reads as a list of
names (`pair: PairOpt = None`) and the same flag means the same thing in every command.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperArgument, TyperCommand

from specreg.schemas.methods import AUTO, Method

if TYPE_CHECKING:
    MethodChoice = StrEnum
else:
    # `--method` choices: auto, then every Method, derived from the one declaration so that typer
    # itself refuses an unknown method and lists the choices in --help
    MethodChoice = StrEnum("MethodChoice", [(AUTO, AUTO)] + [(m.name, m.value) for m in Method])
METHOD_AUTO = MethodChoice(AUTO)  # the default of `--method`


_METAVARS = {"int": "N", "float": "NUMBER", "str": "TEXT", "path": "PATH"}
_TYPE_SHOWN = re.compile(r"<(int|float|str|path)>")


class HelpCommand(TyperCommand):
    """Every command's help: arguments by name alone, as users type them (`FILE...`, not
    `files... <list[Path]>`), and the usual usage line (`TARGET [DRAFT]`, not `{TARGET} [DRAFT]`)."""

    def _arguments(self, ctx: Any) -> list[TyperArgument]:
        return [p for p in self.get_params(ctx) if isinstance(p, TyperArgument) and not p.hidden]

    @staticmethod
    def _name(arg: TyperArgument) -> str:
        return (arg.metavar or (arg.name or "arg").upper()) + ("..." if arg.nargs != 1 else "")

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        return pieces + [self._name(a) if a.required else f"[{self._name(a)}]" for a in self._arguments(ctx)]

    def format_options(self, ctx: Any, formatter: Any) -> None:
        args = [(self._name(a), a.help or "") for a in self._arguments(ctx)]
        opts = []
        for p in self.get_params(ctx):
            rec = None if isinstance(p, TyperArgument) else p.get_help_record(ctx)
            if rec:  # an option without its own metavar: a word (N, TEXT), not a Python type (<int>)
                opts.append((_TYPE_SHOWN.sub(lambda m: _METAVARS[m.group(1)], rec[0]), rec[1]))
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        if opts:
            with formatter.section("Options"):
                formatter.write_dl(opts)


# The root's `--db FILE`, for the command being run: set by the root callback for as long as its
# context lives (a test's or an embedder's next `main()` without --db uses its own registry).
_DB: ContextVar[Path | None] = ContextVar("specreg_db", default=None)


def use_db(ctx: typer.Context, db: Path) -> None:
    """Make `db` the registry of the command `ctx` runs, until that context closes."""
    token = _DB.set(db)
    ctx.call_on_close(lambda: _DB.reset(token))


def db_path() -> Path:
    """The registry this command works on: the root's `--db`, else $SPECREG_DB, else the default."""
    from specreg.paths import registry_path

    return registry_path(_DB.get())


def chosen_method(choice: MethodChoice) -> Method | None:
    """The method a `--method` choice names; None for auto (detected from the draft)."""
    return None if choice == AUTO else Method(choice)


DbOpt = Annotated[
    Path | None,
    typer.Option("--db", metavar="FILE", help="Registry database file (default: $SPECREG_DB, else the user data dir)."),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
PairOpt = Annotated[
    list[int] | None,
    typer.Option("--pair", metavar="ID", help="Pair id (repeatable); default: every admitted pair."),
]
ReportOpt = Annotated[
    Path | None,
    typer.Option("--report", metavar="FILE", help="Also write a report: FILE.md or FILE.html."),
]
MethodOpt = Annotated[
    MethodChoice,
    typer.Option(
        "--method",
        "-m",
        metavar="METHOD",
        help=f"auto (chosen from the draft) or one of: {', '.join(Method)}.",
    ),
]
LicenseOpt = Annotated[
    str | None,
    typer.Option("--license", metavar="ID", help="Licence id you vouch for (beats model card and GGUF)."),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        help="The most each remote operation may take in all (a header read, a hub search, a download); "
        "default $SPECREG_TIMEOUT, else 120 (a download: plus 1 per MiB).",
        show_default=False,
    ),
]
RehashOpt = Annotated[bool, typer.Option("--rehash", help="Hash files again even if the stat cache matches.")]
