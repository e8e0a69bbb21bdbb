"""Who served and on what: the server program's identity and the machine (manifest groups)."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path

import psutil

from specreg.errors import ServerError
from specreg.registry.hashing import sha256_file
from specreg.schemas.bench import HardwareInfo, RuntimeInfo
from specreg.servers.launcher import ServerCommand, child_env, stop_group
from specreg.servers.memory import GpuProbe

MAX_VERSION_BYTES = 64 << 10  # llama-server --version prints two lines


def version_text(cmd: ServerCommand, timeout_s: float) -> str:
    # Own session, so a binary that hangs (or a wrapper script whose child does) is stopped as a
    # whole group on timeout; subprocess.run would kill only the direct child and leave the rest.
    # Output is read up to a cap: a binary that prints endlessly is refused, not buffered.
    argv = cmd.argv(["--version"])
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        raise ServerError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    try:
        out, why = _read_bounded(proc, timeout_s, MAX_VERSION_BYTES)
        if why is None:
            proc.wait(timeout=max(0.1, timeout_s))
    except subprocess.TimeoutExpired:
        why = f"did not exit within {timeout_s:g}s"
    finally:
        stop_group(proc.pid, grace_s=1.0, proc=proc)
        if proc.stdout is not None:
            proc.stdout.close()
    if why is not None:
        raise ServerError(f"{argv[0]} --version {why}", hint="is this a llama-server binary?")
    text = out.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        raise ServerError(
            f"{argv[0]} --version failed (exit {proc.returncode}): {text[-300:]}", hint="is this a llama-server binary?"
        )
    return text


def _read_bounded(proc: subprocess.Popen[bytes], timeout_s: float, limit: int) -> tuple[bytes, str | None]:
    """stdout until EOF, at most `limit` bytes and `timeout_s` seconds: (bytes, None) or (bytes, why not)."""
    import selectors

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    parts: list[bytes] = []
    n = 0
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                return b"".join(parts), f"did not answer within {timeout_s:g}s"
            chunk = os.read(fd, 65536)
            if not chunk:
                return b"".join(parts), None
            parts.append(chunk)
            n += len(chunk)
            if n > limit:
                return b"".join(parts), f"printed more than {limit >> 10} KiB"


def runtime_info(cmd: ServerCommand, timeout_s: float = 30.0) -> RuntimeInfo:
    """Binary SHA-256 and `--version` (external) / xllamacpp release and build info (bundled)."""
    version = version_text(cmd, timeout_s)
    if cmd.kind == "external":
        return RuntimeInfo(kind="external", path=cmd.path, sha256=sha256_file(cmd.path), version_text=version)
    import xllamacpp

    lib = next(Path(xllamacpp.__file__).parent.glob("xllamacpp*.so"), None)
    defaults = _spec_defaults()
    return RuntimeInfo(
        kind="bundled",
        path=str(lib or xllamacpp.__file__),
        sha256=sha256_file(lib) if lib else None,
        version_text=version,
        xllamacpp_version=str(xllamacpp.__version__),
        build_info=dict(getattr(xllamacpp, "BUILD_INFO", {}) or {}),
        spec_defaults=defaults,
    )


def _spec_defaults() -> dict[str, int]:
    """The build's defaults for draft length and n-gram options (what "defaults" meant in this run)."""
    import xllamacpp

    s = xllamacpp.CommonParams().speculative
    return {
        "--spec-draft-n-max": s.draft.n_max,
        "--spec-draft-n-min": s.draft.n_min,
        "--spec-ngram-simple-size-n": s.ngram_simple.size_n,
        "--spec-ngram-simple-size-m": s.ngram_simple.size_m,
        "--spec-ngram-simple-min-hits": s.ngram_simple.min_hits,
        "--spec-ngram-mod-n-match": s.ngram_mod.n_match,
        "--spec-ngram-mod-n-min": s.ngram_mod.n_min,
        "--spec-ngram-mod-n-max": s.ngram_mod.n_max,
    }


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def hardware_info(gpu: GpuProbe, gpu_layers: str | None) -> HardwareInfo:
    """CPU, RAM, GPU (absent with its reason) and the load when the run starts."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    placement = "cpu" if not gpu.present else f"gpu (-ngl {gpu_layers if gpu_layers is not None else 'default'})"
    return HardwareInfo(
        cpu_model=_cpu_model(),
        logical_cores=psutil.cpu_count(logical=True),
        physical_cores=psutil.cpu_count(logical=False),
        ram_bytes=psutil.virtual_memory().total,
        load_avg_1m=load,
        platform=platform.platform(),
        gpu=gpu.observation(),
        placement=placement,
    )
