"""Surface `hostile`: a loopback hub and CDN (tests/hubserver.py) that never finish an answer,
trickle it a byte every few seconds, announce 10 GB, link a listing's next page to itself or to
new pages without end, redirect in a loop, list 100,000 models, or send more of a file than the
hub declared - against `drafts TARGET --hub`, `drafts URL`, `inspect hf://` and `fetch`.

Besides the oracle's own rules (one `error:` line, no traceback, bounded CPU), the surface has two
properties of its own, measured here and returned as violations:

- TIME: the command ends within its `--timeout` + 2 s, counted from the hub's first request of
  the case (the operation's deadline starts with its first request);
- MEMORY: the process's RSS (sampled every 10 ms while the command runs) grows by less than
  200 MB over what it was when the case began;

and nothing is kept: the registry and the Hugging Face cache are byte for byte as they were
(the cache already holds one fetched file, as a user's would).

A recipe (tests/fuzz/corpus/hostile/*.json, or `random_recipes`) names the command (`run`:
drafts-hub, drafts-url, inspect, fetch), the hub's misbehaviour (`listing`, `info`: one of
hubserver.HOSTILE; `trickle_after`, `declare`, `redirect_loop` for the file), the deadline
(`timeout`), the trickle's pace (`trickle_s`), the listing's length (`entries`) and `--limit`,
and whether it must end in an error (`expect`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import random
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from fuzz.remote import CliResult, _cli

RSS_GROWTH = 200 << 20
_STATE: dict[str, Any] = {}
_COUNT = itertools.count()
FAMILY = "acme/Tiny-135M-GGUF"


def _tree(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(root):
        out.update((os.path.join(dirpath, d), "dir") for d in dirs)
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[p] = hashlib.file_digest(fh, "sha256").hexdigest()
    return out


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Sampler:
    """The process's peak RSS while the command runs (ru_maxrss is a high-water mark for the whole
    child, which earlier cases may have set)."""

    def __init__(self) -> None:
        self.base = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, _rss())

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())
        return self.peak - self.base


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Any:
    saved = {k: os.environ.get(k) for k in [*values, "HF_HUB_OFFLINE"]}
    os.environ.update(values)
    os.environ.pop("HF_HUB_OFFLINE", None)
    from huggingface_hub import constants

    offline, constants.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE, False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = offline
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _state(gguf_path: str, target_path: str) -> dict[str, Any]:
    """This child's hub, its environment, a registry holding the target, a cache holding a file."""
    if _STATE:
        return _STATE
    from hubserver import FakeHub

    hub = FakeHub().__enter__()
    home = Path(tempfile.mkdtemp(prefix="specreg-hostile-"))
    env = {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HOME": str(home / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "SPECREG_DB": str(home / "registry.db"),
    }
    hub.add_commit(FAMILY, {"m.gguf": Path(gguf_path).read_bytes()})
    hub.repos[FAMILY].tags = ["gguf"]
    with _env(env):
        for argv in (["fetch", FAMILY, "m.gguf"], ["register", target_path], ["drafts", target_path]):
            if argv[0] == "drafts":  # files changed just now are hashed again by each command (racy
                old = time.time() - 3600  # stats), which writes: an hour old, the drafts run settles them
                for path in [Path(target_path), *(home / "hf").rglob("*.gguf")]:
                    os.utime(path, (old, old))
            done = _cli(argv)
            assert done.code == 0, (argv, done.stderr)
    _STATE.update(hub=hub, home=home, env=env, gguf=Path(gguf_path).read_bytes(), target=target_path)
    return _STATE


def run(recipe: dict[str, Any], gguf_path: str, target_path: str) -> CliResult:
    """One recipe against the hostile hub, judged for TIME, MEMORY and nothing kept."""
    from hubserver import FakeFile, FakeRepo, gguf_bytes

    st = _state(gguf_path, target_path)
    hub = st["hub"]
    timeout = float(recipe.get("timeout", 1.0))
    hub.listing = recipe.get("listing")
    hub.trickle_s = float(recipe.get("trickle_s", 2.0))
    hub.listing_entries = int(recipe.get("entries", 100_000))
    family: FakeRepo = hub.repos[FAMILY]
    family.info_mode = recipe.get("info") if recipe["run"] == "drafts-hub" else None
    n = next(_COUNT)
    repo = f"acme/case-{n}-GGUF"
    data: bytes | Path = gguf_bytes(seed=n + 1)  # a file of its own: the CDN finds blobs by SHA-256
    if recipe.get("size"):  # a big file: the real header, then a sparse tail
        big = st["home"] / f"{repo.split('/')[1]}.gguf"
        big.write_bytes(data)
        with open(big, "r+b") as f:
            f.truncate(int(recipe["size"]))
        data = big
    file = (
        FakeFile(data, trickle_after=recipe.get("trickle_after"))
        if isinstance(data, bytes)
        else FakeFile(path=data, trickle_after=recipe.get("trickle_after"))
    )
    hub.add_commit(repo, {"f.gguf": file})
    case_repo: FakeRepo = hub.repos[repo]
    if recipe["run"] != "drafts-hub":
        case_repo.info_mode = recipe.get("info")
    if recipe.get("declare") is not None:  # the hub declares another LFS size than the CDN serves
        declared = int(recipe["declare"])

        def edit(body: dict) -> None:
            for s in body["siblings"]:
                if "lfs" in s:
                    s["lfs"]["size"] = declared

        case_repo.info_edit = edit
    if recipe.get("redirect_loop"):
        case_repo.redirect_to = f"{hub.cdn}/blobs/{file.sha256}"
    argv = {
        "drafts-hub": ["drafts", st["target"], "--hub", "--limit", str(recipe.get("limit", 20))],
        "drafts-url": ["drafts", f"{hub.cdn}/blobs/{file.sha256}"],
        "inspect": ["inspect", f"hf://{repo}/f.gguf"],
        "fetch": ["fetch", repo, "f.gguf"],
    }[recipe["run"]] + ["--timeout", f"{timeout:g}"]
    with _env(st["env"]):
        kept = [Path(st["env"]["HF_HOME"]), Path(st["env"]["SPECREG_DB"])]
        before = [_tree(p) if p.is_dir() else _tree(p.parent) for p in kept]
        seen = len(hub.requests)
        sampler = _Sampler()
        t0 = time.monotonic()
        done = _cli(argv)
        end = time.monotonic()
        grew = sampler.stop()
        after = [_tree(p) if p.is_dir() else _tree(p.parent) for p in kept]
    first = hub.requests[seen].at if len(hub.requests) > seen else t0
    bad = []
    if end - first > timeout + 2:
        bad.append(f"TIME: ended {end - first:.1f} s after the hub's first request (--timeout {timeout:g} + 2 s)")
    if grew >= RSS_GROWTH:
        bad.append(f"MEMORY: RSS grew by {grew >> 20} MiB (limit {RSS_GROWTH >> 20})")
    if after != before:
        changed = sorted(
            k for b, a in zip(before, after, strict=True) for k in a.keys() | b.keys() if a.get(k) != b.get(k)
        )
        bad.append(f"kept something: {changed[:5]}")
    if recipe.get("expect") == "error" and done.code != 2:
        bad.append(f"exit {done.code}, not the one-line error this input must end in")
    return CliResult(done.code, done.stdout, done.stderr, bad)


def random_recipes(rng: random.Random, n: int) -> list[tuple[str, dict[str, Any]]]:
    """`n` recipes with random misbehaviour, paces, sizes and deadlines (the long pass)."""
    from hubserver import HOSTILE

    out = []
    for i in range(n):
        run_ = rng.choice(["drafts-hub", "drafts-url", "inspect", "fetch"])
        recipe: dict[str, Any] = {
            "run": run_,
            "timeout": rng.choice([1.0, 2.0, 4.0]),
            "trickle_s": rng.choice([0.3, 2.0]),
        }
        if run_ == "drafts-hub":
            recipe[rng.choice(["listing", "info"])] = rng.choice(HOSTILE)
            recipe["entries"] = rng.choice([1_000, 100_000, 400_000])
            recipe["limit"] = rng.choice([20, 200])
        elif run_ == "drafts-url":
            recipe["trickle_after"] = rng.randrange(0, 4096)
        elif run_ == "inspect":
            if rng.random() < 0.5:
                recipe["info"] = rng.choice([h for h in HOSTILE if h not in ("self-link", "next-pages", "huge")])
            else:
                recipe["redirect_loop"] = True
        else:
            size = rng.choice([16 << 20, 64 << 20, 200 << 20])
            recipe |= {"size": size + (1 << 20), "trickle_after": size}
            if rng.random() < 0.3:
                recipe = {**recipe, "declare": rng.randrange(1, size)}
                recipe.pop("trickle_after")
        out.append((f"random-{i}-{run_}", recipe))
    return out
