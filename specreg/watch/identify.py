"""What a running llama-server runs: its model files (by SHA-256), its build, its flags and slots.

Exactly, through its process, when it listens on this machine: the process bound to the URL's
port gives its argv (read by the parser the deploy command is written from) and its working
directory (a relative `-m` is relative to it). Otherwise through `/props`: the model path as it
was given, the build, the slots and the sampler; `/props` shows neither the draft nor the
configured speculation (its `speculative.types` is a request's default; the rule set says
whether a build's can be trusted), so those stay unknown and the identity says so. A model file
is known by its SHA-256 when it can be read here (the registry's stat cache vouches, or it is
hashed once per stat), else by the registry's record of that path.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.audit.deploy import BUNDLED_MODULE, read_flags
from specreg.errors import SpecregError
from specreg.schemas.memory import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS
from specreg.schemas.watch import ServerSeen

if TYPE_CHECKING:
    import argparse

    from specreg.registry.store import Registry
    from specreg.watch.scrape import Scrape

BUNDLED_SCRIPT = "specreg-llama-server"
# the flags that make a server what was audited (the deploy command's, less where it listens, the
# measuring host's threads, and --metrics: how the server is watched, not what it serves; without
# it a window is unknown): compared one by one
COMPARED = (
    "spec_type",
    "draft_n_max",
    "draft_n_min",
    "draft_sampling",
    "ng_spec_ngram_simple_size_n",
    "ng_spec_ngram_simple_size_m",
    "ng_spec_ngram_simple_min_hits",
    "ng_spec_ngram_mod_n_match",
    "ng_spec_ngram_mod_n_min",
    "ng_spec_ngram_mod_n_max",
    "ng_spec_ngram_map_k_size_n",
    "ng_spec_ngram_map_k_size_m",
    "ng_spec_ngram_map_k_min_hits",
    "ng_spec_ngram_map_k4v_size_n",
    "ng_spec_ngram_map_k4v_size_m",
    "ng_spec_ngram_map_k4v_min_hits",
    "ctx_size",
    "parallel",
    "cache_type_k",
    "cache_type_v",
    "cache_ram",
    "ctx_checkpoints",
    "threads_http",
    "swa_full",
    "ngl",
    "ngld",
    "seed",
    "temp",
    "top_k",
    "top_p",
    "min_p",
)  # fmt: skip
UNSET = "unset"
_PROPS_SAMPLER = {"temperature": "temp", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "seed": "seed"}


def _text(value: Any) -> str:
    if value is None:
        return UNSET
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def effective(ns: argparse.Namespace) -> dict[str, str]:
    """The compared flags of a parsed argv as text: what is unset reads `unset` (the build's
    default), except where the audited build's default is pinned by every deploy command."""
    out = {dest: _text(getattr(ns, dest, None)) for dest in COMPARED}
    out["cache_ram"] = _text(DEFAULT_CACHE_RAM_MIB if ns.cache_ram is None else ns.cache_ram)
    out["ctx_checkpoints"] = _text(DEFAULT_CTX_CHECKPOINTS if ns.ctx_checkpoints is None else ns.ctx_checkpoints)
    return out


def is_loopback(host: str) -> bool:
    """A URL host on this machine (where the server's process can be read)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def server_flags(cmdline: list[str]) -> tuple[str, list[str], bool]:
    """(program, its llama-server flags, bundled?) of a process's argv: `llama-server ...`,
    `specreg-llama-server ...` (also run by an interpreter) or `python -m specreg.servers.bundled_server ...`."""
    if len(cmdline) >= 3 and cmdline[1] == "-m" and cmdline[2] == BUNDLED_MODULE:
        return BUNDLED_SCRIPT, cmdline[3:], True
    if len(cmdline) >= 2 and Path(cmdline[1]).name == BUNDLED_SCRIPT and Path(cmdline[0]).name.startswith("python"):
        return BUNDLED_SCRIPT, cmdline[2:], True
    program = cmdline[0] if cmdline else "?"
    return program, cmdline[1:], Path(program).name == BUNDLED_SCRIPT


def listening_process(host: str, port: int) -> Any | None:
    """The process listening on this host's TCP port on this machine (psutil.Process): bound to
    the address itself or to every address of its family. None when none is, when two are (an
    IPv4 and an IPv6 socket of different processes), or when this user may not see it."""
    import psutil

    host = host.strip("[]").lower()
    wanted = {"127.0.0.1", "::1"} if host == "localhost" else {host}
    wanted |= {"0.0.0.0", "::"}  # a server bound to every address answers on this one too
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    pids = {
        c.pid
        for c in conns
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.laddr.ip in wanted and c.pid
    }
    if len(pids) != 1:
        return None
    try:
        return psutil.Process(pids.pop())
    except psutil.Error:
        return None


class FileHashes:
    """SHA-256 of model files on this machine, hashed once per stat (the registry's stat cache
    first: a registered, unchanged file is not read at all)."""

    def __init__(self, reg: Registry | None) -> None:
        self.reg = reg
        self._known: dict[tuple[str, Any], str] = {}

    def sha256(self, path: str) -> str | None:
        from specreg.registry import hashing

        try:
            key = hashing.stat_key(path)
        except OSError:
            return None
        if (path, key) in self._known:
            return self._known[(path, key)]
        sha = self.reg.known_sha256(path) if self.reg is not None else None
        if sha is None:
            try:
                sha, key = hashing.sha256_file_keyed(path)
            except (OSError, hashing.FileChangedWhileHashing):
                return None
        self._known[(path, key)] = sha
        return sha


def _bundled_build(proc: Any) -> tuple[int | None, str | None]:
    """The build of a bundled server's process: the xllamacpp installed beside this specreg,
    when the process runs this very interpreter (another environment's release is not known here)."""
    from specreg.servers.identity import build_of, bundled_version

    try:
        same = os.path.realpath(proc.exe()) == os.path.realpath(sys.executable)
    except Exception:  # psutil.Error, OSError: another user's process
        same = False
    release = bundled_version() if same else None
    if release is None:
        return None, None
    return build_of(f"xllamacpp {release}"), f"xllamacpp {release}"


def _from_process(seen: ServerSeen, proc: Any, scrape: Scrape) -> argparse.Namespace | None:
    """Fill `seen` from the process's argv and cwd; None (with a note) when they cannot be read."""
    try:
        cmdline, cwd, pid = proc.cmdline(), proc.cwd(), proc.pid
    except Exception as exc:  # psutil.AccessDenied / NoSuchProcess / ZombieProcess
        seen.notes.append(f"the process on this port cannot be read ({type(exc).__name__})")
        return None
    program, flags, bundled = server_flags(cmdline)
    try:
        ns, extra = read_flags(flags)
    except SpecregError as exc:
        seen.notes.append(f"process {pid}'s flags cannot be read: {exc}")
        return None
    # the process on the port is the server when its -m is the path /props says it loaded (as
    # given on its command line); without /props, only a program named like llama-server is
    props = scrape.props
    if not ns.model or (props is not None and props.model_path != ns.model):
        seen.notes.append(f"process {pid} ({Path(program).name}) is not the server: its -m is not /props' model_path")
        return None
    if props is None and not bundled and "llama" not in Path(program).name:
        seen.notes.append(f"process {pid} ({Path(program).name}) cannot be told from another without /props")
        return None
    seen.via, seen.pid = "process", pid
    seen.program = f"{program} (bundled xllamacpp)" if bundled else program
    seen.target_path = os.path.normpath(os.path.join(cwd, ns.model))
    seen.draft_path = os.path.normpath(os.path.join(cwd, ns.draft)) if ns.draft else None
    seen.spec_type = ns.spec_type
    seen.flags = effective(ns)
    seen.threads = _text(ns.threads)
    seen.extra_flags = [str(x)[:200] for x in extra[:20]]
    build, text = _bundled_build(proc) if bundled else (None, None)
    if build is None and scrape.props is not None:
        build, text = scrape.props.build, scrape.props.build_info
    seen.build, seen.build_text = build, text
    return ns


def _from_props(seen: ServerSeen, scrape: Scrape) -> None:
    props = scrape.props
    if props is None:
        seen.notes.append("/props did not answer as llama-server's: the server's files cannot be named")
        return
    seen.target_path = props.model_path
    seen.build, seen.build_text = props.build, props.build_info
    for key, dest in _PROPS_SAMPLER.items():
        if key in props.sampler:
            seen.flags[dest] = _text(props.sampler[key])
    if props.total_slots is not None:
        seen.flags["parallel"] = str(props.total_slots)
    seen.notes.append("the draft and --spec-type are not shown by /props (watch on the server's machine names them)")


def _hash_files(seen: ServerSeen, reg: Registry | None, hashes: FileHashes, local: bool) -> None:
    """Each model file's SHA-256: read here when it is on this machine, else the registry's
    record of its path (said so)."""
    for role in ("target", "draft"):
        path = getattr(seen, f"{role}_path")
        if not path:
            continue
        sha = hashes.sha256(path) if local and os.path.isabs(path) else None
        if sha is None and reg is not None:
            known = reg.registered_at(path)
            if len(set(known.values())) == 1:
                sha = next(iter(known.values()))
                seen.notes.append(f"the {role}'s SHA-256 is the registry's for {next(iter(known))} (not read here)")
        if sha is None:
            seen.notes.append(f"the {role} file {path} cannot be read here and is not registered at that path")
        setattr(seen, f"{role}_sha256", sha)


def identify(url: str, scrape: Scrape, reg: Registry | None, hashes: FileHashes) -> ServerSeen:
    """What the server at `url` runs, from its process when it listens on this machine, else `/props`."""
    import httpx

    parsed = httpx.URL(url)
    seen = ServerSeen(url=url, via="props")
    local = is_loopback(parsed.host)
    ns = None
    if local:
        proc = listening_process(parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80))
        if proc is not None:
            ns = _from_process(seen, proc, scrape)
        else:
            seen.notes.append("no process on this machine could be seen listening on that port")
    if ns is None:
        _from_props(seen, scrape)
    if scrape.slots is not None:
        seen.slots, seen.speculative_slots = len(scrape.slots), sum(scrape.slots)
    elif scrape.props is not None and scrape.props.total_slots is not None:
        seen.slots = scrape.props.total_slots
    seen.metrics = scrape.counters is not None or (scrape.props.endpoint_metrics if scrape.props else None)
    _hash_files(seen, reg, hashes, local)
    return seen


def identity_key(seen: ServerSeen) -> str:
    """A digest of what the server runs and which process runs it: a new one is a new baseline."""
    facts = {
        "url": seen.url,
        "via": seen.via,
        "pid": seen.pid,
        "target": seen.target_sha256 or seen.target_path,
        "draft": seen.draft_sha256 or seen.draft_path,
        "build": seen.build,
        "spec_type": seen.spec_type,
        "flags": seen.flags,
        "extra": seen.extra_flags,
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()
