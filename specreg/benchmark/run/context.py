"""What every slot of one benchmark run shares: its settings, its server command, its store, and
the rows measured so far (`RunContext`), and the callbacks progress is reported through
(`Observer`).

The runner creates one context per run and hands it to each slot (execute.py), to the
token-id replay and mismatch triage (equivalence/) and to the tuning; they all read the same
rows and write through the same store. It lives apart from the slot's code so that those parts
can name it without importing each other.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from specreg.benchmark.run.reply import Completion
from specreg.benchmark.store.runstore import RunStore
from specreg.benchmark.workloads.jsonl import Workload
from specreg.schemas.bench import ConditionRun, RoundLoad, RunInfo, SlotPhase, WorkloadItem
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.request_row import RequestRow
from specreg.schemas.sampling import Sampler
from specreg.servers.launcher import ServerCommand
from specreg.servers.memory import GpuProbe
from specreg.servers.pinning import Pinning


class Observer:
    """Progress callbacks (the CLI draws a progress bar); every method is optional."""

    def note(self, text: str) -> None: ...
    def run_started(self, info: RunInfo, conds: list[ConditionRun], n_requests: int) -> None: ...
    def condition_started(self, cond: ConditionRun) -> None: ...
    def slot_step(self, cond: ConditionRun, step: str) -> None: ...  # what the slot does now
    def request_done(self, cond: ConditionRun, row: RequestRow) -> None: ...
    def condition_done(self, cond: ConditionRun) -> None: ...
    def run_done(self, run_id: str, status: str, reason: str | None) -> None: ...


@dataclass
class RunContext:
    """What every condition of one run shares, and the rows collected so far."""

    run_id: str
    run_dir: Path
    target_path: str
    opts: BenchSettings
    cmd: ServerCommand
    store: RunStore
    observer: Observer
    gpu: GpuProbe
    workload: Workload
    started: float = field(default_factory=time.monotonic)
    rows: list[RequestRow] = field(default_factory=list)
    # (arm: concurrency and sampler, prompt, rep) -> the baseline's row
    baseline: dict[tuple[tuple[int, Sampler], str, int], RequestRow] = field(default_factory=dict)
    prompts_stored: bool = False
    input_tokens: dict[str, int | None] = field(default_factory=dict)  # prompt id -> tokens on the server
    items: dict[str, WorkloadItem] = field(default_factory=dict)
    row_ids: dict[tuple[int, str, int], int] = field(default_factory=dict)  # (condition, prompt, rep) -> row id
    positions: dict[tuple[int, str, int], list[int]] = field(default_factory=dict)  # the stream's id positions
    concurrency: dict[int, tuple[int, Sampler]] = field(default_factory=dict)  # condition idx -> its arm
    pinning: Pinning = field(default_factory=lambda: Pinning(None, None))  # the servers' threads and cores
    slot_s: dict[int, list[float]] = field(default_factory=dict)  # condition idx -> each slot's wall seconds
    replay_s: dict[int, list[float]] = field(default_factory=dict)  # ... and the part its id replays took
    phase: SlotPhase = "planned"  # why the next slots run (the runner sets it), recorded with each
    strata: frozenset[str] | None = None  # the next slots measure only these strata's prompts (None: all)
    marks: dict[str, float] = field(default_factory=dict)  # the slot running: when each of its parts began
    # (condition idx, prompt, max tokens, seed or None when greedy) -> its last id replay (`complete_ids`)
    replays: dict[tuple[int, str, int, int | None], Completion] = field(default_factory=dict)
    # `--budget`: when the run must end (monotonic; None: no budget). Nothing starts after it, and
    # the requests in flight then are cut: not rows, not failures (execute.py)
    deadline: float | None = None
    cut: int = 0  # requests in flight when the deadline came: cut, not counted
    waited_s: float = 0.0  # spent waiting for a quieter machine so far (at most `--busy-wait` in all)
    last_load: RoundLoad | None = None  # the machine's load as last seen (a slot's, or a look while waiting)

    def __post_init__(self) -> None:
        self.items = {i.id: i for i in self.workload.items}

    def remaining(self) -> float:
        """Seconds until the run must stop: its `--run-timeout`, or its budget's deadline if sooner."""
        left = self.opts.run_timeout_s - (time.monotonic() - self.started)
        return left if self.deadline is None else min(left, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return self.remaining() <= 0

    def budget_over(self) -> bool:
        """The budget's deadline has passed (what stops the run is the budget, not a fault)."""
        return self.deadline is not None and time.monotonic() >= self.deadline


def row_key(row: RequestRow) -> tuple[int, str, int]:
    """A row's place in a run: (condition idx, prompt id, repetition), the key of the context's
    row ids and stream positions."""
    return (row.condition_idx, row.prompt_id, row.repeat)
