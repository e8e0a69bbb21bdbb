"""What a run records about itself before its first request: the manifest.

A run is evidence only if it can be read back without the machine it ran on: which files (by
SHA-256, with their licence as it was), which server build and flags, which prompts (pinned by
their hash), which sampler and seeds, which schedule, threads and cores, and the settings the
run was started with. The runner writes it once, before any condition runs, so that even a run
that is interrupted says what it was measuring.
"""

from __future__ import annotations

from pathlib import Path

from specreg.benchmark.workloads.jsonl import Workload
from specreg.schemas.bench import (
    ArtifactRef,
    DraftInfo,
    ObservationSettings,
    RequestSettings,
    RunManifest,
    RuntimeInfo,
    ScheduleSlot,
)
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.registry import ArtifactRecord, PairRecord
from specreg.servers.memory import GpuProbe
from specreg.servers.pinning import Pinning
from specreg.servers.runtime import hardware_info


def run_manifest(
    opts: BenchSettings,
    *,
    pair: PairRecord,
    target: ArtifactRecord,
    target_path: str,
    draft: ArtifactRecord | None,
    draft_path: str | None,
    order: list[ScheduleSlot],
    planned: int,
    runtime: RuntimeInfo,
    workload: Workload,
    gpu: GpuProbe,
    pinning: Pinning,
) -> RunManifest:
    """The manifest of a run of `pair` on these files: `order` its schedule, `planned` its planned
    rounds (with `--tune`: its first pass)."""
    o = opts
    return RunManifest(
        runtime=runtime,
        target=artifact_ref(target, target_path),
        draft=DraftInfo(
            method=pair.method,
            artifact=artifact_ref(draft, draft_path) if draft and draft_path else None,
            pair_id=pair.id,
            rule_set=pair.rule_set,
            compatibility=pair.checks,
            draft_n_max=o.draft_n_max[0] if o.draft_n_max and len(o.draft_n_max) == 1 else None,
            draft_n_min=o.draft_n_min,
        ),
        hardware=hardware_info(gpu, o.gpu_layers),
        request=RequestSettings(
            workload=workload.name,
            workload_sha256=workload.sha256,
            workload_source=workload.source,
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
            threads=pinning.threads,
            server_cpus=list(pinning.cpus) if pinning.cpus else None,
            ctx_size=o.ctx_size,
        ),
        settings=o,
    )


def artifact_ref(rec: ArtifactRecord, path: str) -> ArtifactRef:
    """A file as a run names it: SHA-256, the path measured, provenance, tokenizer and licence."""
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
