"""One slot of a condition: start its server, warm up, measure its repetitions, stop the server.

A condition runs in one slot (blocked order: every repetition in one server) or one slot per
round (round order: a fresh server per repetition, conditions shuffled per round), and is judged
after its last slot: did speculation run. Warm-up requests repeat until two in a row agree
within the tolerance (at most `warmup`), are not counted, and are recorded.

Requests go through a thread pool (the condition's concurrency in flight, as many `-np` slots);
the main thread writes each row as it finishes, so Ctrl-C (KeyboardInterrupt arrives in the main
thread) leaves every finished row stored and the server is stopped in `finally`. After a slot's
requests and its counters, rows whose stream left token ids out get every id from a replay of
the same request (`equivalence/replay.complete_ids`), and their comparisons with the baseline are
made again.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.benchmark.plan.conditions import ServerOptions, server_args
from specreg.benchmark.run.client import LlamaClient
from specreg.benchmark.run.context import RunContext, row_key
from specreg.benchmark.run.reply import Completion
from specreg.benchmark.run.warmup import WARMUP_TOKENS, warm_after_one, warm_up
from specreg.benchmark.store.sampling import arm
from specreg.benchmark.workloads import expect as expect_mod
from specreg.benchmark.workloads.jsonl import content_sha256
from specreg.equivalence.replay import compare_with_baseline, complete_ids
from specreg.errors import ServerError, ServerStartError
from specreg.registry.db import now
from specreg.schemas.bench import ConditionRun, PromptInfo, WorkloadItem
from specreg.schemas.bench_settings import BenchSettings, duration_text
from specreg.schemas.methods import BASELINE
from specreg.schemas.request_row import IdsSource, RequestRow
from specreg.schemas.sampling import repetition_seed
from specreg.servers.launcher import ServerProcess, launch
from specreg.servers.load import LoadProbe, wait_for_quiet
from specreg.servers.memory import MemorySampler, higher_peak
from specreg.servers.memory_predict import predict_rss, served_requests
from specreg.servers.metrics import add_counters, parse_metrics, spec_counters, spec_only
from specreg.servers.serverlog import error_lines, head_text, last_lines, refusal_lines, speculation_lines, tail_text
from specreg.text import plural

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence


# a slot's requests look at the machine's load this often (LoadProbe.recent): a neighbour that
# arrives during a long slot is waited out between its requests
LOOK_EVERY_S = 20.0


def _fail(cond: ConditionRun, message: str, lines: list[str] | None = None) -> None:
    if cond.status == "running":
        cond.status, cond.failure, cond.failure_lines = "failed", message, list(lines or [])


def _log_name(cond: ConditionRun, round_no: int | None) -> str:
    name = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in cond.spec.name)
    return f"{cond.idx:02d}-{name}" + (f"-r{round_no}" if round_no is not None else "") + ".log"


def condition_args(ctx: RunContext, cond: ConditionRun) -> list[str]:
    """The server arguments of a condition in this run (every slot's, and the triage's restart)."""
    o = ctx.opts
    opts = ServerOptions(
        ctx_size=o.ctx_size,
        parallel=cond.spec.concurrency,
        threads=ctx.pinning.threads,
        gpu_layers=o.gpu_layers,
        seed=o.seed,
    )
    return server_args(cond.spec, ctx.target_path, opts)


def run_condition(
    ctx: RunContext,
    cond: ConditionRun,
    repeats: Sequence[int] | None = None,
    *,
    round_no: int | None = None,
    last: bool = True,
    prompts: int | None = None,
) -> None:
    """One server start of a condition, measuring `repeats` (default: every repetition).

    After its `last` slot the condition is judged (ok / failed); a failure ends it at once.
    `prompts`: only the first this many of `partial_order(workload)` (a `--budget` slot that
    the budget left has room for part of; default: every prompt). Never loses stored rows.
    """
    o = ctx.opts
    waited = wait_for_quiet_machine(ctx)  # before the slot: its time is no part of the slot's
    if ctx.budget_over():
        return  # the budget ended while it waited: the runner says what was left unmeasured
    reps = list(range(o.repeat)) if repeats is None else list(repeats)
    log_path = ctx.run_dir / _log_name(cond, round_no)
    if cond.status == "pending":
        cond.status, cond.started_at = "running", now()
    cond.log_path = str(log_path)
    args = condition_args(ctx, cond)
    cond.argv = ctx.cmd.argv(args)
    ctx.store.save_condition(ctx.run_id, cond)
    ctx.observer.condition_started(cond)
    server: ServerProcess | None = None
    t_slot = time.monotonic()
    ctx.marks = {"start": t_slot, "waited": 0.0}
    slots_before = len(cond.load)
    try:

        def spawned(pid: int, started: float) -> None:
            cond.server_pid = pid
            ctx.store.save_condition(ctx.run_id, cond, server_started=started)

        # the slot's load is watched from the server's start: its requests alone can be 40 ms
        probe = LoadProbe(
            lambda: server.pids() if server is not None else [], round_no or 0, reps, o.busy_share
        ).start()
        try:
            server = launch(
                ctx.cmd,
                args,
                log_path,
                start_timeout_s=max(1.0, min(o.start_timeout_s, ctx.remaining())),
                on_spawn=spawned,
                cpus=set(ctx.pinning.cpus) if ctx.pinning.cpus else None,
            )
        except ServerStartError as exc:
            if not ctx.budget_over():  # a start the budget's deadline cut short is no failure
                _fail(cond, exc.message, exc.lines)
            return
        cond.argv, cond.port, cond.server_pid = server.argv, server.port, server.pid
        ctx.store.save_condition(ctx.run_id, cond, server_started=server.create_time)
        conc = cond.spec.concurrency
        with LlamaClient(server.base_url, timeout_s=o.request_timeout_s, max_connections=conc + 2) as client:
            _measure(ctx, cond, server, client, reps, round_no or 0, probe, prompts)
    except ServerError as exc:
        if server is not None and not server.alive():
            server.settle_log()
            _fail(cond, f"server exited (code {server.proc.returncode}): {exc.message}", _errors(log_path))
        else:
            _fail(cond, exc.message)
    except Exception as exc:  # whatever broke, this condition failed; the run and the other pairs go on
        if os.environ.get("SPECREG_DEBUG") == "1":
            raise
        _fail(cond, f"the condition crashed: {type(exc).__name__}: {str(exc)[:300]}")
    except KeyboardInterrupt:
        if cond.status == "running":
            cond.status, cond.failure = "cancelled", "interrupted"
        raise
    finally:
        if server is not None:
            server.stop()
        t_end = time.monotonic()
        inside = ctx.marks.get("waited", 0.0)  # waited between its requests: not what the slot costs
        ctx.slot_s.setdefault(cond.idx, []).append(t_end - t_slot - inside)
        ctx.replay_s.setdefault(cond.idx, []).append(ctx.marks.get("replay_s", 0.0))
        if len(cond.load) > slots_before:  # the slot measured: where its time went
            parts = slot_times(ctx.marks, t_end)
            if "requests_s" in parts:
                parts["requests_s"] = round(parts["requests_s"] - inside, 3)
            extra = {"phase": ctx.phase, "waited_s": round(waited + inside, 3) if waited + inside else None,
                     "replay_s": round(ctx.marks["replay_s"], 3) if "replay_s" in ctx.marks else None}  # fmt: skip
            cond.load[-1] = cond.load[-1].model_copy(update=parts | extra)
            ctx.last_load = cond.load[-1]
        cond.log_tail = tail_text(log_path, 40)
        if cond.status == "running":
            refused = refusal_lines(head_text(log_path))
            if refused:
                _fail(cond, "speculation did not run: the server refused it (see log lines)", refused)
            elif last:
                _judge(cond, log_path, [r for r in ctx.rows if r.condition_idx == cond.idx])
        if cond.status != "running":
            cond.finished_at = now()
        ctx.store.save_condition(ctx.run_id, cond)
        ctx.observer.condition_done(cond)


def slot_times(marks: dict[str, float], end: float) -> dict[str, float]:
    """A slot's parts in seconds (RoundLoad): the server's start (with the prompts' token counts
    on a run's first slot), warm-up, requests and what came after them, from when each began;
    each part ends where the next one that began starts, the last at `end`."""
    parts = [(k, f) for k, f in (("start", "start_s"), ("warm", "warmup_s"), ("requests", "requests_s"),
                                 ("after", "after_s")) if k in marks]  # fmt: skip
    ends = [marks[k] for k, _ in parts[1:]] + [end]
    return {f: round(e - marks[k], 3) for (k, f), e in zip(parts, ends, strict=True)}


def wait_for_quiet_machine(ctx: RunContext, pids: Callable[[], list[int]] = list) -> float:
    """Before a slot (or between its requests): while other processes take `--busy-share` of the
    cores, wait, telling how busy the machine is, until it is quieter or the run has waited its
    `--busy-wait` in all (or its time is up); returns the seconds waited. A slot measured beside
    a neighbour is set aside and measured again (benchmark/store/contention.py), so waiting first
    is the cheaper way to a kept round. The machine is looked at only when the run has not seen
    it yet or last saw it busy: a quiet run pays no look between its slots."""
    o = ctx.opts
    allowed = wait_allowance(o)
    left = min(allowed - ctx.waited_s, ctx.remaining())
    if o.busy_share <= 0 or left <= 0 or (ctx.last_load is not None and ctx.last_load.busy is None):
        return 0.0
    waited, ctx.last_load = wait_for_quiet(o.busy_share, left, ctx.observer.note, pids=pids)
    ctx.waited_s += waited
    if ctx.last_load.busy is not None and ctx.waited_s >= allowed:
        limit = f"--busy-wait {duration_text(o.busy_wait_s)}" + (
            f", a quarter of --budget {duration_text(o.budget_s)}" if allowed < o.busy_wait_s and o.budget_s else ""
        )
        ctx.observer.note(
            f"waited {ctx.waited_s:.0f} s in all for a quieter machine ({limit}); "
            f"measuring anyway ({ctx.last_load.busy}): what is measured busy is set aside"
        )
    return waited


def wait_allowance(o: BenchSettings) -> float:
    """How long a run may wait for a quieter machine in all: `--busy-wait`, and under a budget at
    most a quarter of it (a wait that spent the budget would leave nothing measured)."""
    return o.busy_wait_s if o.budget_s is None else min(o.busy_wait_s, o.budget_s / 4)


def finish_condition(ctx: RunContext, cond: ConditionRun) -> None:
    """Judge a condition whose slots all ran with `last=False` (a run measured until decided,
    whose last slot was not known in advance), on every row it measured and its last log."""
    if cond.status != "running":
        return
    _judge(cond, Path(cond.log_path or ""), [r for r in ctx.rows if r.condition_idx == cond.idx])
    if cond.status != "running":
        cond.finished_at = now()
    ctx.store.save_condition(ctx.run_id, cond)


def _measure(
    ctx: RunContext,
    cond: ConditionRun,
    server: ServerProcess,
    client: LlamaClient,
    reps: list[int],
    round_no: int,
    probe: LoadProbe,
    prompts: int | None = None,
) -> None:
    o = ctx.opts
    if not ctx.prompts_stored:
        ctx.observer.slot_step(cond, "counting the prompts' tokens")
        infos = [_prompt_info(client, it, o.max_tokens) for it in ctx.workload.items]
        ctx.store.add_prompts(ctx.run_id, infos)
        ctx.input_tokens = {p.id: p.input_tokens for p in infos}
        ctx.prompts_stored = True
    warmed: list[tuple[str, int, int | None]] = []
    ctx.marks["warm"] = time.monotonic()
    if o.warmup:
        ctx.observer.slot_step(cond, "warming up")
        most = 1 if warm_after_one(cond.warmup) else None  # warm after one request before: one is enough
        cond.warmup.append(warm_up(client, ctx.workload.items[0], o, round_no, ctx.remaining, most))
        first = ctx.workload.items[0]
        n_warm = min(WARMUP_TOKENS, o.max_tokens or first.max_tokens)
        warmed = [(first.id, n_warm, d) for d in cond.warmup[-1].drafted]  # one per warm-up request
    if not server.alive():
        server.settle_log()
        _fail(cond, f"server exited (code {server.proc.returncode}) during warm-up", _errors(server.log_path))
        return
    before = parse_metrics(client.metrics_text())
    sampler = MemorySampler(server.pids, ctx.gpu)
    first_row = len(ctx.rows)
    ctx.marks["requests"] = time.monotonic()
    ctx.observer.slot_step(cond, "measuring")
    with sampler:
        _requests(ctx, cond, server, client, reps, prompts, probe)
    ctx.marks["after"] = time.monotonic()
    cond.load.append(probe.stop())  # was the machine busy from the server's start to here
    old = cond.memory.predicted_rss_bytes if cond.memory else None
    cond.memory = higher_peak(cond.memory, sampler.result())
    mine = [r for r in ctx.rows[first_row:] if r.condition_idx == cond.idx]
    chat = {it.id for it in ctx.workload.items if it.messages is not None}
    predicted = predict_rss(
        cond.spec, ctx.target_path, ctx_size=o.ctx_size, slots=cond.spec.concurrency, gpu_layers=o.gpu_layers,
        items=ctx.workload.items, max_tokens=o.max_tokens,
        served=served_requests(mine, ctx.input_tokens, chat, warmed),
    )  # fmt: skip
    # a condition started more than once (rounds) keeps the higher peak, and the higher prediction
    known = [x for x in (old, predicted) if x is not None]
    cond.memory.predicted_rss_bytes = max(known) if known else None
    if server.alive() and cond.status == "running":
        after = parse_metrics(client.metrics_text())
        cond.metrics_before, cond.metrics_after = spec_only(before), spec_only(after)
        cond.counters = add_counters(cond.counters, spec_counters(before, after))
    if server.alive():  # after the counters: the replays are not part of the measurement
        ctx.observer.slot_step(cond, "replaying for token ids")
        t_replay = time.monotonic()
        complete_ids(ctx, cond, client, [r for r in ctx.rows[first_row:] if r.condition_idx == cond.idx])
        ctx.marks["replay_s"] = time.monotonic() - t_replay


def partial_order(items: Sequence[WorkloadItem]) -> list[WorkloadItem]:
    """The prompts in the order a part of a slot takes them: one of each stratum in turn (the
    workload's order within a stratum), so a slot cut short by the budget still spans the strata."""
    by: dict[str, list[WorkloadItem]] = {}
    for it in items:
        by.setdefault(it.stratum, []).append(it)
    out: list[WorkloadItem] = []
    for i in range(max((len(v) for v in by.values()), default=0)):
        out += [v[i] for v in by.values() if i < len(v)]
    return out


def _requests(
    ctx: RunContext,
    cond: ConditionRun,
    server: ServerProcess,
    client: LlamaClient,
    reps: list[int],
    prompts: int | None = None,
    probe: LoadProbe | None = None,
) -> None:
    """The slot's requests, `concurrency` in flight, each row written as it finishes. Every
    `LOOK_EVERY_S` the load since the last look is read: beside a neighbour the slot lets its
    requests in flight finish and waits for a quieter machine (not counted in its load) before
    it sends more. A request the budget's deadline cut is no row and no failure."""
    o = ctx.opts
    conc = cond.spec.concurrency
    items = [it for it in ctx.workload.items if ctx.strata is None or it.stratum in ctx.strata]
    items = items if prompts is None else partial_order(items)[: max(0, prompts)]
    # a request already stored (a continued run's slot cut short by a fault) is not measured again
    tasks = [(rep, it) for rep in reps for it in items if (cond.idx, it.id, rep) not in ctx.row_ids]
    pool = ThreadPoolExecutor(max_workers=conc, thread_name_prefix="specreg-req")
    pending: set[Future[RequestRow | None]] = set()
    it = iter(tasks)
    skipped = 0
    looked = time.monotonic()

    def take(done: Iterable[Future[RequestRow | None]]) -> bool:
        """Write the finished rows; False when the server died under them (the condition failed)."""
        nonlocal skipped
        for fut in done:
            row = fut.result()
            if row is None:
                skipped += 1
                continue
            _record(ctx, cond, row)
            if not row.ok and _died(server, row):
                server.settle_log()
                n = sum(1 for r in ctx.rows if r.condition_idx == cond.idx)
                _fail(
                    cond,
                    f"server exited (code {server.proc.returncode}) during the run after "
                    f"{plural(n, 'request')}: {row.error}",
                    _errors(server.log_path),
                )
                return False
        return True

    try:
        while True:
            if probe is not None and o.busy_share > 0 and time.monotonic() - looked >= LOOK_EVERY_S:
                recent = probe.recent()
                if recent.busy is not None and ctx.waited_s < wait_allowance(o) and not ctx.expired():
                    if not take(as_completed(pending)):  # the requests in flight finish first
                        return
                    pending = set()
                    probe.pause()  # the wait is no part of the slot's load
                    ctx.last_load = recent
                    ctx.marks["waited"] += wait_for_quiet_machine(ctx, server.pids)
                    probe.resume()
                looked = time.monotonic()
            while len(pending) < conc:  # keep exactly `concurrency` in flight
                nxt = next(it, None)
                if nxt is None:
                    break
                pending.add(pool.submit(_one, ctx, cond, client, nxt[1], nxt[0]))
            if not pending:
                break
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            if not take(done):
                return
        if skipped and not ctx.budget_over():  # the budget's cut is no failure: what ran is judged
            _fail(cond, f"run deadline of {o.run_timeout_s:g}s exceeded; {plural(skipped, 'request')} not run")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


_CONNECTION_ERRORS = ("ConnectError", "RemoteProtocolError", "ReadError", "WriteError")


def _died(server: ServerProcess, row: RequestRow) -> bool:
    """Did the server die? A dropped connection gives a dying process a moment to be reaped."""
    if not server.alive():
        return True
    if (row.error or "").startswith(_CONNECTION_ERRORS):
        try:
            server.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return False
        return True
    return False


def _one(ctx: RunContext, cond: ConditionRun, client: LlamaClient, item: WorkloadItem, rep: int) -> RequestRow | None:
    o = ctx.opts
    if ctx.expired():
        return None
    started = now()
    seed = repetition_seed(o.seed, rep)
    timeout_s = min(o.request_timeout_s, max(0.5, ctx.remaining()))
    c = client.complete(
        item,
        max_tokens=o.max_tokens or item.max_tokens,
        seed=seed,
        sampling=cond.spec.sampler.request_fields(),
        timeout_s=timeout_s,
    )
    if c.timed_out and timeout_s < o.request_timeout_s and ctx.budget_over():
        ctx.cut += 1
        return None  # in flight when the budget ended: cut, neither a row nor a failed request
    row = _row(cond, item, rep, started, c)
    sp = cond.spec
    row.seed, row.temperature, row.top_p, row.top_k, row.min_p = seed, sp.temperature, sp.top_p, sp.top_k, sp.min_p
    ctx.positions[row_key(row)] = c.id_positions
    return row


def _row(cond: ConditionRun, item: WorkloadItem, rep: int, started: datetime, c: Completion) -> RequestRow:
    t = c.timings

    def num(key: str) -> float | None:
        v = t.get(key)
        return float(v) if isinstance(v, (int, float)) else None

    def whole(key: str) -> int | None:
        v = t.get(key)
        return int(v) if isinstance(v, (int, float)) else None

    return RequestRow(
        condition_idx=cond.idx,
        condition=cond.spec.name,
        prompt_id=item.id,
        stratum=item.stratum,
        repeat=rep,
        started_at=started,
        ok=c.ok,
        error=c.error,
        timed_out=c.timed_out,
        ttft_ms=c.ttft_ms,
        total_ms=c.total_ms,
        tpot_ms=c.tpot_ms,
        output_tokens=c.output_tokens,
        finish_reason=c.finish_reason,
        prompt_n=whole("prompt_n"),
        prompt_ms=num("prompt_ms"),
        predicted_ms=num("predicted_ms"),
        draft_n=whole("draft_n"),
        draft_n_accepted=whole("draft_n_accepted"),
        cache_n=whole("cache_n"),
        output_text=c.text if c.ok else (c.text or None),
        output_ids=c.token_ids if c.ok else None,
        ids_source=_ids_source(c) if c.ok else None,
        stream_ids_n=len(c.token_ids) if c.ok and c.token_ids is not None else None,
        arrivals=_from_first_text(c) if c.ok else None,
        server_tpot_ms=num("predicted_per_token_ms"),
        output_sha256=hashlib.sha256(c.text.encode()).hexdigest() if c.ok else None,
    )


def _ids_source(c: Completion) -> IdsSource:
    if c.token_ids is None:
        return "none"
    return "stream" if c.ids_complete else "incomplete"  # "incomplete" until a replay completes it


def _from_first_text(c: Completion) -> list[tuple[float, int]] | None:
    first = c.first_text
    return [(round(t, 4), k) for t, k in c.arrivals[first:]] if first is not None else None


def _record(ctx: RunContext, cond: ConditionRun, row: RequestRow) -> None:
    """Equivalence and expect checks, then one short transaction for the row."""
    item = ctx.items[row.prompt_id]
    if row.ok and item.expect is not None:
        row.expect_ok, row.expect_detail = expect_mod.check(item.expect, row.output_text or "")
    conc = ctx.concurrency[cond.idx] = arm(cond.spec)
    if cond.spec.method == BASELINE:
        if row.ok:
            ctx.baseline[(conc, row.prompt_id, row.repeat)] = row
    elif row.ok and cond.spec.sampler.greedy:  # sampled output is judged by benchmark/store/sampling.py
        compare_with_baseline(ctx, conc, row)
    ctx.row_ids[row_key(row)] = ctx.store.add_request(ctx.run_id, row)
    ctx.rows.append(row)
    ctx.observer.request_done(cond, row)


def _prompt_info(client: LlamaClient, item: WorkloadItem, override: int | None) -> PromptInfo:
    return PromptInfo(
        id=item.id,
        stratum=item.stratum,
        kind="prompt" if item.prompt is not None else "messages",
        content_sha256=content_sha256(item),
        input_tokens=client.input_tokens(item),
        max_tokens=override or item.max_tokens,
        expect=item.expect,
    )


def _errors(path: Path) -> list[str]:
    tail = tail_text(path, 30)
    return error_lines(tail) or last_lines(tail, 8)


def _judge(cond: ConditionRun, log_path: Path, rows: list[RequestRow]) -> None:
    """ok, or failed when speculation provably did not run (0 drafted) or nothing succeeded.

    A refusal in the log has already failed the condition at the end of its slot."""
    ok_rows = [r for r in rows if r.ok]
    if not rows:  # nothing measured is never a result
        _fail(cond, "no request was run")
        return
    if not ok_rows:
        _fail(cond, f"no request succeeded (first error: {rows[0].error})")
        return
    if cond.spec.method != BASELINE:
        drafted = cond.counters.drafted if cond.counters else sum(r.draft_n or 0 for r in ok_rows)
        if not drafted:
            spec_lines = speculation_lines(head_text(log_path))
            _fail(cond, f"speculation did not run: 0 tokens drafted over {plural(len(ok_rows), 'request')}", spec_lines)
            return
    cond.status = "ok"
