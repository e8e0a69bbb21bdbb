"""Benchmark admitted pairs: one run per pair, fresh servers per condition, rows as they finish.

The conditions follow PROTOCOL §3: the baseline (its outputs are the reference for every
speculative condition), the n-gram methods, the pair's admitted method, each at every draft
length and concurrency asked for. By default they run in rounds, one repetition per round in a
seeded random order (`conditions.schedule`, recorded in the manifest). Whatever goes wrong - a
server that never starts, dies mid-run, refuses the draft, Ctrl-C - the rows already written
stay, the condition and the run say what happened, and the next condition runs.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark import conditions as cond_mod
from specreg.benchmark import contention, tune
from specreg.benchmark.condition_summary import paired_ms, projected_rounds, stat_settings, stratum_ms, summarize
from specreg.benchmark.digest import keep_digests
from specreg.benchmark.eligibility import NOT_BENCHMARKABLE, not_benchmarkable
from specreg.benchmark.execute import Observer, RunContext, finish_condition, run_condition
from specreg.benchmark.runstore import RunStore
from specreg.benchmark.sampling import arm, greedy_problem, greedy_twin, stored_greedy, unsupported
from specreg.benchmark.workloads import Workload, load_workload
from specreg.decision import budget as budget_mod
from specreg.decision import sequential
from specreg.equivalence import triage
from specreg.errors import ArtifactChanged, NotAdmitted, SpecregError, UsageError
from specreg.registry.db import now
from specreg.registry.evidence import not_checked_here, trusted
from specreg.registry.hashing import sha256_file
from specreg.schemas.bench import (
    ArtifactRef,
    BenchRun,
    ConditionRun,
    ConditionSummary,
    DraftInfo,
    ObservationSettings,
    RequestRow,
    RequestSettings,
    RunInfo,
    RunManifest,
    RunStatus,
    RuntimeInfo,
    ScheduleSlot,
    SlotPhase,
)
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import BASELINE
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.servers.launcher import ServerCommand, bundled_command, external_command
from specreg.servers.memory import GpuProbe
from specreg.servers.pinning import Pinning, server_pinning
from specreg.servers.runtime import hardware_info, runtime_info
from specreg.sources.range_reads import metadata_only
from specreg.text import rounds_named

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.sampling import Sampler

__all__ = ["BenchSettings", "Observer", "Runner"]


PART_MARGIN = 1.1  # what a round measured in part is priced at, over its estimate
# the most rounds one server start measures while deciding the leader (its plan's rounds, at most
# this many): on tiny models a slot's start, warm-up and stop were ~0.9 s of ~2 s
MAX_BATCH = 3


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
        self._needs: dict[int, budget_mod.Need] = {}  # condition idx -> its last projection (`_plan_budget`)

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
            if elsewhere is not None and not trusted(pair.elsewhere):
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

    def bench(self, pair_ids: list[int] | None = None) -> list[BenchRun]:
        """Benchmark the selected (default: all admitted) pairs, one run each.

        With several pairs, one that cannot start (e.g. its file changed) is refused and
        listed in `self.refused`, and the next pair runs; a single pair raises.
        """
        self.refused, self.skipped = [], []
        for note in self.store.reap_orphans():
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
        for p, specs in plans:
            try:
                runs.append(self.bench_pair(p, specs))
            except SpecregError as exc:
                if len(plans) == 1:
                    raise
                said = exc.message if exc.message.startswith(f"pair {p.id}") else f"pair {p.id}: {exc.message}"
                self.refused.append(said)
                self.observer.note(f"not benchmarked: {said}")
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

    def bench_pair(self, pair: PairRecord, specs: list[cond_mod.ConditionSpec] | None = None) -> BenchRun:
        """One run: verify files, write the manifest, run each condition, summarise."""
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
        manifest = self._manifest(pair, target, target_path, draft, draft_path, order, planned)
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
            target.licence.model_dump(mode="json"),
            draft.licence.model_dump(mode="json") if draft else None,
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
        status: RunStatus = "failed"
        reason: str | None = "runner error"
        by_name = {c.spec.name: c for c in conds}
        last = {slot.condition: i for i, slot in enumerate(order)}
        until_decided = self.opts.budget_s is not None
        t_start = time.monotonic()
        try:
            for i, slot in enumerate(order):
                c = by_name[slot.condition]
                if c.status not in ("pending", "running"):
                    continue  # failed in an earlier round: its later rounds are not run
                if until_decided and slot.round > 0 and time.monotonic() - t_start > (self.opts.budget_s or 0.0):
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
            busy = every_round_set_aside(conds, ctx.rows, aside)
            if busy is not None and until_decided and not ctx.expired():  # once more: a burst may have passed
                self.observer.note(f"every round so far was set aside as contended ({busy}): measuring it once more")
                again = cond_mod.balanced_order([by_name[s.condition] for s in order if s.round == 0], 1)
                for c in again:
                    if c.status == "running":
                        run_condition(ctx, c, [planned], round_no=planned, last=False)
                planned += 1
                aside = contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
                busy = every_round_set_aside(conds, ctx.rows, aside)
            if busy is not None:
                self.observer.note(busy_line(busy, self.opts.busy_share))
            elif tuner is not None:
                for note in tuner.add_candidates(ctx, conds, contention.kept_rows(ctx.rows, aside)):
                    self.observer.note(f"tune {note}")
            if until_decided:
                if busy is None:
                    self._until_decided(ctx, conds, t_start, planned)
                else:  # nothing to decide on: the budget is not spent measuring a busy machine again
                    if tuner is not None:
                        tuner.close(ctx)
                    for c in conds:
                        finish_condition(ctx, c)
            triage.triage_run(ctx, conds)  # mismatches: near tie or divergence (not a measurement)
            ruled_out = tuner.ruled_out if tuner is not None else set()
            failed = [c for c in conds if c.status != "ok" and c.idx not in ruled_out]
            status = "incomplete" if failed else "complete"
            reason = "; ".join(f"{c.spec.name}: {c.failure}" for c in failed) or None
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
                self._project_undecided(summaries, ctx, conds, time.monotonic() - t_start)
            if tuner is not None:  # on the rows the summaries rest on (not set aside)
                kept = contention.kept_rows(
                    ctx.rows, contention.set_aside(conds, ctx.rows, spread=self.opts.busy_share > 0)
                )
                tuner.annotate(summaries, conds, kept)
            self.store.set_summaries(run_id, target.sha256, info.draft_sha256, summaries)
            self.store.finish(run_id, status, reason)
            keep_digests(self.store.reg, [run_id])  # what the audit reads, built once while the rows are hot
            self.observer.run_done(run_id, status, reason)
        return self.store.load(run_id)

    def _sampled_stage(
        self, c: ConditionRun, conds: list[ConditionRun], ctx: RunContext, pair: PairRecord
    ) -> str | None:
        """Why a sampled condition may not run (None: it may). PROTOCOL's stages in order: a
        speculative condition is measured at temperature > 0 only once its greedy stage kept
        output equivalence, in this run (its greedy twin, which the schedule ran first) or in a
        stored run of the same pair, runtime and prompts."""
        spec = c.spec
        if spec.temperature == 0:
            return None
        if spec.method == BASELINE:  # its conditions all refused: the baseline would run for nothing
            partners = [
                x for x in conds if x is not c and arm(x.spec) == arm(spec) and x.status in ("pending", "running")
            ]
            refused = [why for x in partners if (why := self._sampled_stage(x, conds, ctx, pair)) is not None]
            if partners and len(refused) == len(partners):
                return f"not run: every condition it is the baseline of was refused ({refused[0]})"
            return None
        twin = greedy_twin(spec, (x.spec for x in conds))
        if twin is not None:
            tc = next(x for x in conds if x.spec.name == twin.name)
            problem = greedy_problem(tc.status, tc.failure, [r for r in ctx.rows if r.condition_idx == tc.idx])
            return None if problem is None else f"sampled stage refused: {problem} ({twin.name})"
        found = stored_greedy(
            self.reg.conn, spec, pair.target_sha256, pair.draft_sha256, self.runtime(), self.workload.sha256
        )
        if found.run_id is not None:
            if c.idx not in self._told_greedy:
                self._told_greedy.add(c.idx)
                self.observer.note(f"{spec.name}: greedy stage kept output equivalence in run {found.run_id}")
            return None
        if found.near is not None:
            return (
                f"sampled stage refused: stored run {found.near} measured its greedy stage, but {found.why}; "
                "add --temperature 0 to measure it again in this run"
            )
        return (
            "sampled stage refused: no greedy stage of this condition kept output equivalence (none in this "
            "run, none stored for this pair, runtime and prompts); add --temperature 0 to measure it first"
        )

    def _until_decided(self, ctx: RunContext, conds: list[ConditionRun], started: float, planned: int) -> None:
        """`--budget`: more rounds after the planned ones until each condition is decided
        against `--min-speedup` (decision/sequential.py: a look after every pair keeps the
        decision's error rate), or the budget is spent.

        Where the budget goes: with `--tune`, first to the decision that matters, the tuned
        length (the leader: `Tuner.leaders`) against its baseline, in rounds of those two only;
        once the leader is decided (or the plan says it cannot be), the other candidates and the
        other methods with what is left (issue 32: spent in whole rounds of every condition, an
        8-minute SmolLM2 run stopped after the first pass, its one round of five conditions
        priced at 13 min, and the tuned length was never decided). Without `--tune`, every
        undecided condition and its baseline. After every round each undecided condition is
        planned (budget.py): about how many more paired requests it needs and what they cost,
        told to the user; a condition that cannot be decided within the budget left is not
        measured for nothing, and the run says which budget would decide it. A round that does
        not fit in what is left is measured in part: the same first prompts
        (`execute.partial_order`, one of each stratum in turn) of each of its conditions, as many
        as fit, so a run ends at most about one paired request past its budget instead of
        stopping a round early; none fit: it stops, naming the budget that would run the round.
        Rounds that ran under contention are left out of the decision (`contention.set_aside`), so
        their conditions stay undecided and are measured again while the budget lasts.
        Then every condition still running is judged on all its rows, as after a planned run."""
        o = self.opts
        budget = o.budget_s or 0.0
        bases = {arm(c.spec): c for c in conds if c.spec.method == BASELINE}
        order = list(conds)
        rng = random.Random(o.seed)
        rng.shuffle(order)  # the seeded order the balanced rounds turn
        round_no = planned
        given_up: dict[int, str] = {}  # condition idx -> why it is not measured further
        told_strata: set[tuple[int, str]] = set()  # (condition idx, stratum) the budget cannot decide, told
        self._needs = {}  # this run's projections (a condition idx is the run's own)

        def rows(c: ConditionRun) -> list[RequestRow]:
            return [r for r in ctx.rows if r.condition_idx == c.idx]

        while True:
            aside = contention.set_aside(conds, ctx.rows, spread=o.busy_share > 0)
            kept = contention.kept_rows(ctx.rows, aside)

            def pair_ms(c: ConditionRun, aside: dict[contention.Slot, str] = aside) -> tuple[list[float], list[float]]:
                base = bases[arm(c.spec)]
                return paired_ms(
                    contention.kept_rows(rows(base), aside, c.idx), contention.kept_rows(rows(c), aside, base.idx)
                )

            def open_(c: ConditionRun) -> bool:
                base = bases.get(arm(c.spec))
                return (
                    c.spec.method != BASELINE
                    and c.status == "running"
                    and base is not None
                    and base.status == "running"
                    and sequential.decide(*pair_ms(c), o.min_speedup).decision == "undecided"
                )

            undecided = [c for c in conds if open_(c)]
            leads: list[ConditionRun] = []
            if self._tuner is not None:  # --tune: its candidates run until the best is decided
                undecided = self._tuner.select(conds, undecided, kept)
                leads = [c for c in self._tuner.leaders(conds, kept).values() if open_(c)]
            spent = time.monotonic() - started
            left = budget - spent
            undecided = [
                c
                for c in undecided
                if c.idx not in given_up or len({r.repeat for r in ctx.rows if r.condition_idx == c.idx}) < o.repeat
            ]
            # the leaders first; the rest once no leader is left to decide (or none can be)
            picked = self._plan_budget(ctx, conds, [c for c in leads if c.idx not in given_up], bases, pair_ms,
                                       spent, left, given_up, lead=True)  # fmt: skip
            if not picked:  # a level whose leader cannot be decided stands with it: not measured further
                dropped = self._tuner.level_of(conds) if self._tuner is not None else {}
                out_levels = {dropped[c.idx] for c in leads if c.idx in given_up}
                rest = [c for c in undecided if dropped.get(c.idx) not in out_levels]
                picked = self._plan_budget(ctx, conds, rest, bases, pair_ms, spent, left, given_up)
            if self._tuner is not None:  # the time to the tuned choice: before any strata rounds
                for conc in self._tuner.levels:
                    if conc not in self._tuner.settled_s and self._tuner.settled(conc, conds, kept):
                        self._tuner.settled_s[conc] = spent
            strata: frozenset[str] | None = None
            if not picked and self._tuner is not None and not ctx.expired():
                picked, strata = self._strata_plan(ctx, conds, aside, bases, pair_ms, spent, left, told_strata)
            ctx.strata = strata
            free = free_rounds(picked, bases, ctx.rows, kept)
            deciding = bool(picked) and all(c in leads for c in picked)
            # deciding the leader (or a contender), its plan's rounds go in one server start each;
            # a contender not measured yet is screened first: one round, which often rules it out
            planned_rounds = [self._needs[c.idx].rounds or 1 for c in picked if c.idx in self._needs]
            lead_idx = {lv.lead.idx for lv in self._tuner.levels.values() if lv.lead} if self._tuner else set()
            unseen = any(c.idx not in lead_idx and not rows(c) for c in picked)
            batch = max(1, min([MAX_BATCH, *planned_rounds])) if deciding and planned_rounds and not unseen else 1
            todo_set = {id(c): c for c in [bases[arm(c.spec)] for c in picked if c.idx not in free] + picked}
            todo = [c for c in order if id(c) in todo_set]
            fresh = list(range(round_no, round_no + batch))
            reps = {c.idx: free[c.idx][:batch] if c.idx in free else fresh for c in todo}
            leaders = lead_idx
            tuned = self._tuner.level_of(conds) | {lv.first.idx: k for k, lv in self._tuner.levels.items()} if (
                self._tuner is not None
            ) else {}  # fmt: skip
            if o.balance:
                todo = cond_mod.balanced_order(todo, round_no - planned)
            else:
                rng.shuffle(todo)
            known = budget_mod.costs(ctx.slot_s, self._request_s(ctx), ctx.replay_s)
            first = self._first_pass_of()
            cost = budget_mod.Cost(0.0, 0.0)
            for c in todo:
                cost = cost + budget_mod.cost_of(known, c.idx, first.get(c.idx))
            n_now = sum(1 for it in self.workload.items if strata is None or it.stratum in strata)
            round_s = cost.seconds(n_now, n_now)
            while batch > 1 and spent + cost.seconds(n_now * batch, n_now * batch) > budget:
                batch -= 1  # the budget has no room for them all in one start: fewer rounds
                fresh = fresh[:batch]
                reps = {i: r[:batch] for i, r in reps.items()}
            # a part-round is priced 10% dearer: under load its servers' starts vary most (on a
            # shared 2-core machine a one-prompt round after 40 s left ended 30 s past the budget)
            part = n_now if spent + round_s <= budget else cost.fits(left / PART_MARGIN, n_now)
            if not picked or not part or ctx.expired():
                if picked and not ctx.expired():
                    self.observer.note(
                        f"budget: {budget_mod.minutes(max(left, 0.0))} left, a round of "
                        f"{', '.join(c.spec.name for c in picked)} takes about {budget_mod.minutes(round_s)}: "
                        f"stopped; --budget {budget_mod.budget_for(spent, round_s)} would run it"
                    )
                break
            if part < n_now:
                self.observer.note(
                    f"budget: {budget_mod.minutes(max(left, 0.0))} left, a round takes about "
                    f"{budget_mod.minutes(round_s)}: measuring {part} of its {n_now} prompts"
                )
            for c in todo:
                if c.status == "running":
                    ctx.phase = "strata" if strata is not None else _phase(c, picked, leaders, set(tuned))
                    run_condition(ctx, c, reps[c.idx], round_no=reps[c.idx][0], last=False,
                                  prompts=None if part >= n_now else part)  # fmt: skip
            ctx.strata = None
            took = budget_mod.minutes(time.monotonic() - started)
            names = ", ".join(
                c.spec.name + (f" (paired with its baseline's {rounds_named(reps[c.idx])})" if c.idx in free else "")
                for c in todo
            )
            new_round = any(c.idx not in free for c in todo)
            what = rounds_named(fresh) if new_round else "rounds its baseline ran"
            what += f" of {', '.join(sorted(strata))}" if strata is not None else ""
            self.observer.note(f"{what} done: {names}; {took} of the {budget_mod.minutes(budget)} budget")
            round_no += len(fresh) if new_round else 0
        ctx.strata = None
        if self._tuner is not None:
            kept = contention.kept_rows(ctx.rows, contention.set_aside(conds, ctx.rows, spread=o.busy_share > 0))
            self._tuner.close(ctx, conds, kept)
            for conc in self._tuner.levels:
                st = self._tuner.standing(conc, conds, kept)
                k = f"k{st.choice.spec.draft_n_max}" if st.choice is not None else "no length"
                self.observer.note(f"tune: {k} {'chosen' if st.decided else 'leads, undecided'}: {st.why}")
        for c in conds:
            finish_condition(ctx, c)

    def _project_undecided(
        self, summaries: list[ConditionSummary], ctx: RunContext, conds: list[ConditionRun], spent: float
    ) -> None:
        """Each condition and stratum left undecided by a `--budget` run gets about how many more
        rounds would decide it and the budget that would have (budget.py, on its kept pairs; a
        stratum's pairs come with whole rounds of its condition, priced whole), so `runs show`,
        the report and the audit say what would decide it instead of printing its interval."""
        o = self.opts
        by_name = {c.spec.name: c for c in conds}
        bases = {arm(c.spec): c for c in conds if c.spec.method == BASELINE}
        known = budget_mod.costs(ctx.slot_s, self._request_s(ctx), ctx.replay_s)
        prompts = len(self.workload.items)
        strata = [it.stratum for it in self.workload.items]
        projected = projected_rounds(conds, ctx.rows, summaries, strata, o.min_speedup, o.seed, o.busy_share > 0)
        for i, more in projected.items():
            s = summaries[i]
            c = by_name[s.condition]
            base = bases[arm(c.spec)]
            cost = budget_mod.cost_of(known, base.idx) + budget_mod.cost_of(known, c.idx)
            s.decision_more_rounds = more
            needed = more * cost.seconds(prompts, prompts) if more <= budget_mod.HORIZON else 0.0
            # within the run's own budget, it was left undecided by choice (a length that cannot
            # beat the tuned one): how many rounds, but no budget to ask for
            if needed and spent + needed > (o.budget_s or 0.0):
                s.decision_budget = budget_mod.budget_for(spent, needed)

    def _strata_plan(
        self,
        ctx: RunContext,
        conds: list[ConditionRun],
        aside: dict[contention.Slot, str],
        bases: dict[tuple[int, Sampler], ConditionRun],
        pair_ms: Callable[[ConditionRun], tuple[list[float], list[float]]],
        spent: float,
        left: float,
        told: set[tuple[int, str]],
    ) -> tuple[list[ConditionRun], frozenset[str] | None]:
        """Once the tuning is settled and nothing else is left to measure, the budget left goes
        to the chosen length's strata still undecided: the audit gates per stratum, and a length
        decided `faster` over the whole workload was refused for "repetitive: undecided after 3
        rounds" (issue 32). Each such stratum is planned as a condition is (budget.need, on its
        own kept pairs, its prompts a round); those that fit are measured (their prompts only,
        with the baseline), those that cannot are named with the budget that would decide them.
        A choice decided `not faster` gets none: its refusal is for speed already. Returns the
        conditions to measure and their strata (None: nothing to measure)."""
        o = self.opts
        assert self._tuner is not None
        known = budget_mod.costs(ctx.slot_s, self._request_s(ctx), ctx.replay_s)
        per_stratum: dict[str, int] = {}
        for it in self.workload.items:
            per_stratum[it.stratum] = per_stratum.get(it.stratum, 0) + 1
        kept = contention.kept_rows(ctx.rows, aside)
        picked: list[ConditionRun] = []
        strata: set[str] = set()
        for conc in self._tuner.levels:
            st = self._tuner.standing(conc, conds, kept)
            choice = st.choice
            if not st.settled or choice is None or choice.status != "running":
                continue
            base = bases.get(arm(choice.spec))
            if base is None or base.status != "running":
                continue
            if sequential.decide(*pair_ms(choice), o.min_speedup).decision != "faster":
                continue  # not faster (or not decided): no stratum of it can be deployed for speed
            cost = budget_mod.cost_of(known, base.idx) + budget_mod.cost_of(known, choice.idx)
            for stratum, n in per_stratum.items():
                base_ms, cond_ms = stratum_ms(ctx.rows, aside, base.idx, choice.idx, stratum)
                if sequential.decide(base_ms, cond_ms, o.min_speedup).decision != "undecided":
                    continue
                if len(base_ms) < 2:  # nothing to project yet: a round of it first, once
                    tried = {r.repeat for r in ctx.rows if r.condition_idx == choice.idx and r.stratum == stratum}
                    if len(tried) < 2:
                        strata.add(stratum)
                        picked.append(choice)
                    elif (choice.idx, stratum) not in told:
                        told.add((choice.idx, stratum))
                        self.observer.note(
                            f"budget: {stratum} ({choice.spec.name}): fewer than 2 paired requests after "
                            f"{len(tried)} rounds (its requests failed or were set aside); not measured further"
                        )
                    continue
                need = budget_mod.need(
                    f"{stratum} ({choice.spec.name})", base_ms, cond_ms, o.min_speedup,
                    per_round=n, cost=cost, seed=o.seed,
                )  # fmt: skip
                if need.pairs == 0:
                    continue
                if need.fits(left):
                    self.observer.note("plan " + need.line(left))
                    strata.add(stratum)
                    picked.append(choice)
                elif (choice.idx, stratum) not in told:
                    told.add((choice.idx, stratum))
                    would = (
                        f"--budget {budget_mod.budget_for(spent, need.seconds)} would"
                        if need.seconds
                        else f"no budget of up to {budget_mod.HORIZON} more rounds would"
                    )
                    self.observer.note(f"budget: {need.line(left)}: {would}; not measured further")
        picked = list({c.idx: c for c in picked}.values())
        return picked, frozenset(strata) if picked else None

    def _request_s(self, ctx: RunContext) -> dict[int, list[float]]:
        """Each condition's requests' client wall seconds (what a slot spends on them)."""
        out: dict[int, list[float]] = {}
        for r in ctx.rows:
            if r.total_ms:
                out.setdefault(r.condition_idx, []).append(r.total_ms / 1000)
        return out

    def _first_pass_of(self) -> dict[int, int]:
        """A `--tune` candidate's idx -> its first pass's (what it is priced at before it ran)."""
        if self._tuner is None:
            return {}
        return {c.idx: lv.first.idx for lv in self._tuner.levels.values() for c in lv.candidates}

    def _plan_budget(
        self,
        ctx: RunContext,
        conds: list[ConditionRun],
        undecided: list[ConditionRun],
        bases: dict[tuple[int, Sampler], ConditionRun],
        pair_ms: Callable[[ConditionRun], tuple[list[float], list[float]]],
        spent: float,
        left: float,
        given_up: dict[int, str],
        *,
        lead: bool = False,
    ) -> list[ConditionRun]:
        """The undecided conditions the budget left can still decide (budget.py), each told with
        its projection; those it cannot are given up with the budget that would decide them. A
        condition with no kept pair yet has nothing to project: it runs - except a `--tune`
        leader, projected from its first pass re-centred on its prediction. With --tune, a
        level's candidates are planned by their leader (the best measured): they stand or fall
        with it. `lead`: these are the leaders, planned at the cost of them and their baselines."""
        o = self.opts
        prompts = len(self.workload.items)
        tuned = self._tuner.level_of(conds) if self._tuner is not None else {}
        leaders = self._tuner.leaders(conds, ctx.rows) if self._tuner is not None else {}
        known = budget_mod.costs(ctx.slot_s, self._request_s(ctx), ctx.replay_s)
        first_of = self._first_pass_of()
        out: list[ConditionRun] = []
        verdicts: dict[int, budget_mod.Need] = {}
        told: set[int] = set()

        def rounds_of(c: ConditionRun) -> int:
            return len({r.repeat for r in ctx.rows if r.condition_idx == c.idx})

        for c in undecided:
            lv = tuned.get(c.idx)
            who = leaders.get(lv, c) if lv is not None else c
            if who.idx in verdicts:
                n = verdicts[who.idx]
            else:
                base_ms, cond_ms = pair_ms(who)
                fresh = False
                if not base_ms and lv is not None and self._tuner is not None:
                    level = self._tuner.levels[lv]
                    base_ms, cond_ms = pair_ms(level.first)
                    k0, k = level.first.spec.draft_n_max or 0, who.spec.draft_n_max or 0
                    p0, pk = level.predicted(k0), level.predicted(k)
                    if p0 and pk:  # the first pass as it would have measured at the leader's length
                        cond_ms = [m * p0 / pk for m in cond_ms]
                    fresh = True
                if not base_ms:
                    out.append(c)
                    continue
                pool: list[float] = []
                if lv is not None and not fresh:  # neighbour lengths: their spread, re-centred on the leader's mean
                    own = sequential.log_ratios(base_ms, cond_ms)
                    centre = sum(own) / len(own) if own else 0.0
                    for other in (x for x in conds if tuned.get(x.idx) == lv and x is not who):
                        xs = sequential.log_ratios(*pair_ms(other))
                        if xs:
                            m = sum(xs) / len(xs)
                            pool += [x - m + centre for x in xs]
                done = rounds_of(who)
                members = [x.idx for x in conds if lv is not None and tuned.get(x.idx) == lv] or [who.idx]
                base = bases[arm(who.spec)]
                cost = budget_mod.cost_of(known, base.idx)
                for idx in [who.idx] if lead or lv is None else members:
                    cost = cost + budget_mod.cost_of(known, idx, first_of.get(idx))
                n = budget_mod.need(
                    who.spec.name + (f" ({self._role(lv, who)})" if lv is not None else ""),
                    base_ms,
                    cond_ms,
                    o.min_speedup,
                    per_round=max(1, prompts),
                    cost=cost,
                    at_least=max(0, o.repeat - done) * prompts if lv is not None and not lead else 0,
                    pool=pool,
                    seed=o.seed,
                    fresh=fresh,
                )
                verdicts[who.idx] = n
                self._needs[who.idx] = n
                self.observer.note("plan " + n.line(left))
            below_floor = rounds_of(c) < o.repeat and not lead  # the policy's repetitions: evidence, not nothing
            decided = n.pairs == 0
            # a leader with no round of its own is planned from the first pass at another length:
            # a guess (2 noisy pairs once read "not decidable" at a predicted 0.58x), so it gets
            # one round of its own before the plan may give it up
            screen = lead and lv is not None and rounds_of(who) == 0
            if n.fits(left) or decided or below_floor or screen:
                out.append(c)
            if not (n.fits(left) or decided or screen) and c.idx not in given_up:
                need = (
                    f"--budget {budget_mod.budget_for(spent, n.seconds)} would"
                    if n.seconds
                    else f"no budget of up to {budget_mod.HORIZON} more rounds would"
                )
                given_up[c.idx] = need
                further = f"measured only up to --repeat {o.repeat}" if below_floor else "not measured further"
                if lv is None:
                    self.observer.note(
                        f"budget: {c.spec.name} cannot be decided in the budget left ({need}); {further}"
                    )
                elif lv not in told:
                    told.add(lv)
                    role = self._role(lv, who)
                    if sequential.decide(*pair_ms(who), o.min_speedup).decision != "undecided":
                        self.observer.note(  # the leader is decided: its neighbours are what is left
                            f"budget: {role} {who.spec.name} is decided; its other lengths cannot be "
                            f"measured to --repeat {o.repeat} in the budget left ({need}); {further}"
                        )
                    else:
                        self.observer.note(
                            f"budget: {role} {who.spec.name} cannot be decided in the budget left "
                            f"({need}); its candidates are {further if not lead else 'not measured further'}"
                        )
        return out

    def _role(self, level: int, who: ConditionRun) -> str:
        """What a `--tune` length is to its level, for the plan's lines."""
        lv = self._tuner.levels.get(level) if self._tuner is not None else None
        lead = lv.lead if lv is not None else None
        return (
            "the tuning's leader" if lead is None or lead.idx == who.idx else "a length that may beat the decided one"
        )

    def _manifest(
        self,
        pair: PairRecord,
        target: ArtifactRecord,
        target_path: str,
        draft: ArtifactRecord | None,
        draft_path: str | None,
        order: list[ScheduleSlot],
        planned: int,
    ) -> RunManifest:
        o = self.opts
        return RunManifest(
            runtime=self.runtime(),
            target=_ref(target, target_path),
            draft=DraftInfo(
                method=pair.method,
                artifact=_ref(draft, draft_path) if draft and draft_path else None,
                pair_id=pair.id,
                rule_set=pair.rule_set,
                compatibility=pair.checks,
                draft_n_max=o.draft_n_max[0] if o.draft_n_max and len(o.draft_n_max) == 1 else None,
                draft_n_min=o.draft_n_min,
            ),
            hardware=hardware_info(self.gpu, o.gpu_layers),
            request=RequestSettings(
                workload=self.workload.name,
                workload_sha256=self.workload.sha256,
                workload_source=self.workload.source,
                seed=o.seed,
                temperature=o.temperature[0],
                temperatures=list(o.temperature),
                top_p=o.top_p,
                top_k=o.top_k,
                min_p=o.min_p,
                draft_sampling=list(o.draft_sampling or []),
                seeds="repetition r: (seed + r) mod 2^32 - 1, the same for every condition",
                max_tokens_override=o.max_tokens,
                concurrency=o.concurrency[0],
                concurrency_levels=list(o.concurrency),
            ),
            observation=ObservationSettings(
                warmup_requests=o.warmup,
                warmup_tolerance=o.warmup_tolerance,
                repeat=planned,  # the planned rounds (--tune: its first pass); `runs show` counts those measured
                order=o.order,
                schedule=order,
                start_timeout_s=o.start_timeout_s,
                request_timeout_s=o.request_timeout_s,
                run_timeout_s=o.run_timeout_s,
                threads=self._pinning.threads,
                server_cpus=list(self._pinning.cpus) if self._pinning.cpus else None,
                ctx_size=o.ctx_size,
            ),
            settings=o,
        )


def free_rounds(
    picked: list[ConditionRun],
    bases: dict[tuple[int, Sampler], ConditionRun],
    rows: list[RequestRow],
    kept: list[RequestRow],
) -> dict[int, list[int]]:
    """Condition idx -> the repetitions its baseline measured (and kept) that it has not, after
    its own last: its next slot pairs with those rounds instead of starting the baseline again
    (issue 32: a `--tune` length first measured after the first pass, or a method the first
    pass left out, pairs with the baseline's rounds so far). In order, so its pairs are measured
    in the order the sequence takes them (`paired_ms`: by repetition)."""
    out = {}
    for c in picked:
        base = bases.get(arm(c.spec))
        if base is None or base is c:
            continue
        have = {r.repeat for r in rows if r.condition_idx == c.idx}
        free = [r for r in sorted({r.repeat for r in kept if r.condition_idx == base.idx}) if r > max(have, default=-1)]
        if free:
            out[c.idx] = free
    return out


def _phase(c: ConditionRun, picked: list[ConditionRun], leaders: set[int], tuned: set[int]) -> SlotPhase:
    """Why a `--budget` slot runs (a baseline's: for the conditions it is paired with)."""
    idxs = {x.idx for x in picked} if c.spec.method == BASELINE else {c.idx}
    return "leader" if idxs & leaders else "lengths" if idxs & tuned else "methods"


def every_round_set_aside(
    conds: list[ConditionRun], rows: list[RequestRow], aside: dict[contention.Slot, str]
) -> str | None:
    """The first reason, when every slot measured so far was set aside (None: some were kept):
    then there is nothing to price a draft length from or decide on (issue 32: a busy machine's
    first pass priced every length from set-aside rounds, a flat curve of 0.19x "slow-downs")."""
    measured = {(r.condition_idx, r.repeat) for r in rows}
    if not measured or any(slot not in aside for slot in measured):
        return None
    return aside[min(measured)]


def busy_line(why: str, busy_share: float) -> str:
    """One line for a run whose every round was set aside, with the ways forward."""
    return (
        f"every round so far was set aside as contended ({why}): nothing measured to decide on, so the "
        f"budget is not spent; wait for a quieter machine, raise --busy-share (now {busy_share:g}), or "
        "--busy-share off (contended timings then count: a neighbour's load lands on whichever condition it hit)"
    )


def drop_covered(
    plans: list[tuple[PairRecord, list[cond_mod.ConditionSpec]]],
) -> tuple[list[tuple[PairRecord, list[cond_mod.ConditionSpec]]], list[tuple[PairRecord, PairRecord]]]:
    """Leave out self-speculation pairs whose every condition another run of the same target has.

    Every run of a target includes the baseline and the n-gram methods, so benchmarking an
    admitted n-gram pair next to a draft pair of that target would measure the same servers twice.
    """
    order = sorted(plans, key=lambda ps: (ps[0].draft_sha256 is None, ps[0].id))
    kept: list[tuple[PairRecord, list[cond_mod.ConditionSpec]]] = []
    covered: list[tuple[PairRecord, PairRecord]] = []
    for pair, specs in order:
        methods = {s.method for s in specs}
        by = next(
            (
                q
                for q, qspecs in kept
                if pair.draft_sha256 is None
                and q.target_sha256 == pair.target_sha256
                and methods <= {s.method for s in qspecs}
            ),
            None,
        )
        if by is None:
            kept.append((pair, specs))
        else:
            covered.append((pair, by))
    return kept, covered


def _ref(rec: ArtifactRecord, path: str) -> ArtifactRef:
    s = rec.summary
    tok = s.tokenizer if s else None
    return ArtifactRef(
        sha256=rec.sha256,
        path=str(Path(path)),
        size=rec.size,
        repo=rec.provenance.repo,
        revision=rec.provenance.revision,
        file_type=rec.file_type_name,
        tokenizer_model=tok.model if tok else None,
        tokenizer_pre=tok.pre if tok else None,
        chat_template_sha256=tok.chat_template_sha256 if tok else None,
        licence=rec.licence,
    )
