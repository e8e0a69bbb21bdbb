"""`specreg export` and `specreg import`: result bundles between registries, and supply-chain manifests.

Thin: options in, one core call (benchmark.bundle, report.cyclonedx), a short summary out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands.options import JsonOpt, db_path
from specreg.commands.output import console, emit_json, safe

_FORMATS = ("bundle", "cyclonedx")


def export_cmd(
    pair_arg: Annotated[
        int | None,
        typer.Argument(metavar="[PAIR_ID]", help="With --format cyclonedx: the pair to describe.", show_default=False),
    ] = None,
    run: Annotated[
        list[str] | None, typer.Option("--run", metavar="ID", help="Run id or unique prefix (repeatable).")
    ] = None,
    pair: Annotated[
        list[int] | None,
        typer.Option("--pair", metavar="ID", help="Pair id (repeatable): its verdicts and every run measuring it."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every artifact record, pair and finished run.")] = False,
    output: Annotated[
        Path | None, typer.Option("-o", "--output", metavar="FILE", help="Where to write (a bundle needs one).")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="bundle (a .zip) or cyclonedx (an ML-BOM, JSON).")] = "bundle",
    policy: Annotated[
        Path | None, typer.Option("--policy", help="With --format cyclonedx: the audit policy (TOML).")
    ] = None,
    sign: Annotated[
        Path | None,
        typer.Option(
            "--sign",
            metavar="KEY",
            help="Sign the bundle with this PEM private key (Ed25519/ECDSA; extra: specreg[signing]).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Export results: a bundle of runs, pairs and artifact records, or a CycloneDX ML-BOM of one pair.

    A bundle holds no model bytes: artifact records (SHA-256, size, licence, provenance),
    verdicts with their rule set, and runs (manifest, every request row, summaries, server logs),
    each member with its SHA-256. `specreg import` merges it into another registry.
    """
    from specreg.errors import UsageError

    if fmt not in _FORMATS:
        raise UsageError(f"--format {fmt!r}: choose one of {', '.join(_FORMATS)}")
    if fmt == "cyclonedx":
        if sign is not None:
            raise UsageError("--sign signs a bundle (the ML-BOM is not signed by specreg)")
        _cyclonedx(pair_arg, run, pair, all_, output, policy)
        return
    if policy is not None:
        raise UsageError("--policy applies to --format cyclonedx (the audit it describes)")
    if pair_arg is not None:
        raise UsageError("a bundle takes --pair ID, --run ID or --all (PAIR_ID alone is for --format cyclonedx)")
    if output is None:
        raise UsageError("give the bundle file: -o FILE (e.g. -o results.zip)")
    from specreg.exchange.bundle import check_export_request, export_bundle
    from specreg.registry.store import Registry

    check_export_request(run or [], pair or [], all_, output)
    signer = None
    if sign is not None:  # a bad key fails before anything is read or written
        from specreg.signing.dsse import load_signer

        signer = load_signer(sign)
    with Registry(db_path(), show_progress=False, create=False) as reg:
        if signer is None:
            res = export_bundle(reg, output, run_ids=run or [], pair_ids=pair or [], everything=all_)
            kid = None
        else:
            from specreg.exchange.bundle_signer import export_signed

            res, kid = export_signed(reg, output, signer, run_ids=run or [], pair_ids=pair or [], everything=all_)
    h = res.header
    if json_out:
        emit_json(
            {
                "path": str(res.path),
                "digest": h.digest,
                "counts": h.counts,
                "runs": [r.run_id for r in h.runs],
                "signed_by": kid,
            }
        )
        return
    c = h.counts
    console().print(f"wrote {safe(res.path)}", soft_wrap=True)
    console().print(
        f"  {_n(c.get('artifacts', 0), 'artifact record')}, {_n(c.get('pairs', 0), 'pair')} "
        f"({_n(c.get('verdicts', 0), 'verdict')})"
    )
    console().print(f"  {_n(c.get('runs', 0), 'run')} ({_n(c.get('requests', 0), 'request row')})")
    console().print(f"  digest {h.digest}")
    if kid is not None:
        console().print(f"  signed by key {kid}")


def _cyclonedx(
    pair_arg: int | None,
    run: list[str] | None,
    pair: list[int] | None,
    all_: bool,
    output: Path | None,
    policy: Path | None,
) -> None:
    from specreg.errors import UsageError

    if pair_arg is None or run or pair or all_:
        raise UsageError("--format cyclonedx describes one pair: specreg export --format cyclonedx PAIR_ID [-o FILE]")
    from specreg.audit.fleet import audit_by_hardware
    from specreg.audit.policy import load_policy
    from specreg.registry.store import Registry
    from specreg.report.cyclonedx import ml_bom_json

    pol, source = load_policy(policy)
    with Registry(db_path(), show_progress=False, create=False) as reg:
        audit = audit_by_hardware(reg, pol, source, pair_ids=[pair_arg], spread=False)
        target = reg.get_artifact(audit.pairs[0].target_sha256)
        draft = reg.get_artifact(audit.pairs[0].draft_sha256) if audit.pairs[0].draft_sha256 else None
        text = ml_bom_json(audit, target, draft)
    if output is None:
        console().file.write(text + "\n")
        console().file.flush()
        return
    from specreg.atomic import write_atomic

    if not output.parent.is_dir():
        raise UsageError(f"-o {output}: folder {output.parent} does not exist")
    write_atomic(output, text + "\n")
    console().print(f"wrote {safe(output)}", soft_wrap=True)


def import_cmd(
    files: Annotated[list[Path], typer.Argument(metavar="FILE", help="Bundles written by `specreg export`.")],
    policy: Annotated[
        Path | None,
        typer.Option(
            "--policy",
            help="Name signers by its [trust] signers; with require_signed_evidence, refuse a run none signed.",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Merge result bundles into this registry: all of them, or nothing.

    Every member is checked against the bundle's SHA-256 list before anything is written; a
    tampered, truncated or too-new bundle is refused. Every signature a bundle carries is
    verified and who signed which run and verdict is recorded (a key the policy does not name is
    recorded, never trusted, never fatal). Importing twice changes nothing; a run id
    this registry holds with different content is refused, naming both digests. A bundle's
    verdicts are kept as evidence about the machine that made them: a pair is admitted here only
    by checks made here (run at once when its files are registered here).
    """
    from specreg.exchange.bundle import import_bundles
    from specreg.registry.store import Registry

    trust = None
    if policy is not None:
        from specreg.audit.policy import load_policy, policy_folder
        from specreg.signing.signers import trusted_keys

        pol, source = load_policy(policy)
        trust = (trusted_keys(pol.trust.signers, policy_folder(source), source), pol.trust.require_signed_evidence)
    with Registry(db_path(), show_progress=False) as reg:
        res = import_bundles(reg, files, trust)
    if json_out:
        emit_json(
            {
                "bundles": [{"path": p, "digest": d} for p, d in res.bundles],
                "artifacts": res.artifacts,
                "pairs": res.pairs,
                "verdicts": res.verdicts,
                "runs": res.runs,
                "already_present": res.present,
                "requests": res.requests,
                "signed": res.signed,
                "signed_verdicts": res.signed_verdicts,
                "untrusted_keys": sorted(set(res.untrusted)),
                "checked_here": res.checked_here,
                "not_checked_here": [{"pair": pid, "why": why} for pid, why in sorted(res.not_checked.items())],
            }
        )
        return
    for path, digest in res.bundles:
        console().print(f"verified {safe(path)} (digest {digest[:16]})", soft_wrap=True)
    console().print(f"imported {_n(len(res.runs), 'run')} ({_n(res.requests, 'request row')})")
    console().print(
        f"  new: {_n(res.artifacts, 'artifact record')}, {_n(res.pairs, 'pair')}, "
        f"{_n(res.verdicts, 'verdict')} from elsewhere (evidence, not verdicts here)"
    )
    if res.checked_here:
        ids = ", ".join(map(str, res.checked_here))
        console().print(f"  checked here from the registered files: {_n(len(res.checked_here), 'pair')} ({ids})")
    if res.not_checked:
        ids = ", ".join(map(str, sorted(res.not_checked)))
        console().print(
            f"  not checked here: {_n(len(res.not_checked), 'pair')} ({ids}); not admitted here until "
            "`specreg check pair` runs on their files"
        )
    if res.present:
        console().print(f"  already here, unchanged: {_n(len(res.present), 'run')} with the same content")
    if res.signed or res.signed_verdicts:
        console().print(
            f"  signatures verified: {_n(res.signed, 'run attestation')}, "
            f"{_n(res.signed_verdicts, 'verdict attestation')} recorded"
        )
    for kid in sorted(set(res.untrusted)):
        console().print(safe(f"  signed by key {kid[:16]}, not in [trust] signers: recorded, not trusted"))


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
