"""`specreg inspect`: what a GGUF file says about itself, without loading tensors or registering."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from specreg.commands._common import JsonOpt, console, db_path, emit_json, safe, warn
from specreg.schemas.gguf import GGUFSummary

_SPECIAL = ("bos", "eos", "eot", "eom", "unk", "pad", "sep", "fim_pre", "fim_suf", "fim_mid")


def _known(path: Path, do_hash: bool) -> tuple[str | None, str | None, bool | None]:
    """(sha256, effective licence, licence conflict) from the registry's stat cache, or by
    hashing with --hash. Never creates a registry or writes to one."""
    sha = lic = None
    conflict = None
    db = db_path()
    if db.exists():
        from specreg.errors import SpecregError
        from specreg.registry.store import Registry

        try:
            with Registry(db, show_progress=False) as reg:
                sha = reg.known_sha256(path)
                if sha is None and do_hash:
                    from specreg.registry.hashing import sha256_with_bar

                    sha = sha256_with_bar(path)[0]
                if sha is not None:
                    try:
                        rec = reg.get_artifact(sha)
                        lic, conflict = rec.licence.effective, rec.licence.conflict
                    except SpecregError:
                        pass  # hashed with --hash but not registered
        except SpecregError:
            pass  # an unreadable registry must not stop a read-only look at a file
    if sha is None and do_hash:
        from specreg.registry.hashing import sha256_with_bar

        sha = sha256_with_bar(path)[0]
    return sha, lic, conflict


def _tok(texts: list[str], tid: int | None) -> str:
    if tid is None:
        return "-"
    text = repr(texts[tid]) if 0 <= tid < len(texts) else "(out of range)"
    return f"{tid} {safe(text)}"


def _human(s: GGUFSummary, texts: list[str], lic: str | None, conflict: bool | None) -> None:
    t = s.tokenizer
    sp = s.speculative
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    rows: list[tuple[str, str]] = [
        ("file", safe(os.path.abspath(s.path))),
        ("sha256", s.sha256 or "(not registered; --hash computes it)"),
        ("size", f"{s.file_size:,} bytes, GGUF v{s.version}, {s.n_tensors} tensors, {s.n_kv} keys"),
        ("name", safe(s.name or "-")),
        ("architecture", safe(s.architecture or "-")),
        ("quant", f"{safe(s.file_type_name or '-')} (file_type {s.file_type})"),
        ("parameters", f"{s.parameter_count:,}"),
        (
            "shape",
            f"ctx {s.context_length}, embd {s.embedding_length}, blocks {s.block_count}, "
            f"heads {s.head_count}/{s.head_count_kv}",
        ),
        (
            "vocab",
            f"{safe(t.model or '-')} pre={safe(t.pre or '-')}, {t.n_tokens} tokens, "
            f"{t.n_merges} merges, tokens sha256 {(t.tokens_sha256 or '-')[:16]}",
        ),
        (
            "special tokens",
            ", ".join(
                f"{k} {_tok(texts, getattr(t, f'{k}_id'))}" for k in _SPECIAL if getattr(t, f"{k}_id") is not None
            )
            or "-",
        ),
        ("add bos/eos", f"{t.add_bos}/{t.add_eos}"),
        ("chat template", "yes" if t.chat_template_present else "no"),
    ]
    heads = []
    if sp.nextn_predict_layers:
        heads.append(f"MTP: {sp.nextn_predict_layers} nextn layer(s), {len(sp.nextn_tensors)} tensors")
    if sp.eagle3_target_layers is not None:
        heads.append(
            f"EAGLE-3 draft: target layers {sp.eagle3_target_layers}, "
            f"target hidden {sp.eagle3_target_hidden_size}, d2t {sp.d2t_shape}"
        )
    if sp.dflash_block_size is not None or sp.dflash_target_layers is not None:
        heads.append(
            f"DFlash draft: block {sp.dflash_block_size}, target layers "
            f"{sp.dflash_target_layers}, target hidden {sp.dflash_target_hidden_size}"
        )
    rows.append(("speculative", "; ".join(heads) or "none"))
    gl = s.license
    rows.append(("licence (gguf)", safe(" | ".join(x for x in (gl.license, gl.name, gl.link) if x) or "-")))
    if lic is not None or conflict:
        rows.append(("licence (registry)", safe(lic or "-") + (" [red](sources conflict)[/]" if conflict else "")))
    for k, v in rows:
        table.add_row(k, v)
    (console if console.is_terminal else Console(width=160, highlight=False)).print(table)


def inspect_cmd(
    file: Annotated[Path, typer.Argument(help="GGUF file to read.", show_default=False)],
    do_hash: Annotated[
        bool, typer.Option("--hash", help="Compute the SHA-256 if the registry does not know it.")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Show a GGUF file's architecture, quant, vocab, special tokens, speculative heads, licence.

    The SHA-256 is shown when the registry knows the file by its stat (no hashing), or with --hash.
    Example: specreg inspect models/target-q4.gguf --json
    """
    from specreg.gguf.reader import open_gguf
    from specreg.gguf.summary import summarize

    gf = open_gguf(file)
    warn(file, gf.warnings)
    summary = summarize(gf)
    sha, lic, conflict = _known(file, do_hash)
    summary = summary.model_copy(update={"sha256": sha})
    if json_out:
        emit_json(summary)
        return
    _human(summary, gf.token_texts() if summary.tokenizer.n_tokens else [], lic, conflict)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)
