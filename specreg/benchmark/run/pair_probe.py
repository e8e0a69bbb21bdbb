"""The pair probe: a target and one draft run together on a few short prompts, on this machine.

The machine probes (machine_probe.py) price the steps of speculation; they cannot say how often
this draft's tokens are accepted, and the step model between prices and acceptance leaves out
what only the runtime does (a second tokenizer's translation of every draft, the sampler's and
the server's per-step work). A prior's acceptance, drawn from sizes and tokenizers, is wide
enough to hold both signs on a CPU. So the best candidates of `drafts` are also run as a pair:
the target alone, then the target with the draft at the predicted draft length, generating the
same tokens for the same prompts (greedy, end of text ignored, streamed as `bench` and users
stream), each decode timed by llama.cpp's own clock (`predicted_ms`), the draft counts read from
`/metrics`. The prediction takes its acceptance from these counts and calibrates the step model
to the measured ratio at that length (audit/draft_prediction.py).

The prompts are ordinary prose, code and a list, not the user's workload, and few: the
prediction's range keeps a stated spread for that. The target alone is started once for all its
candidates; each pair is one more server start. A probe is kept in the registry by both files'
SHA-256, the method, the draft length and the machine's key, like a machine probe.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark.plan.conditions import ServerOptions, server_args
from specreg.benchmark.run import machine_probe as mp
from specreg.benchmark.run.client import LlamaClient
from specreg.errors import ServerError, SpecregError
from specreg.schemas.bench import ConditionSpec, WorkloadItem
from specreg.schemas.machine_probe import PairProbe, PairProbeRequest
from specreg.schemas.methods import BASELINE
from specreg.servers.launcher import ServerCommand, ServerProcess, launch
from specreg.servers.metrics import parse_metrics, spec_counters

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.servers.machine_key import MachineKey
    from specreg.servers.pinning import Pinning

# each prompt is timed this often on each server and its fastest kept: contention only ever slows a request
ROUNDS = 2
GENERATED = 48  # generated per prompt: enough steps for the counts, short enough for a real model on a CPU
# (id, text): prose, code and a list, each continued by the model. Short: the draft processes the
# prompt too, inside the first decode step, so a long prompt would time the draft's prompt work as decode
PROMPTS = (
    ("prose", "The committee met on a cold morning and"),
    ("code", "def mean(values):\n    return"),
    ("list", "Shopping list:\n1. apples\n2."),
)


@dataclass(frozen=True)
class Candidate:
    """One draft to run with the target: its SHA-256 and file, the method and the draft length."""

    sha256: str
    path: Path
    method: str
    draft_length: int


def _generate(client: LlamaClient, pid: str, text: str) -> tuple[int, float, float, dict[str, float]]:
    """(generated tokens, predicted_ms, prompt_ms, the request's timings) of one greedy, uncached,
    streamed completion, as `bench` and users make one (a speculative step streams its tokens
    together): the decode phase, which `drafts` predicts, and the prompt phase beside it."""
    item = WorkloadItem(id=pid, stratum="probe", prompt=text, max_tokens=GENERATED)
    done = client.complete(item, max_tokens=GENERATED, seed=42, ignore_eos=True)
    if not done.ok:
        raise ServerError(f"the probe's request failed: {done.error}")
    t = done.timings
    n, ms, pms = t.get("predicted_n"), t.get("predicted_ms"), t.get("prompt_ms")
    if not isinstance(n, (int, float)) or not isinstance(ms, (int, float)) or n < 2 or ms <= 0:
        raise ServerError("/completion: the answer's timings hold no generated tokens")
    return int(n), float(ms), float(pms) if isinstance(pms, (int, float)) and pms > 0 else 0.0, t


def _server(
    cmd: ServerCommand, spec: ConditionSpec, target: Path, opts: ServerOptions, log: Path, pinning: Pinning
) -> ServerProcess:
    return launch(cmd, server_args(spec, str(target), opts), log, cpus=set(pinning.cpus or ()) or None)


def _warm_up(client: LlamaClient) -> None:
    """One short request first: the first request pays for allocations."""
    client.timings(client.tokenize(PROMPTS[0][1])[:8], max_tokens=2)


def _baseline(
    cmd: ServerCommand, target: Path, opts: ServerOptions, log: Path, pinning: Pinning
) -> tuple[dict[str, tuple[int, float, float]], float]:
    """The target alone: each prompt's (tokens, decode ms, prompt ms), the fastest rounds; its seconds."""
    t0 = time.monotonic()
    proc = _server(cmd, ConditionSpec(name="pair probe baseline", method=BASELINE), target, opts, log, pinning)
    try:
        with LlamaClient(proc.base_url, timeout_s=120.0, max_connections=2) as client:
            _warm_up(client)
            base: dict[str, tuple[int, float, float]] = {}
            for _ in range(ROUNDS):
                for pid, text in PROMPTS:
                    n, ms, pms, _t = _generate(client, pid, text)
                    _, b_ms, b_pms = base.get(pid, (n, ms, pms))
                    base[pid] = (n, min(ms, b_ms), min(pms, b_pms))
    finally:
        proc.stop()
    return base, time.monotonic() - t0


def _with_draft(
    cmd: ServerCommand, target: Path, c: Candidate, base: dict[str, tuple[int, float, float]], opts: ServerOptions,
    log: Path, pinning: Pinning,
) -> list[PairProbeRequest]:  # fmt: skip
    spec = ConditionSpec(name="pair probe", method=c.method, draft_path=str(c.path), draft_n_max=c.draft_length)
    proc = _server(cmd, spec, target, opts, log, pinning)
    out = []
    try:
        with LlamaClient(proc.base_url, timeout_s=120.0, max_connections=2) as client:
            _warm_up(client)
            for pid, text in PROMPTS:
                before = parse_metrics(client.metrics_text())
                n, ms, pms, t = _generate(client, pid, text)
                counters = spec_counters(before, parse_metrics(client.metrics_text()))
                b_n, b_ms, b_pms = base[pid]
                if n != b_n:  # the same prompt, greedy, end of text ignored: the same length, or not comparable
                    raise ServerError(f"the pair generated {n} tokens where the target alone made {b_n}")
                drafted = counters.drafted if counters else int(t.get("draft_n") or 0)
                accepted = counters.accepted if counters else int(t.get("draft_n_accepted") or 0)
                steps = counters.steps if counters and counters.steps else None
                for _ in range(ROUNDS - 1):  # greedy: the same drafts again, only the time may differ
                    _n, again, again_p, _t = _generate(client, pid, text)
                    ms, pms = min(ms, again), min(pms, again_p)
                out.append(PairProbeRequest(prompt=pid, tokens=n, base_ms=round(b_ms, 3), spec_ms=round(ms, 3),
                                            base_prompt_ms=round(b_pms, 3), spec_prompt_ms=round(pms, 3),
                                            drafted=drafted, accepted=accepted, steps=steps))  # fmt: skip
    finally:
        proc.stop()
    return out


@dataclass
class PairProbed:
    """The pair probes of one target's candidates: kept or measured now, and what could not be."""

    probes: dict[tuple[str, str], PairProbe] = field(default_factory=dict)  # (draft SHA-256, method) -> probe
    measured: list[tuple[str, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0  # what this call's probes took (the baseline's start included)


def ensure(
    reg: Registry,
    target_sha: str,
    target: Path,
    candidates: Sequence[Candidate],
    key: MachineKey,
    cmd: ServerCommand,
    pinning: Pinning,
    gpu_layers: str | None = None,
    *,
    log_dir: Path,
    progress: mp.Progress | None = None,
) -> PairProbed:
    """The pair probe of every candidate with this target under `key`: kept ones from the
    registry (one taken on a busy machine is taken again on a quiet one), the others measured
    now (the target alone once, then one start per pair) and kept. A pair that cannot be probed
    is one line in `failures`, never an exception: its prediction keeps its acceptance prior."""
    out = PairProbed()
    quiet = not mp.busy(mp.load_average())
    todo = []
    for c in candidates:
        kept = reg.pair_probe(target_sha, c.sha256, c.method, c.draft_length, key.hardware, key.runtime, key.flags)
        if kept is not None and not (quiet and mp.busy(kept.load)):
            out.probes[(c.sha256, c.method)] = kept
        else:
            todo.append(c)
    if not todo:
        return out
    from specreg.registry.db import now_iso

    opts = ServerOptions(ctx_size=mp.CTX_SIZE, parallel=1, threads=pinning.threads, gpu_layers=gpu_layers)
    log_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    load = mp.load_average()
    if progress is not None:
        progress("running the drafts with the target", 0, len(todo))
    try:
        base, base_s = _baseline(cmd, target, opts, log_dir / f"{stamp}-{target_sha[:12]}-alone.log", pinning)
    except SpecregError as exc:
        out.failures += [f"{c.path.name}: not run with the target: {exc.message}" for c in todo]
        return out
    out.seconds += base_s
    for i, c in enumerate(todo):
        t0 = time.monotonic()
        log = log_dir / f"{stamp}-{target_sha[:12]}-{c.sha256[:12]}-k{c.draft_length}.log"
        try:
            requests = _with_draft(cmd, target, c, base, opts, log, pinning)
        except SpecregError as exc:
            out.failures.append(f"{c.path.name}: not run with the target: {exc.message}")
            continue
        finally:
            out.seconds += time.monotonic() - t0
            if progress is not None:
                progress("running the drafts with the target", i + 1, len(todo))
        if not any(r.drafted for r in requests):  # speculation that did not run is a failure, not a 1.0x
            out.failures.append(f"{c.path.name}: drafted nothing with the target (see {log})")
            continue
        probe = PairProbe(
            target_sha256=target_sha, draft_sha256=c.sha256, name=c.path.name, method=c.method,
            draft_length=c.draft_length, hardware=key.hardware, runtime=key.runtime, flags=list(key.flags),
            requests=requests,
            seconds=round(base_s + time.monotonic() - t0, 2), load=load, probed_at=now_iso(),
        )  # fmt: skip
        out.probes[(c.sha256, c.method)] = probe
        out.measured.append((c.sha256, c.method))
        reg.record_pair_probe(probe)
    out.seconds = round(out.seconds, 2)
    return out
