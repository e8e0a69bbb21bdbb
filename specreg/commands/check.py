"""`specreg check pair` and `specreg pairs`: admit or reject a speculative pair, list verdicts.

Thin: resolve the files through the registry, call `validators.check_pair`, record and render.
Heavy modules are imported inside the commands so `specreg --help` stays fast.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specreg.commands._common import JsonOpt, console, db_path, emit_json, print_listing, safe, warn

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.checks import CheckResult, PairVerdict
    from specreg.schemas.registry import ArtifactRecord

_METHODS = (
    "auto",
    "draft-simple",
    "draft-eagle3",
    "draft-dflash",
    "draft-dspark",
    "draft-mtp",
    "ngram-simple",
    "ngram-mod",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-cache",
)
_STYLE = {"pass": "green", "info": "cyan", "warn": "yellow", "error": "bold red"}
_GROUP = {"pass": "pass", "info": "info", "warn": "warn", "error": "fail"}
_NAME_WIDTH = 40  # model names in listings are cut here (--json has them whole)


def _open(reg: Registry, arg: str) -> tuple[ArtifactRecord, GGUFFile]:
    """Resolve a path (registered on the way) or a SHA-256 prefix, and open the bytes it names."""
    from specreg.gguf.reader import open_gguf

    rec = reg.resolve(arg)
    path = arg if os.path.exists(arg) else reg.locate(rec.sha256)  # locate: a path verified to hold it
    gf = open_gguf(path)
    warn(path, gf.warnings)
    return rec, gf


def _evidence(c: CheckResult) -> str:
    """Evidence as short text: token diffs one per line, otherwise key=value."""
    ev = c.evidence
    lines: list[str] = []
    for item in ev.get("first", []) if isinstance(ev.get("first"), list) else []:
        if isinstance(item, dict) and "id" in item and "target" in item:
            lines.append(f"id {item['id']}: target {item['target']!r} | draft {item['draft']!r}")
        elif isinstance(item, dict):
            lines.append(", ".join(f"{k} {v!r}" for k, v in item.items()))
    rest = {k: v for k, v in ev.items() if k != "first"}
    if rest:
        text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in rest.items())
        lines.insert(0, text if len(text) <= 400 else text[:400] + "...")
    return "\n".join(safe(line) for line in lines)  # escape each line, keep the line breaks


def _render(v: PairVerdict, target: ArtifactRecord, draft: ArtifactRecord | None, pair_id: int) -> None:
    from rich.table import Table

    table = Table(show_lines=False, pad_edge=False, expand=False, box=None)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("result / evidence", overflow="fold")
    for sev in ("pass", "info", "warn", "error"):
        for c in (c for c in v.checks if c.severity == sev):
            text = safe(c.message)
            if sev != "pass" and c.evidence:
                text += f"\n[dim]{_evidence(c)}[/]"
            table.add_row(f"[{_STYLE[sev]}]{_GROUP[sev]}[/]", safe(c.code), text)
    console.print(f"target  {target.sha256[:12]}  {safe(target.name or (target.paths or ['-'])[0])}", soft_wrap=True)
    if draft is not None:
        console.print(f"draft   {draft.sha256[:12]}  {safe(draft.name or (draft.paths or ['-'])[0])}", soft_wrap=True)
    console.print(f"method  {v.method}   rule set {v.rule_set}{'   strict' if v.strict else ''}")
    console.print(table)
    n = {s: sum(1 for c in v.checks if c.severity == s) for s in _STYLE}
    counts = f"{n['pass']} pass, {n['info']} info, {n['warn']} warn, {n['error']} fail"
    if v.admitted:
        console.print(f"[bold green]ADMITTED[/] ({counts}) - pair {pair_id}")
    else:
        console.print(f"[bold red]REJECTED[/] ({counts}) - pair {pair_id}")


def pair_cmd(
    target: Annotated[
        str, typer.Argument(metavar="TARGET", help="Target GGUF path or SHA-256 prefix.", show_default=False)
    ],
    draft: Annotated[
        str | None, typer.Argument(metavar="DRAFT", help="Draft GGUF path or SHA-256 prefix.", show_default=False)
    ] = None,
    method: Annotated[str, typer.Option("--method", "-m", help=f"One of: {', '.join(_METHODS)}.")] = "auto",
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
    from specreg.errors import UsageError
    from specreg.registry.store import Registry
    from specreg.validators.pair import check_pair, detect_method, verdict
    from specreg.validators.ruleset import load_rule_set

    if method not in _METHODS:
        raise UsageError(f"unknown method {method!r}; choose one of {', '.join(_METHODS)}")
    rules = load_rule_set(runtime)
    if method == "auto" and draft is None:
        detect_method(None, rules)  # raises the "pass --method" hint before anything is registered
    with Registry(db_path(), show_progress=not json_out) as reg:
        t_rec, t_file = _open(reg, target)
        d_rec, d_file = _open(reg, draft) if draft is not None else (None, None)
        if method == "auto":
            method = detect_method(d_file, rules)
        checks = check_pair(t_file, d_file, method, rule_set=rules, strict=strict)
        v = verdict(
            checks,
            method=method,
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
        _render(v, t_rec, d_rec, pair_id)
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
    verdicts = {
        (True, False): ("admitted", "green"),
        (True, True): ("admitted (strict)", "green"),
        (False, False): ("rejected", "red"),
        (False, True): ("rejected (strict)", "red"),
    }
    print_listing(
        ("id", "target", "draft", "method", "verdict", "rule set", "when"),
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
        limits=(None, 13 + _NAME_WIDTH, 13 + _NAME_WIDTH, None, None, 40, None),
        right={0},
    )
    if not rows:
        console.print("[dim]no pairs yet: specreg check pair TARGET DRAFT[/]")


def register(app: typer.Typer) -> None:
    check_app = typer.Typer(
        help="Check speculative-decoding setups before they are deployed.\n\n"
        "Example: specreg check pair target.gguf draft.gguf --json",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    check_app.command("pair")(pair_cmd)
    app.add_typer(check_app, name="check")
    app.command("pairs")(pairs_cmd)
