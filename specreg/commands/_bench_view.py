"""Rendering for `bench` and `runs`: the progress display (stderr) and the comparison table.

Everything that came from a model, a log or a file goes through `safe()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from specreg.benchmark.execute import Observer
from specreg.commands._common import console, err_console, print_listing, safe

if TYPE_CHECKING:
    from specreg.schemas.bench import BenchRun, ConditionRun, ConditionSummary, RequestRow, RunInfo

_STATUS = {
    "ok": "green",
    "complete": "green",
    "failed": "bold red",
    "incomplete": "yellow",
    "cancelled": "yellow",
    "aborted": "red",
    "skipped": "dim",
    "running": "cyan",
    "pending": "dim",
}


def _st(status: str) -> str:
    return f"[{_STATUS.get(status, 'white')}]{status}[/]"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _mib(v: int | None, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v / 2**20:+.1f}" if signed else f"{v / 2**20:.1f}"


def _print_wide(table: Table) -> None:
    """Tables are wide; a pipe or file gets them unwrapped (a terminal wraps at its own width)."""
    if console.is_terminal:
        console.print(table)
    else:
        Console(file=console.file, width=max(console.width, 160), highlight=False, no_color=console.no_color).print(
            table
        )


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


class ProgressView(Observer):
    """Observer drawing one progress bar per run and one line per finished condition (stderr)."""

    def __init__(self) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self.task: TaskID | None = None
        self.per_condition = 0
        self.done: dict[int, int] = {}  # requests finished per condition (rounds interleave them)
        self.started = False

    def __enter__(self) -> ProgressView:
        return self  # the bar starts with the first run: an early error prints no empty bar line

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    def note(self, text: str) -> None:
        err_console.print(f"[yellow]note:[/] {safe(text)}")

    def run_started(self, info: RunInfo, conds: list[ConditionRun], n_requests: int) -> None:
        self.per_condition = n_requests
        self.done = {}
        err_console.print(
            f"run {info.run_id}  pair {info.pair_id}  {safe(info.method)}  "
            f"{len(conds)} conditions x {n_requests} requests"
        )
        if not self.started:
            self.progress.start()
            self.started = True
        self.task = self.progress.add_task("starting", total=len(conds) * n_requests)

    def condition_started(self, cond: ConditionRun) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=f"{safe(cond.spec.name)}: starting server")

    def request_done(self, cond: ConditionRun, row: RequestRow) -> None:
        self.done[cond.idx] = self.done.get(cond.idx, 0) + 1
        if self.task is not None:
            self.progress.update(self.task, advance=1, description=safe(cond.spec.name))

    def condition_done(self, cond: ConditionRun) -> None:
        if cond.status == "running":
            return  # one round of several: the condition goes on in a later round
        line = f"  {_st(cond.status)}  {safe(cond.spec.name)}"
        if cond.counters is not None and cond.spec.method != "none":
            line += f"  acceptance {_pct(cond.counters.acceptance)}"
        if cond.failure:
            line += f": {safe(cond.failure)}"
        err_console.print(line)
        for ln in cond.failure_lines[:8]:
            err_console.print(f"      [dim]{safe(ln)}[/]")
        left = self.per_condition - self.done.get(cond.idx, 0)
        if self.task is not None and left > 0:  # skip the bar ahead over requests that will not run
            self.done[cond.idx] = self.per_condition
            self.progress.update(self.task, advance=left)

    def run_done(self, run_id: str, status: str, reason: str | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        err_console.print(f"run {run_id}: {_st(status)}")


def runs_table(runs: list[RunInfo]) -> None:
    """One aligned line per run (a thousand runs: rich's Table took a second to lay them out)."""
    print_listing(
        ("run", "status", "pair", "method", "target", "draft", "conds", "requests", "started"),
        (
            (
                r.run_id,
                (r.status, _STATUS.get(r.status, "white")),
                str(r.pair_id or "-"),
                r.method,
                r.target_sha256[:12],
                (r.draft_sha256 or "none")[:12],
                str(r.n_conditions),
                str(r.n_requests),
                r.started_at.strftime("%Y-%m-%d %H:%M:%S"),
            )
            for r in runs
        ),
        limits=(64, None, None, 32, None, None, None, None, None),
        right={2, 6, 7},
    )


def _equiv(s: ConditionSummary) -> str:
    if s.method == "none":
        return "reference"
    if not s.n_compared:
        return "-"
    text = f"{s.n_equal}/{s.n_compared}"
    if s.first_mismatch:
        return f"[bold red]{text}[/] ({safe(s.first_mismatch)})"
    return f"[green]{text}[/]"


def _speedup(s: ConditionSummary) -> str:
    """`1.23x [1.10, 1.35]`; `reference`; `-` for a condition without one (its reason is printed below)."""
    from specreg.benchmark.statistics import interval_text

    if s.speedup_note == "reference":
        return "reference"
    text = safe(interval_text(s.speedup, s.speedup_ci95))
    return f"[bold red]{text} unexplained[/]" if s.unexplained else text


def _unexplained(run: BenchRun) -> None:
    """Speed-ups that acceptance cannot account for, each with why (the audit fails them), and
    warm-ups that never settled (their condition's numbers may still include a cold start)."""
    for c in run.conditions:
        for w in c.warmup:
            if w.steady is False:
                ms = ", ".join(f"{x:.0f}" for x in w.latencies_ms)
                console.print(
                    f"[yellow]warm-up not steady[/] {safe(c.spec.name)} round {w.round}: "
                    f"{len(w.latencies_ms)} requests never agreed within {w.tolerance:.0%} ({ms} ms)"
                )
    for s in run.summaries:
        if s.unexplained:
            console.print(
                f"[bold red]unexplained[/] {safe(s.condition)} / {safe(s.stratum)}: {safe(s.unexplained_reason or '')}"
            )


def show_run(run: BenchRun) -> None:
    """Header, the condition x stratum comparison table, then each failure with its log lines."""
    i, m = run.info, run.manifest
    console.print(f"run {i.run_id}  {_st(i.status)}  pair {i.pair_id}  method {safe(i.method)}")
    if i.status_reason:
        console.print(f"  [dim]{safe(i.status_reason)}[/]")
    console.print(f"target {i.target_sha256[:12]}  draft {(i.draft_sha256 or 'none (self-speculation)')[:24]}")
    if m is not None:
        ver = m.runtime.version_text.splitlines()
        console.print(
            f"runtime {m.runtime.kind} {safe(m.runtime.xllamacpp_version or (ver[0] if ver else ''))}  "
            f"workload {safe(m.request.workload)}  repeat {m.observation.repeat}  "
            f"concurrency {','.join(map(str, m.request.concurrency_levels or [m.request.concurrency]))}  "
            f"seed {m.request.seed}" + (f"  order {m.observation.order}" if m.observation.order else "")
        )
        gpu = m.hardware.gpu
        console.print(
            f"hardware {safe(m.hardware.cpu_model or '?')}  "
            f"gpu {'absent (' + safe(gpu.reason) + ')' if not gpu.present else safe(', '.join(d.name for d in gpu.devices))}"
        )
    table = Table(box=None, pad_edge=False)
    expects = any(s.n_expect_checked for s in run.summaries)
    cols = [
        "condition",
        "stratum",
        "status",
        "accept",
        "speed-up",
        "p50 ms",
        "p95 ms",
        "TTFT ms",
        "RSS MiB",
        "equal",
        "err/to",
    ] + (["expect"] if expects else [])
    for col in cols:
        table.add_column(col, no_wrap=col in ("condition", "stratum", "status"))
    for s in run.summaries:
        whole = s.stratum == "all"
        if not s.n_requests and not whole:
            continue
        rss = (
            "-"
            if s.peak_rss_bytes is None
            else _mib(s.peak_rss_bytes)
            + (f" ({_mib(s.rss_overhead_bytes, True)})" if s.rss_overhead_bytes is not None else "")
        )
        row = [
            safe(s.condition) if whole else "",
            safe(s.stratum),
            _st(s.status) if whole else "",
            "-" if s.method == "none" else _pct(s.acceptance),
            _speedup(s),
            _ms(s.total_ms.p50),
            _ms(s.total_ms.p95),
            _ms(s.ttft_ms.p50),
            rss if whole else "",
            _equiv(s),
            f"{s.n_errors}/{s.n_timeouts}",
        ]
        if expects:
            row.append(f"{s.n_expect_failed} failed/{s.n_expect_checked}" if s.n_expect_checked else "-")
        table.add_row(*row)
    _print_wide(table)
    _unexplained(run)
    for c in run.conditions:
        if c.status == "ok":
            continue
        console.print(f"{_st(c.status)} {safe(c.spec.name)}: {safe(c.failure or '')}")
        for ln in c.failure_lines[:12]:
            console.print(f"    [dim]{safe(ln)}[/]")
        if c.log_path:
            console.print(f"    log: {safe(c.log_path)}")
