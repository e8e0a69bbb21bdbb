"""Rendering for `bench` and `runs`: the progress display (stderr) and the comparison table.

Everything that came from a model, a log or a file goes through `safe()`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from specreg.benchmark.execute import Observer
from specreg.commands.layout import Col, pack
from specreg.commands.output import Cell, err_console, print_listing, safe, safe_plain, say, show_lines, width
from specreg.units import mib_text

if TYPE_CHECKING:
    from specreg.schemas.bench import BenchRun, ConditionRun, ConditionSummary, RequestRow, RunInfo, WorkloadSource
    from specreg.servers.hardware import HardwareCell, HardwareRow

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


def _num(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


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
            console=err_console(),
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
        say(text, prefix="note: ", marks=[("note:", "yellow")], indent=6, stderr=True)

    def run_started(self, info: RunInfo, conds: list[ConditionRun], n_requests: int) -> None:
        self.per_condition = n_requests
        self.done = {}
        say(
            f"pair {info.pair_id}  {info.method}  {len(conds)} conditions x {n_requests} requests",
            prefix=f"run {info.run_id}  ",
            indent=2,
            stderr=True,
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
        line = cond.spec.name
        if cond.counters is not None and cond.spec.method != "none":
            line += f"  acceptance {_pct(cond.counters.acceptance)}"
        if cond.failure:
            line += f": {cond.failure}"
        say(
            line,
            prefix=f"  {cond.status}  ",
            marks=[(cond.status, _STATUS.get(cond.status, "white"))],
            indent=6,
            stderr=True,
        )
        for ln in cond.failure_lines[:8]:
            say(ln, prefix="      ", style="dim", indent=8, stderr=True)
        left = self.per_condition - self.done.get(cond.idx, 0)
        if self.task is not None and left > 0:  # skip the bar ahead over requests that will not run
            self.done[cond.idx] = self.per_condition
            self.progress.update(self.task, advance=left)

    def run_done(self, run_id: str, status: str, reason: str | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        err_console().print(f"run {run_id}: {_st(status)}")


def runs_table(runs: list[RunInfo]) -> None:
    """One aligned line per run (a thousand runs: rich's Table took a second to lay them out).

    `hw` names the run's hardware class (legend below) and `host` where an imported run came from.
    """
    from specreg.servers.hardware import labels

    if not runs:
        err_console().print("no benchmark runs yet (specreg bench admitted)")
        return
    hw = labels(sorted({r.hardware for r in runs if r.hardware}))
    print_listing(
        (
            Col("run", limit=64, squeeze=16),
            Col("status"),
            Col("pair", right=True),
            Col("method", limit=32, squeeze=12),
            Col("target", stack=3),
            Col("draft", stack=3),
            Col("conds", right=True, stack=2),
            Col("requests", right=True, stack=2),
            Col("started", stack=4),
            Col("hw", stack=5),
            Col("host", limit=24, stack=5),
        ),
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
                hw.get(r.hardware or "", "-"),
                r.host or "local",
            )
            for r in runs
        ),
    )
    _legend(hw)


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
            return (c.status, _STATUS.get(c.status, "white"))
        return f"{c.speedup:.2f}x" if c.status == "complete" else (f"{c.speedup:.2f}x {c.status}", "yellow")

    if not rows:
        say("no finished runs yet: specreg bench admitted, or specreg import BUNDLE", style="dim")
    else:
        print_listing(
            (
                Col("target", limit=28, squeeze=12),
                Col("draft", limit=28, squeeze=12),
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


def _equiv(s: ConditionSummary) -> Cell:
    if s.method == "none":
        return "reference"
    if not s.n_compared:
        return "-"
    return (f"{s.n_equal}/{s.n_compared}", "bold red" if s.first_mismatch else "green")


_COLUMNS = (
    Col("condition", limit=24, squeeze=10),
    Col("stratum", limit=16, squeeze=8),
    Col("status"),
    Col("accept", right=True),
    Col("speed-up", right=True),
    Col("E[L]", right=True, stack=6),
    Col("predicted", right=True, stack=7),
    Col("p50 ms", right=True),
    Col("p95 ms", right=True),
    Col("TTFT ms", right=True, stack=2),
    Col("RSS MiB", stack=3),
    Col("equal", stack=1),
    Col("errors", stack=4),
    Col("expect", stack=5),
)


def _row(s: ConditionSummary, expects: bool) -> list[Cell]:
    whole = s.stratum == "all"
    rss = "-"
    if s.peak_rss_bytes is not None and whole:
        extra = f" ({mib_text(s.rss_overhead_bytes, signed=True)})" if s.rss_overhead_bytes is not None else ""
        rss = mib_text(s.peak_rss_bytes) + extra
    errors = "-" if not (s.n_errors or s.n_timeouts) else f"{s.n_errors} err, {s.n_timeouts} timeout"
    expect = f"{s.n_expect_failed} of {s.n_expect_checked} failed" if expects and s.n_expect_checked else "-"
    return [
        s.condition if whole else "",
        s.stratum,
        (s.status, _STATUS.get(s.status, "white")) if whole else "",
        "-" if s.method == "none" else _pct(s.acceptance),
        _speedup(s),
        _num(s.expected_accepted_length),
        _num(s.predicted_speedup, "x"),
        _ms(s.total_ms.p50),
        _ms(s.total_ms.p95),
        _ms(s.ttft_ms.p50),
        rss,
        _equiv(s),
        errors,
        expect,
    ]


_TIMING_COLUMNS = (
    Col("condition", limit=24, squeeze=10),
    Col("stratum", limit=16, squeeze=8),
    Col("TTFT ms", right=True),
    Col("ITL p50", right=True),
    Col("ITL p95", right=True),
    Col("TPOT ms", right=True),
    Col("srv ms/tok", right=True),
    Col("TPOT<srv", right=True),
)

TIMINGS_LEGEND = (
    "client timings, p50 over requests: TTFT to the first generated text; ITL per token (a token "
    "that came in the same event as the one before: 0); TPOT (last token - first text) / tokens "
    "after it. srv ms/tok: the server's own predicted_per_token_ms. TPOT<srv: requests whose "
    "TPOT was below it, which is no decode speed: left out of TPOT."
)


def tpot_cells(s: ConditionSummary) -> tuple[str, str]:
    """The client TPOT median (without the requests below the server's time) and how many those were."""
    return _num(s.tpot_ms.p50), f"{s.n_tpot_flagged}/{s.n_ok}" if s.n_tpot_flagged else "-"


def _timing_row(s: ConditionSummary) -> list[Cell]:
    tpot, below = tpot_cells(s)
    return [
        s.condition if s.stratum == "all" else "",
        s.stratum,
        _ms(s.ttft_ms.p50),
        _num(s.itl_ms.p50),
        _num(s.itl_ms.p95),
        tpot,
        _num(s.server_tpot_ms.p50),
        (below, "yellow") if s.n_tpot_flagged else below,
    ]


TEXT_ONLY_LEGEND = (
    "text only: a side's token ids are not all on record (a chat request, or a stream that left "
    "ids out and no replay gave them), so a token change that keeps the text passes"
)


def _comparisons(summaries: list[ConditionSummary]) -> None:
    """Where outputs could only be compared by text, and each first difference with its context."""
    for s in summaries:
        if s.n_text_only:
            say(
                f"{s.n_text_only} of {s.n_compared} outputs compared by text only",
                prefix=f"{s.condition} / {s.stratum}: ",
                indent=4,
            )
    if any(s.n_text_only for s in summaries):
        say(TEXT_ONLY_LEGEND, style="dim")
    for s in summaries:
        if s.first_mismatch:
            say(
                f"first output that differs from the baseline: {s.first_mismatch}",
                prefix=f"{s.condition} / {s.stratum}: ",
                indent=4,
            )
            if s.mismatch_context:
                say(s.mismatch_context, prefix="    ", style="dim", indent=6)


def _speedup(s: ConditionSummary) -> Cell:
    """`1.23x [1.10, 1.35]`; `reference`; `-` for a condition without one (its reason is printed below)."""
    from specreg.benchmark.statistics import interval_text

    if s.speedup_note == "reference":
        return "reference"
    text = interval_text(s.speedup, s.speedup_ci95, short=True)
    return (f"{text} unexplained", "bold red") if s.unexplained else text


def _legend_no_difference(summaries: list[ConditionSummary]) -> None:
    from specreg.benchmark.statistics import NO_DIFFERENCE_LEGEND, difference

    if any(difference(s.speedup_ci95) == "no measurable difference" for s in summaries if s.speedup is not None):
        say(NO_DIFFERENCE_LEGEND, style="dim")
    if any(s.predicted_speedup is not None for s in summaries):
        say(PREDICTED_LEGEND, style="dim")


PREDICTED_LEGEND = (
    "E[L]: tokens per step that drafted; predicted: the decode speed-up this stratum's acceptance "
    "gives at the step costs measured in this run"
)


def _decisions(run: BenchRun) -> None:
    """Each condition's anytime-valid decision against the minimum speed-up (what `--budget` runs
    until), with the interval it was made on."""
    decided = [s for s in run.summaries if s.stratum == "all" and s.decision is not None]
    if not decided:
        return
    bar = decided[0].decision_min_speedup or 0.0
    parts = [
        f"{s.condition} {s.decision}" + (f" [{s.decision_ci[0]:.2f}, {s.decision_ci[1]:.2f}]" if s.decision_ci else "")
        for s in decided
    ]
    budget = run.manifest.settings.budget_s if run.manifest and run.manifest.settings else None
    how = f"measured until decided, budget {budget:g} s" if budget else "after the planned rounds"
    say("; ".join(parts), prefix=f"decided against {bar:g}x ({how}): ", indent=4)


def _tuning(run: BenchRun) -> None:
    """`--tune`: each measured draft length's prediction (made before it ran) beside what it
    measured, over all strata, and the choice (benchmark/tune.py)."""
    from specreg.benchmark.statistics import interval_text

    tuned = [s for s in run.summaries if s.stratum == "all" and s.tune is not None]
    for conc in sorted({s.concurrency or 1 for s in tuned}):
        mine = sorted((s for s in tuned if (s.concurrency or 1) == conc), key=lambda s: s.draft_n_max or 0)
        first = next((s for s in mine if s.tune and s.tune.curve), None)
        if first is None or first.tune is None:
            continue
        curve = first.tune.curve
        best = max(curve, key=lambda k: (round(curve[k], 6), -k)) if curve else None
        parts = [
            f"k{s.tune.draft_max} predicted {s.tune.predicted_speedup or 0:.2f}x measured "
            + interval_text(s.speedup, s.speedup_ci95)
            for s in mine
            if s.tune and s.tune.role == "candidate"
        ]
        chosen = next((s for s in mine if s.tune and s.tune.chosen), None)
        if chosen is not None and chosen.tune is not None:
            how = "decided" if chosen.tune.decided else "the budget ended before the best was decided"
            parts.append(f"chosen k{chosen.tune.draft_max} ({how})")
        say(
            "; ".join(parts),
            prefix=f"tuned at c{conc} from {first.condition} ({first.tune.profile} profile, best predicted k{best}): ",
            indent=4,
        )


def _unexplained(run: BenchRun) -> None:
    """Speed-ups that acceptance cannot account for, each with why (the audit fails them), and
    warm-ups that never settled (their condition's numbers may still include a cold start)."""
    for c in run.conditions:
        for w in c.warmup:
            if w.steady is False:
                ms = ", ".join(f"{x:.0f}" for x in w.latencies_ms)
                say(
                    f"{c.spec.name} round {w.round}: {len(w.latencies_ms)} requests never agreed within "
                    f"{w.tolerance:.0%} ({ms} ms)",
                    prefix="warm-up not steady: ",
                    marks=[("warm-up not steady:", "yellow")],
                    indent=4,
                )
    for s in run.summaries:
        if s.unexplained:
            say(
                s.unexplained_reason or "",
                prefix=f"unexplained {s.condition} / {s.stratum}: ",
                marks=[("unexplained", "bold red")],
                indent=4,
            )


def _workload_source(src: WorkloadSource) -> None:
    """Where a standard workload's prompts came from, pinned: package, wheel and data file hashes,
    and the prompts used (the first few ids; `--json` has them all)."""
    data = src.data_file.rsplit("/", 1)[-1]
    say(
        f"{src.package}=={src.version} wheel sha256 {src.wheel_sha256}, {data} sha256 {src.data_sha256}",
        prefix="  prompts from ",
        indent=4,
    )
    ids = src.prompt_ids
    shown = ", ".join(ids[:6]) + (f", +{len(ids) - 6} more" if len(ids) > 6 else "")
    of = f" of {src.available}" if src.available else ""
    sample = f", --sample {src.sample}" if src.sample else ""
    say(f"{len(ids)}{of}{sample}: {shown}", prefix="  prompts used ", indent=4)


def show_run(run: BenchRun) -> None:
    """Header, the condition x stratum comparison, then each difference and failure with its log lines."""
    i, m = run.info, run.manifest
    say(
        f"pair {i.pair_id}  method {i.method}",
        prefix=f"run {i.run_id}  {i.status}  ",
        marks=[(f"  {i.status}  ", _STATUS.get(i.status, "white"))],
        indent=2,
    )
    if i.status_reason:
        say(i.status_reason, prefix="  ", style="dim", indent=2)
    head = [f"target {i.target_sha256[:12]}", f"draft {i.draft_sha256[:12] if i.draft_sha256 else 'none (self)'}"]
    if m is not None:
        ver = m.runtime.version_text.splitlines()
        runtime = f"xllamacpp {m.runtime.xllamacpp_version}" if m.runtime.xllamacpp_version else (ver[0] if ver else "")
        gpu = m.hardware.gpu
        gpus = ", ".join(d.name for d in gpu.devices) if gpu.present else f"absent ({gpu.reason})"
        head += [
            f"runtime {m.runtime.kind} {runtime}".rstrip(),
            f"workload {m.request.workload}",
            f"repeat {m.observation.repeat}",
            f"concurrency {','.join(map(str, m.request.concurrency_levels or [m.request.concurrency]))}",
            f"seed {m.request.seed}",
            *([f"order {m.observation.order}"] if m.observation.order else []),
            f"cpu {m.hardware.cpu_model or '?'}",
            f"gpu {gpus}",
        ]
    show_lines(pack([safe_plain(h) for h in head], width(), indent=2))
    if m is not None and m.request.workload_source is not None:
        _workload_source(m.request.workload_source)
    expects = any(s.n_expect_checked for s in run.summaries)
    cols = _COLUMNS if expects else _COLUMNS[:-1]
    rows = [_row(s, expects)[: len(cols)] for s in run.summaries if s.n_requests or s.stratum == "all"]
    show_lines([""])
    print_listing(cols, rows)
    _legend_no_difference(run.summaries)
    _decisions(run)
    _tuning(run)
    show_lines([""])
    print_listing(_TIMING_COLUMNS, [_timing_row(s) for s in run.summaries if s.n_ok])
    say(TIMINGS_LEGEND, style="dim")
    _unexplained(run)
    _comparisons(run.summaries)
    for c in run.conditions:
        if c.status == "ok":
            continue
        say(
            c.failure or "",
            prefix=f"{c.status} {c.spec.name}: ",
            marks=[(c.status, _STATUS.get(c.status, "white"))],
            indent=4,
        )
        for ln in c.failure_lines[:12]:
            say(ln, prefix="    ", style="dim", indent=6)
        if c.log_path:
            say(str(c.log_path), prefix="    log: ", indent=6)
