"""`specreg drafts TARGET`: every draft (and self-drafting method) for a target, judged and ranked.

The question users bring: "I serve this target; which draft should I use?". The candidates come
from sources/candidates.py (registry, HF cache, --dir folders, the hub by range reads); each is
judged by `validators.check_pair` - the very checks `check pair` runs - for the method its
architecture serves (draft-simple; EAGLE-3 / DFlash heads, whose recorded target the checks
compare), under the rule set of the server that will run it; the target alone is judged for MTP
(if it has next-n heads) and the n-gram methods. Admitted rows are ranked by the speed-up
audit/draft_prediction.py predicts, with the licence as the policy's licence gate sees it.

The prediction is priced by machine probes (benchmark/run/machine_probe.py) when the target is
on this machine: the target and the `PROBE_LIMIT` best local drafts by the hardware-blind
ranking are each started once (or read back from the registry, where a probe is kept by the
file's SHA-256 and the machine's key), since the hardware decides the sign of a speed-up and
the headers cannot tell it; the same best drafts by the probe-priced ranking are then run with
the target on a few prompts (benchmark/run/pair_probe.py), which measures their acceptance and
what the runtime adds. `--no-probe` keeps the hardware-blind ranking and says so.
Nothing else is recorded here but the target (as `check pair` records it); `--bench` records
what it measures (audit/draft_bench.py).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.audit.draft_prediction import Book, build_book, predict
from specreg.audit.gates import licence_gate
from specreg.benchmark.plan.eligibility import NOT_BENCHMARKABLE, VOCAB_ONLY_CODES
from specreg.errors import SpecregError, UsageError
from specreg.registry.artifacts import HEX
from specreg.registry.db import now
from specreg.schemas.drafts import DraftReport, DraftRow, MachineUse
from specreg.schemas.methods import DEFAULT_NGRAM_METHODS, MODEL_DRAFTED, SELF_METHODS, Method
from specreg.schemas.registry import ArtifactRecord, LicenceRecord, Provenance
from specreg.sources import candidates as cand

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.audit import Policy
    from specreg.schemas.checks import CheckResult
    from specreg.schemas.gguf import GGUFSummary
    from specreg.validators.ruleset import RuleSet

Progress = Callable[[str, int, int], None]  # (stage, done, total)
PROBE_LIMIT = 5  # drafts probed by one command (one server start each): the best by the blind ranking


@dataclass(frozen=True)
class Search:
    """Where to look and under which rules and policy."""

    rules: RuleSet
    rules_why: str
    policy: Policy
    policy_source: str
    dirs: tuple[Path, ...] = ()
    hub: bool = False
    limit: int = 20
    cache: bool = True
    probe: bool = True  # price the predictions with machine probes (local files only)
    server: str | None = None  # the llama-server the probes (and --bench) run


def resolve_target(reg: Registry, arg: str) -> tuple[ArtifactRecord, GGUFFile, str]:
    """TARGET as a path, pair id (its target), SHA-256 prefix, URL or ORG/REPO[:FILE] on the hub."""
    from specreg.sources.checking import open_artifact

    ref = arg
    if arg.isdigit() and not os.path.exists(arg) and (len(arg) < 6 or not HEX.fullmatch(arg)):
        ref = reg.get_pair(int(arg)).target_sha256
    elif (hub_ref := cand.hub_target_ref(arg)) is not None:
        ref = hub_ref
    rec, gf = open_artifact(reg, ref)
    return rec, gf, ref


def _first_error(checks: list[CheckResult]) -> CheckResult | None:
    return next((c for c in checks if c.severity == "error"), None)


def _licence(
    rec: ArtifactRecord | None, value: str | None, found: cand.Found | None, policy: Policy
) -> tuple[bool, str]:
    """The policy's licence gate on this one file (a record made up for files not registered)."""
    if rec is None:
        rec = ArtifactRecord(
            sha256="0" * 64, size=0, licence=LicenceRecord(effective=value, effective_source="gguf" if value else None),
            provenance=Provenance(repo=found.repo if found else None, revision=found.revision if found else None),
            registered_at=now(), updated_at=now(),
        )  # fmt: skip
    g = licence_gate([("draft", rec)], policy.licence)
    return g.passed, g.message


def _bytes_per_token(gf: GGUFFile) -> int:
    """Weights one decode of the draft reads: every tensor but the embedding table (one row of it)."""
    return sum(t.n_bytes for t in gf.tensors if not t.name.startswith("token_embd"))


def _row_for(found: cand.Found, target: GGUFFile, reg: Registry, rules: RuleSet, policy: Policy) -> DraftRow:
    from specreg.gguf.summary import summarize
    from specreg.validators.pair import check_pair, detect_method

    gf = found.file
    assert gf is not None
    method = detect_method(gf, rules)
    checks = check_pair(target, gf, method, rule_set=rules, scans=reg.template_scans)
    bad = _first_error(checks)
    # admitted by `check pair` but with no weights to draft with: no candidate (bench would refuse it)
    hollow = next((c for c in checks if c.code in VOCAB_ONLY_CODES and c.severity != "pass"), None)
    s = summarize(gf, shared=True)
    allowed, note = _licence(found.record, found.licence, found, policy)
    local = found.where != "hub" and not (found.record is not None and not found.record.paths)
    return DraftRow(
        method=method, draft=found.label, where=found.where, ref=found.ref, sha256=found.sha256,
        repo=found.repo, revision=found.revision, quant=s.file_type_name, size_bytes=found.size or s.file_size,
        bytes_per_token=_bytes_per_token(gf), parameters=s.parameter_count or None,
        licence=found.licence, licence_allowed=allowed, licence_note=note,
        admitted=bad is None and hollow is None,
        reason=f"{bad.code}: {bad.message}" if bad else f"{NOT_BENCHMARKABLE}: {hollow.message}" if hollow else None,
        reason_code=bad.code if bad else NOT_BENCHMARKABLE if hollow else None,
        warnings=sum(1 for c in checks if c.severity == "warn"),
        local=local,
    )  # fmt: skip


def _self_rows(
    t_rec: ArtifactRecord, target: GGUFFile, book: Book, reg: Registry, rules: RuleSet, policy: Policy
) -> list[DraftRow]:
    """The target alone: MTP when it has next-n heads, the n-gram methods (those `bench` runs by
    default and any other this target has runs of)."""
    from specreg.gguf.summary import summarize
    from specreg.validators.pair import check_pair

    s = summarize(target, shared=True)
    methods: list[Method] = [Method.DRAFT_MTP] if s.speculative.nextn_predict_layers else []
    measured = {m.method for m in book.measured.values() if m.target == t_rec.sha256}
    methods += [
        m
        for m in Method
        if m in SELF_METHODS and m != Method.DRAFT_MTP and (m in DEFAULT_NGRAM_METHODS or m in measured)
    ]
    allowed, note = _licence(t_rec, None, None, policy)
    rows = []
    for m in methods:
        checks = check_pair(target, None, m, rule_set=rules, scans=reg.template_scans)
        bad = _first_error(checks)
        rows.append(
            DraftRow(
                method=m,
                where="target",
                sha256=None,
                quant=s.file_type_name,
                licence=t_rec.licence.effective,
                licence_allowed=allowed,
                licence_note=note,
                admitted=bad is None,
                reason=f"{bad.code}: {bad.message}" if bad else None,
                reason_code=bad.code if bad else None,
                warnings=sum(1 for c in checks if c.severity == "warn"),
                local=bool(t_rec.paths),
                bytes_per_token=0 if m != Method.DRAFT_MTP else None,
            )
        )
    return rows


def rank_key(row: DraftRow) -> tuple[float, int, int]:
    """Highest speed-up first - the measured one where this pair has runs (its own evidence beats
    the step model's reading of it), else the predicted; then what can run here, then the smaller
    draft."""
    pred = row.prediction
    p = 0.0 if pred is None else pred.measured_speedup if pred.measured_speedup is not None else pred.speedup
    return (-round(p, 4), 0 if row.local else 1, row.size_bytes or 0)


def find_drafts(reg: Registry, target_arg: str, search: Search, progress: Progress | None = None) -> DraftReport:
    """Gather, judge, predict and rank (module docstring); one line per candidate that failed."""
    from specreg.gguf.summary import summarize
    from specreg.sources.hub import HubSettings

    def tell(stage: str, done: int, total: int) -> None:
        if progress is not None:
            progress(stage, done, total)

    t_rec, t_file, _ = resolve_target(reg, target_arg)
    t_sum = summarize(t_file)
    settings = HubSettings.from_env()
    got = cand.Gathered()
    cand.from_registry(reg, t_sum, t_rec.sha256, search.rules, got)
    known = {os.path.realpath(p) for f in got.found if f.record is not None for p in f.record.paths}
    known |= {os.path.realpath(p) for p in t_rec.paths}
    if search.dirs:
        cand.from_dirs(search.dirs, known, got)
    if search.cache:
        cand.from_hf_cache(settings, known, got)
    local = [f for f in got.found if f.file is None]
    for i, f in enumerate(local):
        cand.open_local(f, reg)
        tell("reading local headers", i + 1, len(local))
    if search.hub:
        terms = cand.family_terms(t_file, t_rec.provenance.repo)
        shas = {t_rec.sha256} | {f.sha256 for f in got.found if f.sha256}
        cand.from_hub(settings, terms, search.limit, got, exclude=shas, exclude_repo=None,
                      progress=lambda d, n: tell("reading hub headers", d, n))  # fmt: skip
    book = build_book(reg)
    rows: list[DraftRow] = []
    failures = list(got.failures)
    seen: set[str] = set()
    opened = [f for f in got.found if f.file is not None]
    for i, f in enumerate(opened):
        if f.sha256 is not None and (f.sha256 == t_rec.sha256 or f.sha256 in seen):
            continue
        if f.sha256:
            seen.add(f.sha256)
        try:
            rows.append(_row_for(f, t_file, reg, search.rules, search.policy))
        except SpecregError as exc:
            failures.append(f"{f.label}: {exc.message}")
        tell("checking", i + 1, len(opened))
    failures += [f"{f.label}: {f.problem}" for f in got.found if f.problem]
    rows += _self_rows(t_rec, t_file, book, reg, search.rules, search.policy)
    drafts_of: dict[int, GGUFSummary | None] = {}
    for row in rows:
        if not row.admitted:
            continue
        d_sum = None
        if row.method in MODEL_DRAFTED and row.method != Method.DRAFT_MTP:
            f = next(x for x in opened if x.ref == row.ref)
            d_sum = f.summary
        drafts_of[id(row)] = d_sum
        row.prediction = predict(book, row.method, t_sum, d_sum, t_rec.sha256, row.sha256)
    machine = MachineUse(blind="--no-probe: the ranges hold any machine")
    if search.probe:
        priced, machine = _probe(reg, t_rec.sha256, t_file, rows, opened, search, tell)
        if priced is not None:
            book = priced
            for row in rows:
                if row.admitted:
                    row.prediction = predict(book, row.method, t_sum, drafts_of[id(row)], t_rec.sha256, row.sha256)
            for row in _pair_probe(reg, book, machine, t_rec.sha256, t_file, rows, opened, search, tell):
                row.prediction = predict(book, row.method, t_sum, drafts_of[id(row)], t_rec.sha256, row.sha256)
    admitted = sorted((r for r in rows if r.admitted), key=rank_key)
    rejected = [r for r in rows if not r.admitted]
    by_reason = Counter(r.reason_code or "?" for r in rejected)
    if got.other_tokenizer:
        by_reason["other tokenizer (not opened)"] = got.other_tokenizer
    return DraftReport(
        target=target_arg, target_sha256=t_rec.sha256, target_name=t_rec.name, rule_set=search.rules.id,
        rule_set_chosen_by=search.rules_why, policy=search.policy_source, rows=admitted, rejected=rejected,
        rejected_by_reason=dict(by_reason.most_common()), other_tokenizer=got.other_tokenizer,
        failures=failures, notes=got.notes, searched_repos=got.searched_repos,
        hub_bytes_fetched=sum(f.bytes_fetched for f in got.found), prior=book.prior, error=book.error,
        machine=machine,
    )  # fmt: skip


def _probe(
    reg: Registry, target_sha: str, target: GGUFFile, rows: list[DraftRow], opened: list[cand.Found],
    search: Search, tell: Progress,
) -> tuple[Book | None, MachineUse]:  # fmt: skip
    """The target's and the best local drafts' machine probes (kept ones read back), and the book
    priced by them; (None, why) when the target cannot be probed here."""
    from specreg.benchmark.run import machine_probe as mp
    from specreg.paths import data_dir
    from specreg.registry.hashing import sha256_file
    from specreg.servers.launcher import bundled_command, external_command
    from specreg.servers.machine_key import machine_key
    from specreg.servers.pinning import server_pinning

    if not isinstance(target.path, Path):
        return None, MachineUse(blind="the target is not on this machine (headers only): nothing to probe")
    files = {f.ref: f.file.path for f in opened if f.file is not None and isinstance(f.file.path, Path)}
    ranked = sorted((r for r in rows if r.admitted and r.prediction is not None), key=rank_key)
    local = [
        r for r in ranked if r.method in MODEL_DRAFTED and r.method != Method.DRAFT_MTP and r.local and r.ref in files
    ]
    chosen: dict[str, Path] = {}
    for r in local:
        if len(chosen) >= PROBE_LIMIT:
            break
        path = files[r.ref or ""]
        if r.sha256 is None:  # a folder's file: hashed now, as a probe is kept by the bytes it measured
            r.sha256 = reg.known_sha256(path) or sha256_file(path)
        chosen.setdefault(r.sha256, path)
    cmd = external_command(search.server) if search.server else bundled_command()
    pinning = server_pinning(None, True)  # what `bench` gives its servers by default
    key = machine_key(cmd, pinning)
    got = mp.ensure(reg, [(target_sha, target.path), *chosen.items()], key, cmd, pinning,
                    log_dir=data_dir() / "probes", progress=tell)  # fmt: skip
    use = MachineUse(
        key=key.text(), probes=[got.probes[s] for s in [target_sha, *chosen] if s in got.probes],
        measured=got.measured, seconds=round(got.seconds(), 2), failures=got.failures,
        not_probed=len({r.ref for r in local}) - len(chosen),
    )  # fmt: skip
    if target_sha not in got.probes:
        use.blind = "the target could not be probed: the ranges hold any machine"
        return None, use
    return build_book(reg, key, got.probes), use


def _pair_probe(
    reg: Registry, book: Book, use: MachineUse, target_sha: str, target: GGUFFile, rows: list[DraftRow],
    opened: list[cand.Found], search: Search, tell: Progress,
) -> list[DraftRow]:  # fmt: skip
    """Run the `PROBE_LIMIT` best local drafts by the machine-priced ranking with the target, each
    at its predicted draft length (benchmark/run/pair_probe.py; kept ones read back), into the
    book; the rows whose prediction a pair probe now informs."""
    from specreg.benchmark.run import pair_probe as pp
    from specreg.paths import data_dir
    from specreg.servers.launcher import bundled_command, external_command
    from specreg.servers.pinning import server_pinning

    assert book.machine is not None and isinstance(target.path, Path)
    files = {f.ref: f.file.path for f in opened if f.file is not None and isinstance(f.file.path, Path)}
    chosen: list[tuple[DraftRow, pp.Candidate]] = []
    for r in sorted((r for r in rows if r.admitted and r.prediction is not None), key=rank_key):
        if len(chosen) >= PROBE_LIMIT:
            break
        k = r.prediction.draft_length if r.prediction else None
        if r.method in MODEL_DRAFTED and r.method != Method.DRAFT_MTP and r.sha256 and r.ref in files and k:
            chosen.append((r, pp.Candidate(r.sha256, files[r.ref or ""], r.method, k)))
    if not chosen:
        return []
    cmd = external_command(search.server) if search.server else bundled_command()
    got = pp.ensure(reg, target_sha, target.path, [c for _, c in chosen], book.machine, cmd,
                    server_pinning(None, True), log_dir=data_dir() / "probes", progress=tell)  # fmt: skip
    use.pairs = list(got.probes.values())
    use.pairs_measured = len(got.measured)
    use.seconds = round(use.seconds + got.seconds, 2)
    use.failures += got.failures
    for (sha, method), probe in got.probes.items():
        book.pair_probes[(target_sha, sha, method)] = probe
    return [r for r, c in chosen if (c.sha256, c.method) in got.probes]


def check_limits(limit: int) -> None:
    if not 1 <= limit <= cand.MAX_LIMIT:
        raise UsageError(f"--limit {limit}: choose 1 to {cand.MAX_LIMIT} repos")
