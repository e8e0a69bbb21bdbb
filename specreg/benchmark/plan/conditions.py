"""Which conditions a pair is benchmarked under, and the server argv for each.

Step by step (PROTOCOL §3): the baseline `none` always runs (speed-up and output equivalence
are measured against it), then the n-gram methods with the build's defaults, then the pair's
admitted method. Whether speculation then ran is read from the server log (`serverlog`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TypeVar

from specreg.errors import UsageError
from specreg.schemas.bench import ConditionSpec, ScheduleSlot
from specreg.schemas.bench_settings import Order
from specreg.schemas.methods import BASELINE, DEFAULT_NGRAM_METHODS, DRAFT_METHODS, MODEL_DRAFTED, SELF_METHODS
from specreg.schemas.sampling import GREEDY, DraftSampling, Sampler
from specreg.servers.bundled_server import NGRAM_FLAGS

# flag prefix -> the n-gram method it configures, longest first (map-k4v before map-k)
_NGRAM_PREFIX = {
    f"--spec-{m.value}-": m.value
    for m in sorted(SELF_METHODS, key=lambda m: (-len(m.value), m.value))
    if m.value.startswith("ngram-")
}


@dataclass(frozen=True)
class ServerOptions:
    """Flags shared by every condition of a run."""

    ctx_size: int = 4096
    parallel: int = 1
    threads: int | None = None  # -t and -tb (prompt batches run on the same cores as decode)
    gpu_layers: str | None = None
    seed: int = 42


def ngram_method(flag: str) -> str:
    """The method an n-gram flag belongs to (longest prefix wins: map-k4v before map-k)."""
    for prefix, method in _NGRAM_PREFIX.items():
        if flag.startswith(prefix):
            return method
    raise UsageError(f"{flag} is not an n-gram option")


def parse_ngram_options(values: list[str]) -> dict[str, int]:
    """`simple-size-n=8` / `--spec-ngram-mod-n-match=16` -> {'--spec-ngram-...': int}."""
    out: dict[str, int] = {}
    for raw in values:
        key, sep, val = raw.partition("=")
        flag = key if key.startswith("--") else f"--spec-ngram-{key}"
        if not sep or flag not in NGRAM_FLAGS:
            known = ", ".join(f.removeprefix("--spec-ngram-") for f in NGRAM_FLAGS)
            raise UsageError(f"--ngram {raw!r}: expected NAME=VALUE with NAME one of: {known}")
        try:
            out[flag] = int(val)
        except ValueError:
            raise UsageError(f"--ngram {raw!r}: value must be an integer") from None
    return out


def condition_name(
    method: str,
    draft_n_max: int | None,
    concurrency: int,
    *,
    by_length: bool,
    by_level: bool,
    temperature: float | None = None,
    draft_sampling: DraftSampling | None = None,
) -> str:
    """`draft-simple`, or with a sweep the swept values: `draft-simple k8`, `none c4`, `draft-simple k8 c4`,
    `draft-simple T0.7`, `draft-simple T0.7 probabilistic` (temperature / draft sampling when swept)."""
    parts = [method]
    if by_length and draft_n_max is not None:
        parts.append(f"k{draft_n_max}")
    if by_level:
        parts.append(f"c{concurrency}")
    if temperature is not None:
        parts.append(f"T{temperature:g}")
    if draft_sampling is not None:
        parts.append(draft_sampling)
    return " ".join(parts)


def plan(
    pair_method: str,
    *,
    draft_path: str | None,
    draft_sha256: str | None,
    methods: list[str] | None = None,
    draft_n_max: list[int] | int | None = None,
    draft_n_min: int | None = None,
    ngram: dict[str, int] | None = None,
    concurrency: list[int] | int | None = None,
    samplers: list[Sampler] | None = None,
    draft_sampling: list[DraftSampling] | None = None,
) -> list[ConditionSpec]:
    """The conditions for one admitted pair, baselines first.

    Args:
        pair_method: the method the pair's verdict admits; the baseline and the default n-gram
            methods are always available beside it.
        draft_path: the draft's file, for the draft methods.
        draft_sha256: the draft's SHA-256, recorded with its conditions.
        methods: the methods to run (default: every available one); the baseline is added.
        draft_n_max: a draft length, or a list of them: one condition per length for the
            methods that use one (draft models and MTP heads).
        draft_n_min: the server's --spec-draft-n-min.
        ngram: n-gram flags (`--spec-ngram-*`) and their values; each must configure a method run.
        concurrency: a level, or a list: every condition, the baseline included, once per level.
        samplers: likewise, once per sampler (temperature); default greedy.
        draft_sampling: draft sampling modes, which multiply the model-drafted methods at
            temperature > 0 only: at 0 both modes verify the same way (llama.cpp rejects only
            when the request samples), so greedy runs measure one condition, recorded with the
            mode asked for when only one was.

    Raises:
        UsageError: for a method not available to this pair, an n-gram flag for a method not
            run, or draft sampling modes without a draft method.
    """
    available = [BASELINE, *DEFAULT_NGRAM_METHODS]
    if pair_method not in available:
        available.append(pair_method)
    wanted = list(dict.fromkeys(methods)) if methods else list(available)
    bad = [m for m in wanted if m not in available]
    if bad:
        raise UsageError(
            f"method {', '.join(bad)} is not available for this pair (admitted: {pair_method})",
            hint=f"choose from: {', '.join(available)}",
        )
    if BASELINE not in wanted:
        wanted.insert(0, BASELINE)
    wanted.sort(key=lambda m: m != BASELINE)
    ngram = dict(ngram or {})
    for flag in ngram:
        if ngram_method(flag) not in wanted:
            raise UsageError(f"{flag} configures {ngram_method(flag)}, which is not among the methods run")
    lengths: list[int | None] = (
        [draft_n_max] if isinstance(draft_n_max, int) else list(draft_n_max) if draft_n_max else [None]
    )
    levels = [concurrency] if isinstance(concurrency, int) else list(concurrency or [1])
    samplers = list(samplers or [GREEDY])
    modes = list(draft_sampling or [])
    if modes and methods and not any(m in MODEL_DRAFTED for m in wanted):  # asked for, not only defaulted
        raise UsageError("--draft-sampling is for draft methods, and none is among the methods run")
    by_length, by_level = len(lengths) > 1, len(levels) > 1
    by_sampler, by_mode = len(samplers) > 1, len(modes) > 1
    out: list[ConditionSpec] = []
    for method in wanted:
        uses_draft_len = method in MODEL_DRAFTED  # --spec-draft-n-max: draft models and MTP heads
        needs_file = method in DRAFT_METHODS
        if needs_file and not draft_path:
            raise UsageError(f"{method} needs a draft model file, and this pair has none")
        for sampler in samplers:
            method_modes: list[DraftSampling | None] = [None]
            if uses_draft_len and modes:
                method_modes = list(modes) if not sampler.greedy else [modes[0] if len(modes) == 1 else None]
            for level in levels:
                for k in lengths if uses_draft_len else [None]:
                    for mode in method_modes:
                        name = condition_name(
                            method, k, level, by_length=by_length, by_level=by_level,
                            temperature=sampler.temperature if by_sampler else None,
                            draft_sampling=mode if by_mode else None,
                        )  # fmt: skip
                        out.append(
                            ConditionSpec(
                                name=name,
                                method=method,
                                draft_path=draft_path if needs_file else None,
                                draft_sha256=draft_sha256 if needs_file else None,
                                draft_n_max=k,
                                draft_n_min=draft_n_min if uses_draft_len else None,
                                params={f: v for f, v in ngram.items() if ngram_method(f) == method},
                                concurrency=level,
                                temperature=sampler.temperature,
                                top_p=sampler.top_p,
                                top_k=sampler.top_k,
                                min_p=sampler.min_p,
                                draft_sampling=mode,
                            )
                        )
    return out


_T = TypeVar("_T")


def balanced_order(names: list[_T], round_no: int) -> list[_T]:
    """Round `round_no`'s order of `names` (the run's seeded order): every odd round the reverse
    of the round before, and rotated by one every two rounds - ABBA BAAB for two conditions. A
    drift that is linear over two rounds (a warming machine, a neighbour winding down) puts
    every condition at the same mean position in each pair of rounds, so it cancels in their
    ratios instead of landing on whichever a shuffle put late."""
    if not names:
        return []
    k = (round_no // 2) % len(names)
    rotated = names[k:] + names[:k]
    return rotated[::-1] if round_no % 2 else rotated


def schedule(
    specs: list[ConditionSpec], repeat: int, order: Order, seed: int, *, balance: bool = False
) -> list[ScheduleSlot]:
    """The run's order of server starts.

    blocked: each condition once, every repetition in one server, baselines first. rounds: one
    round per repetition, each condition once per round in a seeded random order, so drift
    (a cold page cache, a busy neighbour, heat) spreads over every condition instead of hitting
    whichever ran first. Round 0 starts with the baselines: their outputs are the reference the
    other conditions' outputs are compared with.

    Greedy conditions all run before sampled ones (temperature > 0): the greedy stage proves
    output equivalence, and a sampled condition runs only where its greedy one kept it.
    `balance`: rounds after the first follow `balanced_order` of the first round's seeded order
    instead of a fresh shuffle each.
    """
    greedy = [s for s in specs if s.temperature == 0]
    if greedy and len(greedy) < len(specs):
        sampled = [s for s in specs if s.temperature != 0]
        return schedule(greedy, repeat, order, seed, balance=balance) + schedule(
            sampled, repeat, order, seed + 1, balance=balance
        )
    if order == "blocked":
        return [ScheduleSlot(round=0, condition=s.name, repeats=list(range(repeat))) for s in specs]
    rng = random.Random(seed)
    out: list[ScheduleSlot] = []
    first: list[str] = []
    for r in range(repeat):
        names = [s.name for s in specs]
        if r == 0:
            bases = [s.name for s in specs if s.method == BASELINE]
            rest = [n for n in names if n not in bases]
            rng.shuffle(bases)
            rng.shuffle(rest)
            names = first = bases + rest
        elif balance:
            names = balanced_order(first, r)
        else:
            rng.shuffle(names)
        out += [ScheduleSlot(round=r, condition=n, repeats=[r]) for n in names]
    return out


def server_args(cond: ConditionSpec, target_path: str, opts: ServerOptions) -> list[str]:
    """llama-server flags for one condition (the launcher adds --host and --port)."""
    args = ["-m", target_path, "--spec-type", cond.method]
    if cond.draft_path:
        args += ["-md", cond.draft_path]
    if cond.draft_n_max is not None:
        args += ["--spec-draft-n-max", str(cond.draft_n_max)]
    if cond.draft_n_min is not None:
        args += ["--spec-draft-n-min", str(cond.draft_n_min)]
    if cond.draft_sampling is not None:
        args += ["--spec-draft-sampling", cond.draft_sampling]
    for flag, value in sorted(cond.params.items()):
        args += [flag, str(value)]
    if cond.sampler != GREEDY:  # the server's defaults = the requests' sampler, as deploy pins them
        args += ["--temp", f"{cond.temperature:g}"]
        if cond.top_p is not None:
            args += ["--top-p", f"{cond.top_p:g}"]
        if cond.top_k is not None:
            args += ["--top-k", str(cond.top_k)]
        if cond.min_p is not None:
            args += ["--min-p", f"{cond.min_p:g}"]
    args += ["-c", str(opts.ctx_size), "-np", str(opts.parallel), "--seed", str(opts.seed), "--metrics"]
    if opts.threads is not None:
        args += ["-t", str(opts.threads), "-tb", str(opts.threads)]
    if opts.gpu_layers is not None:
        args += ["-ngl", opts.gpu_layers]
    return args
