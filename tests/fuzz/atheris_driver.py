"""Coverage-guided fuzzing with atheris (libFuzzer) under the same oracle, for the byte surfaces.

    pip install atheris   # a wheel exists for CPython 3.11 on x86-64 Linux (3.0.0); not a dependency
    cd tests && nice python -m fuzz.atheris_driver {gguf|bundle|policy|workload} \\
        -max_total_time=600 -timeout=10 -rss_limit_mb=2048 CORPUS_DIR

The driver imports specreg's modules instrumented, writes the surface's seeds into CORPUS_DIR
(when empty), then hands libFuzzer's bytes
to the command in-process (fuzz.oracle.run_case): a traceback, another exit status, a case
over the time limit or a changed registry on exit 2 raises, and libFuzzer saves the input.
The oracle's own timer uses SIGALRM, so libFuzzer's -timeout is off; the case limit holds.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

# specreg's modules on the surfaces' paths, imported instrumented before anything else imports
# them (only specreg's own code: instrumenting every loaded module takes minutes)
with atheris.instrument_imports(include=["specreg"]):
    import specreg.audit.policy
    import specreg.benchmark.workloads.jsonl
    import specreg.cli
    import specreg.commands.audit
    import specreg.commands.bench
    import specreg.commands.check
    import specreg.commands.export
    import specreg.commands.runs
    import specreg.exchange.bundle
    import specreg.exchange.bundle_format
    import specreg.exchange.bundle_runs
    import specreg.exchange.portable
    import specreg.gguf.reader
    import specreg.gguf.summary
    import specreg.validators.checks_hparams
    import specreg.validators.memory_budget
    import specreg.validators.memory_facts
    import specreg.validators.pair  # noqa: F401

from fuzz import bundles, texts
from fuzz.gguf_counts import BASE
from fuzz.oracle import Case, run_case


def main() -> None:
    surface, rest = sys.argv[1], sys.argv[2:]
    work = Path(tempfile.mkdtemp(prefix="specreg-atheris-"))
    seed_bundle, dest = bundles.seed_bundle(work / "seed")
    target = work / {"gguf": "f.gguf", "bundle": "b.zip", "policy": "p.toml", "workload": "w.jsonl"}[surface]
    db = work / "case.db"
    if surface == "gguf":
        from specreg.testing import write_model

        seeds = [write_model(work / "s.gguf", BASE.but(n_layer=1, n_words=8)).read_bytes()]
        argv = ["--db", str(db), "check", "pair", str(target), str(target), "--budget", "1GiB", "--json"]
    elif surface == "bundle":
        seeds = [seed_bundle.read_bytes()]
        argv = ["--db", str(db), "import", str(target)]
    elif surface == "policy":
        seeds = [texts.policy_seed().encode()]
        argv = ["--db", str(dest), "audit", "--policy", str(target), "--json"]
    else:
        seeds = [texts.workload_text().encode()]
        argv = ["--db", str(dest), "bench", "admitted", "--workload", str(target), "--json"]
    dirs = [a for a in rest if not a.startswith("-")]
    if dirs and not any(Path(dirs[0]).glob("*")):
        Path(dirs[0]).mkdir(parents=True, exist_ok=True)
        for i, s in enumerate(seeds):
            (Path(dirs[0]) / f"seed-{i}").write_bytes(s)

    def one(data: bytes) -> None:
        target.write_bytes(data)
        copy = str(dest) if surface == "bundle" else None
        case = Case(id="atheris", argv=argv, db=str(db if surface in ("gguf", "bundle") else dest), copy_db_from=copy)
        outcome = run_case(case)
        if outcome.violations:
            raise AssertionError(f"{outcome.violations}: {outcome.stderr[-2000:]}")

    one(seeds[0])
    atheris.Setup([sys.argv[0], *rest], one)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
