"""`specreg sign`: add a signature (in-toto statement, DSSE envelope) to a finished result bundle.

Thin: load the key, verify and sign the bundle (exchange/bundle_signer.py), say what was signed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specreg.commands.options import JsonOpt
from specreg.commands.output import console, emit_json, safe


def sign_cmd(
    bundle: Annotated[Path, typer.Argument(metavar="BUNDLE", help="A bundle written by `specreg export`.")],
    key: Annotated[Path, typer.Option("--key", metavar="KEY", help="PEM private key, Ed25519 or ECDSA P-256/P-384.")],
    json_out: JsonOpt = False,
) -> None:
    """Sign a result bundle: its runs, artifacts and verdicts, by SHA-256, vouched for by this key.

    The bundle and every envelope it carries are verified first (one that import would refuse is
    never signed); the envelope is added as signatures/KEYID.intoto.json (the same key signing
    again replaces its own). Several keys may co-sign. `specreg import` verifies every signature;
    the audit's policy names whom it trusts.
    Needs the extra: pip install 'specreg[signing]'; making a key: docs/security.md.
    """
    from specreg.exchange.bundle_signer import sign_bundle
    from specreg.signing.dsse import load_signer

    signer = load_signer(key)
    path, kid = sign_bundle(bundle, signer)
    if json_out:
        emit_json({"path": str(path), "key_id": kid})
        return
    console().print(f"signed {safe(path)} with key {kid}", soft_wrap=True)
