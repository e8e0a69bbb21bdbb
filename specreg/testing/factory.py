"""Tiny, deterministic GGUF models for tests, the demo and benchmarks.

Every variant is a parameter of `ModelSpec`, never a copied file: a rule-breaking draft is
the target's spec with one field changed. Weights come from `seed`; `noise` adds a second,
independently seeded perturbation so a draft can agree with its target often but not always.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from specreg.testing.vocab import build_vocab

SMALL_NOISE = 0.05  # partial acceptance against the same-seed target (measured: ~30-70%)

_F16 = gguf.GGMLQuantizationType.F16
_F32 = gguf.GGMLQuantizationType.F32


@dataclass(frozen=True)
class ModelSpec:
    """Everything that distinguishes one tiny test model from another."""

    # weights
    seed: int = 0
    noise: float = 0.0
    noise_seed: int = 1
    weight_scale: float = 0.5
    # A "really faster" pair: blocks scaled down to nearly nothing make the next token a function
    # of the current one, and a head (embeddings, output) from its own seed is the same for any
    # depth, so a 1-layer draft predicts what an 8-layer target does at an eighth of the cost.
    block_scale: float = 1.0  # multiplies every 2-D block weight
    head_seed: int | None = None  # token_embd / output from this seed instead of the base stream
    # > 0: a head that loops - every token is followed by the first of `cycle` tokens in the
    # middle of the vocabulary, each of those by the next, the last by the first again (with
    # blocks scaled to nearly nothing: see CYCLER)
    cycle: int = 0
    file_type: str = "f32"  # "f32" or "f16" (2-D weights; norms stay f32)
    # shape
    architecture: str = "llama"
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 4
    n_ff: int = 128
    n_ctx: int = 512
    vocab_only: bool = False
    # vocabulary
    vocab_type: str = "llama"  # tokenizer.ggml.model: "llama" (SPM) or "gpt2" (BPE)
    # a real tokenizer: every tokenizer.* key copied from this GGUF (e.g. llama.cpp's
    # models/ggml-vocab-*.gguf); the vocabulary fields below are then ignored
    tokenizer_from: str | None = None
    pre: str | None = None  # tokenizer.ggml.pre
    n_words: int = 160  # word pieces after the 256 byte tokens
    extra_tokens: int = 0  # appended tokens ("<extra_N>", type USER_DEFINED)
    pad_tokens: int = 0  # appended padding tokens ("[PAD_N]", type UNUSED)
    token_edits: tuple[tuple[int, str], ...] = ()  # (id, new text)
    token_type_edits: tuple[tuple[int, int], ...] = ()  # (id, new type)
    merge_edits: tuple[tuple[int, str], ...] = ()  # (index, new "left right" merge), BPE only
    # special tokens; None leaves the key out of the file
    bos_id: int | None = 1
    eos_id: int | None = 2
    unk_id: int | None = 0
    pad_id: int | None = None
    eot_id: int | None = None
    eom_id: int | None = None
    add_bos: bool | None = True
    add_eos: bool | None = False
    chat_template: str | None = None
    # identity, licence, provenance
    name: str | None = "specreg-tiny"
    license: str | None = "apache-2.0"
    license_name: str | None = None
    license_link: str | None = None
    base_model: str | None = None  # general.base_model.0.name
    base_model_repo_url: str | None = None
    repo_url: str | None = None
    # speculative metadata
    eagle3_target_layers: tuple[int, ...] | None = None
    eagle3_target_hidden_size: int | None = None
    d2t: tuple[int, ...] | None = None  # EAGLE-3 draft-to-target id offsets
    dflash_block_size: int | None = None
    dflash_target_layers: tuple[int, ...] | None = None
    dflash_target_hidden_size: int | None = None
    nextn_predict_layers: int = 0  # MTP heads: extra blocks with blk.N.nextn.* tensors
    extra_kv: tuple[tuple[str, object], ...] = ()
    # (key, value, GGUF type name, array item type name or None): replaces a key the factory writes,
    # in place and with the stated type (hostile counts: block_count as UINT64 2^32+1, INT32 -1)
    kv_overrides: tuple[tuple[str, object, str, str | None], ...] = ()
    # tensors added or reshaped (name, numpy shape), e.g. a DSpark head ("markov_w1.weight") or a
    # reduced-vocab EAGLE-3 output ("output.weight", (n_draft_vocab, n_embd)); and tensors left out
    extra_tensors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    drop_tensors: tuple[str, ...] = ()

    def but(self, **changes: object) -> ModelSpec:
        """This spec with some fields changed (the one-rule-broken variants)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


# Tiny weights whose output loops with a period of 64 tokens whatever the prompt: near-zero blocks
# under a head that maps every token to the next of the cycle. Every n-gram method then drafts in
# full (ngram-simple copies at most one period, so the period must be at least its 48-token
# m-gram), and a draft of the same head is always accepted: the memory of real speculation on a
# tiny model.
CYCLER = ModelSpec(head_seed=7, block_scale=0.01, cycle=64)


def sliding_window_spec(
    arch: str = "gemma3", n_layer: int = 6, window: int = 64, base: ModelSpec = CYCLER
) -> ModelSpec:
    """A tiny model llama.cpp serves with a sliding-window (iSWA) cache: gemma2 (every 2nd layer
    windowed, output tied to the embeddings) or gemma3 (5 of every 6), with the extra norms their
    loaders require (post-attention and post-FFN, gemma3's Q/K norms) and the window as the
    UINT32 llama.cpp reads, trained for 4096 tokens (standard workloads' prompts fit a slot).
    gemma2 has no output tensor of its own, so no looping head."""
    if arch not in ("gemma2", "gemma3"):
        raise ValueError(f"no sliding-window layout for {arch!r}")
    e, head = base.n_embd, base.n_embd // base.n_head
    norms: list[tuple[str, tuple[int, ...]]] = []
    for i in range(n_layer):
        norms += [(f"blk.{i}.post_attention_norm.weight", (e,)), (f"blk.{i}.post_ffw_norm.weight", (e,))]
        if arch == "gemma3":
            norms += [(f"blk.{i}.attn_q_norm.weight", (head,)), (f"blk.{i}.attn_k_norm.weight", (head,))]
    spec = base.but(
        architecture=arch,
        n_layer=n_layer,
        n_ctx=max(base.n_ctx, 4096),  # the server caps a slot's context at the trained one
        extra_tensors=base.extra_tensors + tuple(norms),
        kv_overrides=(*base.kv_overrides, (f"{arch}.attention.sliding_window", window, "UINT32", None)),
    )
    if arch == "gemma2":
        spec = spec.but(drop_tensors=(*spec.drop_tensors, "output.weight"), cycle=0, head_seed=None)
    return spec


# A passage longer than ngram-simple's 48-token m-gram: a real model given it three times over
# goes on repeating it, so the n-gram methods draft in full on a real model too.
LOOP_TEXT = (
    "The small draft model proposes a few tokens, the target model checks all of them in one "
    "batch and keeps the ones it agrees with, then the draft starts again from the first token "
    "the target rejected, so the output is exactly what the target alone would have written. "
)


def _cycle_head(spec: ModelSpec, embd: np.ndarray, out: np.ndarray) -> None:
    """Rewrite token_embd / output in place so that greedy decoding loops through `spec.cycle` ids.

    Cycle tokens get embeddings of their own (r_i); every other token shares one direction u (plus
    a little noise). Output row c_{i+1} is 3 r_i and row c_0 is 3 (u + r_last): after a rms norm
    the right next token scores ~12, any other at most ~4 (random rows, 262k of them)."""
    n_vocab, e = embd.shape
    period = spec.cycle
    if not 0 < period < n_vocab:
        raise ValueError(f"cycle {period} needs a vocabulary larger than that (have {n_vocab})")
    rng = np.random.default_rng(spec.seed + 101)
    scale = spec.weight_scale / np.sqrt(e)
    start = n_vocab // 2
    ids = np.arange(start, start + period)
    u = rng.standard_normal((e,)).astype(np.float32) * scale
    rest = np.ones(n_vocab, dtype=bool)
    rest[ids] = False
    embd[rest] = u + 0.1 * rng.standard_normal((int(rest.sum()), e)).astype(np.float32) * scale
    r = rng.standard_normal((period, e)).astype(np.float32) * scale
    embd[ids] = r
    out[ids[1:]] = 3 * r[:-1]
    out[ids[0]] = 3 * (u + r[-1])


def _shapes(spec: ModelSpec, n_vocab: int) -> dict[str, tuple[int, ...]]:
    """Every tensor's numpy shape (rows, columns), in file order."""
    e, ff = spec.n_embd, spec.n_ff
    kv = e * spec.n_head_kv // spec.n_head
    shapes: dict[str, tuple[int, ...]] = {"token_embd.weight": (n_vocab, e)}
    for i in range(spec.n_layer + spec.nextn_predict_layers):
        shapes.update(
            {
                f"blk.{i}.attn_norm.weight": (e,),
                f"blk.{i}.attn_q.weight": (e, e),
                f"blk.{i}.attn_k.weight": (kv, e),
                f"blk.{i}.attn_v.weight": (kv, e),
                f"blk.{i}.attn_output.weight": (e, e),
                f"blk.{i}.ffn_norm.weight": (e,),
                f"blk.{i}.ffn_gate.weight": (ff, e),
                f"blk.{i}.ffn_up.weight": (ff, e),
                f"blk.{i}.ffn_down.weight": (e, ff),
            }
        )
        if i >= spec.n_layer:  # an MTP (next-n prediction) block
            shapes.update(
                {
                    f"blk.{i}.nextn.eh_proj.weight": (e, 2 * e),
                    f"blk.{i}.nextn.enorm.weight": (e,),
                    f"blk.{i}.nextn.hnorm.weight": (e,),
                    f"blk.{i}.nextn.shared_head_norm.weight": (e,),
                }
            )
    shapes["output_norm.weight"] = (e,)
    shapes["output.weight"] = (n_vocab, e)
    shapes.update(_head_shapes(spec))
    shapes.update(dict(spec.extra_tensors))
    for name in spec.drop_tensors:
        shapes.pop(name, None)
    return shapes


def _weights(spec: ModelSpec, n_vocab: int) -> dict[str, np.ndarray]:
    """Deterministic weights: base from `seed`, plus `noise` from `noise_seed`."""
    base = np.random.default_rng(spec.seed)
    jitter = np.random.default_rng(spec.noise_seed) if spec.noise else None
    shapes = _shapes(spec, n_vocab)
    out: dict[str, np.ndarray] = {}
    head = np.random.default_rng(spec.head_seed) if spec.head_seed is not None else None
    for name, shape in shapes.items():
        if len(shape) == 1:
            w = np.ones(shape, dtype=np.float32)
        else:
            rng = head if head is not None and name in ("token_embd.weight", "output.weight") else base
            w = rng.standard_normal(shape, dtype=np.float32) * (spec.weight_scale / np.sqrt(shape[-1]))
            if name.startswith("blk.") and spec.block_scale != 1.0:
                w = w * np.float32(spec.block_scale)
        if jitter is not None and len(shape) > 1:
            w = w + jitter.standard_normal(shape, dtype=np.float32) * (spec.noise / np.sqrt(shape[-1]))
        out[name] = w.astype(np.float32)
    if spec.cycle:
        _cycle_head(spec, out["token_embd.weight"], out["output.weight"])
    return out


def _head_shapes(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """The layer and head tensors llama.cpp's EAGLE-3 / DFlash loaders require (src/models/*.cpp).

    EAGLE-3: attention reads [token embedding, fused target features] (2 x n_embd inputs), and
    `fc` fuses the target's extracted layers (len(target_layers) x target_hidden_size inputs).
    DFlash: per-head q/k norms. Shapes follow the file's own metadata, so a draft whose metadata
    disagrees with its target is still a well-formed file.
    """
    e, hd = spec.n_embd, spec.n_embd // spec.n_head
    kv = e * spec.n_head_kv // spec.n_head
    out: dict[str, tuple[int, ...]] = {}
    if spec.architecture == "eagle3":
        layers = len(spec.eagle3_target_layers or (0, 1, 2))
        out["fc.weight"] = (e, layers * (spec.eagle3_target_hidden_size or e))
        for i in range(spec.n_layer):
            out[f"blk.{i}.attn_norm_2.weight"] = (e,)
            out[f"blk.{i}.attn_q.weight"] = (e, 2 * e)
            out[f"blk.{i}.attn_k.weight"] = (kv, 2 * e)
            out[f"blk.{i}.attn_v.weight"] = (kv, 2 * e)
    elif spec.architecture == "dflash":
        for i in range(spec.n_layer):
            out[f"blk.{i}.attn_q_norm.weight"] = (hd,)
            out[f"blk.{i}.attn_k_norm.weight"] = (hd,)
    return out


def _add_metadata(w: gguf.GGUFWriter, spec: ModelSpec, arch: str) -> None:
    for text, adder in (
        (spec.name, w.add_name),
        (spec.license, w.add_license),
        (spec.license_name, w.add_license_name),
        (spec.license_link, w.add_license_link),
        (spec.repo_url, w.add_repo_url),
    ):
        if text is not None:
            adder(text)
    if spec.base_model is not None:
        w.add_base_model_count(1)
        w.add_base_model_name(0, spec.base_model)
        if spec.base_model_repo_url:
            w.add_base_model_repo_url(0, spec.base_model_repo_url)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if spec.file_type == "f16" else gguf.LlamaFileType.ALL_F32)
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer + spec.nextn_predict_layers)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(spec.n_embd // spec.n_head)
    if spec.nextn_predict_layers:
        w.add_uint32(f"{arch}.nextn_predict_layers", spec.nextn_predict_layers)
    if spec.eagle3_target_layers is not None:
        w.add_array(f"{arch}.target_layers", list(spec.eagle3_target_layers))
    if spec.eagle3_target_hidden_size is not None:
        w.add_uint32(f"{arch}.target_hidden_size", spec.eagle3_target_hidden_size)
    if spec.dflash_block_size is not None:
        w.add_uint32(f"{arch}.block_size", spec.dflash_block_size)
    if spec.dflash_target_layers is not None:
        w.add_array(f"{arch}.target_layers", list(spec.dflash_target_layers))
    if spec.dflash_target_hidden_size is not None:
        w.add_uint32(f"{arch}.target_hidden_size", spec.dflash_target_hidden_size)
    for key, value in spec.extra_kv:
        w.add_key_value(key, value, _value_type(value))
    for key, value, vtype, sub in spec.kv_overrides:
        item = None if sub is None else gguf.GGUFValueType[sub]
        w.kv_data[0][key] = gguf.GGUFValue(value=value, type=gguf.GGUFValueType[vtype], sub_type=item)


def _value_type(value: object) -> gguf.GGUFValueType:
    if isinstance(value, bool):
        return gguf.GGUFValueType.BOOL
    if isinstance(value, int):
        return gguf.GGUFValueType.INT32
    if isinstance(value, float):
        return gguf.GGUFValueType.FLOAT32
    if isinstance(value, (list, tuple)):
        return gguf.GGUFValueType.ARRAY
    return gguf.GGUFValueType.STRING


def _copy_tokenizer(w: gguf.GGUFWriter, source: str) -> int:
    """Every tokenizer.* key of `source` with its stored type; the vocabulary size.

    Read with specreg's own reader: gguf-py's reader takes minutes over a 262k-token vocabulary."""
    from specreg.gguf.reader import GGUFArray, open_gguf

    gf = open_gguf(source)
    n_vocab = 0
    for key, value in gf.metadata.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = gguf.GGUFValueType(gf.value_types[key])
        if isinstance(value, GGUFArray):
            w.add_key_value(key, value.to_list(), vtype, sub_type=gguf.GGUFValueType(value.item_type))
            if key == gguf.Keys.Tokenizer.LIST:
                n_vocab = value.count
        else:
            w.add_key_value(key, value, vtype)
    if not n_vocab:
        raise ValueError(f"{source}: no tokenizer.ggml.tokens")
    return n_vocab


def _add_tokenizer(w: gguf.GGUFWriter, spec: ModelSpec) -> int:
    if spec.tokenizer_from is not None:
        return _copy_tokenizer(w, spec.tokenizer_from)
    vocab = build_vocab(spec)
    w.add_tokenizer_model(spec.vocab_type)
    if spec.pre is not None:
        w.add_tokenizer_pre(spec.pre)
    w.add_token_list(vocab.texts)
    w.add_token_scores(vocab.scores)
    w.add_token_types(vocab.types)
    if vocab.merges:
        w.add_token_merges(vocab.merges)
    for value, adder in (
        (spec.bos_id, w.add_bos_token_id),
        (spec.eos_id, w.add_eos_token_id),
        (spec.unk_id, w.add_unk_token_id),
        (spec.pad_id, w.add_pad_token_id),
        (spec.eot_id, w.add_eot_token_id),
        (spec.eom_id, w.add_eom_token_id),
    ):
        if value is not None:
            adder(value)
    if spec.add_bos is not None:
        w.add_add_bos_token(spec.add_bos)
    if spec.add_eos is not None:
        w.add_add_eos_token(spec.add_eos)
    if spec.chat_template is not None:
        w.add_chat_template(spec.chat_template)
    return len(vocab.texts)


def write_model(path: str | Path, spec: ModelSpec = ModelSpec(), *, data: bool = True) -> Path:
    """Write the model described by `spec` to `path` (same spec, same bytes).

    `data=False`: the header only, then the file is extended to its full size without writing
    (a sparse file of zero weights): a "500 MB model" for remote-read tests costs no disk.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arch = spec.architecture
    w = gguf.GGUFWriter(path, arch)
    _add_metadata(w, spec, arch)
    n_vocab = _add_tokenizer(w, spec)
    if not data:
        return _write_sparse(w, path, spec, n_vocab)
    if not spec.vocab_only:
        for name, tensor in _weights(spec, n_vocab).items():
            if spec.file_type == "f16" and tensor.ndim > 1:
                w.add_tensor(name, tensor.astype(np.float16), raw_dtype=_F16)
            else:
                w.add_tensor(name, tensor, raw_dtype=_F32)
        if spec.d2t is not None:
            w.add_tensor("d2t", np.asarray(spec.d2t, dtype=np.int64))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _write_sparse(w: gguf.GGUFWriter, path: Path, spec: ModelSpec, n_vocab: int) -> Path:
    sizes = []
    for name, shape in ({} if spec.vocab_only else _shapes(spec, n_vocab)).items():
        f16 = spec.file_type == "f16" and len(shape) > 1
        nbytes = int(np.prod(shape)) * (2 if f16 else 4)
        w.add_tensor_info(name, shape, np.dtype(np.float16 if f16 else np.float32), nbytes, _F16 if f16 else _F32)
        sizes.append(nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    align = gguf.GGUF_DEFAULT_ALIGNMENT
    pad = lambda n: -(-n // align) * align  # noqa: E731
    end = pad(path.stat().st_size) + sum(pad(n) for n in sizes)
    os.truncate(path, end)
    return path
