"""A run's outputs against its baseline's, and the token-id replay that lets them be compared by id.

Greedy speculative output must equal the baseline's token for token. A streamed reply does not
always name every token id (text held back across tokens, a chat stream that names none), so
after a slot's measurements a row that lacks ids asks the same server for the same request again,
not streamed, with `return_tokens` (`complete_ids`). The replay's ids are kept only when it is
provably the streamed generation again (`replay_problem`: same token count, same text, the
stream's id at every position it showed one); otherwise the row is compared by text alone. The
comparison itself (`compare_with_baseline`, which baseline row: `baseline_row`) is made when a row
is recorded and again whenever a replay completes either side. The mismatch triage (triage.py)
uses the same pieces to explain a difference that remains.
"""

from __future__ import annotations

from specreg.benchmark.run.client import LlamaClient
from specreg.benchmark.run.context import RunContext, row_key
from specreg.benchmark.run.reply import Completion
from specreg.benchmark.store.condition_summary import compare_outputs
from specreg.benchmark.store.sampling import arm
from specreg.errors import ServerError
from specreg.schemas.bench import ConditionRun
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import RequestRow
from specreg.schemas.sampling import Sampler


def compare_with_baseline(ctx: RunContext, conc: tuple[int, Sampler], row: RequestRow) -> bool:
    """Compare a speculative row with its baseline; whether anything about it changed."""
    base = baseline_row(ctx, conc, row)
    if base is None:
        return False
    c = compare_outputs(base, row)
    before = (row.matches_baseline, row.first_diff, row.diff_unit, row.first_diff_char, row.diff_context)
    row.matches_baseline, row.first_diff, row.diff_unit = c.equal, c.first, c.unit  # type: ignore[assignment]
    row.first_diff_char, row.diff_context = c.first_char, c.context
    return before != (row.matches_baseline, row.first_diff, row.diff_unit, row.first_diff_char, row.diff_context)


def complete_ids(ctx: RunContext, cond: ConditionRun, client: LlamaClient, rows: list[RequestRow]) -> None:
    """Give every row of this slot whose stream left out ids (text held back across tokens) the
    full list: the same request again, not streamed, with `return_tokens`; a greedy speculative
    chat row (its stream names no ids) too when the triage may need them (`_chat_needs_ids`),
    through the template as the server applies it (`/apply-template`). Run after the slot's
    measurements and counters, so it changes neither. Its ids are kept only when its text and
    token count are the stream's and it agrees with every id the stream carried; else the row
    stays "incomplete" and is compared by text alone. Then comparisons that involve these rows
    are made again (a baseline row completed here changes the rows compared with it)."""
    o = ctx.opts
    done: list[RequestRow] = []
    for row in rows:
        item = ctx.items[row.prompt_id]
        if not row.ok or ctx.expired():
            continue
        if row.ids_source == "incomplete" and item.prompt is not None:
            prompt = item.prompt
        elif row.ids_source == "none" and _chat_needs_ids(ctx, cond, row):
            try:  # the template applied by the server itself, never rendered here
                prompt = client.apply_template([m.model_dump() for m in item.messages or []])
            except ServerError as exc:
                ctx.observer.note(f"{cond.spec.name} {row.prompt_id}#{row.repeat}: no token ids ({exc.message})")
                continue
        else:
            continue
        seed = row.seed if row.seed is not None else o.seed
        n = o.max_tokens or item.max_tokens
        replay_key = (cond.idx, prompt, n, None if cond.spec.sampler.greedy else seed)
        # the same greedy request on the same condition's server answers the same: a replay of an
        # earlier round serves again when it passes this row's checks (else every round of a
        # condition would replay the same rows again)
        rec = ctx.replays.get(replay_key)
        if rec is None or replay_problem(row, ctx.positions.get(row_key(row), []), rec) is not None:
            rec = client.record_ids(
                prompt,
                max_tokens=n,
                seed=seed,
                sampling=cond.spec.sampler.request_fields(),
                timeout_s=min(o.request_timeout_s, max(0.5, ctx.remaining())),
            )
            ctx.replays[replay_key] = rec
        problem = replay_problem(row, ctx.positions.get(row_key(row), []), rec)
        if problem is None:
            row.output_ids, row.ids_source = rec.token_ids, "replay"
            done.append(row)
        else:
            ctx.observer.note(
                f"{cond.spec.name} {row.prompt_id}#{row.repeat}: the stream left token ids out and the "
                f"replay that asks for every id was not used ({problem}); compared by text only"
            )
    conc = arm(cond.spec)
    changed = {row_key(r): r for r in done}
    if cond.spec.method == BASELINE:
        prompts = {r.prompt_id for r in done}
        for r in ctx.rows:
            mine = r.ok and r.matches_baseline is not None and r.prompt_id in prompts and _conc(ctx, r) == conc
            if mine and compare_with_baseline(ctx, conc, r):
                changed[row_key(r)] = r
    elif cond.spec.sampler.greedy:
        for r in done:
            compare_with_baseline(ctx, conc, r)
    for key, r in changed.items():
        ctx.store.update_request_output(ctx.row_ids[key], r)


def _chat_needs_ids(ctx: RunContext, cond: ConditionRun, row: RequestRow) -> bool:
    """A greedy speculative chat row needs its ids (for the mismatch triage) when its text differs
    from the baseline's, or when no baseline row of its prompt is measured yet; a baseline chat
    row gets its ids from the triage itself, only when some row differs from it."""
    if cond.spec.method == BASELINE or not cond.spec.sampler.greedy:
        return False
    base = baseline_row(ctx, arm(cond.spec), row)
    return base is None or base.output_text != row.output_text


def baseline_row(ctx: RunContext, conc: tuple[int, Sampler], row: RequestRow) -> RequestRow | None:
    """The baseline row a speculative row is compared with: the same prompt and repetition at the
    same arm; greedy output is deterministic, so any measured baseline repetition of the prompt
    stands in when that one is not there yet."""
    return ctx.baseline.get((conc, row.prompt_id, row.repeat)) or _any_baseline(ctx, conc, row.prompt_id)


def _conc(ctx: RunContext, row: RequestRow) -> tuple[int, Sampler]:
    return ctx.concurrency.get(row.condition_idx, (1, Sampler()))


def replay_problem(row: RequestRow, positions: list[int], rec: Completion) -> str | None:
    """Why the replay is not the streamed generation again (None: it is): it must have the same
    token count, the same text (a trailing incomplete UTF-8 sequence the stream never released
    shows as U+FFFD) and the stream's id at every position the stream showed one."""
    ids, stream = rec.token_ids, row.output_ids
    if not rec.ok:
        return rec.error or "no answer"
    if ids is None or not ids:
        return "the server returned no token ids (no return_tokens in this build?)"
    if rec.output_tokens != row.output_tokens or len(ids) != row.output_tokens:
        return f"{len(ids)} ids and {rec.output_tokens} tokens for the stream's {row.output_tokens}"
    if not same_text(rec.text, row.output_text or ""):
        return "its text differs from the stream's"
    if row.ids_source == "none":  # a chat stream names no ids: its text and token count are the check
        return None
    if stream is None or len(positions) != len(stream):
        return "the stream's ids have no positions"
    bad = next((p for p, t in zip(positions, stream, strict=True) if p >= len(ids) or ids[p] != t), None)
    return None if bad is None else f"its token {bad} differs from the stream's"


def same_text(replayed: str, measured: str) -> bool:
    """A replay's text is the measured one's (a trailing incomplete UTF-8 sequence the stream
    never released shows as U+FFFD in the replay)."""
    return replayed == measured or (replayed.startswith(measured) and set(replayed[len(measured) :]) <= {"\ufffd"})


def _any_baseline(ctx: RunContext, conc: tuple[int, Sampler], prompt_id: str) -> RequestRow | None:
    """A greedy baseline row of the prompt, at this concurrency if there is one (first measured
    first); never a sampled one, whose output depends on its seed."""
    rows = [(c != conc, b) for (c, p, _), b in ctx.baseline.items() if p == prompt_id and c[1].greedy]
    return min(rows, key=lambda cb: cb[0])[1] if rows else None
