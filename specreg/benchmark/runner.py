"""Benchmark admitted pairs: one run per pair, one fresh server per condition, rows as they finish.

The order is fixed by PROTOCOL §3: baseline first (its outputs are the reference for every
speculative condition), then n-gram, then the pair's admitted method. Whatever goes wrong -
a server that never starts, dies mid-run, refuses the draft, Ctrl-C - the rows already written
stay, the condition and the run say what happened, and the next condition runs.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark import conditions as cond_mod
from specreg.benchmark.execute import Observer, RunContext, run_condition
from specreg.benchmark.launcher import ServerCommand, bundled_command, external_command
from specreg.benchmark.memory import GpuProbe
from specreg.benchmark.runstore import RunStore
from specreg.benchmark.runtime import hardware_info, runtime_info
from specreg.benchmark.summary import summarize
from specreg.benchmark.workloads import Workload, load_workload
from specreg.errors import ArtifactChanged, NotAdmitted, SpecregError, UsageError
from specreg.registry.db import now
from specreg.registry.hashing import sha256_file
from specreg.schemas.bench import (
    ArtifactRef,
    BenchRun,
    ConditionRun,
    DraftInfo,
    ObservationSettings,
    RequestSettings,
    RunInfo,
    RunManifest,
    RunStatus,
    RuntimeInfo,
)
from specreg.schemas.registry import ArtifactRecord, PairRecord

if TYPE_CHECKING:
    from specreg.registry.store import Registry

__all__ = ["BenchOptions", "Observer", "Runner"]


@dataclass
class BenchOptions:
    """Everything a `bench admitted` invocation can set; recorded in each run's manifest."""

    methods: list[str] | None = None
    workload: str = "default"
    repeat: int = 1
    max_tokens: int | None = None
    concurrency: int = 1
    draft_n_max: int | None = None
    draft_n_min: int | None = None
    ngram: dict[str, int] = field(default_factory=dict)
    seed: int = 42
    warmup: int = 1
    ctx_size: int = 4096
    threads: int | None = None
    gpu_layers: str | None = None
    server: str | None = None
    start_timeout_s: float = 120.0
    request_timeout_s: float = 120.0
    run_timeout_s: float = 3600.0

    def check(self) -> None:
        for name in ("repeat", "concurrency", "ctx_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise UsageError("--max-tokens must be at least 1")
        if self.draft_n_max is not None and self.draft_n_max < 0:
            raise UsageError("--draft-max must be >= 0")
        for name in ("start_timeout_s", "request_timeout_s", "run_timeout_s"):
            if getattr(self, name) <= 0:
                raise UsageError(f"{name} must be positive")


def new_run_id() -> str:
    return now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


class Runner:
    """Runs benchmarks against one registry with one server program and one workload."""

    def __init__(
        self, reg: Registry, opts: BenchOptions, observer: Observer | None = None, gpu: GpuProbe | None = None
    ) -> None:
        opts.check()
        self.reg, self.opts = reg, opts
        self.store = RunStore(reg)
        self.observer = observer or Observer()
        self.workload: Workload = load_workload(opts.workload)
        self.cmd: ServerCommand = external_command(opts.server) if opts.server else bundled_command()
        self.gpu = gpu or GpuProbe()
        self._runtime: RuntimeInfo | None = None
        self.refused: list[str] = []  # pairs of the last bench() that could not start, with why

    def runtime(self) -> RuntimeInfo:
        if self._runtime is None:
            self._runtime = runtime_info(self.cmd)
        return self._runtime

    # -- selecting pairs ------------------------------------------------------------------------

    def select(self, pair_ids: list[int] | None) -> list[PairRecord]:
        """The pairs to run; a rejected or unknown pair is refused with the reason."""
        if not pair_ids:
            pairs = self.reg.pairs(admitted=True)
            if not pairs:
                raise NotAdmitted(
                    "no admitted pairs in the registry", hint="admit one with `specreg check pair TARGET DRAFT`"
                )
            return pairs
        out = []
        for pid in pair_ids:
            try:
                pair = self.reg.get_pair(pid)
            except SpecregError:
                raise NotAdmitted(
                    f"pair {pid} has never been checked (not in the registry)",
                    hint="run `specreg check pair TARGET [DRAFT]` first; `specreg pairs` lists them",
                ) from None
            if not pair.admitted:
                why = "; ".join(f"{c.code}: {c.message}" for c in pair.checks if c.severity == "error")
                raise NotAdmitted(f"pair {pid} ({pair.method}) was rejected, not benchmarked: {why or 'not admitted'}")
            out.append(pair)
        return out

    def _verified_path(self, rec: ArtifactRecord, role: str) -> str:
        """A registered path still holding these bytes; a changed file is refused with both hashes."""
        ok, problem = self.reg.verify_artifact(rec)
        if ok and rec.paths:
            return rec.paths[0]
        existing = [p for p in rec.paths if os.path.isfile(p)]
        if existing:
            raise ArtifactChanged(existing[0], rec.sha256, sha256_file(existing[0]))
        raise SpecregError(
            f"{role} {rec.sha256[:12]}: {problem or 'no registered path'}",
            hint="register the file again at its new location",
        )

    # -- running --------------------------------------------------------------------------------

    def bench(self, pair_ids: list[int] | None = None) -> list[BenchRun]:
        """Benchmark the selected (default: all admitted) pairs, one run each.

        With several pairs, one that cannot start (e.g. its file changed) is refused and
        listed in `self.refused`, and the next pair runs; a single pair raises.
        """
        self.refused = []
        for note in self.store.reap_orphans():
            self.observer.note(note)
        pairs = self.select(pair_ids)
        plans = [(p, self._plan(p)) for p in pairs]  # refuse bad --methods before any server starts
        if not pair_ids:
            plans, covered = drop_covered(plans)
            for p, by in covered:
                self.observer.note(
                    f"pair {p.id} ({p.method}) is measured in pair {by.id}'s run (same target, same conditions)"
                )
        self.runtime()  # a broken server binary fails once, here
        runs = []
        for p, specs in plans:
            try:
                runs.append(self.bench_pair(p, specs))
            except SpecregError as exc:
                if len(plans) == 1:
                    raise
                self.refused.append(f"pair {p.id}: {exc.message}")
                self.observer.note(f"pair {p.id} not benchmarked: {exc.message}")
        return runs

    def _plan(self, pair: PairRecord) -> list[cond_mod.ConditionSpec]:
        return cond_mod.plan(
            pair.method,
            draft_path="(draft)" if pair.draft_sha256 else None,
            draft_sha256=pair.draft_sha256,
            methods=self.opts.methods,
            draft_n_max=self.opts.draft_n_max,
            draft_n_min=self.opts.draft_n_min,
            ngram=self.opts.ngram,
        )

    def bench_pair(self, pair: PairRecord, specs: list[cond_mod.ConditionSpec] | None = None) -> BenchRun:
        """One run: verify files, write the manifest, run each condition, summarise."""
        target = self.reg.get_artifact(pair.target_sha256)
        draft = self.reg.get_artifact(pair.draft_sha256) if pair.draft_sha256 else None
        for role, rec in (("target", target), ("draft", draft)):
            if rec is not None and rec.summary is not None and rec.summary.vocab_only:
                raise NotAdmitted(
                    f"pair {pair.id}: the {role} {rec.sha256[:12]} is vocab-only (no tensors): "
                    "it can be checked, not benchmarked",
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
        manifest = self._manifest(pair, target, target_path, draft, draft_path)
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
        )
        self.observer.run_started(info, conds, len(self.workload.items) * self.opts.repeat)
        status: RunStatus = "failed"
        reason: str | None = "runner error"
        try:
            for c in conds:
                if ctx.expired():
                    c.status, c.failure = "skipped", f"run deadline of {self.opts.run_timeout_s:g}s exceeded"
                    self.store.save_condition(run_id, c)
                    continue
                run_condition(ctx, c)
            failed = [c for c in conds if c.status != "ok"]
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
            self.store.set_summaries(run_id, target.sha256, info.draft_sha256, summarize(conds, ctx.rows))
            self.store.finish(run_id, status, reason)
            self.observer.run_done(run_id, status, reason)
        return self.store.load(run_id)

    def _manifest(
        self,
        pair: PairRecord,
        target: ArtifactRecord,
        target_path: str,
        draft: ArtifactRecord | None,
        draft_path: str | None,
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
                draft_n_max=o.draft_n_max,
                draft_n_min=o.draft_n_min,
            ),
            hardware=hardware_info(self.gpu, o.gpu_layers),
            request=RequestSettings(
                workload=self.workload.name,
                workload_sha256=self.workload.sha256,
                seed=o.seed,
                max_tokens_override=o.max_tokens,
                concurrency=o.concurrency,
            ),
            observation=ObservationSettings(
                warmup_requests=o.warmup,
                repeat=o.repeat,
                start_timeout_s=o.start_timeout_s,
                request_timeout_s=o.request_timeout_s,
                run_timeout_s=o.run_timeout_s,
                threads=o.threads,
                ctx_size=o.ctx_size,
            ),
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
