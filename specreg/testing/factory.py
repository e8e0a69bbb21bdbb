"""Tiny, deterministic GGUF models for tests, the demo and benchmarks.

Every variant is a parameter of `ModelSpec`, never a copied file: a rule-breaking draft is
the target's spec with one field changed. Weights come from `seed`; `noise` adds a second,
independently seeded perturbation so a draft can agree with its target often but not always.
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np

from specreg.testing.modelspec import CYCLER, ModelSpec
from specreg.testing.vocab import build_vocab

_F16 = gguf.GGMLQuantizationType.F16
_F32 = gguf.GGMLQuantizationType.F32
_PLAIN = ModelSpec()  # write_model's default: the plain tiny model


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


def recurrent_spec(n_layer: int = 2, d_state: int = 16, d_conv: int = 4, base: ModelSpec = CYCLER) -> ModelSpec:
    """A tiny mamba model (every layer recurrent, no attention) the bundled llama.cpp serves with a
    recurrent state and context checkpoints of it: the tensors and ssm.* keys llama_model_mamba
    loads (src/models/mamba.cpp: d_inner 2 n_embd, a time-step rank of n_embd / 8), the attention
    and FFN tensors left out (the loader refuses a tensor it does not take)."""
    e = base.n_embd
    d_inner, dt_rank = 2 * e, max(1, e // 8)
    drop = [
        f"blk.{i}.{name}.weight"
        for i in range(n_layer)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down")
    ]
    extra: list[tuple[str, tuple[int, ...]]] = []
    for i in range(n_layer):  # numpy shapes: (ne1, ne0) of llama.cpp's {ne0, ne1}
        extra += [
            (f"blk.{i}.ssm_in.weight", (2 * d_inner, e)),
            (f"blk.{i}.ssm_conv1d.weight", (d_inner, d_conv)),
            (f"blk.{i}.ssm_conv1d.bias", (d_inner,)),
            (f"blk.{i}.ssm_x.weight", (dt_rank + 2 * d_state, d_inner)),
            (f"blk.{i}.ssm_dt.weight", (d_inner, dt_rank)),
            (f"blk.{i}.ssm_dt.bias", (d_inner,)),
            (f"blk.{i}.ssm_a", (d_inner, d_state)),
            (f"blk.{i}.ssm_d", (d_inner,)),
            (f"blk.{i}.ssm_out.weight", (e, d_inner)),
        ]
    keys = {"conv_kernel": d_conv, "inner_size": d_inner, "state_size": d_state, "time_step_rank": dt_rank}
    return base.but(
        architecture="mamba",
        n_layer=n_layer,
        n_ctx=max(base.n_ctx, 4096),
        extra_tensors=base.extra_tensors + tuple(extra),
        drop_tensors=(*base.drop_tensors, *drop),
        kv_overrides=(*base.kv_overrides, *((f"mamba.ssm.{k}", v, "UINT32", None) for k, v in keys.items())),
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


def _table_head(spec: ModelSpec, embd: np.ndarray, out: np.ndarray) -> None:
    """Rewrite token_embd / output in place so that greedy decoding follows `spec.next_tokens`.

    As `_cycle_head`: each listed token gets an embedding of its own (r_t), every other token
    shares one direction u (plus a little noise); the output row of a successor is 3 times the sum
    of its predecessors' directions (the first pair's next also gets 3 u)."""
    n_vocab, e = embd.shape
    table = dict(spec.next_tokens)
    if any(not (0 <= t < n_vocab and 0 <= n < n_vocab) for t, n in table.items()):
        raise ValueError(f"next_tokens names a token outside the vocabulary (0..{n_vocab - 1})")
    rng = np.random.default_rng(spec.seed + 103)
    scale = spec.weight_scale / np.sqrt(e)
    ids = np.array(sorted(table))
    u = rng.standard_normal((e,)).astype(np.float32) * scale
    rest = np.ones(n_vocab, dtype=bool)
    rest[ids] = False
    embd[rest] = u + 0.1 * rng.standard_normal((int(rest.sum()), e)).astype(np.float32) * scale
    embd[ids] = rng.standard_normal((len(ids), e)).astype(np.float32) * scale
    successors = {n for n in table.values()}
    for s in successors:
        out[s] = 0.0
    for t, n in table.items():
        out[n] += 3 * embd[t]
    out[spec.next_tokens[0][1]] += 3 * u


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
    if spec.next_tokens:
        _table_head(spec, out["token_embd.weight"], out["output.weight"])
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

    Read with specreg's own reader: gguf-py's reader is slow over a large vocabulary."""
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


def write_model(path: str | Path, spec: ModelSpec = _PLAIN, *, data: bool = True) -> Path:
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
