"""Check a pair and record its verdict: open both files, pick the method, check, record.

The one path from two files (or registered SHA-256 digests) to a stored verdict, used by `check pair`,
the audit's re-check of stale verdicts, the demo, the benchmarks and the tests. Opening an
artifact (register or locate, then open the bytes) happens in `open_artifact` only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.errors import ArtifactChanged, ArtifactNotFound
from specreg.registry.artifacts import HEX, MIN_PREFIX
from specreg.registry.store import Registry
from specreg.schemas.checks import CheckResult, PairVerdict
from specreg.schemas.registry import ArtifactRecord

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.validators.ruleset import RuleSet


# more checks on the opened files for the chosen method, given the checks so far (e.g. the memory
# budget and the runtime probe of `check pair`)
ExtraChecks = Callable[["GGUFFile", "GGUFFile | None", str, list[CheckResult]], list[CheckResult]]


@dataclass(frozen=True)
class Checked:
    """A recorded verdict, its pair id and the two artifacts it is about."""

    verdict: PairVerdict
    pair_id: int
    target: ArtifactRecord
    draft: ArtifactRecord | None
    warnings: tuple[str, ...] = ()  # "path: what llama.cpp tolerates" from either file (untrusted text)


def open_artifact(reg: Registry, ref: str | Path, twin: GGUFFile | None = None) -> tuple[ArtifactRecord, GGUFFile]:
    """A file (registered with its local facts on the way) or the SHA-256 (prefix) of a registered
    artifact, with the bytes it names opened for checking. The header checked and the SHA-256
    recorded come from one open descriptor (snapshot.py): a file replaced between hashing and
    parsing can no longer put a verdict under the SHA-256 of bytes nobody checked. `twin`: the
    pair's other file, opened already: a local file's arrays equal to its are not walked again."""
    from specreg.sources.provenance import register
    from specreg.sources.range_reads import REMOTE_KEY, is_remote, metadata_only, open_remote, record_remote

    arg = os.fspath(ref)
    if is_remote(arg):  # https:// or hf://: the header by range requests, recorded as metadata only
        gf, remote = open_remote(arg)
        rec = record_remote(reg, gf, remote)
        gf.sha256 = rec.sha256
        return rec, gf
    twins = twin.twin_arrays() if twin is not None else None
    if os.path.exists(arg):
        snap = reg.snapshot(arg, twins=twins)
        rec, gf = register(reg, arg, snap=snap), snap.file
        gf.sha256 = rec.sha256  # what the checks compare (a byte-identical draft is named as such)
        return rec, gf
    if not HEX.fullmatch(arg.strip().lower()):
        raise ArtifactNotFound(
            f"{arg}: no such file, and not a SHA-256 prefix of {MIN_PREFIX}+ hex digits",
            hint="give a GGUF path, or a SHA-256 (prefix) from `specreg artifacts`",
        )
    rec = reg.get_artifact(arg)
    if metadata_only(rec):  # no copy on disk: read the header again where it was found (pinned URL)
        gf = open_remote(rec.provenance.extra[REMOTE_KEY]["url"])[0]
        gf.sha256 = rec.sha256
        return rec, gf
    snap = reg.snapshot(reg.locate(rec.sha256), twins=twins)
    if snap.sha256 != rec.sha256:
        raise ArtifactChanged(snap.path, rec.sha256, snap.sha256)
    snap.file.sha256 = rec.sha256
    return rec, snap.file


def check_and_record(
    reg: Registry,
    target: str | Path,
    draft: str | Path | None,
    method: str,
    *,
    rule_set: RuleSet,
    strict: bool = False,
    extra: ExtraChecks | None = None,
) -> Checked:
    """Check target/draft for `method` and record the verdict.

    Args:
        reg: the registry the files are registered in and the verdict recorded in.
        target: a path, a remote reference (`hf://`, `https://`) or a registered SHA-256
            (prefix).
        draft: likewise; None for the methods that speculate with the target alone.
        method: a `Method` value, or "auto": detected from the draft.
        rule_set: the llama.cpp build's facts to judge by.
        strict: turn every warning into an error.
        extra: more checks on the opened files for the chosen method (the memory budget, the
            runtime probe of `check pair`).

    Raises:
        UsageError: when the method and the files given do not fit (checked before anything
            is registered).
        ArtifactNotFound: when a path or SHA-256 names nothing.
        GGUFError: when a file is not a valid GGUF file.
    """
    from specreg.validators.pair import check_pair, detect_method, verdict

    if method == "auto" and draft is None:
        detect_method(None, rule_set)  # raises the "pass --method" hint before anything is registered
    t_rec, t_file = open_artifact(reg, target)
    d_rec, d_file = open_artifact(reg, draft, t_file) if draft is not None else (None, None)
    if method == "auto":
        method = detect_method(d_file, rule_set)
    checks = check_pair(t_file, d_file, method, rule_set=rule_set, strict=strict, scans=reg.template_scans)
    if extra is not None:
        checks += extra(t_file, d_file, method, list(checks))
    v = verdict(
        checks,
        method=method,
        target_sha256=t_rec.sha256,
        draft_sha256=d_rec.sha256 if d_rec else None,
        rule_set=rule_set,
        strict=strict,
    )
    warnings = tuple(f"{f.path}: {w}" for f in (t_file, d_file) if f is not None for w in f.warnings)
    return Checked(v, reg.record_verdict(v), t_rec, d_rec, warnings)
