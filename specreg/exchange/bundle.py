"""Result bundles: export runs, pairs and artifact records to one file; import them elsewhere.

`export` reads one consistent snapshot of the registry; `import` verifies every bundle whole
(see bundle_format) before it writes anything, then merges all of them in one transaction:
artifacts by SHA-256, pairs by identity, verdicts by content, runs by id. A run id this registry
already holds is skipped when its content digest is the same (importing twice changes nothing)
and refused, naming both digests, when it differs. Each imported run records the host and the
specreg version it came from (table run_origins).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg import __version__
from specreg.benchmark.store.digest import keep_digests
from specreg.benchmark.store.runstore import RunStore
from specreg.errors import BundleError, RunUnreadable, UsageError
from specreg.exchange.bundle_format import (
    RUN_PARTS,
    Bundle,
    BundleHeader,
    BundleWriter,
    Origin,
    RunEntry,
    jsonl,
    new_header,
    open_bundle,
    run_digest,
    run_member,
)
from specreg.exchange.bundle_runs import insert_run, local_digest, run_logs, run_parts
from specreg.exchange.origins import record_origin
from specreg.exchange.portable import artifact_records, merge_artifacts, merge_pairs, pair_records
from specreg.exchange.rederive import check_summaries
from specreg.paths import data_dir
from specreg.registry.db import now_iso
from specreg.registry.migrations import bundle_schema, migrations
from specreg.servers.hardware import run_hardware

if TYPE_CHECKING:
    from specreg.registry.store import Registry

Trust = tuple[dict[str, str], bool]  # (key id -> signer name, require_signed_evidence)


def this_host() -> Origin:
    return Origin(host=socket.gethostname() or "unknown", specreg_version=__version__)


@dataclass
class ExportResult:
    header: BundleHeader
    path: Path
    notes: list[str] = field(default_factory=list)


def _select_runs(
    reg: Registry, run_ids: Iterable[str], pair_ids: Iterable[int], everything: bool, runs_of_pairs: bool
) -> list[str]:
    from specreg.benchmark.store.run_index import runs_for_pair
    from specreg.benchmark.store.runstore import RunStore

    store = RunStore(reg)
    chosen: list[str] = []
    for rid in run_ids:
        full = store.resolve(rid)
        status = reg.conn.execute("SELECT status FROM bench_runs WHERE run_id = ?", (full,)).fetchone()[0]
        if status == "running":
            raise UsageError(f"run {full} is still running; export it when it has finished")
        chosen.append(full)
    for pid in pair_ids if runs_of_pairs else ():
        chosen += [h.info.run_id for h in runs_for_pair(reg, reg.get_pair(pid)) if h.info.status != "running"]
    if everything:
        chosen += [r for (r,) in reg.conn.execute("SELECT run_id FROM bench_runs WHERE status != 'running'")]
    return sorted(set(chosen))


def check_export_request(run_ids: list[str], pair_ids: list[int], everything: bool, path: str | Path) -> Path:
    """What to export and where, checked before any registry is opened: the bundle's path."""
    if not (run_ids or pair_ids or everything):
        raise UsageError("say what to export: --run ID, --pair ID or --all")
    out = Path(path)
    if not out.parent.is_dir():
        raise UsageError(f"-o {out}: folder {out.parent} does not exist")
    return out


def export_bundle(
    reg: Registry,
    path: str | Path,
    *,
    run_ids: Iterable[str] = (),
    pair_ids: Iterable[int] = (),
    everything: bool = False,
    runs_of_pairs: bool = True,
) -> ExportResult:
    """Write the chosen runs (with their pairs and artifact records) or everything to `path`.

    Args:
        reg: the registry to export from (one consistent read snapshot).
        path: the bundle file to write.
        run_ids: runs to export, with their pairs and artifact records.
        pair_ids: pairs to export, with their verdicts.
        everything: export every run and pair.
        runs_of_pairs: a pair brings every finished run that measured it; False: its verdicts
            only (e.g. a fleet splitting its pairs and its runs over different bundles).

    Raises:
        UsageError: when nothing is asked for, the folder of `path` does not exist, or a run
            asked for is still running.
        RunNotFound: when a run id names no run.
        PairNotFound: when a pair id names no pair.
    """
    run_ids, pair_ids = list(run_ids), list(pair_ids)
    out = check_export_request(run_ids, pair_ids, everything, path)
    conn = reg.conn
    conn.execute("BEGIN")  # one read snapshot: a bench writing meanwhile cannot tear the bundle
    try:
        runs = _select_runs(reg, run_ids, pair_ids, everything, runs_of_pairs)
        pairs = set(pair_ids) | {
            p
            for (p,) in conn.execute(
                "SELECT DISTINCT pair_id FROM bench_runs WHERE pair_id IS NOT NULL "
                "AND run_id IN (SELECT value FROM json_each(?))",
                (_json(runs),),
            )
        }
        if everything:
            pairs |= {p for (p,) in conn.execute("SELECT id FROM pairs")}
        shas: set[str] = set()
        for t, d in conn.execute(
            "SELECT target_sha256, draft_sha256 FROM pairs WHERE id IN (SELECT value FROM json_each(?))",
            (_json(sorted(pairs)),),
        ):
            shas |= {t, *([d] if d else [])}
        for t, d in conn.execute(
            "SELECT target_sha256, draft_sha256 FROM bench_runs WHERE run_id IN (SELECT value FROM json_each(?))",
            (_json(runs),),
        ):
            shas |= {t, *([d] if d else [])}
        if everything:
            shas |= {s for (s,) in conn.execute("SELECT sha256 FROM artifacts")}
        origins = {
            rid: Origin(host=h, specreg_version=v)
            for rid, h, v in conn.execute("SELECT run_id, host, specreg_version FROM run_origins")
        }
        hardware = run_hardware(reg, runs)
        writer = BundleWriter(out)
        try:
            header = new_header(this_host(), bundle_schema())
            arts = list(artifact_records(conn, shas))
            pair_recs = list(pair_records(conn, pairs))
            writer.add("artifacts.jsonl", jsonl(arts))
            writer.add("pairs.jsonl", jsonl(pair_recs))
            n_requests = 0
            for rid in runs:
                parts = run_parts(conn, rid)
                for part in RUN_PARTS:
                    writer.add(run_member(rid, part), parts[part])
                n_requests += parts["requests.jsonl"].count(b"\n")
                logs = {}
                for idx, data in run_logs(conn, rid).items():
                    logs[idx] = run_member(rid, f"logs/{int(idx):02d}.log")
                    writer.add(logs[idx], data)
                header.runs.append(
                    RunEntry(
                        run_id=rid,
                        digest=run_digest(parts),
                        origin=origins.get(rid, header.origin),
                        hardware=hardware.get(rid),
                        logs=logs,
                    )
                )
            header.counts = {
                "artifacts": len(arts),
                "pairs": len(pair_recs),
                "verdicts": sum(len(p["verdicts"]) for p in pair_recs),
                "runs": len(runs),
                "requests": n_requests,
            }
            header = writer.close(header)
        except BaseException:
            writer.abort()
            raise
    finally:
        conn.execute("COMMIT")
    return ExportResult(header, out)


def _json(values: Iterable[object]) -> str:
    return json.dumps(list(values))


@dataclass
class ImportResult:
    """What an import added; `present` lists runs that were already here with the same content."""

    bundles: list[tuple[str, str]] = field(default_factory=list)  # (path, bundle digest)
    artifacts: int = 0
    pairs: int = 0
    verdicts: int = 0  # imported verdicts: evidence about the machine that made them
    runs: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    requests: int = 0
    signed: int = 0  # (run, key) attestations stored (a repeat stores none)
    signed_verdicts: int = 0  # (verdict, key) attestations stored
    untrusted: list[str] = field(default_factory=list)  # key ids of verified envelopes the policy does not name
    checked_here: list[int] = field(default_factory=list)  # pairs checked on this machine after the import
    not_checked: dict[int, str] = field(default_factory=dict)  # pair id -> why it could not be checked here


def _stage_logs(bundle: Bundle, entry: RunEntry, staged: list[Path]) -> tuple[dict[str, Path], Path | None]:
    if not entry.logs:
        return {}, None
    run_dir = data_dir() / "runs" / entry.run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for idx, member in entry.logs.items():
        p = run_dir / f"imported-{int(idx):02d}.log"
        p.write_bytes(bundle.read(member))
        staged.append(p)
        paths[idx] = p
    return paths, run_dir


# what merging a record of the wrong shape raises (a string where an object belongs, an integer
# past SQLite's 64 bits, a key missing, JSON nested past the recursion limit)
_RECORD_SHAPE = (TypeError, AttributeError, LookupError, ValueError, ArithmeticError, RecursionError)


def import_bundles(reg: Registry, paths: Iterable[str | Path], trust: Trust | None = None) -> ImportResult:
    """Verify every bundle and its signatures, then merge them all in one write transaction (or
    nothing at all). `trust`: the policy's signers (exchange/bundle_signatures.verify_bundle)."""
    from specreg.exchange.bundle_signatures import verify_bundle
    from specreg.signing.attestations import record_attestations, record_verdict_attestations

    known = migrations.names()
    bundles = [open_bundle(p, known) for p in paths]
    verified = [verify_bundle(b, *(trust or (None, False))) for b in bundles]
    result = ImportResult()
    staged: list[Path] = []
    unchecked: set[int] = set()
    current = None
    try:
        with reg.write():
            conn = reg.conn
            for b, v in zip(bundles, verified, strict=True):
                current = b
                result.bundles.append((str(b.path), b.header.digest))
                result.artifacts += merge_artifacts(conn, b.records("artifacts.jsonl"))
                origin = (b.header.origin.host, b.header.origin.specreg_version)
                merged = merge_pairs(conn, b.records("pairs.jsonl"), origin, b.header.digest)
                result.pairs += merged.pairs
                result.verdicts += merged.verdicts
                unchecked.update(merged.unchecked)
                for entry in b.header.runs:
                    _import_run(reg, b, entry, result, staged)
                result.signed_verdicts += record_verdict_attestations(conn, v.envelopes, merged.own, now_iso())
                if trust is not None:
                    result.untrusted += [e.key_id for e in v.envelopes if e.signer is None]
            for v in verified:  # after every bundle's runs: an attestation names a run stored above
                result.signed += record_attestations(conn, v.runs, now_iso())
            keep_digests(reg, result.runs)  # what the audit reads, built once as the runs arrive
    except BaseException as exc:
        for p in staged:
            p.unlink(missing_ok=True)
            with contextlib.suppress(OSError):  # only an empty folder: never one that held anything else
                p.parent.rmdir()
        if isinstance(exc, _RECORD_SHAPE) and current is not None:
            # a resealed bundle (every digest recomputed) can carry records of any shape: a value of
            # the wrong type, a number SQLite cannot hold; the transaction is rolled back already
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
            raise BundleError(
                f"{current.path}: a record does not have the shape specreg writes ({why}); nothing was imported"
            ) from None
        raise
    check_here(reg, sorted(unchecked), result)
    return result


def check_here(reg: Registry, pair_ids: list[int], result: ImportResult) -> None:
    """Check each pair this machine has no verdict of its own for, from its registered files
    (their SHA-256 checked, headers only: cheap), under the current revision of its rule set,
    and record that verdict: the one it stands on here. A pair whose files are not here stays
    "not checked here" (registry/evidence.py), whatever the bundle said about it."""
    from specreg.errors import SpecregError
    from specreg.sources.checking import check_and_record
    from specreg.validators.ruleset import load_rule_set

    for pid in pair_ids:
        pair = reg.get_pair(pid)
        if pair.checked_here:
            continue
        shas = [s for s in (pair.target_sha256, pair.draft_sha256) if s]
        have = reg.get_artifacts(shas)
        if not all(s in have and have[s].paths for s in shas):
            result.not_checked[pid] = "its files are not registered here"
            continue
        try:
            rules = load_rule_set(pair.rule_set.rsplit("/r", 1)[0])
            strict = pair.strict
            check_and_record(reg, pair.target_sha256, pair.draft_sha256, pair.method, rule_set=rules, strict=strict)
        except SpecregError as exc:
            result.not_checked[pid] = exc.message
            continue
        result.checked_here.append(pid)


def _import_run(reg: Registry, b: Bundle, entry: RunEntry, result: ImportResult, staged: list[Path]) -> None:
    conn = reg.conn
    have = local_digest(conn, entry.run_id)
    if have is not None:
        if have != entry.digest:
            raise BundleError(
                f"run {entry.run_id} is already in this registry with different content "
                f"(registry digest {have}, bundle digest {entry.digest} in {b.path}); nothing was imported",
                hint="a run id names one measurement: find out which registry holds the right one",
            )
        result.present.append(entry.run_id)
        return
    parts = {part: b.records(run_member(entry.run_id, part)) for part in RUN_PARTS}
    if len(parts["run.json"]) != 1:
        raise BundleError(f"{b.path}: run {entry.run_id}: run.json must hold one record; nothing was imported")
    logs, run_dir = _stage_logs(b, entry, staged)
    result.requests += insert_run(conn, entry.run_id, parts, logs, run_dir)
    # derived numbers are derived here: the run's summaries drawn again from its rows, with the code
    # that wrote them, before anything reads them (the rows are in this transaction, not committed)
    try:
        run = RunStore(reg).load(entry.run_id)
        why = check_summaries(run)
    except RunUnreadable as exc:
        raise BundleError(f"{b.path}: {exc.message}; nothing was imported") from None
    if why is not None:
        raise BundleError(
            f"{b.path}: run {entry.run_id}: its summaries are not what its request rows give ({why}); "
            "nothing was imported"
        )
    record_origin(
        conn,
        entry.run_id,
        entry.origin.host,
        entry.origin.specreg_version,
        run_digest=entry.digest,
        bundle_digest=b.header.digest,
        bundle_created_at=b.header.created_at,
        node=run.manifest.node if run.manifest else None,  # a run measured on a Ray node says which
    )
    result.runs.append(entry.run_id)


__all__ = ["ExportResult", "ImportResult", "export_bundle", "import_bundles"]
