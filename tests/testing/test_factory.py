"""The tiny-model factory: deterministic, small, and loadable by real llama.cpp."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import gguf

from specreg.testing import ModelSpec, write_model
from specreg.testing.modelspec import SMALL_NOISE


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_same_spec_same_bytes_and_small(tmp_path: Path) -> None:
    a = write_model(tmp_path / "a.gguf", ModelSpec(seed=3))
    b = write_model(tmp_path / "b.gguf", ModelSpec(seed=3))
    c = write_model(tmp_path / "c.gguf", ModelSpec(seed=4))
    assert _sha(a) == _sha(b)
    assert _sha(a) != _sha(c)
    assert 100_000 < a.stat().st_size < 1_000_000


def test_variants_are_parameters(tmp_path: Path) -> None:
    spec = ModelSpec(
        token_edits=((300, "\u2581swapped"),),
        extra_tokens=3,
        add_bos=False,
        chat_template="{{ messages }}",
        file_type="f16",
        eagle3_target_layers=(0, 1, 2),
        eagle3_target_hidden_size=64,
        architecture="eagle3",
        d2t=(0, 1, 2),
    )
    r = gguf.GGUFReader(write_model(tmp_path / "v.gguf", spec))
    tokens = r.fields["tokenizer.ggml.tokens"]
    texts = [bytes(tokens.parts[i]).decode() for i in tokens.data]
    assert texts[300] == "\u2581swapped"
    assert texts[-1] == "<extra_2>"
    assert bool(r.fields["tokenizer.ggml.add_bos_token"].parts[-1][0]) is False
    assert r.fields["general.architecture"].contents() == "eagle3"
    assert list(r.fields["eagle3.target_layers"].contents()) == [0, 1, 2]
    names = {t.name for t in r.tensors}
    assert "d2t" in names
    assert r.get_tensor(0).tensor_type in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.F32)
    vocab_only = gguf.GGUFReader(write_model(tmp_path / "vo.gguf", ModelSpec(vocab_only=True)))
    assert len(vocab_only.tensors) == 0
    mtp = gguf.GGUFReader(write_model(tmp_path / "mtp.gguf", ModelSpec(nextn_predict_layers=1)))
    assert any(".nextn." in t.name for t in mtp.tensors)


_SERVE = textwrap.dedent(
    """
    import json, sys, time, httpx, xllamacpp as x
    target, draft, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = x.CommonParams()
    p.model.path = target
    p.n_ctx = 256
    p.port = port
    p.endpoint_metrics = True
    p.cpuparams.n_threads = 1
    p.speculative.types = [x.common_speculative_type.COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE]
    p.speculative.draft.mparams.path = draft
    s = x.Server(p)
    c = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    for _ in range(200):
        try:
            if c.get("/health").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    r = c.post("/completion", json={"prompt": "the model", "n_predict": 24, "temperature": 0}).json()
    print(json.dumps({"content": r["content"], "n": r["tokens_predicted"],
                      "draft_n": r["timings"].get("draft_n"), "acc": r["timings"].get("draft_n_accepted")}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(target: Path, draft: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SERVE, str(target), str(draft), str(_free_port())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_identical_and_small_noise_pairs_serve_in_llama_cpp(tmp_path: Path) -> None:
    target = write_model(tmp_path / "target.gguf", ModelSpec())
    same = write_model(tmp_path / "same.gguf", ModelSpec())
    noisy = write_model(tmp_path / "noisy.gguf", ModelSpec(noise=SMALL_NOISE))
    ident = _serve(target, same)
    assert ident["n"] == 24 and ident["draft_n"] > 0
    assert ident["acc"] == ident["draft_n"]  # same weights: every drafted token accepted
    noise = _serve(target, noisy)
    assert noise["content"] == ident["content"]  # greedy: speculation never changes the output
    assert noise["draft_n"] > 0 and 0 < noise["acc"] < noise["draft_n"]


def test_shared_head_and_quiet_blocks_make_a_deep_target_and_a_shallow_draft(tmp_path: Path) -> None:
    """`head_seed` draws embeddings and output independently of depth; `block_scale` quiets blocks."""
    deep = gguf.GGUFReader(write_model(tmp_path / "t.gguf", ModelSpec(n_layer=4, head_seed=7, block_scale=0.02)))
    shallow = gguf.GGUFReader(write_model(tmp_path / "d.gguf", ModelSpec(n_layer=1, head_seed=7, block_scale=0.02)))
    loud = gguf.GGUFReader(write_model(tmp_path / "l.gguf", ModelSpec(n_layer=1, head_seed=7)))
    t = {x.name: x.data for x in deep.tensors}
    d = {x.name: x.data for x in shallow.tensors}
    q = {x.name: x.data for x in loud.tensors}
    for name in ("token_embd.weight", "output.weight"):
        assert (t[name] == d[name]).all()
    assert abs(float(abs(d["blk.0.attn_q.weight"]).mean()) / float(abs(q["blk.0.attn_q.weight"]).mean()) - 0.02) < 1e-3
    plain = {x.name: x.data for x in gguf.GGUFReader(write_model(tmp_path / "p.gguf", ModelSpec(n_layer=1))).tensors}
    assert not (plain["output.weight"] == d["output.weight"]).all()  # off by default: old models unchanged
