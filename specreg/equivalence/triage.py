"""Mismatch triage: why a greedy output differs from the baseline's (schemas/triage.py).

After a run's conditions, every greedy row whose output differs from its baseline row is judged
on the baseline's own distribution at the first differing token. The baseline's server is started
once more (the very command it was measured with) and each differing prompt is asked again,
not streamed, with `return_tokens` and `n_probs` (pre-sampling log-probabilities: the softmax
over every logit at each generated position, llama.cpp `populate_token_probs`). The replay is
used only when its text is the measured baseline's: then it is the same token-by-token
computation, and its ids complete a baseline row that had none (a chat row: the template is
applied by the server, `/apply-template`, never rendered here). Rows whose own ids are not on
record, and rows past the run's deadline, stay untriaged or unclassified, which fails
equivalence like any mismatch; only a listed near tie can be reported instead of failed.

It is not a measurement: it runs after every slot's timings and counters.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.benchmark.run.client import LlamaClient
from specreg.benchmark.run.context import RunContext
from specreg.benchmark.run.execute import condition_args
from specreg.benchmark.run.reply import Completion, TokenProbs
from specreg.benchmark.store.sampling import arm
from specreg.equivalence.replay import baseline_row, compare_with_baseline, same_text
from specreg.errors import ServerError, ServerStartError
from specreg.schemas.bench import ConditionRun
from specreg.schemas.request_row import RequestRow
from specreg.schemas.triage import TOP_CANDIDATES, TopToken, Triage
from specreg.servers.launcher import ServerProcess, launch
from specreg.text import plural

if TYPE_CHECKING:
    from collections.abc import Iterable

    from specreg.schemas.sampling import Sampler


@dataclass
class _Job:
    """One baseline row and the mismatched rows compared with it."""

    base: RequestRow
    rows: list[RequestRow]


def mismatched(ctx: RunContext) -> list[RequestRow]:
    """The greedy rows whose output differs from their baseline and that are not triaged yet."""
    return [r for r in ctx.rows if r.ok and r.matches_baseline is False and r.triage is None]


def triage_run(ctx: RunContext, conds: list[ConditionRun]) -> None:
    """Triage every mismatched row of the run; a baseline server that cannot be started again, or a
    run past its deadline, leaves the rows unclassified with the reason (never a crash)."""
    rows = mismatched(ctx)
    if not rows:
        return
    by_idx = {c.idx: c for c in conds}
    jobs: dict[int, dict[tuple[str, int], _Job]] = {}  # baseline condition idx -> its rows' jobs
    for r in rows:
        base = baseline_row(ctx, ctx.concurrency.get(r.condition_idx) or arm(by_idx[r.condition_idx].spec), r)
        if base is None:
            continue
        job = jobs.setdefault(base.condition_idx, {}).setdefault((base.prompt_id, base.repeat), _Job(base, []))
        job.rows.append(r)
    for idx, group in jobs.items():
        base_cond = by_idx[idx]
        n = sum(len(j.rows) for j in group.values())
        if ctx.expired():
            _leave(ctx, group.values(), "not triaged: the run's deadline had passed")
            continue
        ctx.observer.note(
            f"triage: {plural(n, 'row')} differ from {base_cond.spec.name}; asking it for its top candidates "
            f"at the first differing token ({plural(len(group), 'prompt')})"
        )
        _triage_with(ctx, base_cond, list(group.values()))


def _leave(ctx: RunContext, jobs: Iterable[_Job], why: str) -> None:
    for job in jobs:
        for r in job.rows:
            _store(ctx, r, Triage(note=why))


def _triage_with(ctx: RunContext, base_cond: ConditionRun, jobs: list[_Job]) -> None:
    """Start the baseline's server again and triage each job's rows; stop it, whatever happens."""
    log = ctx.run_dir / f"triage-{base_cond.idx:02d}.log"
    server: ServerProcess | None = None
    try:
        server = launch(
            ctx.cmd,
            condition_args(ctx, base_cond),
            log,
            start_timeout_s=max(1.0, min(ctx.opts.start_timeout_s, ctx.remaining())),
        )
        with LlamaClient(server.base_url, timeout_s=ctx.opts.request_timeout_s) as client:
            for job in jobs:
                if ctx.expired():
                    _leave(ctx, [job], "not triaged: the run's deadline had passed")
                    continue
                _triage_job(ctx, base_cond, client, job)
    except ServerStartError as exc:
        _leave(ctx, jobs, f"not triaged: the baseline server did not start again ({exc.message})")
    except ServerError as exc:
        _leave(ctx, [j for j in jobs if any(r.triage is None for r in j.rows)], f"not triaged: {exc.message}")
    finally:
        if server is not None:
            server.stop()


def _triage_job(ctx: RunContext, base_cond: ConditionRun, client: LlamaClient, job: _Job) -> None:
    base = job.base
    item = ctx.items[base.prompt_id]
    o = ctx.opts
    if item.prompt is not None:
        prompt = item.prompt
    else:  # the server applies the template: the prompt its chat endpoint generated from
        prompt = client.apply_template([m.model_dump() for m in item.messages or []])
    rec = client.record_ids(
        prompt,
        max_tokens=o.max_tokens or item.max_tokens,
        seed=base.seed if base.seed is not None else o.seed,
        sampling=base_cond.spec.sampler.request_fields(),
        timeout_s=min(o.request_timeout_s, max(0.5, ctx.remaining())),
        n_probs=TOP_CANDIDATES,
    )
    problem = _replay_problem(base, rec)
    if problem is not None:
        _leave(ctx, [job], f"not triaged: the baseline's replay {problem}")
        return
    if not base.ids_complete:  # a chat baseline (or ids the stream left out): the replay's are its ids
        base.output_ids, base.ids_source = rec.token_ids, "replay"
        _store(ctx, base, base.triage)
        for r in ctx.rows:  # compared with this baseline row again, now by ids where both have them
            if r.prompt_id != base.prompt_id or r.matches_baseline is None:
                continue
            conc: tuple[int, Sampler] | None = ctx.concurrency.get(r.condition_idx)
            if conc is not None and baseline_row(ctx, conc, r) is base and compare_with_baseline(ctx, conc, r):
                _store(ctx, r, r.triage)
    names = _names(client, rec, job.rows)
    probs = aligned(rec.token_ids or [], rec.probs)
    for r in job.rows:
        _store(ctx, r, judge(base, r, probs, names) if r.matches_baseline is False else None)


def _replay_problem(base: RequestRow, rec: Completion) -> str | None:
    if not rec.ok:
        return f"failed ({rec.error or 'no answer'})"
    if not same_text(rec.text, base.output_text or ""):
        return "differs from its measured output (a baseline that is not deterministic)"
    if not rec.token_ids or not rec.probs:
        return "has no token probabilities (no n_probs in this build?)"
    if base.ids_complete and base.output_ids != rec.token_ids:
        return "has other token ids than its measured output"
    return None


def aligned(ids: list[int], probs: list[TokenProbs]) -> dict[int, TokenProbs]:
    """Each probability entry at its token position. The server records one only for a token
    after which the text is whole UTF-8 (`process_token` -> `add_token`, as a stream's ids), so
    the entries are a subsequence of the ids: matched left to right, each to the first position
    with its id. A token held back inside a UTF-8 sequence has no entry."""
    out: dict[int, TokenProbs] = {}
    i = 0
    for p in probs:
        while i < len(ids) and ids[i] != p.id:
            i += 1
        if i == len(ids):
            return {}  # not a subsequence: nothing can be placed
        out[i] = p
        i += 1
    return out


def judge(base: RequestRow, row: RequestRow, probs: dict[int, TokenProbs], names: dict[int, str]) -> Triage:
    """The triage of one mismatched row against the baseline's replayed probabilities (`probs[i]`:
    the baseline's distribution at its generated token i, `aligned`)."""
    if row.diff_unit != "token" or row.first_diff is None:
        return Triage(note="this output's token ids are not on record (compared by text only)")
    d = row.first_diff
    ids, mine = base.output_ids or [], row.output_ids or []
    if d >= len(ids):
        return Triage(position=d, note=f"the baseline's output ends at token {d}, this one goes on")
    at = probs.get(d)
    if at is None:
        return Triage(
            position=d, note=f"the baseline's server gave no probabilities at token {d} (inside a UTF-8 sequence)"
        )
    top = [TopToken(id=i, text=t, logprob=lp) for i, t, lp in at.top]
    listed = {t.id: t for t in top}
    base_tok = listed.get(ids[d])
    base_lp = base_tok.logprob if base_tok else at.logprob
    if d >= len(mine):
        return Triage(
            position=d, base_id=ids[d], base_text=names.get(ids[d]), base_logprob=base_lp, top=top,
            note=f"this output ends at token {d} (stopped), the baseline's goes on",
        )  # fmt: skip
    row_tok = listed.get(mine[d])
    return Triage(
        position=d,
        base_id=ids[d],
        base_text=names.get(ids[d]),
        base_logprob=base_lp,
        row_id=mine[d],
        row_text=names.get(mine[d]),
        row_logprob=row_tok.logprob if row_tok else None,
        floor=min((t.logprob for t in top), default=None),
        top=top,
    )


def _names(client: LlamaClient, rec: Completion, rows: list[RequestRow]) -> dict[int, str]:
    """Each token's text as the baseline's server spells it: the listed candidates' own, and the
    rest (an unlisted token a row chose) by /detokenize."""
    names = {i: t for p in rec.probs for i, t, _ in p.top}
    wanted = {t for r in rows if (t := _token_at(r)) is not None} - names.keys()
    for tid in sorted(wanted):
        with contextlib.suppress(ServerError):  # else shown by id alone
            names[tid] = client.detokenize([tid])
    return names


def _token_at(r: RequestRow) -> int | None:
    """The row's own token at its first difference (None: not on record)."""
    ids, d = r.output_ids or [], r.first_diff
    return ids[d] if r.diff_unit == "token" and d is not None and d < len(ids) else None


def _store(ctx: RunContext, row: RequestRow, triage: Triage | None) -> None:
    row.triage = triage
    key = (row.condition_idx, row.prompt_id, row.repeat)
    if key in ctx.row_ids:
        ctx.store.update_request_output(ctx.row_ids[key], row)
