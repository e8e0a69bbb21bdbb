"""`specreg check pair` and `specreg pairs`: admit or reject a speculative pair, list verdicts.

Thin: resolve the files through the registry, call `validators.check_pair`, record and render.
Heavy modules are imported inside the commands so `specreg --help` stays fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specreg.commands.layout import Col
from specreg.commands.options import METHOD_AUTO, JsonOpt, MethodOpt, chosen_method, db_path
from specreg.commands.output import emit_json, err_console, print_listing

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.registry import ArtifactRecord

check_app = typer.Typer(
    help="Check speculative-decoding setups before they are deployed.\n\n"
    "Example: specreg check pair target.gguf draft.gguf --json",
    no_args_is_help=True,
    rich_markup_mode=None,
)
_NAME_WIDTH = 40  # model names in listings are cut here (--json has them whole)


def _open(reg: Registry, arg: str) -> tuple[ArtifactRecord, GGUFFile]:
    """Resolve a path (registered on the way) or a SHA-256 prefix, and open the bytes it names."""
    from specreg.gguf.reader import open_gguf

    rec = reg.resolve(arg)
    path = arg if os.path.exists(arg) else reg.locate(rec.sha256)  # locate: a path verified to hold it
    return rec, open_gguf(path)


@check_app.command("pair")
def pair_cmd(
    target: Annotated[
        str, typer.Argument(metavar="TARGET", help="Target GGUF path or SHA-256 prefix.", show_default=False)
    ],
    draft: Annotated[
        str | None, typer.Argument(metavar="DRAFT", help="Draft GGUF path or SHA-256 prefix.", show_default=False)
    ] = None,
    method: MethodOpt = METHOD_AUTO,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Rule set (llama.cpp build), e.g. llama.cpp-b11434.")
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Decide whether a target/draft pair is safe for llama.cpp speculative decoding.

    Exit 0 admitted, 1 rejected, 2 could not decide. The verdict is recorded in the registry.

    Example: specreg check pair target.gguf draft.gguf --method draft-simple
    """
    from specreg.commands.views.check import show_verdict
    from specreg.registry.store import Registry
    from specreg.validators.pair import check_pair, detect_method, verdict
    from specreg.validators.ruleset import load_rule_set

    chosen = chosen_method(method)
    rules = load_rule_set(runtime)
    if chosen is None and draft is None:
        detect_method(None, rules)  # raises the "pass --method" hint before anything is registered
    with Registry(db_path(), show_progress=not json_out) as reg:
        t_rec, t_file = _open(reg, target)
        d_rec, d_file = _open(reg, draft) if draft is not None else (None, None)
        if chosen is None:
            chosen = detect_method(d_file, rules)
        checks = check_pair(t_file, d_file, chosen, rule_set=rules, strict=strict)
        v = verdict(
            checks,
            method=chosen,
            target_sha256=t_rec.sha256,
            draft_sha256=d_rec.sha256 if d_rec else None,
            rule_set=rules,
            strict=strict,
        )
        pair_id = reg.record_verdict(v)
    if json_out:
        emit_json(
            v.model_dump(
                mode="json",
                include={"admitted", "method", "target_sha256", "draft_sha256", "rule_set", "strict", "checks"},
            )
        )
    else:
        show_verdict(v, t_rec, d_rec, pair_id)
    raise typer.Exit(0 if v.admitted else 1)


def pairs_cmd(
    admitted: Annotated[bool, typer.Option("--admitted", help="Only admitted pairs.")] = False,
    rejected: Annotated[bool, typer.Option("--rejected", help="Only rejected pairs.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """List checked pairs with their latest verdict; verdicts from an outdated rule set are stale.

    Example: specreg pairs --admitted
    """
    from specreg.errors import UsageError
    from specreg.registry.store import Registry
    from specreg.validators.ruleset import is_stale

    if admitted and rejected:
        raise UsageError("--admitted and --rejected exclude each other")
    which = True if admitted else False if rejected else None
    with Registry(db_path(), show_progress=False) as reg:
        rows = reg.pairs(which, with_checks=False)
    stale = {rs: is_stale(rs) for rs in {p.rule_set for p in rows}}
    if json_out:
        out: list[dict[str, Any]] = []
        for p in rows:
            d = p.model_dump(mode="json", exclude={"checks"})
            d["stale"] = stale[p.rule_set]
            out.append(d)
        emit_json(out)
        return
    if not rows:
        err_console().print(
            "no pairs checked yet (specreg check pair TARGET DRAFT)"
            if which is None
            else f"no {'admitted' if which else 'rejected'} pairs"
        )
        return
    verdicts = {
        (True, False): ("admitted", "green"),
        (True, True): ("admitted (strict)", "green"),
        (False, False): ("rejected", "red"),
        (False, True): ("rejected (strict)", "red"),
    }
    print_listing(
        (
            Col("id", right=True),
            Col("target", limit=13 + _NAME_WIDTH, squeeze=12),
            Col("draft", limit=13 + _NAME_WIDTH, squeeze=12),
            Col("method"),
            Col("verdict"),
            Col("rule set", limit=40, stack=2),
            Col("when", stack=1),
        ),
        (
            (
                str(p.id),
                f"{p.target_sha256[:12]} {p.target_name or ''}".rstrip(),
                f"{p.draft_sha256[:12]} {p.draft_name or ''}".rstrip() if p.draft_sha256 else "-",
                p.method,
                verdicts[(p.admitted, p.strict)],
                (f"{p.rule_set} stale", "yellow") if stale[p.rule_set] else p.rule_set,
                p.updated_at.strftime("%Y-%m-%d %H:%M"),
            )
            for p in rows
        ),
    )
