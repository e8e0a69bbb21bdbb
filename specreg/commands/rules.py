"""`specreg rules list` and `specreg rules diff A B`: the shipped rule sets and what differs between them.

Thin: the rule sets are validators/ruleset.py's, the differences validators/ruleset_diff.py's.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specreg.commands.options import JsonOpt
from specreg.commands.output import emit_json, say

rules_app = typer.Typer(
    help="The rule sets: the llama.cpp facts each runtime build is judged by.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@rules_app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """The shipped rule sets, the llama.cpp build each mirrors and where its facts come from;
    the one the bundled server is judged by is marked.
    """
    from specreg.commands.layout import Col
    from specreg.commands.output import print_listing
    from specreg.servers.identity import choose_rules
    from specreg.validators.ruleset import known_rule_sets, load_rule_set

    bundled = choose_rules()
    sets = [load_rule_set(name) for name in known_rule_sets()]
    if json_out:
        here = bundled.rules.name
        emit_json(
            [
                {"name": r.name, "id": r.id, "build": r.build, "source": r.source, "bundled": r.name == here}
                for r in sets
            ]
        )
        return
    print_listing(
        (Col("rule set"), Col("build", right=True), Col("source", limit=60, squeeze=20)),
        (
            (
                (f"{r.id} (bundled)", "green") if r.name == bundled.rules.name else r.id,
                str(r.build),
                r.source or "-",
            )
            for r in sets
        ),
    )
    say(f"the bundled server: {bundled.line()}", stderr=True)


@rules_app.command("diff")
def diff_cmd(
    old: Annotated[str, typer.Argument(metavar="A", help="Rule set to compare from, e.g. llama.cpp-b11434.")],
    new: Annotated[str, typer.Argument(metavar="B", help="Rule set to compare to, e.g. llama.cpp-b11549.")],
    json_out: JsonOpt = False,
) -> None:
    """What changed from A to B, in words: tokenizer models and their defaults, pre-tokenizers,
    MTP architectures, structure tables, sliding-window patterns, thresholds.
    """
    from specreg.validators.ruleset import load_rule_set
    from specreg.validators.ruleset_diff import diff_rule_sets

    a, b = load_rule_set(old), load_rule_set(new)
    changes = diff_rule_sets(a, b)
    if json_out:
        emit_json(
            {
                "from": a.id,
                "to": b.id,
                "changes": [{"path": c.path, "text": c.text, "facet": c.facet, "key": c.key} for c in changes],
            }
        )
        return
    say(f"{a.id} -> {b.id}: {len(changes)} change(s)")
    for c in changes:
        say(c.text, prefix="  ", indent=4)
