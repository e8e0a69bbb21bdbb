"""Run lists: `runs` (one aligned line per run) and `runs --by-hardware` (pairs by hardware class).

A list is read to find a run, so each line says what the run found (outputs that differ first,
then faster / slower / no difference) and its fastest condition, and a thousand runs lay out
without a table engine. Hardware classes get short labels with a legend beneath.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from specreg.commands.layout import Col, Styled
from specreg.commands.output import Cell, err_console, print_listing, say
from specreg.commands.views.cells import MISMATCH_MARK, STATUS_STYLE

if TYPE_CHECKING:
    from specreg.benchmark.store.run_index import RunResult
    from specreg.schemas.bench import RunInfo
    from specreg.servers.hardware import HardwareCell, HardwareRow


def runs_table(
    runs: list[RunInfo],
    results: Mapping[str, RunResult] | None = None,
    names: Mapping[str, str | None] | None = None,
) -> None:
    """One aligned line per run (plain columns: a table engine lays out thousands of rows too
    slowly): its status, what it found (`result`, from `results`) and its fastest speculative
    condition.

    `hw` names the run's hardware class (legend below) and `host` where an imported run came from.
    """
    from specreg.servers.hardware import labels

    if not runs:
        err_console().print("no benchmark runs yet (specreg bench admitted)")
        return
    hw = labels(sorted({r.hardware for r in runs if r.hardware}))
    found = results or {}
    named = names or {}

    def model(sha: str | None) -> str:
        return "none" if sha is None else f"{sha[:12]} {named.get(sha) or ''}".rstrip()

    print_listing(
        (
            Col("run"),
            Col("status", stack=1),
            Col("pair", right=True),
            Col("method", limit=32, squeeze=12, stack=2),
            Col("result"),
            Col("best speed-up", limit=48),
            Col("target", limit=40, stack=3),
            Col("draft", limit=40, stack=3),
            Col("conds", right=True, stack=2),
            Col("requests", right=True, stack=2),
            Col("started", stack=4),
            Col("hw", stack=5),
            Col("host", limit=24, stack=5),
        ),
        (
            (
                r.run_id,
                (r.status, STATUS_STYLE.get(r.status, "white")),
                str(r.pair_id or "-"),
                r.method,
                _result(r, found.get(r.run_id)),
                _best(found.get(r.run_id)),
                model(r.target_sha256),
                model(r.draft_sha256),
                str(r.n_conditions),
                str(r.n_requests),
                r.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                hw.get(r.hardware or "", "-"),
                _origin(r),
            )
            for r in runs
        ),
    )
    if any(_result(r, found.get(r.run_id))[0] == "no difference" for r in runs):
        say("no difference: the best speed-up's 95% interval contains 1.0", style="dim")
    _legend(hw)


def _origin(info: RunInfo) -> str:
    """Where a run was measured: here, the host a bundle came from, or the Ray node (by id prefix)."""
    if info.node is not None:
        return f"{info.node.host} (ray {info.node.node_id[:6]})"
    return info.host or "local"


def _result(info: RunInfo, res: RunResult | None) -> Styled:
    """What the run found: outputs that differ (first: a speed-up with wrong output is no speed-up),
    else whether its fastest condition is faster, slower or not measurably different."""
    from specreg.benchmark.store.statistics import difference
    from specreg.schemas.bench import SAYS_NOTHING

    if info.status in SAYS_NOTHING or res is None:
        return ("-", None)
    if res.mismatched:
        return (f"{MISMATCH_MARK} outputs differ", "bold red")
    if res.best_speedup is None:
        return ("nothing measured", "yellow") if res.failed else ("-", None)
    word = difference(res.best_ci95)
    if word is None:
        return ("no interval", "yellow")
    return {"faster": ("faster", "green"), "slower": ("slower", "red")}.get(word, ("no difference", "yellow"))


def _best(res: RunResult | None) -> str:
    if res is None or res.best_speedup is None or res.best_condition is None:
        return "-"
    return f"{res.best_speedup:.2f}x {res.best_condition}"


def _legend(hw: dict[str, str]) -> None:
    for cls, label in sorted(hw.items(), key=lambda kv: int(kv[1][1:])):
        say(cls, prefix=f"{label} ", indent=len(label) + 1)


def hardware_table(classes: list[str], rows: list[HardwareRow]) -> None:
    """Pairs down, hardware classes across: the newest run's speed-up (or its status) on each."""
    from specreg.servers.hardware import labels

    hw = labels(classes)

    def cell(c: HardwareCell | None) -> Cell:
        if c is None:
            return "-"
        if c.speedup is None:
            return (c.status, STATUS_STYLE.get(c.status, "white"))
        return f"{c.speedup:.2f}x" if c.status == "complete" else (f"{c.speedup:.2f}x {c.status}", "yellow")

    if not rows:
        say("no finished runs yet: specreg bench admitted, or specreg import BUNDLE", style="dim")
    else:
        print_listing(
            (
                Col("target", limit=28, squeeze=21),  # the 12-hex SHA-256 prefix and the name's start
                Col("draft", limit=28, squeeze=21),
                Col("method", limit=16, squeeze=12),
                *(Col(hw[c], right=True) for c in classes),
            ),
            (
                (
                    f"{r.target_sha256[:12]} {r.target_name or ''}".rstrip(),
                    f"{r.draft_sha256[:12]} {r.draft_name or ''}".rstrip() if r.draft_sha256 else "-",
                    r.method,
                    *(cell(r.cells.get(c)) for c in classes),
                )
                for r in rows
            ),
        )
    _legend(hw)
