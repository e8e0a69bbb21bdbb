"""One real benchmark run the `specreg watch` tests hold servers to, and the servers themselves.

The demo's models (specreg.demo): a target whose head follows a table (the alphabet loops; a
question is answered with word pieces that are nowhere in it) and a small draft that knows the
alphabet only, so speculation is right on one stratum and wrong on the other, on any machine.
Registered with their licences; pairs draft-simple (target + draft) and ngram-simple (the target
alone, 1-grams: on the alphabet prompts the n-gram copies every token), measured once in one run
(`--spec-type none`, draft-simple, ngram-simple; one round of the demo's repetitive prompts, the
stratum both are deployed for) on the bundled server. Also on disk:
the demo's near-miss draft (one token text changed: llama.cpp refuses to speculate with it) and a
draft the audit never saw (the same vocabulary, another head: llama.cpp loads it).

Servers are started with exactly the argv `specreg deploy` prints (its `--server` pointing at
`specreg-llama-server`), pinned to one of the machine's cores, as on a one-core host: the
machine's cores are shared, and llama.cpp's threads spinning on cores others use make a
request's time depend on who else runs (not what these tests measure).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import pytest
from _audit_world import specreg
from _bench_helpers import admit
from _shared import built_once

from specreg.registry.store import Registry

BINARY = Path(sys.executable).parent / "specreg-llama-server"
POLICY = """\
[evidence]
min_repetitions = 1
[speed]
min_speedup = 0.0
p95_tolerance_pct = 10000
[memory]
max_extra_ram_pct = 50
[licence]
allow = ["apache-2.0"]
"""
ABC = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class WatchWorld:
    folder: Path
    db: Path
    pairs: dict[str, int]  # "draft-simple", "ngram-simple"
    run_id: str
    target: Path
    draft: Path
    near_miss: Path
    other: Path
    policy: Path
    workload: list[dict[str, Any]] = field(default_factory=list)

    @property
    def repetitive(self) -> list[dict[str, Any]]:
        """The audited workload (its repetitive prompts: the stratum the draft is deployed for)."""
        return [w for w in self.workload if w["stratum"] == "repetitive"]

    def copy(self, dest: Path) -> Path:
        """A private copy of the registry (watch keeps its windows there)."""
        from _audit_world import _backup

        return _backup(self.db, dest)

    def deploy_argv(self, db: Path, pair: str, port: int, *extra: str) -> list[str]:
        """The argv `specreg deploy` prints for the pair (with --server and --port)."""
        args = [str(self.pairs[pair]), "--policy", str(self.policy), "--server", str(BINARY), "--port", str(port)]
        code, out, err = specreg("deploy", *args, *extra, "--json", db=db)
        assert code == 0, (out, err)
        argv: list[str] = json.loads(out)["argv"]
        return argv


def _build(folder: Path) -> None:
    from specreg.benchmark.run.runner import Runner
    from specreg.demo import DRAFT, DRAFTS, NGRAM, TARGET, WORKLOAD
    from specreg.schemas.bench_settings import BenchSettings
    from specreg.sources.provenance import register
    from specreg.testing import write_model

    target = write_model(folder / "target.gguf", TARGET)
    draft = write_model(folder / "draft.gguf", DRAFT)
    write_model(folder / "near-miss.gguf", DRAFTS[1][1])
    write_model(folder / "other.gguf", DRAFT.but(name="other-draft", head_seed=11))
    # the stratum both methods are deployed for (the draft and the 1-gram are right on the alphabet)
    items = [line for line in WORKLOAD.splitlines() if '"repetitive"' in line]
    (folder / "workload.jsonl").write_text("\n".join(items) + "\n")
    (folder / "policy.toml").write_text(POLICY)
    ngram = {k: v for k, v in NGRAM.items() if "simple" in k} | {"--spec-ngram-simple-size-n": 1}
    with pytest.MonkeyPatch.context() as mp, Registry(folder / "registry.db", show_progress=False) as reg:
        mp.setenv("SPECREG_HOME", str(folder))  # run logs stay in the fixture's folder
        for path in (target, draft):
            register(reg, path)
        pairs = {
            m: admit(reg, target, draft if m == "draft-simple" else None, m) for m in ("draft-simple", "ngram-simple")
        }
        opts = BenchSettings(
            workload=str(folder / "workload.jsonl"),
            methods=["draft-simple", "ngram-simple"],
            # drafts as long as the n-gram's: at full acceptance a step yields up to 17 tokens, so a
            # load spike on the baseline's round cannot push the speed-up past what acceptance
            # explains (the speed gate's `unexplained`), and `deploy` prints the command
            draft_n_max=[16],
            repeat=1,
            ctx_size=512,
            threads=1,
            ngram=ngram,
            start_timeout_s=60,
            request_timeout_s=60,
            run_timeout_s=240,
        )
        run = Runner(reg, opts).bench([pairs["draft-simple"]])[0]
    (folder / "world.json").write_text(json.dumps({"pairs": pairs, "run_id": run.info.run_id}))


@pytest.fixture(scope="session")
def watch_world(tmp_path_factory: pytest.TempPathFactory) -> WatchWorld:
    """Built once per test run (by one xdist worker; the others wait and read its files)."""
    folder = built_once(tmp_path_factory, "watch-world", _build)
    made = json.loads((folder / "world.json").read_text())
    return WatchWorld(
        folder=folder,
        db=folder / "registry.db",
        pairs=made["pairs"],
        run_id=made["run_id"],
        target=folder / "target.gguf",
        draft=folder / "draft.gguf",
        near_miss=folder / "near-miss.gguf",
        other=folder / "other.gguf",
        policy=folder / "policy.toml",
        workload=[json.loads(line) for line in (folder / "workload.jsonl").read_text().splitlines() if line.strip()],
    )


def _one_core() -> None:
    """In the server's child, before exec: one of the cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1]})


@contextmanager
def server(argv: list[str], *, start_timeout: float = 60, pin: bool = True) -> Iterator[subprocess.Popen[bytes]]:
    """The command as given, healthy on its --port, stopped (its whole session) afterwards;
    `pin`: on one core (the benchmark's servers, whose decode rate is compared, are not). Its log
    goes to a file: a pipe nobody reads fills up with llama.cpp's log and blocks the server."""
    port = argv[argv.index("--port") + 1]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            preexec_fn=_one_core if pin else None,
        )
        try:
            _healthy(proc, port, start_timeout, log)
            yield proc
        finally:
            stop(proc)


def _healthy(proc: subprocess.Popen[bytes], port: str, timeout: float, log: IO[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise AssertionError(f"server exited: {log.read().decode('utf-8', 'replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("the deployed command did not become healthy")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after a few seconds: the bundled server's stop waits for a request
    in flight that its stopped loop never answers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(2)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def shuffled_letters(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Chat-like prompts for the n-gram test: prose that mentions the letters, out of order. The
    target still answers with the alphabet, but what the prompt holds after each letter is not
    what follows it: the 1-gram lookup drafts from the prompt and is wrong."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        letters = list(ABC)
        rng.shuffle(letters)
        out.append({"id": f"mixed-{i}", "prompt": "".join(letters) + "".join(rng.sample(ABC, 4)), "max_tokens": 48})
    return out


@contextmanager
def traffic(port: int, items: list[dict[str, Any]]) -> Iterator[list[int]]:
    """Requests to the server, one after another over `items` (a client on the audited workload, or
    another), until the block ends; yields the list of finished request counts."""
    done = [0]
    halt = threading.Event()

    def send() -> None:
        # no keep-alive: a server stopping waits for its open connections (a restart would hang)
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60, trust_env=False, limits=limits) as c:
            while not halt.is_set():
                for it in items:
                    if halt.is_set():
                        return
                    try:
                        c.post("/completion", json={"prompt": it["prompt"], "n_predict": it.get("max_tokens", 48)})
                        done[0] += 1
                    except httpx.HTTPError:
                        time.sleep(0.1)  # the server is being restarted

    t = threading.Thread(target=send, daemon=True)
    t.start()
    try:
        yield done
    finally:
        halt.set()
        t.join(70)
