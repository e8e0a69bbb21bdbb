"""`specreg-llama-server`: llama.cpp's own HTTP server (via xllamacpp) behind llama-server's flags.

The runner treats this exactly like a user's `llama-server` binary: it gets an argv, answers
`/health`, `/completion`, `/metrics`, ... on 127.0.0.1 and stops on SIGTERM/SIGINT. Only the
flags the runner emits are accepted, so a typo fails loudly instead of silently benchmarking
something else; `--spec-synth-*` is deliberately absent (its output is not model output).
Keep imports light: this module starts once per benchmark condition.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from specreg.gguf.format import KV_CACHE_TYPES
from specreg.schemas.methods import BASELINE, SPEC_TYPES

_LOG_DRAIN_S = 0.3  # the fallback wait for llama.cpp's log thread when its flush is not exported
# common/log.cpp, mangled (C++ linkage); exported by the xllamacpp .so this package pins
_LOG_MAIN, _LOG_FLUSH = "_Z15common_log_mainv", "_Z16common_log_flushP10common_log"

# flag -> (attribute path under params.speculative, minimum value); names as in common/arg.cpp
NGRAM_FLAGS: dict[str, tuple[str, int]] = {
    "--spec-ngram-simple-size-n": ("ngram_simple.size_n", 1),
    "--spec-ngram-simple-size-m": ("ngram_simple.size_m", 1),
    "--spec-ngram-simple-min-hits": ("ngram_simple.min_hits", 1),
    "--spec-ngram-mod-n-match": ("ngram_mod.n_match", 1),
    "--spec-ngram-mod-n-min": ("ngram_mod.n_min", 0),
    "--spec-ngram-mod-n-max": ("ngram_mod.n_max", 0),
    "--spec-ngram-map-k-size-n": ("ngram_map_k.size_n", 1),
    "--spec-ngram-map-k-size-m": ("ngram_map_k.size_m", 1),
    "--spec-ngram-map-k-min-hits": ("ngram_map_k.min_hits", 1),
    "--spec-ngram-map-k4v-size-n": ("ngram_map_k4v.size_n", 1),
    "--spec-ngram-map-k4v-size-m": ("ngram_map_k4v.size_m", 1),
    "--spec-ngram-map-k4v-min-hits": ("ngram_map_k4v.min_hits", 1),
}


def version_text() -> str:
    """What `--version` prints: the xllamacpp release is the runtime's identity (no commit in the wheel)."""
    import xllamacpp

    info: dict[str, Any] = dict(getattr(xllamacpp, "BUILD_INFO", {}) or {})
    return (
        f"version: {info.get('build_number', 0)} ({info.get('commit', 'unknown')})\n"
        f"built with {info.get('compiler', 'unknown')} for {info.get('build_target', 'unknown')}\n"
        f"xllamacpp {xllamacpp.__version__}\n"
    )


def build_parser() -> argparse.ArgumentParser:
    """The llama-server flags the benchmark runner uses, with llama-server's spellings."""
    p = argparse.ArgumentParser(
        prog="specreg-llama-server",
        description="llama.cpp's HTTP server (bundled through xllamacpp) for specreg benchmarks.",
        allow_abbrev=False,
    )
    p.add_argument("--version", action="store_true", help="print the runtime version and exit")
    p.add_argument("-m", "--model", help="target model GGUF")
    p.add_argument("-md", "--spec-draft-model", "--model-draft", dest="draft", help="draft model GGUF")
    p.add_argument("--spec-type", default=BASELINE, help="comma-separated: " + ",".join(SPEC_TYPES))
    p.add_argument("--spec-draft-n-max", type=int, dest="draft_n_max")
    p.add_argument("--spec-draft-n-min", type=int, dest="draft_n_min")
    for flag in NGRAM_FLAGS:
        p.add_argument(flag, type=int, dest=ngram_dest(flag))
    p.add_argument("-c", "--ctx-size", type=int, default=4096)
    p.add_argument("-np", "--parallel", type=int, default=1)
    p.add_argument("-ctk", "--cache-type-k", dest="cache_type_k", choices=KV_CACHE_TYPES, default=None)
    p.add_argument("-ctv", "--cache-type-v", dest="cache_type_v", choices=KV_CACHE_TYPES, default=None)
    # what a serving server holds over time (validators/memory_served.py); None: the build's default
    p.add_argument("--cache-ram", "-cram", type=int, dest="cache_ram", default=None, help="prompt cache MiB (-1, 0)")
    p.add_argument("--ctx-checkpoints", "-ctxcp", type=int, dest="ctx_checkpoints", default=None)
    p.add_argument("--swa-full", action="store_true", dest="swa_full")
    # HTTP workers, each tokenizing in an arena of its own (default: max(-np + 4, CPUs - 1))
    p.add_argument("--threads-http", type=int, dest="threads_http", default=None)
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-tb", "--threads-batch", type=int, dest="threads_batch", default=None)
    p.add_argument("-ngl", "--gpu-layers", "--n-gpu-layers", dest="ngl", default=None)
    p.add_argument("-ngld", "--spec-draft-ngl", dest="ngld", default=None)
    p.add_argument("-s", "--seed", type=int, default=None)
    # the server's default sampling (a request's own fields override it), as `specreg deploy` pins it
    p.add_argument("--temp", "--temperature", type=float, dest="temp", default=None)
    p.add_argument("--top-k", type=int, dest="top_k", default=None)
    p.add_argument("--top-p", type=float, dest="top_p", default=None)
    p.add_argument("--min-p", type=float, dest="min_p", default=None)
    # common/arg.cpp: greedy drafts the argmax; probabilistic samples the draft and the target
    # verifies by rejection (common_speculative_params.draft.probabilistic, temperature > 0 only)
    p.add_argument("--spec-draft-sampling", choices=("greedy", "probabilistic"), dest="draft_sampling", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--metrics", action="store_true", help="expose /metrics")
    p.add_argument("-lv", "--verbosity", type=int, default=None)
    return p


def ngram_dest(flag: str) -> str:
    """The parsed attribute of an n-gram flag."""
    return "ng_" + flag.lstrip("-").replace("-", "_")


def _layers(flag: str, value: str | None) -> int | None:
    """-ngl accepts a number, 'auto' (-1) or 'all' (-2), like llama-server."""
    if value is None:
        return None
    if value in ("auto", "all"):
        return -1 if value == "auto" else -2
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{flag}: expected a number, 'auto' or 'all', got {value!r}") from None


def build_params(ns: argparse.Namespace) -> Any:
    """Translate parsed flags into xllamacpp.CommonParams; raises ValueError on bad values."""
    import xllamacpp as x

    if not ns.model:
        raise ValueError("-m/--model is required")
    params = x.CommonParams()
    params.model.path = ns.model
    params.port = ns.port
    params.hostnames = [ns.host]
    params.endpoint_metrics = bool(ns.metrics)
    params.n_ctx = ns.ctx_size
    params.n_parallel = ns.parallel
    if ns.cache_ram is not None:
        if ns.cache_ram < -1:
            raise ValueError(f"--cache-ram: expected -1 (no limit), 0 (off) or MiB, got {ns.cache_ram}")
        params.cache_ram_mib = ns.cache_ram
    if ns.ctx_checkpoints is not None:
        if ns.ctx_checkpoints < 0:
            raise ValueError(f"--ctx-checkpoints: expected 0 or more, got {ns.ctx_checkpoints}")
        params.n_ctx_checkpoints = ns.ctx_checkpoints
    params.swa_full = bool(ns.swa_full)
    if ns.threads_http is not None:
        if ns.threads_http < 1:
            raise ValueError(f"--threads-http: expected 1 or more, got {ns.threads_http}")
        params.n_threads_http = ns.threads_http
    if ns.threads is not None:
        params.cpuparams.n_threads = ns.threads
        params.cpuparams_batch.n_threads = ns.threads
    if ns.threads_batch is not None:  # llama-server's -tb: prompt batches (default: -t)
        params.cpuparams_batch.n_threads = ns.threads_batch
    if ns.seed is not None:
        params.sampling.seed = ns.seed
    if ns.temp is not None:
        params.sampling.temp = ns.temp
    if ns.top_k is not None:
        params.sampling.top_k = ns.top_k
    if ns.top_p is not None:
        params.sampling.top_p = ns.top_p
    if ns.min_p is not None:
        params.sampling.min_p = ns.min_p
    if ns.verbosity is not None:
        params.verbosity = ns.verbosity
    for attr in ("cache_type_k", "cache_type_v"):
        value = getattr(ns, attr)
        if value is not None:
            setattr(params, attr, getattr(x.ggml_type, "GGML_TYPE_" + value.upper()))
    ngl = _layers("-ngl", ns.ngl)
    if ngl is not None:
        params.n_gpu_layers = ngl
    spec = params.speculative
    names = [n.strip() for n in ns.spec_type.split(",") if n.strip()]
    unknown = [n for n in names if n not in SPEC_TYPES]
    if unknown or not names:
        raise ValueError(f"--spec-type: unknown speculative type {','.join(unknown) or '(empty)'}")
    enum = x.common_speculative_type
    if BASELINE in names:  # llama.cpp: 'none' anywhere means no speculation at all
        spec.types = [enum.COMMON_SPECULATIVE_TYPE_NONE]
    else:
        spec.types = [getattr(enum, "COMMON_SPECULATIVE_TYPE_" + n.upper().replace("-", "_")) for n in names]
    if ns.draft:
        spec.draft.mparams.path = ns.draft
    ngld = _layers("-ngld", ns.ngld)
    if ngld is not None:
        spec.draft.n_gpu_layers = ngld
    if ns.draft_n_max is not None:
        if ns.draft_n_max < 0:
            raise ValueError("--spec-draft-n-max: must be >= 0")
        spec.draft.n_max = ns.draft_n_max
    if ns.draft_n_min is not None:
        spec.draft.n_min = ns.draft_n_min
    if ns.draft_sampling is not None:
        if not hasattr(spec.draft, "probabilistic"):
            raise ValueError("--spec-draft-sampling: this xllamacpp build has no probabilistic drafting")
        spec.draft.probabilistic = ns.draft_sampling == "probabilistic"
    for flag, (attr, minimum) in NGRAM_FLAGS.items():
        value = getattr(ns, ngram_dest(flag))
        if value is None:
            continue
        if value < minimum or value > 1024:
            raise ValueError(f"{flag}: must be between {minimum} and 1024")
        group, field = attr.split(".")
        setattr(getattr(spec, group), field, value)
    return params


def drain_llama_log(module_file: str | None) -> None:
    """Write out what llama.cpp's log worker still holds before this process says why it stops.

    llama.cpp logs through a queue that a worker thread writes (common/log.cpp), and its logger
    is leaked on purpose (never destroyed, "logs may be lost if not flushed before the program
    exits", ggml-org/llama.cpp#22142): a process that returns right after a failed start loses
    the loader's reason ("tensor 'token_embd.weight' has wrong shape"), as CI under load showed.
    `common_log_flush` (pause: the worker writes up to an end marker and is
    joined; resume) is the drain itself; a build that does not export it gets a short wait."""
    import ctypes

    try:
        lib = ctypes.CDLL(module_file or "")
        main_log, flush = getattr(lib, _LOG_MAIN), getattr(lib, _LOG_FLUSH)
    except (OSError, AttributeError):
        time.sleep(_LOG_DRAIN_S)
        return
    main_log.restype = ctypes.c_void_p
    flush.argtypes = [ctypes.c_void_p]
    flush(main_log())


def serve(params: Any) -> int:
    """Start the server and block until SIGTERM/SIGINT; the llama.cpp log goes to stderr."""
    import xllamacpp as x

    so = getattr(sys.modules.get(x.Server.__module__), "__file__", None)
    try:
        server = x.Server(params)
    except RuntimeError as exc:  # model load failure, port taken: llama.cpp logged the cause
        drain_llama_log(so)
        print(f"specreg-llama-server: server failed to start: {exc}", file=sys.stderr, flush=True)
        return 1
    # llama.cpp's server installs its own SIGINT/SIGTERM handlers while starting; ours go last
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(f"specreg-llama-server: serving on {server.listening_address}", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    del server  # ~Server joins llama.cpp's loop before the process exits
    drain_llama_log(so)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Console entry point (`specreg-llama-server`, `python -m specreg.servers.bundled_server`)."""
    ns = build_parser().parse_args(argv)
    if ns.version:
        sys.stdout.write(version_text())
        return 0
    try:
        params = build_params(ns)
    except ValueError as exc:
        print(f"specreg-llama-server: error: {exc}", file=sys.stderr)
        return 2
    return serve(params)


if __name__ == "__main__":
    sys.exit(main())
