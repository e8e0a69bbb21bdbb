"""One oracle over every untrusted input (tests/fuzz/oracle.py): the fixed corpus of each surface.

GGUF files with hostile counts, damaged bundles, policies, workloads, llama-server answers, range
reads, hub replies, damaged signatures (bundle envelopes, model signatures), and a hostile hub
that never finishes, trickles or loops (its own properties: within --timeout + 2 s, RSS growth
under 200 MB, nothing kept): each ends in a verdict or one `error:` line, within the time and the
2 GiB address space, with the registry unchanged where the command failed, and nothing llama.cpp's
loader refuses admitted. The cases run
in two child processes side by side (the address-space limit is theirs; the CLI runs in-process
there). The long pass over random cases of the same surfaces is `pytest -m fuzz`
(tests/fuzz/run_long.py); README "Fuzzing" says how to run it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from fuzz.harness import SURFACES, World, corpus_cases, random_cases
from fuzz.oracle import failures, run_batch, run_parallel


def test_every_surface_corpus_holds_the_oracle(tmp_path: Path) -> None:
    cases = corpus_cases(World(tmp_path / "world"))
    assert {c.id.split(":")[0] for c in cases} == set(SURFACES)
    # two children side by side (2 cores): the hostile hub's cases, the longest part, most of it spent
    # waiting out trickles and deadlines on purpose (with their own hub and registry), and every other
    # surface (the GGUF cases share one registry, so they stay together)
    hostile = [c for c in cases if c.id.startswith("hostile:")]
    groups = [[c for c in cases if not c.id.startswith("hostile:")], hostile]
    outcomes = run_parallel(groups, tmp_path / "run")
    assert len(outcomes) == len(cases)
    bad = failures(outcomes)
    assert not bad, "\n\n".join(bad)
    by_id = {o.id: o for o in outcomes}
    # the oracle is not vacuous: pristine inputs succeed, the regressions are refused
    assert by_id["bundle:seed"].code == 0 and by_id["range:status-200"].code == 2
    blocks = by_id["gguf:llama-blocks-4294967297-UINT64:0"]
    assert blocks.code == 1 and "structure.hparams" in blocks.stdout, blocks.stdout[-500:]
    assert by_id["gguf:deepseek2-heads-9223372036854775807-UINT64:0"].code == 1
    assert all(by_id[f"bundle:{n}"].code == 2 for n in ("flip-manifest-deflate", "flip-manifest-crc", "cut-half"))
    # signatures: the pristine ones verify, every damaged or misplaced one is refused (one line, registry kept)
    signed = {o.id.split(":", 1)[1]: o for o in outcomes if o.id.startswith("signature:")}
    # a key the policy does not name is recorded, ignored for trust, never fatal (issue 46)
    good = {"seed", "seed-policy", "model-seed", "unknown-cosigner", "unknown-key"}
    assert all(signed[n].code == 0 for n in good), {n: signed[n].stderr for n in good}
    assert "not in [trust] signers: recorded, not trusted" in " ".join(signed["unknown-key"].stdout.split())
    assert all(o.code == 2 for n, o in signed.items() if n not in good), {
        n: (o.code, o.stderr[-300:]) for n, o in signed.items() if n not in good and o.code != 2
    }
    # the hostile hub: each of issue 46's inputs ends in its one error line (TIME and MEMORY held)
    hostile = {o.id.split(":", 1)[1]: o for o in outcomes if o.id.startswith("hostile:")}
    assert hostile["self-link"].code == hostile["trickle-gguf"].code == hostile["fetch-trickle"].code == 2
    assert "did not finish within 1 s (--timeout SECONDS allows more)" in hostile["trickle-gguf"].stderr


@pytest.mark.fuzz
@pytest.mark.parametrize("surface", SURFACES)
def test_long_pass(surface: str, tmp_path: Path) -> None:
    """Random cases of one surface for SPECREG_FUZZ_SECONDS (default 60) each."""
    import os
    import time

    seconds = float(os.environ.get("SPECREG_FUZZ_SECONDS", "60"))
    seed = int(os.environ.get("SPECREG_FUZZ_SEED", "0")) or random.randrange(1 << 30)
    rng, world = random.Random(seed), World(tmp_path / "world")
    deadline, tried, bad = time.monotonic() + seconds, 0, []
    while time.monotonic() < deadline:
        outcomes = run_batch(random_cases(surface, world, rng, 60), tmp_path / "run")
        tried += len(outcomes)
        bad += failures(outcomes)
    print(f"{surface}: seed {seed}, {tried} cases in {seconds:.0f} s, {len(bad)} broke the oracle")
    assert not bad, "\n\n".join(bad[:20])


@pytest.fixture
def semantic_world(audit_world, tmp_path: Path) -> tuple[bytes, Path, Path]:
    """(the shared benchmark world's bundle, the registry it is imported into, a policy)."""
    from fuzz.semantic import prepare

    seed, dest = prepare(audit_world.copy(tmp_path / "source.db"), tmp_path / "semantic")
    return seed, dest, audit_world.policy_file(tmp_path)


def test_resealed_semantic_mutations_hold_the_oracle(semantic_world: tuple[bytes, Path, Path], tmp_path: Path) -> None:
    """Issue 36's short pass: every corpus regression (tests/fuzz/corpus/semantic/) and a few random
    field mutations of every record type, resealed, imported and read back (fuzz/semantic.py)."""
    from fuzz import semantic

    seed, dest, policy = semantic_world
    inputs = [("seed", seed), *semantic.corpus_inputs(seed)]
    inputs += semantic.random_inputs(seed, random.Random(36), 6)
    cases = semantic.cases(inputs, tmp_path / "cases", dest, policy)
    half = len(cases) // 2
    outcomes = run_parallel([cases[:half], cases[half:]], tmp_path / "run")
    bad = failures(outcomes)
    assert not bad, "\n\n".join(bad)
    by_id = {o.id: o for o in outcomes}
    # not vacuous: the pristine bundle imports, each forged one the issue names is refused
    assert by_id["semantic:seed"].code == 0, by_id["semantic:seed"].stderr
    wrong = []
    for name in (p.stem for p in semantic.CORPUS.glob("*.json")):
        want = json.loads((semantic.CORPUS / f"{name}.json").read_text()).get("expect", "refused")
        got = by_id[f"semantic:{name}"]
        if (got.code == 2) != (want == "refused"):
            wrong.append(f"{name}: exit {got.code}, want {want}: {got.stderr[-300:]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.fuzz
def test_semantic_long_pass(semantic_world: tuple[bytes, Path, Path], tmp_path: Path) -> None:
    """Random resealed field mutations over every field of every record type for SPECREG_FUZZ_SECONDS."""
    import os
    import time

    from fuzz import semantic

    seconds = float(os.environ.get("SPECREG_FUZZ_SECONDS", "60"))
    seed_n = int(os.environ.get("SPECREG_FUZZ_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed_n)
    seed, dest, policy = semantic_world
    deadline, tried, bad = time.monotonic() + seconds, 0, []
    while time.monotonic() < deadline:
        cases = semantic.cases(semantic.random_inputs(seed, rng, 20), tmp_path / f"c{tried}", dest, policy)
        outcomes = run_batch(cases, tmp_path / "run")
        tried += len(outcomes)
        bad += failures(outcomes)
    print(f"semantic: seed {seed_n}, {tried} cases in {seconds:.0f} s, {len(bad)} broke the oracle")
    assert not bad, "\n\n".join(bad[:20])
