"""`bench continue`: what a stored run must still be for measuring on from it to be the same run,
and the state a continued run picks up from its rows.

A run that stopped short of a decision (its budget ended, Ctrl-C, a `kill -9`, a reboot) keeps
every row it finished, and the decision is a function of those rows in the order they were
measured (decision/bar.py: the paired log ratios, by repetition). So a continuation needs no
saved state beyond what the rows already are: the sequential decisions, the plan's prices (each
slot's parts, stored with its load) and the tuning's prediction (its first pass's rows) are all
drawn again from them, and new repetitions continue the seed stream (repetition r: seed + r).

What a continuation may not change is what the rows measured: the same files (SHA-256 again), the
same server build, the same prompts (the workload's SHA-256), the same hardware class and server
threads, and the same settings (the stored ones; `--min-speedup` is not an option of `bench
continue`, so the bar a sequence tests cannot move mid-way). Each difference is refused in one
line that names it (`refusal`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specreg.benchmark.plan.tune import SKIPPED as TUNE_SKIPPED
from specreg.benchmark.store.ending import BUDGET_ENDED
from specreg.benchmark.store.sampling import arm
from specreg.errors import ArtifactChanged, UsageError
from specreg.registry.db import now
from specreg.schemas.bench import ALL_STRATA, ConditionRun, RunStatus, ScheduleSlot
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import RequestRow
from specreg.servers.hardware import hardware_class
from specreg.servers.identity import build_of, runtime_text

if TYPE_CHECKING:
    from specreg.benchmark.run.context import RunContext
    from specreg.benchmark.store.runstore import RunStore
    from specreg.schemas.bench import BenchRun, HardwareInfo, RunManifest, RuntimeInfo
    from specreg.servers.pinning import Pinning

# what a run may have ended as and still be continued (`complete` only with a condition undecided)
CONTINUABLE: tuple[RunStatus, ...] = ("complete", "incomplete", "contended", "cancelled", "aborted")
# a condition the continuation measures on from: these end statuses are not final (a fault, the
# budget) - `failed` (the server refused the draft, crashed) and a ruled-out tuning length are
RESUMED = ("ok", "running", "pending", "cancelled", "aborted")


def undecided(run: BenchRun) -> list[str]:
    """The conditions of `run` whose whole-workload decision is still open (or never measured)."""
    out = [
        s.condition
        for s in run.summaries
        if s.stratum == ALL_STRATA and s.method != BASELINE and s.decision in ("undecided", None) and s.n_requests
    ]
    out += [c.spec.name for c in run.conditions if c.status == "skipped" and c.failure == BUDGET_ENDED]
    return list(dict.fromkeys(out))


def check_status(run: BenchRun) -> None:
    """Refuse a run that is not one to go on from, in one line naming why."""
    rid, st = run.info.run_id, run.info.status
    if st == "running":
        raise UsageError(
            f"run {rid} is still running (specreg pid {run.info.runner_pid})",
            hint="wait for it, or stop it (Ctrl-C); a run whose specreg died is marked aborted first",
        )
    if st not in CONTINUABLE:
        raise UsageError(f"run {rid} {st}: {run.info.status_reason or 'no reason recorded'}; nothing to continue")
    if run.manifest is None or run.manifest.settings is None:
        raise UsageError(f"run {rid} records no settings (made before they were stored): measure it again")
    if run.info.pair_id is None:
        raise UsageError(f"run {rid} has no pair in this registry (imported without it): nothing to continue")
    if st == "complete" and not undecided(run):
        raise UsageError(f"run {rid} is decided: every condition is faster or not faster; nothing to continue")


def refusal(
    run: BenchRun, *, runtime: RuntimeInfo, workload_sha256: str, hardware: HardwareInfo, pinning: Pinning
) -> str | None:
    """The first difference between what the stored run measured with and what measuring on here
    would (None: none): the server build, the prompts, the hardware class, the server threads.
    The files are verified by the runner (their SHA-256 read again)."""
    m = run.manifest
    assert m is not None
    was, now = m.runtime, runtime
    old_b, new_b = build_of(was.version_text), build_of(now.version_text)
    if old_b != new_b:
        measured = runtime_text(f"{was.kind} {was.version_text}")
        return f"server build {new_b or 'unknown'} != {old_b or 'unknown'} (the run measured {measured})"
    if was.kind != now.kind or (was.sha256 and now.sha256 and was.sha256 != now.sha256):
        return (
            f"server changed: {now.kind} {now.path} (sha256 {(now.sha256 or '?')[:12]}) != "
            f"{was.kind} {was.path} (sha256 {(was.sha256 or '?')[:12]})"
        )
    if was.version_text.strip() != now.version_text.strip():
        return f"server version changed: {now.version_text.strip()[:80]!r} != {was.version_text.strip()[:80]!r}"
    wanted = m.request.workload_sha256
    if wanted and workload_sha256 != wanted:
        return f"workload changed: sha256 {workload_sha256[:12]} != {wanted[:12]} ({m.request.workload})"
    here = hardware_class(json.loads(hardware.model_dump_json()))
    there = hardware_class(json.loads(m.hardware.model_dump_json()))
    if here != there:
        return f"another hardware class: {here} (the run: {there})"
    obs = m.observation
    cpus = list(pinning.cpus) if pinning.cpus else None
    if (obs.threads, obs.server_cpus) != (pinning.threads, cpus):
        return f"server threads {pinning.threads} on cores {cpus} != {obs.threads} on cores {obs.server_cpus}"
    return None


def reopen(conds: list[ConditionRun], methods: list[str] | None) -> list[ConditionRun]:
    """Set the conditions that continue running again (their baselines always; with `methods`,
    only those methods' others); returns them. A condition with no row yet is pending (its
    planned slots run first); a failed one stays failed."""
    out = []
    for c in conds:
        wanted = methods is None or c.spec.method == BASELINE or c.spec.method in methods
        budget_cut = c.status == "skipped" and c.failure in (BUDGET_ENDED, TUNE_SKIPPED)
        if not wanted or not (c.status in RESUMED or budget_cut):
            continue
        c.status = "running" if c.started_at is not None or budget_cut else "pending"
        c.failure, c.finished_at = None, None
        out.append(c)
    return out


def remaining(schedule: list[ScheduleSlot], ctx: RunContext, conds: list[ConditionRun]) -> list[ScheduleSlot]:
    """The planned slots not measured in full (a run cut inside its planned rounds), for the
    conditions that continue; a slot cut short measures only its prompts missing (execute.py)."""
    by_name = {c.spec.name: c for c in conds if c.status in ("running", "pending")}
    prompts = [it.id for it in ctx.workload.items]
    out = []
    for slot in schedule:
        c = by_name.get(slot.condition)
        if c is None:
            continue
        if any((c.idx, p, rep) not in ctx.row_ids for rep in slot.repeats for p in prompts):
            out.append(slot)
    return out


@dataclass
class Stored:
    """What a stored run measured, as the scheduler and the projection read it (`Measured`)."""

    rows: list[RequestRow]
    slot_s: dict[int, list[float]] = field(default_factory=dict)
    replay_s: dict[int, list[float]] = field(default_factory=dict)

    def expired(self) -> bool:
        return False


def slot_seconds(run: BenchRun) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Each condition's slots' wall seconds and the part their id replays took, from the parts
    each slot stored with its load (a slot with no parts recorded - an older run - is left out)."""
    slot_s: dict[int, list[float]] = {}
    replay_s: dict[int, list[float]] = {}
    for c in run.conditions:
        for load in c.load:
            parts = [load.start_s, load.warmup_s, load.requests_s, load.after_s]
            if all(p is None for p in parts):
                continue
            slot_s.setdefault(c.idx, []).append(sum(p or 0.0 for p in parts))
            replay_s.setdefault(c.idx, []).append(load.replay_s or 0.0)
    return slot_s, replay_s


def reap(store: RunStore) -> list[str]:
    """Mark the runs whose specreg died aborted (`RunStore.reap_orphans`) and draw each one's
    summaries from its rows (`recover`); returns what was done, a line a run."""
    notes = store.reap_orphans()
    recover_reaped(store)
    return notes


def recover_reaped(store: RunStore) -> None:
    """`recover` each run the store's last `reap_orphans` marked aborted."""
    for rid in store.reaped:
        recover(store, rid)


def recover(store: RunStore, run_id: str) -> None:
    """The summaries of a run whose specreg died before writing them (`aborted`: written only
    when a run ends), drawn from its rows as the runner draws them, with the projection of what
    would decide each condition left undecided: so `runs show` states where it stood, and
    `continue_command` the budget still needed. Its own budget is counted as spent (when it
    died is not known), so every projection names the budget a continuation needs."""
    from specreg.benchmark.plan.projection import project_undecided
    from specreg.benchmark.store.condition_summary import stat_settings, summarize

    run = store.load(run_id)
    m = run.manifest
    if m is None or m.settings is None or run.summaries:
        return
    summaries = summarize(run.conditions, run.requests, stat_settings(m.settings, m.runtime.spec_defaults))
    if m.settings.budget_s is not None:
        slot_s, replay_s = slot_seconds(run)
        strata = [p.stratum for p in run.prompts]
        measured = Stored(run.requests, slot_s, replay_s)
        project_undecided(summaries, measured, run.conditions, m.settings.budget_s, m.settings, strata)
    store.set_summaries(run.info.run_id, run.info.target_sha256, run.info.draft_sha256, summaries)


def restore(ctx: RunContext, run: BenchRun, row_ids: list[int]) -> None:
    """Fill a fresh context with what `run` measured: its rows (in measured order, with their
    stored ids), the baseline outputs new rows are compared with, the prompts' token counts, and
    each slot's seconds and replays (what the plan prices the next ones at)."""
    by_idx = {c.idx: c for c in run.conditions}
    ctx.rows = list(run.requests)
    for rid, row in zip(row_ids, ctx.rows, strict=True):
        ctx.row_ids[(row.condition_idx, row.prompt_id, row.repeat)] = rid
        c = by_idx.get(row.condition_idx)
        if c is None:
            continue
        ctx.concurrency[c.idx] = arm(c.spec)
        if c.spec.method == BASELINE and row.ok:
            ctx.baseline[(arm(c.spec), row.prompt_id, row.repeat)] = row
    if run.prompts:
        ctx.prompts_stored = True
        ctx.input_tokens = {p.id: p.input_tokens for p in run.prompts}
    ctx.slot_s, ctx.replay_s = slot_seconds(run)


def check_methods(run: BenchRun, methods: list[str] | None) -> None:
    """`--methods` names only methods the run measured (UsageError otherwise)."""
    unknown = sorted(set(methods or ()) - {c.spec.method for c in run.conditions})
    if unknown:
        have = ", ".join(sorted({c.spec.method for c in run.conditions}))
        raise UsageError(f"--methods {','.join(unknown)}: run {run.info.run_id} measured none of it (it has {have})")


def file_changed(run_id: str, role: str, exc: ArtifactChanged) -> UsageError:
    """The one-line refusal for a measured file that is no longer what the run measured."""
    return UsageError(
        f"run {run_id} cannot be continued here: {role} file changed: sha256 "
        f"{(exc.actual or 'missing')[:12]} != {exc.expected[:12]} ({exc.path})",
        hint="put the measured file back, or measure the pair again (bench admitted)",
    )


def continued_manifest(
    run: BenchRun, *, budget_s: float, first_repeat: int, methods: list[str] | None, tune: bool
) -> RunManifest:
    """The run's manifest with this continuation added; its budget becomes the sum of its sessions'."""
    from specreg.schemas.bench import Continuation

    assert run.manifest is not None and run.manifest.settings is not None
    was = run.manifest.settings
    session = Continuation(
        started_at=now(), previous_status=run.info.status, previous_finished_at=run.info.finished_at,
        budget_s=budget_s, first_repeat=first_repeat, methods=methods, tune=tune,
    )  # fmt: skip
    return run.manifest.model_copy(
        update={
            "settings": was.model_copy(update={"budget_s": (was.budget_s or 0.0) + budget_s}),
            "continued": [*run.manifest.continued, session],
        }
    )
