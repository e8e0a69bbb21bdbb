"""`specreg inspect`: what a GGUF file says about itself, without loading tensors or registering."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specreg.commands.options import JsonOpt, TimeoutOpt, db_path
from specreg.commands.output import emit_json, say, warn

if TYPE_CHECKING:
    from specreg.gguf.walk import KnownArray
    from specreg.schemas.gguf import GGUFSummary

_SPECIAL = ("bos", "eos", "eot", "eom", "unk", "pad", "sep", "fim_pre", "fim_suf", "fim_mid")


Known = tuple[str | None, str | None, bool | None, "dict[int, KnownArray] | None"]


def _known(path: Path, do_hash: bool) -> Known:
    """(sha256, effective licence, licence conflict, header layout) from the registry's stat
    cache, or the SHA-256 by hashing with --hash. Never creates a registry or writes a record."""
    sha = lic = None
    conflict = None
    layout = None
    db = db_path()
    if db.exists():
        from specreg.errors import SpecregError
        from specreg.registry import statcache
        from specreg.registry.db import Database

        try:
            database = Database(db)
            try:
                sha = statcache.known_sha256(database, path)
                if sha is None and do_hash:
                    from specreg.registry.hashing import sha256_with_bar

                    sha = sha256_with_bar(path)[0]
                known = None if sha is None else statcache.licence_of(database, sha)
                if sha is not None and known is not None:  # None: hashed with --hash but not registered
                    lic, conflict = known
                    layout = statcache.layout_of(database, sha)
            finally:
                database.close()
        except SpecregError:
            pass  # an unreadable registry must not stop a read-only look at a file
    if sha is None and do_hash:
        from specreg.registry.hashing import sha256_with_bar

        sha = sha256_with_bar(path)[0]
    return sha, lic, conflict, layout


def _tok(texts: dict[int, str], tid: int | None) -> str:
    if tid is None:
        return "-"
    text = repr(texts[tid]) if tid in texts else "(out of range)"
    return f"{tid} {text}"


def _n(value: object) -> str:
    """A number or flag as people read it: `-` when the file does not say, yes/no for flags."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _human(
    s: GGUFSummary, texts: dict[int, str], lic: str | None, conflict: bool | None, remote: dict[str, Any] | None = None
) -> None:
    t = s.tokenizer
    sp = s.speculative
    rows: list[tuple[str, str]] = [
        ("file", s.path if remote else os.path.abspath(s.path)),
        ("sha256", s.sha256[:12] if s.sha256 else "not registered (--hash computes it)"),
        ("size", f"{s.file_size:,} bytes, GGUF v{s.version}, {s.n_tensors} tensors, {s.n_kv} keys"),
        ("name", s.name or "-"),
        ("architecture", s.architecture or "-"),
        ("quant", f"{s.file_type_name or '-'} (file_type {_n(s.file_type)})"),
        ("parameters", f"{s.parameter_count:,}"),
        (
            "shape",
            f"context {_n(s.context_length)}, embedding {_n(s.embedding_length)}, blocks {_n(s.block_count)}, "
            f"heads {_n(s.head_count)}/{_n(s.head_count_kv)}",
        ),
        (
            "vocab",
            f"{t.model or '-'} pre={t.pre or '-'}, {t.n_tokens} tokens, {t.n_merges} merges, "
            f"tokens sha256 {(t.tokens_sha256 or '-')[:12]}",
        ),
        (
            "special tokens",
            ", ".join(
                f"{k} {_tok(texts, getattr(t, f'{k}_id'))}" for k in _SPECIAL if getattr(t, f"{k}_id") is not None
            )
            or "-",
        ),
        ("adds bos / eos", f"{_n(t.add_bos)} / {_n(t.add_eos)}"),
        ("chat template", "yes" if t.chat_template_present else "no"),
    ]
    heads = []
    if sp.nextn_predict_layers:
        heads.append(f"MTP: {sp.nextn_predict_layers} nextn layer(s), {len(sp.nextn_tensors)} tensors")
    if sp.eagle3_target_layers is not None:
        heads.append(
            f"EAGLE-3 draft: target layers {_list(sp.eagle3_target_layers)}, "
            f"target hidden {_n(sp.eagle3_target_hidden_size)}, d2t {_list(sp.d2t_shape)}"
        )
    if sp.dflash_block_size is not None or sp.dflash_target_layers is not None:
        heads.append(
            f"DFlash draft: block {_n(sp.dflash_block_size)}, target layers {_list(sp.dflash_target_layers)}, "
            f"target hidden {_n(sp.dflash_target_hidden_size)}"
        )
    rows.append(("speculative", "; ".join(heads) or "none"))
    gl = s.license
    rows.append(("licence (gguf)", " | ".join(x for x in (gl.license, gl.name, gl.link) if x) or "-"))
    if lic is not None or conflict:
        rows.append(("licence (registry)", (lic or "-") + (" (sources conflict)" if conflict else "")))
    if remote:
        pin = f", revision {remote['revision'][:12]}" if remote.get("revision") else ""
        fetched = f"{remote['bytes_fetched']:,} of {remote['size']:,} bytes in {remote['requests']} range request(s)"
        rows.insert(1, ("remote", f"metadata only: {fetched}{pin}"))
    key_width = max(len(k) for k, _ in rows) + 2
    for key, value in rows:
        say(value, prefix=f"{key:<{key_width}}", marks=[(key, "bold")], indent=key_width)


def _list(values: list[int] | None) -> str:
    return "-" if values is None else ", ".join(map(str, values))


def inspect_cmd(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", help="GGUF file, https:// URL or hf://ORG/REPO/FILE.gguf[@REV].", show_default=False
        ),
    ],
    do_hash: Annotated[
        bool, typer.Option("--hash", help="Compute the SHA-256 if the registry does not know it.")
    ] = False,
    timeout: TimeoutOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show a GGUF file's architecture, quant, vocab, special tokens, speculative heads, licence.

    The SHA-256 is shown when the registry knows the file by its stat (no hashing), or with --hash.
    A URL is read by HTTP range requests: the header only, nothing downloaded or registered.
    """
    from specreg.allowance import allowing
    from specreg.gguf.reader import open_gguf
    from specreg.gguf.summary import summarize
    from specreg.schemas.gguf import as_dict
    from specreg.sources.range_reads import is_remote, open_remote

    remote = None
    if is_remote(file):
        with allowing(timeout):
            gf, found = open_remote(file)
        remote = found.facts()
        sha, lic, conflict = found.sha256, None, None
    else:
        sha, lic, conflict, layout = _known(Path(file), do_hash)
        gf = open_gguf(file, known=layout)  # a registered file's long arrays are jumped over (each proven)
    warn(f"{file}: {w}" for w in gf.warnings)
    summary = summarize(gf)
    summary.sha256 = sha
    if json_out:
        emit_json(as_dict(summary) | ({"remote": remote} if remote else {}))
        return
    from specreg.gguf.format import KEY_TOKENS, T_STRING

    tokens = gf.typed_array(KEY_TOKENS, (T_STRING,))
    special = [getattr(summary.tokenizer, f"{k}_id") for k in _SPECIAL]
    texts = tokens.strings_at(i for i in special if i is not None) if tokens else {}
    _human(summary, texts, lic, conflict, remote)
