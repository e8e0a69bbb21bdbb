"""Benchmark admitted pairs: one run per pair, fresh servers per condition, rows as they finish.

The conditions follow PROTOCOL §3: the baseline (its outputs are the reference for every
speculative condition), the n-gram methods, the pair's admitted method, each at every draft
length and concurrency asked for. By default they run in rounds, one repetition per round in a
seeded random order (`conditions.schedule`, recorded in the manifest: manifest.py). With
`--budget` the rounds after the planned ones are the scheduler's to choose (scheduler.py); the
runner runs each round it is handed. Whatever goes wrong - a server that never starts, dies
mid-run, refuses the draft, Ctrl-C - the rows already written stay, the condition and the run say
what happened, and the next condition runs.
"""

from __future__ import annotations

import os
import secrets
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark.plan import conditions as cond_mod
from specreg.benchmark.plan import tune
from specreg.benchmark.plan.eligibility import NOT_BENCHMARKABLE, drop_covered, not_benchmarkable
from specreg.benchmark.plan.projection import project_undecided
from specreg.benchmark.plan.scheduler import BudgetScheduler
from specreg.benchmark.run.context import Observer, RunContext
from specreg.benchmark.run.execute import finish_condition, run_condition
from specreg.benchmark.run.machine_probe import tune_verify
from specreg.benchmark.run.manifest import run_manifest
from specreg.benchmark.store import contention
from specreg.benchmark.store.condition_summary import stat_settings, summarize
from specreg.benchmark.store.digest import keep_digests
from specreg.benchmark.store.ending import BUDGET_ENDED
from specreg.benchmark.store.runstore import RunStore
from specreg.benchmark.store.sampling import StoredGreedy, sampled_stage, stored_greedy, unsupported
from specreg.benchmark.workloads.jsonl import Workload, load_workload
from specreg.equivalence import triage
from specreg.errors import ArtifactChanged, NotAdmitted, SpecregError, UsageError
from specreg.registry.db import now
from specreg.registry.evidence import not_checked_here
from specreg.registry.hashing import sha256_file
from specreg.schemas.bench import BenchRun, ConditionRun, RunInfo, RunStatus, RuntimeInfo, ScheduleSlot
from specreg.schemas.bench_settings import BenchSettings, duration_text
from specreg.schemas.methods import BASELINE
from specreg.schemas.record import to_python
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.servers.launcher import ServerCommand, bundled_command, external_command
from specreg.servers.memory import GpuProbe
from specreg.servers.pinning import Pinning, server_pinning
from specreg.servers.runtime import runtime_info
from specreg.sources.range_reads import metadata_only
from specreg.text import plural

if TYPE_CHECKING:
    from specreg.registry.store import Registry

__all__ = ["BenchSettings", "Observer", "Runner"]


def new_run_id() -> str:
    return now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class Runner:
    """Runs benchmarks against one registry with one server program and one workload."""

    def __init__(
        self,
        reg: Registry,
        opts: BenchSettings,
        observer: Observer | None = None,
        gpu: GpuProbe | None = None,
        store: RunStore | None = None,
    ) -> None:
        self.reg, self.opts = reg, opts
        # every write of a run goes through the store: a subclass may also send each one elsewhere
        # (exchange/run_stream.py: a cluster node streams its rows to the driver's registry)
        self.store = store or RunStore(reg)
        self.observer = observer or Observer()
        per_slot = opts.ctx_size // max(opts.concurrency)  # llama.cpp splits -c across -np slots
        self.workload: Workload = load_workload(opts.workload, sample=opts.sample, seed=opts.seed, ctx_tokens=per_slot)
        self.cmd: ServerCommand = external_command(opts.server) if opts.server else bundled_command()
        self.gpu = gpu or GpuProbe()
        self._runtime: RuntimeInfo | None = None
        self.refused: list[str] = []  # pairs of the last bench() that could not start, with why
        self.skipped: list[str] = []  # admitted pairs of the last bench() that cannot be benchmarked
        self._tuner: tune.Tuner | None = None  # --tune: the pair being run's tuning
        self._pinning = Pinning(None, None)
        self._told_greedy: set[int] = set()  # conditions whose stored greedy run was named

    def runtime(self) -> RuntimeInfo:
        if self._runtime is None:
            self._runtime = runtime_info(self.cmd)
        return self._runtime

    # -- selecting pairs ------------------------------------------------------------------------

    def select(self, pair_ids: list[int] | None) -> list[PairRecord]:
        """The pairs to run; a rejected, unknown or unbenchmarkable pair asked for by id is refused.

        Without ids: every admitted pair; those that cannot be benchmarked (vocab-only) are left
        out and listed in `self.skipped`.
        """
        if not pair_ids:
            pairs = self.reg.pairs(admitted=True)
            if not pairs:
                raise NotAdmitted(
                    "no admitted pairs in the registry", hint="admit one with `specreg check pair TARGET DRAFT`"
                )
            usable = []
            for p in pairs:
                if not p.admitted:  # its stored verdict could not be read back
                    self.skipped.append(f"pair {p.id} ({p.method}): " + "; ".join(c.message for c in p.checks))
                    continue
                why = not_benchmarkable(p)
                if why is None:
                    usable.append(p)
                else:
                    self.skipped.append(f"pair {p.id} ({p.method}) is {NOT_BENCHMARKABLE}: {why}")
            if not usable:
                raise NotAdmitted(
                    f"no admitted pair can be benchmarked ({len(pairs)} {NOT_BENCHMARKABLE}: vocab-only files)",
                    hint="register the full model files and check the pairs again",
                )
            return usable
        out = []
        for pid in pair_ids:
            try:
                pair = self.reg.get_pair(pid)
            except SpecregError:
                raise NotAdmitted(
                    f"pair {pid} has never been checked (not in the registry)",
                    hint="run `specreg check pair TARGET [DRAFT]` first; `specreg pairs` lists them",
                ) from None
            elsewhere = not_checked_here(pair)
            if elsewhere is not None:  # another machine's word, signed or not: its files are checked here first
                raise NotAdmitted(f"pair {pid} ({pair.method}) is not benchmarked: {elsewhere}")
            if not pair.admitted:
                why = "; ".join(f"{c.code}: {c.message}" for c in pair.checks if c.severity == "error")
                raise NotAdmitted(f"pair {pid} ({pair.method}) was rejected, not benchmarked: {why or 'not admitted'}")
            reason = not_benchmarkable(pair)
            if reason is not None:
                raise NotAdmitted(
                    f"pair {pid} ({pair.method}) is {NOT_BENCHMARKABLE}: {reason}",
                    hint="register the full model file and check the pair again",
                )
            out.append(pair)
        return out

    def _verified_path(self, rec: ArtifactRecord, role: str) -> str:
        """A registered path still holding these bytes; a changed file is refused with both hashes."""
        ok, problem = self.reg.verify_artifact(rec)
        if ok and rec.paths:
            return rec.paths[0]
        existing = [p for p in rec.paths if os.path.isfile(p)]
        if existing:
            actual = sha256_file(existing[0])
            if actual != rec.sha256:
                raise ArtifactChanged(existing[0], rec.sha256, actual)
        raise SpecregError(  # the file itself is unchanged: another part (a split's shard) is not
            f"{role} {rec.sha256[:12]}: {problem or 'no registered path'}",
            hint="register the file again at its new location",
        )

    # -- running --------------------------------------------------------------------------------

    def bench(self, pair_ids: list[int] | None = None, *, started: float | None = None) -> list[BenchRun]:
        """Benchmark the selected (default: all admitted) pairs, one run each.

        With several pairs, one that cannot start (e.g. its file changed) is refused and
        listed in `self.refused`, and the next pair runs; a single pair raises. A `--budget`
        counts from `started` (monotonic; default: now), the command's start, and is shared
        evenly by the pairs still to run.
        """
        self.refused, self.skipped = [], []
        from specreg.benchmark.run.resume import reap

        for note in reap(self.store):
            self.observer.note(note)
        pairs = self.select(pair_ids)
        for line in self.skipped:
            self.observer.note(f"{line}; skipped")
        plans = [(p, self._plan(p)) for p in pairs]  # refuse bad --methods before any server starts
        if self.opts.tune:
            tune.check_tunable([(p.id, specs) for p, specs in plans])
        if not pair_ids:
            plans, covered = drop_covered(plans)
            for p, by in covered:
                self.observer.note(
                    f"pair {p.id} ({p.method}) is measured in pair {by.id}'s run (same target, same conditions)"
                )
        self.runtime()  # a broken server binary fails once, here
        lacking = unsupported(self.cmd, self.opts)
        if lacking is not None:
            hint = "measure at a sampler this server takes, or give --server a newer llama-server"
            raise UsageError(lacking, hint=hint)
        runs = []
        whole = self.opts
        end = (started or time.monotonic()) + whole.budget_s if whole.budget_s is not None else None
        try:
            for i, (p, specs) in enumerate(plans):
                deadline = None
                if end is not None:  # the command's budget: each pair's run gets an even share of what is left
                    share = (end - time.monotonic()) / (len(plans) - i)
                    if share < 1:
                        self.observer.note(f"pair {p.id} ({p.method}) is not benchmarked: the --budget ended before it")
                        continue
                    deadline = time.monotonic() + share
                    if len(plans) > 1:  # what this run had, as its settings record it
                        self.opts = whole.model_copy(update={"budget_s": float(round(share))})
                try:
                    runs.append(self.bench_pair(p, specs, deadline=deadline))
                except SpecregError as exc:
                    if len(plans) == 1:
                        raise
                    said = exc.message if exc.message.startswith(f"pair {p.id}") else f"pair {p.id}: {exc.message}"
                    self.refused.append(said)
                    self.observer.note(f"not benchmarked: {said}")
        finally:
            self.opts = whole
        return runs

    def _plan(self, pair: PairRecord) -> list[cond_mod.ConditionSpec]:
        specs = cond_mod.plan(
            pair.method,
            draft_path="(draft)" if pair.draft_sha256 else None,
            draft_sha256=pair.draft_sha256,
            methods=self.opts.methods,
            draft_n_max=tune.first_pass_lengths(self.opts) if self.opts.tune else self.opts.draft_n_max,
            draft_n_min=self.opts.draft_n_min,
            ngram=self.opts.ngram,
            concurrency=self.opts.concurrency,
            samplers=self.opts.samplers(),
            draft_sampling=self.opts.draft_sampling,
        )
        return tune.name_lengths(specs, len(self.opts.concurrency)) if self.opts.tune else specs

    def bench_pair(
        self, pair: PairRecord, specs: list[cond_mod.ConditionSpec] | None = None, *, deadline: float | None = None
    ) -> BenchRun:
        """One run: verify files, write the manifest, run each condition, summarise. With a
        budget the run ends by `deadline` (monotonic; default: its budget from its start)."""
        target = self.reg.get_artifact(pair.target_sha256)
        draft = self.reg.get_artifact(pair.draft_sha256) if pair.draft_sha256 else None
        for role, rec in (("target", target), ("draft", draft)):
            if rec is not None and metadata_only(rec):
                raise NotAdmitted(
                    f"pair {pair.id}: the {role} {rec.sha256[:12]} is metadata only (checked from a remote header)",
                    hint="download it (specreg fetch REPO FILE) to benchmark the pair",
                )
            if rec is not None and rec.summary is not None and rec.summary.vocab_only:  # checked before the fix
                raise NotAdmitted(
                    f"pair {pair.id}: the {role} {rec.sha256[:12]} is vocab-only (no tensors): {NOT_BENCHMARKABLE}",
                    hint="register the full model file and check the pair again",
                )
        target_path = self._verified_path(target, "target")
        draft_path = self._verified_path(draft, "draft") if draft else None
        specs = [
            s.model_copy(update={"draft_path": draft_path if s.draft_path else None})
            for s in (specs or self._plan(pair))
        ]
        run_id = new_run_id()
        run_dir = self.reg.path.parent / "runs" / run_id  # logs live beside the registry that records the run
        run_dir.mkdir(parents=True, exist_ok=True)
        tuner = self._tuner = tune.Tuner(self.opts) if self.opts.tune else None
        planned = 1 if tuner else self.opts.repeat  # --tune: a short first pass, then the candidates
        order = cond_mod.schedule(
            tune.first_pass(specs) if tuner else specs,
            planned,
            self.opts.order,
            self.opts.seed,
            balance=self.opts.balance,
        )
        self._pinning = server_pinning(self.opts.threads, self.opts.pin)
        manifest = run_manifest(
            self.opts,
            pair=pair,
            target=target,
            target_path=target_path,
            draft=draft,
            draft_path=draft_path,
            order=order,
            planned=planned,
            runtime=self.runtime(),
            workload=self.workload,
            gpu=self.gpu,
            pinning=self._pinning,
        )
        if tuner is not None:  # its lengths priced by the target's machine probe, before the first pass
            tuner.verify = tune_verify(self.reg, manifest, target.sha256, target_path, self.cmd, self._pinning, run_dir)
        info = RunInfo(
            run_id=run_id,
            pair_id=pair.id,
            status="running",
            method=pair.method,
            target_sha256=target.sha256,
            draft_sha256=draft.sha256 if draft else None,
            started_at=now(),
            runner_pid=os.getpid(),
            run_dir=str(run_dir),
        )
        self.store.create_run(
            info,
            manifest,
            to_python(target.licence),
            to_python(draft.licence) if draft else None,
        )
        conds = [ConditionRun(idx=i, spec=s) for i, s in enumerate(specs)]
        for c in conds:
            self.store.save_condition(run_id, c)
        ctx = RunContext(
            run_id=run_id,
            run_dir=run_dir,
            target_path=target_path,
            opts=self.opts,
            cmd=self.cmd,
            store=self.store,
            observer=self.observer,
            gpu=self.gpu,
            workload=self.workload,
            pinning=self._pinning,
            phase="first pass" if tuner else "planned",
        )
        self.observer.run_started(info, conds, len(self.workload.items) * planned)
        t_start = time.monotonic()  # what the budget counts from: the command's start when it gave a deadline
        if self.opts.budget_s is not None:  # a cap on the run's wall clock, its planned rounds included
            ctx.deadline = deadline if deadline is not None else t_start + self.opts.budget_s
            t_start = ctx.deadline - self.opts.budget_s
        return self._drive(ctx, conds, order, planned, pair, target.sha256, info.draft_sha256, t_start)

    def _drive(
        self,
        ctx: RunContext,
        conds: list[ConditionRun],
        order: list[ScheduleSlot],
        planned: int,
        pair: PairRecord,
        target_sha256: str,
        draft_sha256: str | None,
        t_start: float,
        *,
        resumed: bool = False,
    ) -> BenchRun:
        """Run the slots of `order`, then (with a budget) the scheduler's rounds after the
        `planned` ones; judge, summarise and store the run however it ends. `resumed`: a stored
        run continued (`continue_run`): its planned rounds were measured already, so a run whose
        every round so far was set aside is measured on rather than given up."""
        run_id, tuner = ctx.run_id, self._tuner
        status: RunStatus = "failed"
        reason: str | None = "runner error"
        by_name = {c.spec.name: c for c in conds}
        last = {slot.condition: i for i, slot in enumerate(order)}
        until_decided = self.opts.budget_s is not None
        try:
            for i, slot in enumerate(order):
                c = by_name[slot.condition]
                if c.status not in ("pending", "running"):
                    continue  # failed in an earlier round: its later rounds are not run
                if ctx.budget_over():
                    break  # the budget ended inside the planned rounds: what ran is judged as it is
                if c.status == "pending" and (why := self._sampled_stage(c, conds, ctx, pair)) is not None:
                    c.status, c.failure, c.finished_at = "skipped", why, now()
                    self.store.save_condition(run_id, c)
                    self.observer.note(f"{c.spec.name}: {why}")
                    continue
                if ctx.expired():
                    why = f"run deadline of {self.opts.run_timeout_s:g}s exceeded"
                    c.status, c.failure = ("skipped", why) if c.status == "pending" else ("failed", why)
                    self.store.save_condition(run_id, c)
                    continue
                round_no = slot.round if self.opts.order == "rounds" else None
                run_condition(
                    ctx, c, slot.repeats, round_no=round_no, last=i == last[c.spec.name] and not until_decided
                )
            aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
            busy = contention.every_round_set_aside(conds, ctx.rows, aside) if not resumed else None
            if busy is not None and until_decided and not ctx.expired():  # once more: a burst may have passed
                self.observer.note(f"every round so far was set aside as contended ({busy}): measuring it once more")
                again = cond_mod.balanced_order([by_name[s.condition] for s in order if s.round == 0], 1)
                for c in again:
                    if c.status == "running":
                        run_condition(ctx, c, [planned], round_no=planned, last=False)
                planned += 1
                aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
                busy = contention.every_round_set_aside(conds, ctx.rows, aside)
            if busy is not None:
                self.observer.note(contention.busy_line(busy, self.opts.busy_share, until_decided))
            elif tuner is not None and not tuner.levels:  # a continued run's tuning is restored
                for note in tuner.add_candidates(ctx, conds, contention.kept_rows(ctx.rows, aside)):
                    self.observer.note(f"tune {note}")
            if until_decided:
                if busy is None:
                    self._until_decided(ctx, conds, t_start, planned)
                else:  # nothing to decide on: the budget is not spent measuring a busy machine again
                    if tuner is not None:
                        tuner.close(ctx)
                    self._finish(ctx, conds)
            triage.triage_run(ctx, conds)  # mismatches: near tie or divergence (not a measurement)
            ruled_out = tuner.ruled_out if tuner is not None else set()
            failed = [c for c in conds if c.status != "ok" and c.idx not in ruled_out]
            status = "incomplete" if failed else "complete"
            reason = "; ".join(f"{c.spec.name}: {c.failure}" for c in failed) or None
            if resumed:  # measured on whatever was set aside: judged on what it kept in the end
                aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
                busy = contention.every_round_set_aside(conds, ctx.rows, aside)
            if busy is not None:  # nothing kept: not a result, whatever each condition's status
                status, reason = "contended", f"every round measured was set aside ({busy})"
        except KeyboardInterrupt:
            status, reason = "cancelled", "interrupted (Ctrl-C or SIGTERM); finished rows kept"
            raise
        except BaseException as exc:
            reason = f"runner error: {exc}"
            raise
        finally:
            for c in conds:
                if c.status in ("pending", "running"):
                    c.status = "cancelled" if status == "cancelled" else "aborted"
                    self.store.save_condition(run_id, c)
            summaries = summarize(conds, ctx.rows, stat_settings(self.opts, self.runtime().spec_defaults))
            if until_decided:
                strata = [it.stratum for it in self.workload.items]
                project_undecided(summaries, ctx, conds, time.monotonic() - t_start, self.opts, strata)
            if tuner is not None:  # on the rows the summaries rest on (not set aside)
                kept = contention.kept_rows(
                    ctx.rows, contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
                )
                tuner.annotate(summaries, conds, kept)
            self.store.set_summaries(run_id, target_sha256, draft_sha256, summaries)
            self.store.finish(run_id, status, reason)
            keep_digests(self.store.reg, [run_id])  # what the audit reads, built once while the rows are hot
            self.observer.run_done(run_id, status, reason)
        return self.store.load(run_id)

    def continue_run(self, run_id: str, *, methods: list[str] | None = None, started: float | None = None) -> BenchRun:
        """Measure on from a stored run that stopped short of a decision (resume.py says what
        must be unchanged, and refuses in one line what is not): its planned slots not measured
        in full, then the scheduler's rounds within this Runner's `--budget` (counted from
        `started`), appended to the same run. Nothing measured is measured again; the decisions,
        the plan and the tuning are drawn again from the stored rows. `methods`: only these
        (their baselines always) continue."""
        from specreg.benchmark.run import resume

        for note in resume.reap(self.store):  # a run whose specreg was killed: aborted, so continuable
            self.observer.note(note)
        run = self.store.load(run_id)
        rid = run.info.run_id
        resume.check_status(run)
        assert run.manifest is not None and run.manifest.settings is not None and run.info.pair_id is not None
        if self.opts.budget_s is None:
            raise UsageError(f"run {rid}: continuing needs --budget DURATION (what it may spend measuring on)")
        resume.check_methods(run, methods)
        (pair,) = self.select([run.info.pair_id])
        target = self.reg.get_artifact(pair.target_sha256)
        draft = self.reg.get_artifact(pair.draft_sha256) if pair.draft_sha256 else None
        try:  # the files read again: the SHA-256 the run measured (the stat cache vouches as for any run)
            target_path = self._verified_path(target, "target")
            draft_path = self._verified_path(draft, "draft") if draft else None
        except ArtifactChanged as exc:
            raise resume.file_changed(rid, "target" if exc.expected == target.sha256 else "draft", exc) from None
        if target.sha256 != run.info.target_sha256 or (draft.sha256 if draft else None) != run.info.draft_sha256:
            raise UsageError(f"run {rid}: pair {pair.id} now names other files than the run measured")
        self._pinning = server_pinning(self.opts.threads, self.opts.pin)
        from specreg.servers.runtime import hardware_info

        why = resume.refusal(
            run, runtime=self.runtime(), workload_sha256=self.workload.sha256,
            hardware=hardware_info(self.gpu, self.opts.gpu_layers), pinning=self._pinning,
        )  # fmt: skip
        again = shlex.join(["specreg", "bench", "admitted", "--pair", str(pair.id), *run.manifest.settings.argv()])
        if why is not None:
            raise UsageError(f"run {rid} cannot be continued here: {why}", hint=f"measure the pair again: {again}")
        conds = run.conditions
        going = resume.reopen(conds, methods)
        if not any(c.spec.method != BASELINE for c in going):
            raise UsageError(f"run {rid}: no condition left to measure on (every one failed or was ruled out)")
        for c in conds:
            if c.spec.draft_path:
                c.spec = c.spec.model_copy(update={"draft_path": draft_path})
        run_dir = Path(run.info.run_dir) if run.info.run_dir else self.reg.path.parent / "runs" / rid
        run_dir.mkdir(parents=True, exist_ok=True)
        ctx = RunContext(
            run_id=rid, run_dir=run_dir, target_path=target_path, opts=self.opts, cmd=self.cmd, store=self.store,
            observer=self.observer, gpu=self.gpu, workload=self.workload, pinning=self._pinning,
        )  # fmt: skip
        resume.restore(ctx, run, self.store.row_ids(rid))
        planned_was = run.manifest.observation.repeat
        next_rep = max((r.repeat for r in run.requests), default=-1) + 1
        tuner = self._tuner = tune.Tuner(self.opts) if self.opts.tune else None
        if tuner is not None:  # priced as the run's first pass was: the machine probe it kept
            tuner.verify = tune_verify(
                self.reg, run.manifest, target.sha256, target_path, self.cmd, self._pinning, run_dir
            )
            aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
            tuner.restore(conds, contention.kept_rows(ctx.rows, aside), planned_was)
        order = resume.remaining(run.manifest.observation.schedule, ctx, conds)
        ctx.phase = "first pass" if tuner is not None and not tuner.levels else "planned"
        budget = self.opts.budget_s
        manifest = resume.continued_manifest(
            run, budget_s=budget, first_repeat=max(next_rep, planned_was), methods=methods, tune=tuner is not None
        )
        self.store.reopen(rid, manifest, os.getpid())
        for c in conds:
            self.store.save_condition(rid, c)
        info = run.info.model_copy(update={"status": "running", "status_reason": None, "finished_at": None})
        todo = len(self.workload.items)  # a round of each, as a budget run starts counting
        self.observer.note(
            f"run {rid}: continuing from {plural(len(run.requests), 'stored request')} "
            f"({run.info.status}); {', '.join(c.spec.name for c in going if c.spec.method != BASELINE)} "
            f"measured on within --budget {duration_text(budget)}"
        )
        self.observer.run_started(info, conds, todo)
        t_start = started if started is not None else time.monotonic()
        ctx.deadline = t_start + budget
        return self._drive(
            ctx, conds, order, max(next_rep, planned_was), pair, target.sha256, info.draft_sha256, t_start,
            resumed=True,
        )  # fmt: skip

    def _sampled_stage(
        self, c: ConditionRun, conds: list[ConditionRun], ctx: RunContext, pair: PairRecord
    ) -> str | None:
        """Why a sampled condition may not run (None: it may): sampling.sampled_stage, with the
        stored greedy stages of this pair, runtime and prompts."""
        runtime, wl = self.runtime(), self.workload.sha256

        def stored(spec: cond_mod.ConditionSpec) -> StoredGreedy:
            return stored_greedy(self.reg.conn, spec, pair.target_sha256, pair.draft_sha256, runtime, wl)

        return sampled_stage(c, conds, ctx.rows, stored, self._told_greedy, self.observer.note)

    def _until_decided(self, ctx: RunContext, conds: list[ConditionRun], started: float, planned: int) -> None:
        """`--budget`: more rounds after the planned ones, as the scheduler plans them
        (scheduler.py), until each condition is decided against `--min-speedup` or the budget is
        spent; then every condition still running is judged on all its rows, as after a planned
        run."""
        plan = BudgetScheduler(
            self.opts,
            [it.stratum for it in self.workload.items],
            conds,
            planned=planned,
            started=started,
            tuner=self._tuner,
            note=self.observer.note,
        )
        while not ctx.budget_over() and (rnd := plan.next_round(ctx)) is not None:
            ctx.strata = rnd.strata
            for c in rnd.todo:
                if c.status == "running":
                    ctx.phase = rnd.phases[c.idx]
                    reps = rnd.reps[c.idx]
                    run_condition(ctx, c, reps, round_no=reps[0], last=False, prompts=rnd.prompts)
            ctx.strata = None
            plan.round_done(rnd)
        if self._tuner is not None:
            aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
            kept = contention.kept_rows(ctx.rows, aside)
            self._tuner.close(ctx, conds, kept)
            for conc in self._tuner.levels:
                st = self._tuner.standing(conc, conds, kept)
                k = f"k{st.choice.spec.draft_n_max}" if st.choice is not None else "no length"
                self.observer.note(f"tune: {k} {'chosen' if st.decided else 'leads, undecided'}: {st.why}")
        self._finish(ctx, conds)

    def _finish(self, ctx: RunContext, conds: list[ConditionRun]) -> None:
        """Judge every condition of a `--budget` run on all its rows. When the budget's deadline
        stopped the run, a condition it left with no row was not measured (skipped, with why),
        not failed."""
        if ctx.budget_over():
            budget = duration_text(self.opts.budget_s or 0.0)
            cut = f"{plural(ctx.cut, 'request')} in flight cut (not counted)" if ctx.cut else "nothing in flight"
            self.observer.note(f"budget: the --budget of {budget} ended; {cut}")
            for c in conds:
                if c.status in ("pending", "running") and not any(r.condition_idx == c.idx for r in ctx.rows):
                    c.status, c.failure = "skipped", BUDGET_ENDED
                    c.finished_at = now()
                    self.store.save_condition(ctx.run_id, c)
        for c in conds:
            finish_condition(ctx, c)
