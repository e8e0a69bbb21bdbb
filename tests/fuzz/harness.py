"""Cases for every surface: the fixed corpus (tests/fuzz/corpus/<surface>/) and random ones.

`corpus_cases` is what the default suite runs (a few seconds, one child process);
`random_cases` is what the long pass (`pytest -m fuzz`, tests/fuzz/run_long.py) adds, surface
by surface, for as long as it is given. Both are judged by fuzz.oracle alone.
"""

from __future__ import annotations

import json
import random
import zipfile
from functools import cache
from pathlib import Path

from fuzz import bundles, gguf_counts, hostile, remote, signatures, texts
from fuzz.oracle import Case

CORPUS = Path(__file__).parent / "corpus"
SURFACES = ("gguf", "bundle", "policy", "workload", "server", "range", "hub", "signature", "hostile")


def _recipes(surface: str) -> list[tuple[str, dict]]:
    return [(p.stem, json.loads(p.read_text())) for p in sorted((CORPUS / surface).glob("*.json"))]


@cache
def _loader() -> gguf_counts.Loader:
    from specreg.validators.ruleset import load_rule_set

    s = load_rule_set().structure
    return gguf_counts.Loader(frozenset(s.token_embd_vocab), dict(s.standard_qkv))


class World:
    """The files every surface's cases start from, built once per folder."""

    def __init__(self, work: Path) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self._bundle: tuple[bytes, Path] | None = None
        self._gguf: Path | None = None
        self._signed: signatures.Signed | None = None

    def bundle(self) -> tuple[bytes, Path]:
        if self._bundle is None:
            path, dest = bundles.seed_bundle(self.work / "bundle-seed")
            self._bundle = (path.read_bytes(), dest)
        return self._bundle

    def gguf(self) -> Path:
        if self._gguf is None:
            from specreg.testing import ModelSpec, write_model

            self._gguf = write_model(self.work / "remote.gguf", ModelSpec())
        return self._gguf

    def signed(self) -> signatures.Signed:
        """The seed bundle signed, its key and policy, and a signed GGUF (the signature surface)."""
        if self._signed is None:
            seed, dest = self.bundle()
            self._signed = signatures.Signed(self.work / "signed", seed, dest, self.gguf())
        return self._signed

    def target(self) -> Path:
        """A target whose name has a family the hub search looks for (the hostile surface)."""
        path = self.work / "hostile-target.gguf"
        if not path.exists():
            from specreg.testing import ModelSpec, write_model

            write_model(path, ModelSpec(name="Tiny-135M-Instruct", base_model="Tiny 135M"))
        return path

    def empty_db(self) -> Path:
        return self.bundle()[1]  # holds one artifact, no admitted pair: nothing to audit or bench

    def admitted_db(self) -> Path:
        """The registry the seed bundle was exported from: one admitted pair, no runs (an audit
        then decides on the policy's gates instead of stopping at an empty registry)."""
        return self.bundle()[1].parent / "source.db"


def _bundle_recipe(seed: bytes, recipe: dict) -> bytes | None:
    kind = recipe["kind"]
    if kind == "cut":
        return seed[: int(recipe["at"] * len(seed))]
    buf = bytearray(seed)
    if kind == "flip-tail":
        buf[len(buf) - recipe["back"]] ^= 0xFF
        return bytes(buf)
    if kind == "flip-member":
        import io

        with zipfile.ZipFile(io.BytesIO(seed)) as zf:
            info = zf.getinfo(recipe["member"])
        start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
        buf[start + min(info.compress_size - 1, int(recipe["at"] * info.compress_size))] ^= 0xFF
        return bytes(buf)
    if kind == "structural":
        named = dict(bundles.structural(seed))
        return named.get(recipe["name"])
    raise ValueError(kind)


def corpus_cases(world: World) -> list[Case]:
    """Every corpus entry of every surface, as cases (the default suite's pass)."""
    out: list[Case] = []
    w = world.work
    relabels = [gguf_counts.Relabel(r["arch"], r["key"], r["value"], r["vtype"]) for _, r in _recipes("gguf")]
    out += gguf_counts.cases(relabels, w / "gguf", _loader(), every_command=False)
    seed, dest = world.bundle()
    damaged = [("seed", seed)]
    for name, recipe in _recipes("bundle"):
        data = _bundle_recipe(seed, recipe)
        assert data is not None, f"bundle corpus entry {name}: no such edit"
        damaged.append((name, data))
    out += bundles.cases(damaged, w / "bundle", dest)
    for kind, ext in (("policy", "toml"), ("workload", "jsonl")):
        files = [("seed", (texts.policy_seed() if kind == "policy" else texts.workload_text()).encode())]
        files += [(p.stem, p.read_bytes()) for p in sorted((CORPUS / kind).glob(f"*.{ext}"))]
        out += texts.cases(kind, files, w / kind, world.admitted_db() if kind == "policy" else world.empty_db())
    server = _recipes("server")
    out += [Case(id=f"server:{n}", call="remote:llama", args=[r["endpoint"], r["reply"]]) for n, r in server]
    g = str(world.gguf())
    out += [Case(id=f"range:{n}", call="remote:range_read", args=[r["lie"], g]) for n, r in _recipes("range")]
    out += [Case(id=f"hub:{n}", call="remote:hub", args=[r["edit"], g]) for n, r in _recipes("hub")]
    out += signatures.cases(world.signed(), _recipes("signature"), w / "signature", world.empty_db())
    out += _hostile_cases(_recipes("hostile"), world)
    return out


def _hostile_cases(recipes: list[tuple[str, dict]], world: World) -> list[Case]:
    g, t = str(world.gguf()), str(world.target())
    return [Case(id=f"hostile:{n}", call="hostile:run", args=[r, g, t]) for n, r in recipes]


def random_cases(surface: str, world: World, rng: random.Random, n: int, *, every: bool = False) -> list[Case]:
    """About `n` new cases of one surface, drawn with `rng` (`every`: whole cross products)."""
    w = world.work / f"{surface}-{rng.randrange(1 << 30)}"
    if surface == "gguf":
        from specreg.validators.ruleset import load_rule_set

        archs = sorted(load_rule_set().structure.block_tensors) if every else gguf_counts.ARCHS
        counts = gguf_counts.COUNTS + [rng.randrange(-(2**63), 2**64) for _ in range(2)]
        pool = gguf_counts.relabels(archs, list(gguf_counts.KEYS), counts, wide=True)
        pool += gguf_counts.speculative_relabels(counts)
        picked = gguf_counts.sample(pool, max(1, n // 6), rng.randrange(1 << 30))
        return gguf_counts.cases(picked, w, _loader(), every_command=True)
    if surface == "bundle":
        seed, dest = world.bundle()
        inputs = bundles.flips(seed, bundles.sample_positions(len(seed), n // 2, rng.randrange(1 << 30)))
        inputs += bundles.truncations(seed, bundles.sample_positions(len(seed), n // 4, rng.randrange(1 << 30)))
        inputs += rng.sample(bundles.structural(seed, bombs=True), min(n // 4, 27))
        return bundles.cases(inputs, w, dest)
    if surface in ("policy", "workload"):
        if surface == "policy":
            inputs = texts.policy_inputs(texts.policy_seed(), rng, n // 2, every=every)
        else:
            inputs = texts.workload_inputs(texts.workload_seed(), rng, n // 2, every=every)
        return texts.cases(surface, inputs, w, world.admitted_db() if surface == "policy" else world.empty_db())
    if surface == "server":
        replies = remote.llama_replies(rng, max(1, n // 4))
        return [Case(id=f"server:{name}", call="remote:llama", args=[ep, rep]) for name, ep, rep in replies]
    g = str(world.gguf())
    if surface == "range":
        lies = [Case(id=f"range:{lie}", call="remote:range_read", args=[lie, g]) for lie in remote.RANGE_LIES]
        mutated = [
            Case(id=f"range:mutated-{k}", call="remote:range_read", args=["good", g, k])
            for k in (rng.randrange(1 << 30) for _ in range(n))
        ]
        return lies + mutated
    if surface == "hub":
        return [Case(id=f"hub:{e}", call="remote:hub", args=[e, g]) for e in remote.HUB_EDITS]
    if surface == "hostile":
        return _hostile_cases(hostile.random_recipes(rng, max(1, n // 6)), world)
    if surface == "signature":
        picked = [
            (f"{k}-{i}", {"kind": k, "at": rng.random()})
            for i, k in enumerate(rng.choice(signatures.RANDOM_KINDS) for _ in range(max(1, n // 2)))
        ]
        return signatures.cases(world.signed(), picked, w, world.empty_db())
    raise ValueError(surface)
