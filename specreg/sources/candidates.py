"""Where a target's drafts may be: the registry, the local Hugging Face cache, folders, the hub.

`specreg drafts TARGET` asks the question the other way round from `check pair`: not "may this
draft serve this target" but "which files could". This module only *finds* files and opens
their headers; judging them is the validators' (audit/drafts.py calls them).

The registry is searched from its stored summaries: a file whose tokenizer is of another type,
or whose token count is further from the target's than llama.cpp's draft-simple rule allows,
cannot draft for it with any draft-simple model, so it is counted ("other tokenizer") without
its header being read again - a registry of a thousand files then costs the target's family
only. EAGLE-3 / DFlash heads are always opened (their vocabulary is their own by design).

The hub is searched through huggingface_hub (`list_models`: GGUF repos named like the target's
`general.basename`, or tagged with its `base_model`), at most `limit` repos; each repo's GGUF
files are judged from their headers by HTTP range reads (sources/range_reads.py), never
downloaded. A hub or header failure is one line for that repo or file, never the whole search.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from specreg import remote
from specreg.errors import HubError, RemoteLimit, SpecregError, UsageError

if TYPE_CHECKING:
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.gguf import GGUFSummary
    from specreg.schemas.registry import ArtifactRecord
    from specreg.sources.hub import HubSettings
    from specreg.validators.ruleset import RuleSet

Where = str  # "registry", "hf-cache", "dir", "hub"
MAX_DIR_FILES = 10_000  # GGUF files looked at per --dir folder (a folder of models, not a disk)
MAX_FILES_PER_REPO = 6  # GGUF files of one hub repo whose headers are read (smallest first)
MAX_LIMIT = 200  # --limit's ceiling: each repo costs a model_info and range reads
HUB_WORKERS = 8  # headers read at once (network-bound: the GIL is released while waiting)
# A listing entry on the hub is a few hundred bytes to a few KiB (its tags); a page of --limit
# entries is read whole by huggingface_hub, so its reply is capped at what --limit entries need.
LISTING_ENTRY_BYTES = 16 << 10
LISTING_BASE_BYTES = 64 << 10
# HUB_WORKERS repos' file lists are parsed at once: each reply a quarter of one read alone
SEARCH_INFO_BYTES = 1 << 20
_SIZE_WORD = re.compile(r"^\d+(\.\d+)?[kmbt]$", re.IGNORECASE)  # 135M, 1.7B: not part of a family name
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


@dataclass
class Found:
    """One file that might be a draft: where it was found, and its header once opened."""

    where: Where
    ref: str  # a local path, or hf://ORG/REPO/FILE@COMMIT
    label: str  # what a user recognises it by (path, or ORG/REPO/FILE)
    sha256: str | None = None  # known without hashing: the registry's, the hub's LFS SHA-256
    size: int | None = None
    record: ArtifactRecord | None = None
    repo: str | None = None
    revision: str | None = None
    licence: str | None = None  # as its source states it (registry record, model card, GGUF)
    file: GGUFFile | None = None
    problem: str | None = None  # could not be opened: one line
    bytes_fetched: int = 0  # remote: what reading its header cost

    @property
    def summary(self) -> GGUFSummary | None:
        from specreg.gguf.summary import summarize

        if self.file is not None:
            return summarize(self.file, shared=True)
        return self.record.summary if self.record is not None else None


@dataclass
class Gathered:
    """Every candidate found, what was set aside unopened, and one line per failure."""

    found: list[Found] = field(default_factory=list)
    other_tokenizer: int = 0  # registry files of another tokenizer family (not opened)
    failures: list[str] = field(default_factory=list)  # "repo: what went wrong" (untrusted text)
    notes: list[str] = field(default_factory=list)  # e.g. offline: the hub was not searched
    searched_repos: int = 0


# -- the target --------------------------------------------------------------------------------


def hub_target_ref(arg: str) -> str | None:
    """`ORG/REPO[:FILE]` -> `hf://ORG/REPO/FILE` (FILE None: the repo's one GGUF file); None when
    `arg` is not of that shape or names a file on disk."""
    if os.path.exists(arg) or arg.startswith(("/", ".", "~")) or "://" in arg:
        return None
    repo, _, filename = arg.partition(":")
    if repo.count("/") != 1 or not all(repo.split("/")):
        return None
    if filename:
        return f"hf://{repo}/{filename}"
    from specreg.sources.hub import HubSettings, check_repo_id

    check_repo_id(repo)
    settings = HubSettings.from_env()
    settings.require_online(f"finding the GGUF files of {repo}")
    with remote.operation(f"asking the hub about {repo}"):
        files = sorted(f for f, _, _ in _repo_ggufs(settings, repo)[1])
    if len(files) != 1:
        shown = ", ".join(files[:5]) + (" ..." if len(files) > 5 else "")
        raise UsageError(
            f"{repo} holds {len(files)} GGUF files" + (f" ({shown})" if files else ""),
            hint=f"name one: {repo}:FILE.gguf",
        )
    return f"hf://{repo}/{files[0]}"


# -- local candidates ----------------------------------------------------------------------------


def same_family(target: GGUFSummary, other: GGUFSummary | None, rules: RuleSet) -> bool:
    """Could `other` draft for `target` by llama.cpp's draft-simple rule, from the stored facts
    alone (tokenizer type, token count), or is it a head with a vocabulary of its own?"""
    if other is None:
        return True  # nothing stored to tell: open it
    if other.architecture in (rules.eagle3.architecture, rules.dflash.architecture):
        return True
    t, d = target.tokenizer, other.tokenizer
    if t.tokens_sha256 is not None and t.tokens_sha256 == d.tokens_sha256:
        return True
    return t.model == d.model and abs(t.n_tokens - d.n_tokens) <= rules.draft_simple.max_size_difference


def from_registry(reg: Registry, target: GGUFSummary, target_sha: str, rules: RuleSet, out: Gathered) -> None:
    """Registered artifacts other than the target, of its tokenizer family."""
    for rec in reg.artifacts(with_summary=True):
        if rec.sha256 == target_sha:
            continue
        if not same_family(target, rec.summary, rules):
            out.other_tokenizer += 1
            continue
        path = rec.paths[0] if rec.paths else None
        out.found.append(
            Found(
                "registry",
                ref=path or rec.sha256,
                label=path or f"{rec.provenance.repo or '?'}/{rec.provenance.filename or rec.sha256[:12]}",
                sha256=rec.sha256,
                size=rec.size,
                record=rec,
                repo=rec.provenance.repo,
                revision=rec.provenance.revision,
                licence=rec.licence.effective,
            )
        )


def _gguf_files(folder: Path) -> Iterator[Path]:
    """GGUF files under `folder` (first shards only), at most MAX_DIR_FILES, in name order."""
    n = 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if not name.lower().endswith(".gguf"):
                continue
            m = _SHARD.search(name)
            if m and int(m.group(1)) != 1:
                continue
            yield Path(root) / name
            n += 1
            if n >= MAX_DIR_FILES:
                return


def from_dirs(dirs: Iterable[Path], known: set[str], out: Gathered) -> None:
    """GGUF files in the folders given with --dir (not yet in the registry)."""
    for folder in dirs:
        if not folder.is_dir():
            raise UsageError(f"--dir {folder}: not a folder")
        for path in _gguf_files(folder):
            real = os.path.realpath(path)
            if real in known:
                continue
            known.add(real)
            out.found.append(Found("dir", ref=str(path), label=str(path), size=path.stat().st_size))


def from_hf_cache(settings: HubSettings, known: set[str], out: Gathered) -> None:
    """GGUF files in the local Hugging Face cache (huggingface_hub's own scan; no network)."""
    from huggingface_hub import CorruptedCacheException, scan_cache_dir

    if not settings.cache_dir.is_dir():
        return
    try:
        info = scan_cache_dir(settings.cache_dir)
    except (OSError, CorruptedCacheException) as exc:
        out.failures.append(f"Hugging Face cache {settings.cache_dir}: {exc}")
        return
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        for rev in sorted(repo.revisions, key=lambda r: r.last_modified, reverse=True):
            for f in sorted(rev.files, key=lambda f: f.file_name):
                if not f.file_name.lower().endswith(".gguf"):
                    continue
                real = os.path.realpath(f.file_path)
                if real in known:
                    continue
                known.add(real)
                name = f.file_path.relative_to(rev.snapshot_path).as_posix()
                out.found.append(
                    Found(
                        "hf-cache",
                        ref=str(f.file_path),
                        label=f"{repo.repo_id}/{name}",
                        size=f.size_on_disk,
                        repo=repo.repo_id,
                        revision=rev.commit_hash,
                    )
                )


def open_local(found: Found, reg: Registry) -> None:
    """Read a local candidate's header (a registered file: only if unchanged since it was hashed)."""
    from specreg.gguf.reader import open_gguf
    from specreg.sources.range_reads import REMOTE_KEY, metadata_only, open_remote

    try:
        if found.record is not None and metadata_only(found.record):
            gf, _ = open_remote(found.record.provenance.extra[REMOTE_KEY]["url"])
        else:
            if found.record is not None:  # hashed unless the stat cache vouches: a verdict names these bytes
                snap = reg.snapshot(reg.locate(found.record.sha256))
                if snap.sha256 != found.record.sha256:
                    raise SpecregError(f"{snap.path}: changed since it was registered (register it again)")
                gf = snap.file
            else:
                gf = open_gguf(found.ref)
    except RemoteLimit:  # a bound of the remote exchange: the command's error, not this file's
        raise
    except SpecregError as exc:
        found.problem = exc.message
        return
    except OSError as exc:
        found.problem = f"{exc.filename or found.ref}: {exc.strerror or exc}"
        return
    gf.sha256 = found.sha256
    found.file = gf
    if found.licence is None:
        found.licence = summary_licence(gf)


def summary_licence(gf: GGUFFile) -> str | None:
    from specreg.gguf.summary import summarize

    return summarize(gf, shared=True).license.license


# -- the hub ---------------------------------------------------------------------------------------


def family_terms(gf: GGUFFile, repo: str | None) -> tuple[list[str], list[str]]:
    """What to search the hub for: (names, base-model repos). The name is `general.basename`,
    else `general.name` without its size, variant or quant words; base models from
    `general.base_model.*` (and the target's own repo when it came from the hub)."""
    from specreg.gguf.summary import summarize
    from specreg.text import escape_control

    s = summarize(gf)
    names: list[str] = []
    base = gf.metadata.get("general.basename")
    if isinstance(base, str) and base.strip():
        names.append(base.strip())
    elif s.name:
        words = re.split(r"[-_ ]+", s.name.strip())
        kept = []
        for w in words:
            if _SIZE_WORD.match(w) or w.lower() in ("instruct", "chat", "base", "it", "gguf"):
                break
            kept.append(w)
        if kept:
            names.append("-".join(kept))
    repos: list[str] = []
    for bm in s.provenance.base_models:
        org, name = bm.get("organization"), bm.get("name")
        url = bm.get("repo_url")
        if isinstance(url, str) and "huggingface.co/" in url:
            repos.append(url.rstrip("/").split("huggingface.co/", 1)[1])
        elif isinstance(org, str) and isinstance(name, str):
            repos.append(f"{org}/{name}")
        if isinstance(name, str) and name not in names:
            names.append(name)
    if repo:
        repos.append(repo)
    clean = [escape_control(n, limit=80) for n in names if n]
    return list(dict.fromkeys(clean))[:4], list(dict.fromkeys(r for r in repos if r.count("/") == 1))[:4]


def _repo_ggufs(
    settings: HubSettings, repo: str, cap: int | None = None
) -> tuple[str, list[tuple[str, str, int]], str | None]:
    """(commit, [(file, LFS sha256, size)], card licence) of a repo's main revision (the hub's
    answer capped at `cap` bytes, default MODEL_INFO_BYTES)."""
    from huggingface_hub import HfApi

    from specreg.sources.hub import MODEL_INFO_BYTES, check_commit, hub_errors

    api = HfApi(endpoint=settings.endpoint)
    with (
        hub_errors(settings, repo, None, None),
        remote.expect(f"the hub's answer about {repo}", cap or MODEL_INFO_BYTES),
    ):
        try:
            info = api.model_info(repo, files_metadata=True)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:120]
            raise HubError(f"{repo}: the hub's answer about the repo is malformed ({why})") from None
    commit = check_commit(info.sha, repo)
    files = [
        (s.rfilename, s.lfs.sha256, s.lfs.size)
        for s in info.siblings or []
        if isinstance(s.rfilename, str) and s.rfilename.lower().endswith(".gguf") and s.lfs is not None
        and not ((m := _SHARD.search(s.rfilename)) and int(m.group(1)) != 1)
    ]  # fmt: skip
    card = getattr(info, "card_data", None)
    lic = getattr(card, "license", None) if card is not None else None
    return commit, files, lic if isinstance(lic, str) else None


def search_hub(
    settings: HubSettings, terms: tuple[list[str], list[str]], limit: int, exclude_repo: str | None = None
) -> tuple[list[str], list[str]]:
    """Repo ids of GGUF repos named like the target's family or tagged with its base model, at
    most `limit`; and one line per failed search."""
    from huggingface_hub import HfApi

    from specreg.sources.hub import hub_errors

    names, bases = terms
    api = HfApi(endpoint=settings.endpoint)
    repos: dict[str, None] = {}
    failures: list[str] = []
    queries = [{"filter": ["gguf", f"base_model:{b}"]} for b in bases] + [
        {"search": n, "filter": ["gguf"]} for n in names
    ]
    cap = LISTING_BASE_BYTES + limit * LISTING_ENTRY_BYTES
    for q in queries:
        if len(repos) >= limit:
            break
        try:
            with (
                hub_errors(settings, "the hub search", None, None),
                remote.expect("the hub's model list", cap, why=f"--limit {limit} entries need less"),
            ):
                for m in api.list_models(limit=limit, **q):
                    rid = getattr(m, "id", None)
                    if isinstance(rid, str) and rid.count("/") == 1 and rid != exclude_repo:
                        repos.setdefault(rid[:200])
                    if len(repos) >= limit:
                        break
        except HubError as exc:
            failures.append(f"hub search {q}: {exc.message}")
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            failures.append(f"hub search {q}: malformed answer ({type(exc).__name__})")
    return list(repos)[:limit], failures


def _open_hub_repo(settings: HubSettings, repo: str) -> tuple[list[Found], list[str]]:
    """Every GGUF file of one repo (smallest first, at most MAX_FILES_PER_REPO), headers read."""
    from specreg.sources.range_reads import open_remote
    from specreg.text import escape_control

    try:
        commit, files, lic = _repo_ggufs(settings, repo, SEARCH_INFO_BYTES)
    except RemoteLimit:  # a bound of the remote exchange: the command's error, not this repo's
        raise
    except SpecregError as exc:
        return [], [exc.message]
    out, failures = [], []
    files.sort(key=lambda f: (f[2], f[0]))
    if len(files) > MAX_FILES_PER_REPO:
        failures.append(f"{repo}: {len(files) - MAX_FILES_PER_REPO} larger GGUF files not read (--all reads none more)")
    for name, sha, size in files[:MAX_FILES_PER_REPO]:
        label = escape_control(f"{repo}/{name}", limit=160)
        f = Found("hub", ref=f"hf://{repo}/{name}@{commit}", label=label, sha256=sha, size=size, repo=repo)
        f.revision, f.licence = commit, lic
        try:
            gf, found = open_remote(f.ref)
        except RemoteLimit:
            raise
        except SpecregError as exc:
            f.problem = exc.message
        else:
            gf.sha256 = sha
            f.file, f.bytes_fetched = gf, found.bytes_fetched
            f.licence = f.licence or summary_licence(gf)
        out.append(f)
    return out, failures


def from_hub(
    settings: HubSettings,
    terms: tuple[list[str], list[str]],
    limit: int,
    out: Gathered,
    *,
    exclude: set[str],
    exclude_repo: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Search the hub and read the headers of the repos found (several at once), as one remote
    operation: the listings, every repo's file list and every header share one deadline."""
    if settings.offline:
        out.notes.append("--hub: offline (HF_HUB_OFFLINE is set), so the hub was not searched")
        return
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit {limit}: choose 1 to {MAX_LIMIT} repos")
    with remote.operation("the hub search"):
        _search_and_read(settings, terms, limit, out, exclude, exclude_repo, progress)


def _search_and_read(
    settings: HubSettings,
    terms: tuple[list[str], list[str]],
    limit: int,
    out: Gathered,
    exclude: set[str],
    exclude_repo: str | None,
    progress: Callable[[int, int], None] | None,
) -> None:
    from specreg.sources.hub import bound_hub_client

    bound_hub_client()  # once, before the workers share huggingface_hub's client
    repos, failures = search_hub(settings, terms, limit, exclude_repo)
    out.failures += failures
    out.searched_repos = len(repos)
    done = 0
    read_repo = remote.carried(lambda r: _open_hub_repo(settings, r))
    with ThreadPoolExecutor(max_workers=min(HUB_WORKERS, max(1, len(repos)))) as pool:
        try:
            for found, fails in pool.map(read_repo, repos):
                out.found += [f for f in found if f.sha256 not in exclude]
                out.failures += fails
                done += 1
                if progress is not None:
                    progress(done, len(repos))
        except BaseException:  # a bound broken: the repos not yet begun are not read
            pool.shutdown(wait=True, cancel_futures=True)
            raise
