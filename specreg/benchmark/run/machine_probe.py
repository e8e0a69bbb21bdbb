"""The machine probe: what one model costs on this machine, this build, these flags.

A speed-up is acceptance over cost, and the cost is the machine's: on a CPU running a small
model a verify step of k+1 tokens costs several decodes, on a GPU about one, and a 4-bit draft
that reads a fifth of the bytes may still decode nearly as slowly as its F32 target. So before
a prediction is priced, each model is started once on its own (the baseline's flags, the
threads and GPU layers `bench` would give it) and asked for llama.cpp's own timings: prompt
batches of 2..33 tokens (`prompt_n`, `prompt_ms`: a verify step of k drafted tokens is a batch
of k+1), each request generating two tokens, so that it also times one decode step (the first
token comes with the prompt's logits; `predicted_ms` is the step that makes the second), in
`REPEATS` rounds; a round's decode is its fastest step. Every price is a single forward pass
timed alike, and contention only slows a request, so the prices are taken at the fastest rounds
and the spread of a shared machine shows between them (`stepcost.probe_prices`).
One server start per model; the result is kept in the registry by the file's SHA-256 and the
machine's key (hardware class, runtime, speed flags) and read back by every later `drafts`,
`check pair --probe`, `bench --tune` and `runs show` on the same key.

Every prompt is a list of token ids the server's own tokenizer made, sent with
`cache_prompt: false`, so every batch is evaluated whole (the server never reuses a prefix).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark.plan.conditions import ServerOptions, server_args
from specreg.benchmark.run.client import LlamaClient
from specreg.errors import ServerError, SpecregError
from specreg.schemas.bench import ConditionSpec
from specreg.schemas.machine_probe import MachineProbe, ProbeRound
from specreg.schemas.methods import BASELINE
from specreg.servers.launcher import ServerCommand, launch
from specreg.servers.machine_key import MachineKey

if TYPE_CHECKING:
    from specreg.registry.store import Registry
    from specreg.schemas.bench import RunManifest
    from specreg.servers.pinning import Pinning

BATCH_SIZES = (2, 3, 4, 6, 9, 13, 17, 25, 33)  # a verify step of k = 1..32 drafted tokens: k+1 (between: linear)
REPEATS = 5  # rounds: each price is taken at the fastest, its spread toward the second fastest
CTX_SIZE = 1024  # the longest request is 33 + 2 tokens; a smaller cache starts sooner
# Ordinary prose, tokenized by the server: real token ids of this model's vocabulary.
TEXT = (
    "The committee met on a cold morning to read the reports. Each member spoke in turn about the "
    "harvest, the roads and the school, and the clerk wrote down what was agreed before noon."
)

Progress = Callable[[str, int, int], None]  # (stage, done, total)


def _ids(client: LlamaClient, n: int) -> list[int]:
    """At least `n` token ids of ordinary text in this model's vocabulary (the text repeated as needed)."""
    ids = client.tokenize(TEXT)
    if not ids:
        raise ServerError("the server's tokenizer gave no token for the probe's text")
    while len(ids) < n:
        ids += ids
    return ids


def output_share(path: str | Path) -> float | None:
    """The output matrix's share of a model's matrix weights, from its header (the token
    embedding when it is tied): what computing one more token's logits costs in a batch, per
    token of the batch's other work. None when the header names no such matrix."""
    from specreg.gguf.reader import open_gguf

    mats = {t.name: math.prod(t.shape) for t in open_gguf(path).tensors if len(t.shape) >= 2}
    out = mats.get("output.weight") or mats.get("token_embd.weight")
    body = sum(n for name, n in mats.items() if name not in ("token_embd.weight", "output.weight"))
    return round(out / (body + out), 4) if out and body else None


def _decode_step(t: dict[str, float]) -> float | None:
    """One decode step's time: the first generated token comes free with the prompt's logits, so
    `predicted_ms` covers `predicted_n - 1` steps (llama.cpp's own `predicted_per_token_ms`)."""
    n, ms = t.get("predicted_n"), t.get("predicted_ms")
    if not isinstance(n, (int, float)) or not isinstance(ms, (int, float)) or n < 2 or ms <= 0:
        return None
    return float(ms) / (float(n) - 1)


def _number(t: dict[str, float], key: str) -> float:
    value = t.get(key)
    if not isinstance(value, (int, float)) or value < 0:
        raise ServerError(f"/completion: timings.{key} missing from the answer (is this llama-server?)")
    return float(value)


def measure(
    path: str | Path,
    sha256: str,
    key: MachineKey,
    cmd: ServerCommand,
    log_path: Path,
    pinning: Pinning,
    gpu_layers: str | None = None,
    *,
    start_timeout_s: float = 120.0,
) -> MachineProbe:
    """Start the model alone, time its batches and its decode, stop it (module docstring).

    Raises:
        ServerStartError: the server would not start on this file.
        ServerError: a request failed or the answer had no timings.
    """
    share = output_share(path)
    spec = ConditionSpec(name="machine probe", method=BASELINE)
    opts = ServerOptions(ctx_size=CTX_SIZE, parallel=1, threads=pinning.threads, gpu_layers=gpu_layers)
    args = server_args(spec, str(path), opts)
    load = load_average()
    t0 = time.monotonic()
    proc = launch(cmd, args, log_path, start_timeout_s=start_timeout_s, cpus=set(pinning.cpus or ()) or None)
    rounds: list[ProbeRound] = []
    try:
        with LlamaClient(proc.base_url, timeout_s=120.0, max_connections=2) as client:
            ids = _ids(client, max(BATCH_SIZES) + REPEATS + 8)
            client.timings(ids[:8], max_tokens=2)  # warm-up: the first request pays for allocations
            for rep in range(REPEATS):  # a round: one request per batch size
                batch: dict[int, float] = {}
                steps: list[float] = []
                for n in BATCH_SIZES:
                    t = client.timings(ids[rep : rep + n], max_tokens=2, ignore_eos=True)
                    got, ms = int(_number(t, "prompt_n")), _number(t, "prompt_ms")
                    if got > 0 and ms > 0:
                        batch[got] = round(ms, 4)
                    step = _decode_step(t)
                    if step is not None:
                        steps.append(step)
                if steps and len(batch) >= 2:
                    rounds.append(ProbeRound(decode_ms=round(min(steps), 4), batch_ms=batch))
        cpu = _cpu_seconds(proc.pid)
    finally:
        proc.stop()
    if not rounds:
        raise ServerError("the server's timings gave no decode or batch time")
    from specreg.registry.db import now_iso

    return MachineProbe(
        sha256=sha256, name=Path(path).name, hardware=key.hardware, runtime=key.runtime, flags=list(key.flags),
        rounds=rounds, output_share=share, seconds=round(time.monotonic() - t0, 2), cpu_seconds=cpu, load=load,
        probed_at=now_iso(),
    )  # fmt: skip


@dataclass
class Probed:
    """The probes of some files on one machine: found in the registry or measured now."""

    key: MachineKey
    probes: dict[str, MachineProbe] = field(default_factory=dict)  # SHA-256 -> probe
    measured: list[str] = field(default_factory=list)  # SHA-256s probed by this call (the rest were kept)
    failures: list[str] = field(default_factory=list)  # one line per file that could not be probed

    def seconds(self) -> float:
        """What this call's own probes took."""
        return sum(self.probes[s].seconds for s in self.measured)


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time the server has used so far (its start and every request): what the probe
    costs whatever else the machine is running, where the wall time depends on the load."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return round(t.user + t.system + t.children_user + t.children_system, 2)


def busy(load: float | None) -> bool:
    """A load average at or above the logical cores: a probe taken then may be far off."""
    return load is not None and load >= (os.cpu_count() or 1)


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def ensure(
    reg: Registry,
    files: Sequence[tuple[str, Path]],
    key: MachineKey,
    cmd: ServerCommand,
    pinning: Pinning,
    gpu_layers: str | None = None,
    *,
    log_dir: Path,
    progress: Progress | None = None,
) -> Probed:
    """The probe of every (SHA-256, path) under `key`: kept ones from the registry, the others
    measured now (one server start each) and kept; a kept one taken on a busy machine is taken
    again when the machine is quiet now. A file that cannot be probed is one line in `failures`,
    never an exception: its prediction stays hardware-blind."""
    out = Probed(key)
    shas = [sha for sha, _ in files]
    quiet = not busy(load_average())
    kept = reg.machine_probes(shas, key.hardware, key.runtime, key.flags)
    out.probes = {sha: p for sha, p in kept.items() if not (quiet and busy(p.load))}
    todo = [(sha, p) for sha, p in dict(files).items() if sha not in out.probes]
    for i, (sha, p) in enumerate(todo):
        if progress is not None:
            progress("probing the machine", i, len(todo))
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{sha[:12]}.log"
        try:
            probe = measure(p, sha, key, cmd, log, pinning, gpu_layers)
        except SpecregError as exc:
            out.failures.append(f"{Path(p).name}: not probed: {exc.message}")
            continue
        out.probes[sha] = probe
        out.measured.append(sha)
        reg.record_machine_probe(probe)
    if progress is not None and todo:
        progress("probing the machine", len(todo), len(todo))
    return out


def tune_verify(
    reg: Registry, manifest: RunManifest, sha256: str, path: str, cmd: ServerCommand, pinning: Pinning, log_dir: Path
) -> tuple[float, ...]:
    """`--tune`'s v(k), k = 1..32, from the target's machine probe on the run's machine key (kept,
    or measured now: one server start before the first pass); empty when it cannot be probed."""
    from specreg.benchmark.plan.tune_curve import LENGTHS
    from specreg.benchmark.store.stepcost import probe_prices
    from specreg.servers.machine_key import key_of_run

    gpu_layers = manifest.settings.gpu_layers if manifest.settings else None
    got = ensure(reg, [(sha256, Path(path))], key_of_run(manifest), cmd, pinning, gpu_layers, log_dir=log_dir)
    probe = got.probes.get(sha256)
    prices = probe_prices(probe, None, len(LENGTHS)) if probe is not None else None
    return prices.verify if prices is not None else ()
