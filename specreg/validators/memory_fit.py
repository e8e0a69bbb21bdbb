"""Does one serving configuration of a pair fit a memory budget, and with which caps?

A pair's verdict says whether llama.cpp can speculate with two files; it does not depend on the
machine. Whether a configuration of them (-c, -np, the cache types, -ngl) fits a machine's
memory does, and most of what a llama-server may come to hold is not the configuration but two
caps on what grows while it serves: the host prompt cache (--cache-ram) and the context
checkpoints of a sliding-window or recurrent cache (--ctx-checkpoints per slot). So a budget is
judged here, apart from the verdict (`check pair` records the fit on its own,
registry/memory_fits.py), as: what the server holds from the start and while serving
(`resident_bytes`), then the caps. When the caps asked for (or llama.cpp's defaults) do not
fit, the largest that do are named: the checkpoints first (as many as asked, or fewer), then
the prompt cache in what is left; `deploy` pins them for the configuration.

The budget holds the estimate plus the tolerance it is checked to (memory_budget.BUDGET_MARGIN),
as `memory.budget` always has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from specreg.gguf.reader import GGUFFile
from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, MemoryEstimate, MemoryFit, ServeSettings, config_key
from specreg.validators.memory_budget import BUDGET_MARGIN, budget_check, cache_type_checks, estimate
from specreg.validators.ruleset import RuleSet

Caps = tuple[int, int]  # (--cache-ram MiB, --ctx-checkpoints)


def resident_bytes(est: MemoryEstimate) -> int:
    """What the server holds from its start and while serving, before the prompt cache and the
    context checkpoints grow towards their caps: every buffer llama.cpp reserves, the tokenizer,
    the process, the HTTP threads' work at its bound."""
    return est.total_bytes - est.prompt_cache_bytes - est.checkpoint_bytes


def _within(need: int, budget: int) -> bool:
    return need + int(need * BUDGET_MARGIN) <= budget


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), for an `ok` that holds up to some n and not past it."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def judge_fit(
    target: GGUFFile,
    draft: GGUFFile | None,
    settings: ServeSettings,
    rules: RuleSet,
    budget: tuple[int, str] | None,
    *,
    target_sha256: str,
    draft_sha256: str | None,
    cache_ram_given: bool = False,
    ctx_checkpoints_given: bool = False,
) -> MemoryFit | None:
    """The configuration `settings` (its method set) judged against `budget` (bytes, where it came
    from) and llama.cpp's cache-type rule; None when there is nothing to judge (no budget, the
    default cache types).

    Args:
        target: the target's file.
        draft: the draft's file; None for a method without one.
        settings: the configuration, with the caps asked for (or llama.cpp's defaults).
        rules: the rule set the estimate follows.
        budget: (bytes, source), or None.
        target_sha256: the target's SHA-256 (the record's key).
        draft_sha256: the draft's, or None.
        cache_ram_given: --cache-ram was given: a fit keeps it, a lower one is only suggested.
        ctx_checkpoints_given: likewise --ctx-checkpoints.
    """
    est = estimate(target, draft, settings, rules)
    checks = cache_type_checks(target, draft, settings, rules)
    if budget is None and not checks:
        return None
    refused = any(c.severity == "error" for c in checks)  # llama.cpp refuses the cache types
    asked: Caps = (settings.cache_ram_mib, settings.ctx_checkpoints)
    out = MemoryFit(
        target_sha256=target_sha256,
        draft_sha256=draft_sha256,
        method=settings.method or "",
        config=config_key(settings),
        settings=settings,
        fits=not refused,
        resident_bytes=resident_bytes(est),
        needed_bytes=est.total_bytes,
        cache_ram_mib=None if refused else asked[0],
        ctx_checkpoints=None if refused else asked[1],
        checks=checks,
    )
    if budget is None:
        return out
    limit, source = budget
    out.budget_bytes, out.budget_source = limit, source
    if settings.gpu_layers:  # the GPU's part is judged: the caps are host memory
        out.on, out.needed_bytes = "GPU", est.vram_bytes
        out.fits = out.fits and _within(est.vram_bytes, limit)
        out.checks.append(budget_check(est, limit, source))
        if not out.fits:
            out.cache_ram_mib = out.ctx_checkpoints = None
        return out

    def total(caps: Caps) -> int:
        return estimate(target, draft, _with_caps(settings, caps), rules).total_bytes

    def choose(cache_ram: int | None, checkpoints: int | None) -> Caps | None:
        """The largest caps that fit with these fixed (None: free, up to what was asked)."""
        floor = cache_ram if cache_ram is not None else 0
        if checkpoints is None:
            checkpoints = _largest(0, asked[1], lambda k: _within(total((floor, k)), limit))
        elif not _within(total((floor, checkpoints)), limit):
            return None
        if checkpoints is None:
            return None
        if cache_ram is None:
            # --cache-ram -1 (no size limit) lowered: the largest size tried is llama.cpp's default
            ceiling = asked[0] if asked[0] >= 0 else DEFAULT_CACHE_RAM_MIB
            cache_ram = _largest(0, ceiling, lambda c: _within(total((c, checkpoints)), limit))
        return None if cache_ram is None else (cache_ram, checkpoints)

    chosen: Caps | None = asked if _within(est.total_bytes, limit) else None
    if chosen is None:
        chosen = choose(asked[0] if cache_ram_given else None, asked[1] if ctx_checkpoints_given else None)
    out.fits = out.fits and chosen is not None
    caps = chosen or choose(None, None)  # what would fit, to name when the caps given do not
    out.cache_ram_mib, out.ctx_checkpoints = caps if caps is not None and not refused else (None, None)
    out.lowered = out.fits and chosen != asked
    # judged at the caps it fits with; when none fit, at the given caps and 0 for the others
    judged = chosen or (asked[0] if cache_ram_given else 0, asked[1] if ctx_checkpoints_given else 0)
    final = estimate(target, draft, _with_caps(settings, judged), rules)
    out.needed_bytes = final.total_bytes
    out.checks.append(budget_check(final, limit, source))
    return out


def _with_caps(settings: ServeSettings, caps: Caps) -> ServeSettings:
    return replace(settings, cache_ram_mib=caps[0], ctx_checkpoints=caps[1])
