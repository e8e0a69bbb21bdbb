"""Checking a remote pair by range requests vs downloading it first: bytes and wall time.

A loopback hub (tests/hubserver.py: resolve redirect to a CDN host, LFS SHA-256, byte ranges)
serves a target and a draft whose tensor data is sparse (the header is real, the weights zeros),
so the sizes are those of real models without the disk. Measured in the same run:
- remote: `specreg check pair hf://.../target.gguf hf://.../draft.gguf` (a fresh process);
- reference: download both files from the same server (bytes discarded, so the reference is not
  slowed by a disk) plus `specreg check pair` on local copies of the same bytes.
Bytes are counted by the server (every body byte it sent). Loopback has no latency and ~GB/s:
over a real network the download side grows with size, the remote side stays a few requests.

Usage: python benchmarks/bench_remote.py [--target-mb 2000] [--draft-mb 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from specreg.testing import ModelSpec, write_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hubserver import FakeFile, FakeHub  # the loopback hub the tests use

REPO = "bench/remote-GGUF"


def _spec(mb: int, **kw: object) -> ModelSpec:
    """A tiny model plus one tensor that brings its data to about `mb` megabytes."""
    rows = max(1, mb * 1_000_000 // (1024 * 4))
    return ModelSpec(extra_tensors=(("bulk.weight", (rows, 1024)),), **kw)  # type: ignore[arg-type]


def _cli(*args: str, env: dict[str, str]) -> tuple[float, dict]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "specreg", *args], capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"specreg {' '.join(args)} failed: {proc.stderr.strip()}")
    return dt, json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target-mb", type=int, default=2000)
    ap.add_argument("--draft-mb", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeHub() as hub:
        folder = Path(tmp)
        target = write_model(folder / "target.gguf", _spec(args.target_mb), data=False)
        draft = write_model(folder / "draft.gguf", _spec(args.draft_mb, noise=0.05), data=False)
        served = {"target.gguf": FakeFile(path=target), "draft.gguf": FakeFile(path=draft)}
        for f in served.values():
            assert f.sha256  # the stand-in hub hashes once, before anything is timed (the real hub has it stored)
        hub.add_commit(REPO, dict(served))
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
        env |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(folder / "hf"), "SPECREG_HOME": str(folder / "home")}
        env |= {"SPECREG_DB": str(folder / "home" / "registry.db"), "HF_HUB_DISABLE_TELEMETRY": "1"}
        sizes = (target.stat().st_size, draft.stat().st_size)
        size = sum(sizes)

        sent = hub.bytes_sent
        remote_s, out = _cli(
            "check", "pair", f"hf://{REPO}/target.gguf", f"hf://{REPO}/draft.gguf", "-m", "draft-simple", "--json",
            env=env,
        )  # fmt: skip
        remote_bytes = hub.bytes_sent - sent
        counted = sum(r["bytes_fetched"] for r in out["remote"].values())

        sent = hub.bytes_sent
        t0 = time.perf_counter()
        with httpx.Client(follow_redirects=True, timeout=600) as http:
            for name in ("target.gguf", "draft.gguf"):
                with http.stream("GET", f"{hub.endpoint}/{REPO}/resolve/main/{name}") as r:
                    for _ in r.iter_bytes(1 << 20):
                        pass
        download_s = time.perf_counter() - t0
        download_bytes = hub.bytes_sent - sent
        local_s, _ = _cli("check", "pair", str(target), str(draft), "-m", "draft-simple", "--json", env=env)

    ref_s = download_s + local_s
    print(f"pair: target {sizes[0] / 1e6:,.0f} MB + draft {sizes[1] / 1e6:,.0f} MB")
    print(f"{'':34}{'bytes':>16}{'wall s':>10}")
    print(f"{'remote check (range requests)':34}{remote_bytes:>16,}{remote_s:>10.2f}")
    print(f"{'download + local check':34}{download_bytes:>16,}{ref_s:>10.2f}   (download {download_s:.2f} s)")
    print(f"remote / reference: bytes {remote_bytes / download_bytes:.4%}, time {remote_s / ref_s:.2f}x")
    print(f"bytes fetched as the client counted them: {counted:,} ({counted / size:.4%} of the pair)")
    print("reference: the same pair downloaded from the same loopback server in this run, then checked locally")


if __name__ == "__main__":
    try:  # run as a script, benchmarks/ is sys.path[0]; as `python -m benchmarks.bench_remote`, the root is
        from _perf import run_main
    except ImportError:
        from benchmarks._perf import run_main
    sys.exit(run_main(main, "remote"))
