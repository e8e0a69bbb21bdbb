"""The live view of a running benchmark (stderr): a status line over a progress bar, and a line
per finished condition above it.

The runner reports through `Observer` callbacks; this view turns them into what a person at a
terminal follows: where the run is in its planned rounds (and past them, under `--budget`), how
long is left, and each condition's outcome as it finishes. Without a terminal (CI logs, nohup,
a pipe) no bar is drawn and each slot gets one plain line instead, and a line at least every
`HEARTBEAT_S` whatever the run is doing (a server start, one long request, a wait for a quieter
machine), so a log never goes quiet long enough to look hung. `bench admitted`, the demo and
`drafts --bench` all show their runs through it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
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

from specreg.benchmark.run.context import Observer
from specreg.commands.layout import shorten
from specreg.commands.output import err_console, safe_plain, say, show_lines, width
from specreg.commands.views.cells import STATUS_STYLE, pct_text
from specreg.text import plural, rounds_named

if TYPE_CHECKING:
    from specreg.schemas.bench import ConditionRun, RunInfo
    from specreg.schemas.request_row import RequestRow

HEARTBEAT_S = 25.0  # without a terminal, a line at least this often


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
        self.t_view = self.said = time.monotonic()  # when the view began; when it last wrote a line
        self.slot: ConditionRun | None = None  # the condition whose slot runs now
        self._quit = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> ProgressView:
        if not err_console().is_terminal:  # a log: a line at least every HEARTBEAT_S
            self._beat = threading.Thread(target=self._beating, name="specreg-heartbeat", daemon=True)
            self._beat.start()
        return self  # the bar starts with the first run: an early error prints no empty bar line

    def __exit__(self, *exc: object) -> None:
        self._quit.set()
        if self._beat is not None:
            self._beat.join(timeout=5.0)
        if self.started:
            self.progress.stop()

    def _beating(self) -> None:
        while not self._quit.wait(min(1.0, HEARTBEAT_S / 3)):
            if time.monotonic() - self.said >= HEARTBEAT_S:
                self._say(self._heartbeat())

    def _heartbeat(self) -> str:
        """Where the command is, for a log line when nothing else was said for a while."""
        now = time.monotonic()
        c = self.slot
        if self.task is None or c is None:
            return f"still working, {now - self.t_view:.0f} s in"
        n = self.done.get(c.idx, 0) - self.slot_n0.get(c.idx, 0)
        what = self.progress.status or safe_plain(c.spec.name)
        return (
            f"still running: {self._where()}, {what}: {plural(n, 'request')} of this slot done in "
            f"{now - self.slot_t0.get(c.idx, now):.0f} s; {now - self.t_run:.0f} s into the run"
        )

    def _say(self, text: str, **kw: Any) -> None:
        """A paragraph above the bar (through its console while it is drawn)."""
        say(text, out=self.progress.console if self.started else None, stderr=True, **kw)
        self.said = time.monotonic()

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
        self.slot = cond
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

    def slot_step(self, cond: ConditionRun, step: str) -> None:
        self.progress.status = f"{safe_plain(cond.spec.name)}: {step}"

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
            line += f"  acceptance {pct_text(cond.counters.acceptance)}"
        if cond.failure:
            line += f": {safe_plain(cond.failure)}"
        line = shorten(line, width(self.progress.console if self.started else None, stderr=True) - 1)
        at = line.find(cond.status)
        spans = [(at, at + len(cond.status), STATUS_STYLE.get(cond.status, "white"))]
        show_lines([(line, spans)], self.progress.console if self.started else None, stderr=True)
        self.said = time.monotonic()

    def run_done(self, run_id: str, status: str, reason: str | None) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
            self.task = None
        self.progress.status = ""
        at = len(f"run {run_id}: ")
        line = (f"run {run_id}: {status}", [(at, at + len(status), STATUS_STYLE.get(status, "white"))])
        show_lines([line], self.progress.console if self.started else None, stderr=True)
        self.said = time.monotonic()
        self.slot = None
