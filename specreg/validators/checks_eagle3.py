"""draft-eagle3: the draft reads the target's hidden states, so it must fit that target exactly.

Mirrors src/models/eagle3.cpp (load) and common/speculative.cpp (the EAGLE-3 implementation).
What llama.cpp does with a misfit is harsh (PROTOCOL §8): 2 target layers -> the draft fails to
load; a layer id above the target's n_layer, a wrong target_hidden_size, or a d2t value at or
beyond the vocabulary -> the server aborts. Every such case is an error here.
"""

from __future__ import annotations

from specreg.errors import GGUFError
from specreg.schemas.checks import CheckResult
from specreg.validators.checks_common import base_model
from specreg.validators.checks_simple import tokenizer_identity
from specreg.validators.ruleset import RuleSet
from specreg.validators.side import Side, result


def architecture(code: str, d: Side, want: str) -> CheckResult:
    arch = d.summary.architecture
    if arch != want:
        return result(code, "error", f"draft architecture is {arch!r}, not {want!r}", draft=arch, expected=want)
    return result(code, "pass", f"draft architecture is {want!r}", draft=arch)


def target_layers(
    code: str, layers: list[int] | None, t: Side, *, n_required: int | None, final_allowed: bool, key: str
) -> CheckResult:
    """Every extracted layer must exist in the target; `final_allowed`: id == n_layer reads the last hidden state."""
    n_layer = t.n_layer
    ev: dict[str, object] = {"layers": layers, "target_n_layer": n_layer, "key": key}
    if layers is None:
        return result(code, "error", f"{key} is missing: llama.cpp refuses to load the draft", **ev)
    if n_required is not None and len(layers) != n_required:
        return result(code, "error", f"{key} lists {len(layers)} layers; llama.cpp requires exactly {n_required}", **ev)
    if not layers:
        return result(code, "error", f"{key} is empty: the draft reads no target layer", **ev)
    if n_layer is None:
        return result(code, "error", "the target has no block_count: cannot place the draft's layers", **ev)
    limit = n_layer if final_allowed else n_layer - 1
    bad = [x for x in layers if x < 0 or x > limit]
    if bad:
        return result(
            code,
            "error",
            f"layer ids {bad} are outside the target's 0..{limit} (n_layer {n_layer}): the server aborts",
            **ev,
            bad=bad,
        )
    final = [x for x in layers if x == n_layer]
    if final:
        return result(
            code,
            "pass",
            f"layers {layers} fit the target's {n_layer} layers ({n_layer} reads the final hidden state)",
            **ev,
        )
    return result(code, "pass", f"layers {layers} fit the target's {n_layer} layers", **ev)


def hidden_size(
    code: str, stated: int | None, t: Side, *, what: str, consequence: str = "the server aborts"
) -> CheckResult:
    target = t.summary.embedding_length
    ev = {"draft": stated, "target": target, "source": what}
    if stated is None:
        return result(code, "error", f"{what} is missing: llama.cpp refuses to load the draft", **ev)
    if stated != target:
        return result(code, "error", f"{what} {stated} != target embedding length {target}: {consequence}", **ev)
    return result(code, "pass", f"{what} {stated} equals the target's embedding length", **ev)


def d2t(code: str, t: Side, d: Side, want_type: int) -> CheckResult:
    """A reduced draft vocab must map each draft row to a valid target id through `d2t`."""
    info = d.tensor("d2t")
    out_t = d.tensor("output.weight")
    rows = out_t.shape[1] if out_t is not None and len(out_t.shape) > 1 else None
    n_vocab = d.vocab.n_tokens
    bound = min(t.vocab.n_tokens, n_vocab)
    if info is None:
        if rows is not None and rows != n_vocab:
            return result(
                code,
                "error",
                f"draft output has {rows} rows but {n_vocab} tokens and no d2t mapping: it cannot load",
                output_rows=rows,
                n_tokens=n_vocab,
            )
        return result(
            code, "pass", "no d2t: the draft predicts over the full vocabulary", output_rows=rows, n_tokens=n_vocab
        )
    ev: dict[str, object] = {
        "shape": info.shape,
        "ggml_type": info.type_name,
        "output_rows": rows,
        "target_n_tokens": t.vocab.n_tokens,
    }
    if info.ggml_type != want_type or len(info.shape) != 1:
        return result(
            code, "error", f"d2t must be a 1-D I64 tensor, found {info.type_name} {info.shape}: the server aborts", **ev
        )
    length = info.shape[0]
    if rows is not None and length != rows:
        return result(code, "error", f"d2t has {length} entries but the draft output has {rows} rows", **ev)
    try:
        values = d.file.tensor_values("d2t")
    except GGUFError as exc:
        return result(code, "error", f"d2t cannot be read: {exc.problem}", **ev)
    bad = [(i, int(v)) for i, v in enumerate(values) if not 0 <= int(v) < bound]
    if bad:
        return result(
            code,
            "error",
            f"{len(bad)} d2t values are outside 0..{bound - 1}: the server aborts",
            **ev,
            n_bad=len(bad),
            first=[{"row": i, "value": v} for i, v in bad[:5]],
        )
    dupes = len(values) - len(set(values))
    if dupes:
        return result(code, "warn", f"d2t maps {dupes} draft rows onto already used target ids", **ev, duplicates=dupes)
    return result(code, "pass", f"d2t maps {length} draft rows into the target's {bound} tokens", **ev)


def check_eagle3(t: Side, d: Side, rules: RuleSet) -> list[CheckResult]:
    r = rules.eagle3
    spec = d.summary.speculative
    out = [architecture("eagle3.architecture", d, r.architecture)]
    out.append(
        target_layers(
            "eagle3.target_layers",
            spec.eagle3_target_layers,
            t,
            n_required=r.n_target_layers,
            final_allowed=r.final_layer_allowed,
            key=f"{r.architecture}.target_layers",
        )
    )
    out.append(
        hidden_size(
            "eagle3.target_hidden_size", spec.eagle3_target_hidden_size, t, what=f"{r.architecture}.target_hidden_size"
        )
    )
    tn, dn = t.vocab.n_tokens, d.vocab.n_tokens
    if dn < tn:
        out.append(
            result(
                "eagle3.n_tokens", "error", f"draft has {dn} tokens, fewer than the target's {tn}", target=tn, draft=dn
            )
        )
    else:
        out.append(result("eagle3.n_tokens", "pass", f"draft has {dn} tokens (target {tn})", target=tn, draft=dn))
    out.append(d2t("eagle3.d2t", t, d, r.d2t_ggml_type))
    out.append(tokenizer_identity("eagle3.tokenizer", t, d, rules))
    out.append(base_model("eagle3.base_model", t, d))
    return out
