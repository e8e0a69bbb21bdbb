"""Rendering for `bench` and `runs`: the progress display (stderr) and the comparison table.

Everything that came from a model, a log or a file goes through `safe()`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rich.console import RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column

from specreg.benchmark.execute import Observer
from specreg.commands.layout import Col, Styled, pack, shorten
from specreg.commands.output import Cell, err_console, print_listing, safe_plain, say, show_lines, width
from specreg.commands.views.sampling import show_samplers
from specreg.text import model_label, plural, rounds_named
from specreg.units import MIB, mib_text

if TYPE_CHECKING:
    from specreg.benchmark.run_index import RunResult
    from specreg.schemas.bench import (
        ArtifactRef,
        BenchRun,
        ConditionRun,
        ConditionSummary,
        RequestRow,
        RunInfo,
        WorkloadSource,
    )
    from specreg.servers.hardware import HardwareCell, HardwareRow

MISMATCH_MARK = "\u2717"  # ✗: an output that differs from the baseline (with colour, where there is colour)
WARN_MARK = "!"  # a number to read with care (a warm-up that never settled)
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


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _num(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.2f}{unit}"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


class _Progress(Progress):
    """rich's progress with a status line above the bar: what runs now, cut to the width, so the
    bar's own line (round, condition, counts, elapsed, ETA) always fits 80 columns."""

    status = ""

    def get_renderables(self) -> Iterable[RenderableType]:
        from rich.text import Text

        if self.status:
            yield Text(shorten(self.status, max(self.console.width - 1, 8)), no_wrap=True, overflow="ellipsis")
        yield self.make_tasks_table(self.tasks)


class _Left(ProgressColumn):
    """`eta 0:01:23` from the pace so far; with --budget, the budget left (what the run may still take)."""

    def __init__(self, view: ProgressView) -> None:
        super().__init__(table_column=Column(no_wrap=True))
        self.view = view

    def render(self, task: Task) -> RenderableType:
        from rich.text import Text

        if self.view.budget_s is not None:
            left = max(self.view.budget_s - (time.monotonic() - self.view.t_run), 0.0)
            return Text(f"budget {_clock(left)} left", style="progress.remaining")
        eta = task.time_remaining
        return Text("eta -:--:--" if eta is None else f"eta {_clock(eta)}", style="progress.remaining")


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class ProgressView(Observer):
    """Observer drawing the run's progress (stderr): a status line (the condition now running)
    over a bar with the round, the condition, requests done, elapsed time and ETA (the budget
    left with --budget), and above them one line per finished condition, cut to the width.

    `rounds`: the planned rounds (--repeat in round order; None: one server per condition).
    Lines go through the progress's own console while the bar is drawn, never past it."""

    def __init__(self, *, rounds: int | None = None, budget_s: float | None = None) -> None:
        self.rounds = rounds
        self.budget_s = budget_s
        self.progress = _Progress(
            TextColumn("{task.fields[where]}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=None, table_column=Column(ratio=1)),
            MofNCompleteColumn(table_column=Column(no_wrap=True)),
            TimeElapsedColumn(table_column=Column(no_wrap=True)),
            _Left(self),
            console=err_console(),
            transient=True,
            expand=True,
        )
        self.task: TaskID | None = None
        self.per_condition = 0
        self.n_conditions = 0
        self.done: dict[int, int] = {}  # requests finished per condition (rounds interleave them)
        self.starts: dict[int, int] = {}  # server starts per condition: its round number in round order
        self.in_round = 0  # conditions started in the current round
        self.round = 0
        self.t_run = time.monotonic()
        self.loads_told: dict[int, int] = {}  # slot loads already told per condition (busy ones noted)
        self.started = False
        self.slot_t0: dict[int, float] = {}  # when each condition's current slot started
        self.slot_n0: dict[int, int] = {}  # its requests done before that slot

    def __enter__(self) -> ProgressView:
        return self  # the bar starts with the first run: an early error prints no empty bar line

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.progress.stop()

    def _say(self, text: str, **kw: Any) -> None:
        """A paragraph above the bar (through its console while it is drawn)."""
        say(text, out=self.progress.console if self.started else None, stderr=True, **kw)

    def note(self, text: str) -> None:
        self._say(text, prefix="note: ", marks=[("note:", "yellow")], indent=6)

    def run_started(self, info: RunInfo, conds: list[ConditionRun], n_requests: int) -> None:
        self.per_condition = n_requests
        self.n_conditions = len(conds)
        self.done, self.starts, self.in_round, self.round = {}, {}, 0, 0
        self.t_run = time.monotonic()
        self._say(
            f"pair {info.pair_id}  {info.method}  {plural(len(conds), 'condition')} x {plural(n_requests, 'request')}",
            prefix=f"run {info.run_id}  ",
            indent=2,
        )
        if not self.started:
            self.progress.start()
            self.started = True
        self.task = self.progress.add_task("", total=len(conds) * n_requests, where="")

    def _where(self) -> str:
        """`round 2/3  cond 4/10`: where the run is in its plan (rounds past the plan: --budget's)."""
        if self.rounds is None:
            return f"cond {self.in_round}/{self.n_conditions}"
        if self.round > self.rounds:
            return f"round {self.round} (budget)  cond {self.in_round}"
        return f"round {self.round}/{self.rounds}  cond {self.in_round}/{self.n_conditions}"

    def condition_started(self, cond: ConditionRun) -> None:
        n = self.starts[cond.idx] = self.starts.get(cond.idx, 0) + 1
        self.slot_t0[cond.idx], self.slot_n0[cond.idx] = time.monotonic(), self.done.get(cond.idx, 0)
        if self.rounds is not None and n > self.round:  # the first condition of a new round
            self.round, self.in_round = n, 0
        self.in_round += 1
        self.progress.status = f"{safe_plain(cond.spec.name)}: starting server"
        if self.task is not None:
            if self.rounds is not None and n > self.rounds:  # --budget's round past the plan: its requests
                task = next((t for t in self.progress.tasks if t.id == self.task), None)
                if task is not None and task.total is not None:
                    self.progress.update(self.task, total=task.total + max(self.per_condition // self.rounds, 1))
            self.progress.update(self.task, where=self._where())

    def request_done(self, cond: ConditionRun, row: RequestRow) -> None:
        self.done[cond.idx] = self.done.get(cond.idx, 0) + 1
        self.progress.status = safe_plain(cond.spec.name)
        if self.task is not None:
            task = next((t for t in self.progress.tasks if t.id == self.task), None)
            if task is not None and task.total is not None and task.completed >= task.total:
                self.progress.update(self.task, total=task.total + 1)  # --budget's rounds past the plan
            self.progress.update(self.task, advance=1)

    def condition_done(self, cond: ConditionRun) -> None:
        told = self.loads_told.get(cond.idx, 0)
        for load in cond.load[told:]:  # this slot's (once each)
            if load.busy:
                self.note(f"{cond.spec.name} round {load.round} set aside: {load.busy}")
        self.loads_told[cond.idx] = len(cond.load)
        if not self.progress.console.is_terminal:  # no bar is drawn: a line per slot (CI logs, nohup)
            took = time.monotonic() - self.slot_t0.get(cond.idx, time.monotonic())
            n = self.done.get(cond.idx, 0) - self.slot_n0.get(cond.idx, 0)
            reps = cond.load[-1].repeats if len(cond.load) > told else []  # a `--budget` slot may measure several
            where = rounds_named(reps) if reps and self.rounds is not None else (
                f"round {self.starts.get(cond.idx, 1)}" if self.rounds is not None else "slot"
            )  # fmt: skip
            self._say(
                f"{where} {safe_plain(cond.spec.name)}: {plural(n, 'request')} in {took:.0f} s, "
                f"{time.monotonic() - self.t_run:.0f} s into the run"
            )
        if cond.status == "running":
            return  # one round of several: the condition goes on in a later round
        self._say_done(cond)
        left = self.per_condition - self.done.get(cond.idx, 0)
        if self.task is not None and left > 0:  # skip the bar ahead over requests that will not run
            self.done[cond.idx] = self.per_condition
            self.progress.update(self.task, advance=left)

    def _say_done(self, cond: ConditionRun) -> None:
        """One line, cut to the width: status, condition, acceptance, and why it failed."""
        line = f"  {cond.status:<6}  {safe_plain(cond.spec.name)}"
        if cond.counters is not None and cond.spec.method != "none" and not cond.failure:
            line += f"  acceptance {_pct(cond.counters.acceptance)}"
        if cond.failure:
            line += f": {safe_plain(cond.failure)}"
        line = shorten(line, width(self.progress.console if self.started else None, stderr=True) - 1)
        at = line.find(cond.status)
        spans = [(at, at + len(cond.status), _STATUS.get(cond.status, "white"))]
        show_lines([(line, spans)], self.progress.console if self.started else None, stderr=True)

    def run_done(self, run_id: str, status: str, reason: str | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        self.progress.status = ""
        at = len(f"run {run_id}: ")
        line = (f"run {run_id}: {status}", [(at, at + len(status), _STATUS.get(status, "white"))])
        show_lines([line], self.progress.console if self.started else None, stderr=True)


def runs_table(
    runs: list[RunInfo],
    results: Mapping[str, RunResult] | None = None,
    names: Mapping[str, str | None] | None = None,
) -> None:
    """One aligned line per run (a thousand runs: rich's Table took a second to lay them out):
    its status, what it found (`result`, from `results`) and its fastest speculative condition.

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
                (r.status, _STATUS.get(r.status, "white")),
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
    from specreg.benchmark.statistics import difference

    if info.status in ("running", "cancelled", "aborted") or res is None:
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
            return (c.status, _STATUS.get(c.status, "white"))
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


def _equiv(s: ConditionSummary) -> Cell:
    if s.method == "none":
        return "reference"
    if not s.n_compared:
        return "-"
    if s.first_mismatch:
        return (f"{MISMATCH_MARK} {s.n_equal}/{s.n_compared}", "bold red")
    return (f"{s.n_equal}/{s.n_compared}", "green")


# The condition (its swept values: `draft-simple k16 c2`) and the stratum tell rows apart: never
# shortened. On a narrow terminal the numbers move beneath their row instead, highest `stack` first.
_COLUMNS = (
    Col("condition", limit=40),
    Col("stratum", limit=24),
    Col("status"),
    Col("accept", right=True),
    Col("speed-up", right=True),
    Col("E[L]", right=True, stack=7),
    Col("predicted", right=True, stack=8),
    Col("p50 ms", right=True),
    Col("p95 ms", right=True, stack=1),
    Col("TTFT ms", right=True, stack=3),
    Col("RSS MiB", stack=4),
    Col("equal", stack=2),
    Col("errors", stack=5),
    Col("expect", stack=6),
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
    Col("condition", limit=40),
    Col("stratum", limit=24),
    Col("TTFT ms", right=True),
    Col("ITL p50", right=True),
    Col("ITL p95", right=True),
    Col("TPOT ms", right=True),
    Col("srv ms/tok", right=True, stack=2),
    Col("TPOT<srv", right=True, stack=1),
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
            differ = s.n_compared - s.n_equal
            say(
                f"{s.condition} / {s.stratum}: {plural(differ, 'output')} of {s.n_compared} "
                f"{'differs' if differ == 1 else 'differ'} from the baseline; the first at {s.first_mismatch}",
                prefix=f"{MISMATCH_MARK} mismatch: ",
                marks=[(f"{MISMATCH_MARK} mismatch:", "bold red")],
                indent=4,
            )
            if s.mismatch_context:
                say(s.mismatch_context, prefix="    ", style="yellow", indent=6)
            say(_triage_line(s), prefix="    triage: ", style="yellow", indent=6)


def _triage_line(s: ConditionSummary) -> str:
    """The first mismatch's triage and how the condition's mismatches divide (schemas/triage.py)."""
    first = s.mismatch_triage.text() if s.mismatch_triage else "not triaged (no baseline probabilities on record)"
    ties = plural(s.n_near_ties, "near tie")
    rest = plural(s.n_divergences, "divergence")
    return (
        f"{first}. Of the mismatches: {ties} (reported, not failed, by the default policy), {rest} or "
        "untriaged (fail equivalence)"
    )


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


def _rounds_text(run: BenchRun) -> str:
    """`rounds 4 (planned 1, then until decided)`: what was measured, not only what was planned
    (issue 32: a one-round run's header said `repeat 3`)."""
    m = run.manifest
    planned = m.observation.repeat if m is not None else 0
    measured = len({r.repeat for r in run.requests})
    if not run.requests:
        return f"repeat {planned}"
    budget = m.settings.budget_s if m is not None and m.settings is not None else None
    if measured == planned and not budget:
        return f"repeat {planned}"
    return f"rounds {measured} (planned {planned}" + (", then until decided)" if budget else ")")


def _decisions(run: BenchRun) -> None:
    """Each condition's anytime-valid decision against the minimum speed-up (what `--budget` runs
    until), with the interval it was made on. A failed condition is undecided whatever its pairs
    say (speculation that did not run is a failure, not a speed); with no projection to print,
    it says so, or "undecided after 21 rounds" read like a budget too small."""
    decided = [s for s in run.summaries if s.stratum == "all" and s.decision is not None]
    if not decided:
        return
    from specreg.decision.budget import undecided_text

    bar = decided[0].decision_min_speedup or 0.0
    rounds: dict[str, set[int]] = {}
    for r in run.requests:
        rounds.setdefault(r.condition, set()).add(r.repeat)
    parts = [
        f"{s.condition} "
        + (
            undecided_text(len(rounds.get(s.condition, ())), s.decision_more_rounds, s.decision_budget)
            + (" (the condition failed)" if s.status == "failed" and s.decision_more_rounds is None else "")
            if s.decision == "undecided"
            else f"{s.decision}" + (f" [{s.decision_ci[0]:.2f}, {s.decision_ci[1]:.2f}]" if s.decision_ci else "")
        )
        for s in decided
    ]
    budget = run.manifest.settings.budget_s if run.manifest and run.manifest.settings else None
    how = f"measured until decided, budget {budget:g} s" if budget else "after the planned rounds"
    say("; ".join(parts), prefix=f"decided against {bar:g}x ({how}): ", indent=4)


def _set_aside(run: BenchRun) -> None:
    """How busy the machine was, and the rounds that set aside (benchmark/contention.py)."""
    from specreg.benchmark.contention import run_notes

    loads = [x for c in run.conditions for x in c.load]
    notes = run_notes(run.summaries)
    if notes:
        say(notes[0], prefix="busy: ", marks=[("busy:", "yellow")], indent=4)
        for line in notes[1:]:
            say(line, prefix="  ", indent=6)
    elif loads:
        worst = max(loads, key=lambda x: x.others_cores + x.steal_cores)
        share = run.manifest.settings.busy_share if run.manifest and run.manifest.settings else None
        off = " (--busy-share off)" if share == 0 else ""
        say(
            f"others used at most {worst.others_cores + worst.steal_cores:.2f} of {worst.cores} cores in a "
            f"round; none set aside{off}",
            prefix="machine load: ",
            style="dim",
            indent=4,
        )


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
            how = chosen.tune.why or (
                "decided" if chosen.tune.decided else "the budget ended before the best was decided"
            )
            word = "chosen" if chosen.tune.decided or chosen.decision != "undecided" else "leading, undecided"
            parts.append(f"{word} k{chosen.tune.draft_max} ({how})")
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
                    prefix=f"{WARN_MARK} warm-up not steady: ",
                    marks=[(f"{WARN_MARK} warm-up not steady:", "yellow")],
                    indent=4,
                )
    for s in run.summaries:
        if s.unexplained:
            say(
                s.unexplained_reason or "",
                prefix=f"{MISMATCH_MARK} unexplained {s.condition} / {s.stratum}: ",
                marks=[(f"{MISMATCH_MARK} unexplained", "bold red")],
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


def _model(sha256: str, ref: ArtifactRef | None, name: str | None) -> str:
    """`16c03fe0a65d demo-target (target.gguf, F32)`: the SHA-256 prefix with what names the file."""
    return model_label(sha256, name=name, file=ref.path if ref else None, quant=ref.file_type if ref else None)


def _memory_flags(run: BenchRun) -> None:
    """Each condition whose measured peak RSS passed its prediction's margin (the audit's memory
    gate then counts the measured peak, the larger)."""
    from specreg.validators.memory_budget import exceeded_text, prediction_exceeded

    for c in run.conditions:
        mem = c.memory
        if mem is None or not mem.peak_rss_bytes or not mem.predicted_rss_bytes:
            continue
        over = prediction_exceeded(mem.peak_rss_bytes, mem.predicted_rss_bytes)
        if over is not None:
            line = exceeded_text(c.spec.name, mem.peak_rss_bytes / MIB, mem.predicted_rss_bytes / MIB, over)
            say(line, prefix="memory: ", marks=[("memory:", "yellow")], indent=4)


def show_run(run: BenchRun, names: Mapping[str, str | None] | None = None) -> None:
    """Header, the condition x stratum comparison, then each difference and failure with its log lines.

    `names`: general.name by SHA-256 (from the registry), shown beside each SHA-256 prefix."""
    i, m = run.info, run.manifest
    names = names or {}
    say(
        f"pair {i.pair_id}  method {i.method}",
        prefix=f"run {i.run_id}  {i.status}  ",
        marks=[(f"  {i.status}  ", _STATUS.get(i.status, "white"))],
        indent=2,
    )
    if i.status_reason:
        say(i.status_reason, prefix="  ", style="dim", indent=2)
    node = i.node or (m.node if m is not None else None)  # the registry's record, else the run's own
    if node is not None:
        say(node.line(), prefix="  ran on ", indent=4)
    draft_ref = m.draft.artifact if m is not None else None
    head = [
        f"target {_model(i.target_sha256, m.target if m else None, names.get(i.target_sha256))}",
        f"draft {_model(i.draft_sha256, draft_ref, names.get(i.draft_sha256)) if i.draft_sha256 else 'none (self)'}",
    ]
    if m is not None:
        from specreg.benchmark.digest import runtime_identity
        from specreg.servers.identity import runtime_text

        gpu = m.hardware.gpu
        gpus = ", ".join(d.name for d in gpu.devices) if gpu.present else f"absent ({gpu.reason})"
        head += [
            f"runtime {runtime_text(runtime_identity(m))}",
            f"workload {m.request.workload}",
            _rounds_text(run),
            f"concurrency {','.join(map(str, m.request.concurrency_levels or [m.request.concurrency]))}",
            f"seed {m.request.seed}" + (" + repetition" if m.request.seeds else ""),
            *([f"temperature {','.join(f'{t:g}' for t in m.request.temperatures)}"] if m.request.temperatures else []),
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
    show_samplers(run)
    _set_aside(run)
    _memory_flags(run)
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
