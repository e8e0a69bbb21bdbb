"""What specreg knows about one GGUF file, without its tensor data.

Plain dataclasses, not pydantic models: the reader fills them from values it has already
type-checked against the file's own type tags, and `specreg inspect` prints them, so importing
and building pydantic (a large share of an inspect) buys nothing on that path. Where a summary
crosses a trust boundary as JSON (the registry's `summary_json`, a result bundle) it is
validated on the way in by `summary_from_json`, through a pydantic TypeAdapter built on first
use; records that embed a summary (`ArtifactRecord`) leave it to that function.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import TypeAdapter


@dataclass(kw_only=True, slots=True)
class TensorInfo:
    """One tensor's header entry; `offset` is relative to the start of the data section."""

    name: str
    shape: list[int]
    ggml_type: int
    type_name: str
    offset: int
    n_bytes: int


@dataclass(kw_only=True, slots=True)
class TokenizerSummary:
    """Tokenizer facts as stored in the file (raw, not llama.cpp's effective defaults)."""

    model: str | None = None
    pre: str | None = None
    n_tokens: int = 0
    tokens_sha256: str | None = None
    token_types_sha256: str | None = None
    scores_sha256: str | None = None
    merges_sha256: str | None = None
    n_merges: int = 0
    bos_id: int | None = None
    eos_id: int | None = None
    eot_id: int | None = None
    eom_id: int | None = None
    unk_id: int | None = None
    pad_id: int | None = None
    sep_id: int | None = None
    fim_pre_id: int | None = None
    fim_suf_id: int | None = None
    fim_mid_id: int | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    add_sep: bool | None = None
    chat_template_present: bool = False
    chat_template_sha256: str | None = None


@dataclass(kw_only=True, slots=True)
class SpeculativeMeta:
    """Metadata that speculative methods (MTP, EAGLE-3, DFlash) depend on."""

    nextn_predict_layers: int | None = None
    nextn_tensors: list[str] = field(default_factory=list)
    eagle3_target_layers: list[int] | None = None
    eagle3_target_hidden_size: int | None = None
    dflash_block_size: int | None = None
    dflash_target_layers: list[int] | None = None
    dflash_target_hidden_size: int | None = None
    d2t_shape: list[int] | None = None


@dataclass(kw_only=True, slots=True)
class LicenceFields:
    """`general.license*` as written in the file (untrusted text)."""

    license: str | None = None
    name: str | None = None
    link: str | None = None


@dataclass(kw_only=True, slots=True)
class ProvenanceFields:
    """`general.base_model.*`, `general.source.*`, `general.repo_url` as written in the file."""

    base_models: list[dict[str, str | int | None]] = field(default_factory=list)
    source: dict[str, str | int | None] = field(default_factory=dict)
    repo_url: str | None = None


@dataclass(kw_only=True, slots=True)
class GGUFSummary:
    """The facts the validators, registry and reports need from one GGUF file."""

    path: str
    sha256: str | None = None
    file_size: int
    version: int
    n_tensors: int
    n_kv: int
    alignment: int = 32
    data_offset: int = 0
    architecture: str | None = None
    name: str | None = None
    file_type: int | None = None
    file_type_name: str | None = None
    parameter_count: int = 0
    context_length: int | None = None
    embedding_length: int | None = None
    block_count: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    vocab_only: bool = False
    split_count: int | None = None
    split_no: int | None = None
    tokenizer: TokenizerSummary = field(default_factory=TokenizerSummary)
    speculative: SpeculativeMeta = field(default_factory=SpeculativeMeta)
    license: LicenceFields = field(default_factory=LicenceFields)
    provenance: ProvenanceFields = field(default_factory=ProvenanceFields)


@cache
def _adapter() -> TypeAdapter[GGUFSummary]:
    from pydantic import TypeAdapter

    return TypeAdapter(GGUFSummary)


def summary_from_json(text: str | bytes, *, strict: bool = False) -> GGUFSummary:
    """A summary read back from JSON (the registry, a bundle): every field validated."""
    return _adapter().validate_json(text, strict=strict)


def summary_to_json(summary: GGUFSummary) -> str:
    """The compact JSON the registry stores (`summary_from_json` reads it back equal)."""
    return json.dumps(as_dict(summary), ensure_ascii=False, separators=(",", ":"))


def as_dict(summary: Any) -> dict[str, Any]:
    """Plain data (dicts, lists, str, int, bool, None), e.g. for `--json`."""
    return asdict(summary)
