"""The Hugging Face side of provenance: the local HF cache, and the hub through huggingface_hub.

Everything here goes through huggingface_hub's own API (cache scan objects, `HfApi`,
`hf_hub_download`); nothing re-implements its layout rules or its HTTP protocol. Settings are
read from the environment at call time (`HF_ENDPOINT`, `HF_HUB_CACHE` / `HF_HOME`,
`HF_HUB_OFFLINE`), not from huggingface_hub's import-time constants, so one process can change
them and the CLI always does what its environment says. Every hub failure leaves as one
`HubError` with a hint; the local path (recognising cached files) never touches the network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specreg.errors import HubError, UsageError

if TYPE_CHECKING:
    from huggingface_hub import CachedRepoInfo

CARD_FILENAME = "README.md"
_TRUE = {"1", "on", "yes", "true"}
COMMIT = re.compile(r"[0-9a-f]{40}")
# A branch or tag name that stays one path below refs/ in the cache: no '..', no absolute path,
# no backslash or control character (huggingface_hub writes refs/<revision> as given).
_REF = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")
_MAX_REF = 200
# What huggingface_hub turns into a file name (blobs/<etag>): one path component, nothing else.
_ETAG = re.compile(r"[A-Za-z0-9_.:+=-]{1,128}")
# model_info with files_metadata: ~250 bytes a file with its LFS facts (GGUF repos hold tens), so
# room for over ten thousand files; parsed (a dict and a sibling object per file) the worst answer
# of this size costs ~90 MB, within what one command may take.
MODEL_INFO_BYTES = 4 << 20


@dataclass(frozen=True)
class HubSettings:
    """Where the hub and the cache are, and whether we may talk to the hub at all."""

    endpoint: str
    cache_dir: Path
    offline: bool

    @classmethod
    def from_env(cls) -> HubSettings:
        from huggingface_hub import constants

        endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        cache = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
        if not cache:
            home = os.environ.get("HF_HOME")
            cache = os.path.join(home, "hub") if home else constants.HF_HUB_CACHE
        flag = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
        offline = flag.strip().lower() in _TRUE or constants.is_offline_mode()
        return cls(endpoint=endpoint, cache_dir=Path(cache).expanduser(), offline=offline)

    def require_online(self, what: str) -> None:
        if self.offline:
            raise HubError(
                f"{what} needs the Hugging Face hub, but HF_HUB_OFFLINE is set",
                hint="unset HF_HUB_OFFLINE to reach the hub; files already on disk still register offline "
                "(specreg register FILE)",
            )


# -- the local cache ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CachedFile:
    """A file found in a Hugging Face cache: which repo, commit and repo path it is."""

    repo_id: str
    repo_type: str
    revision: str  # the snapshot's commit hash
    filename: str  # path inside the repo, '/'-separated
    refs: tuple[str, ...]  # branch / tag names the cache last saw pointing at this commit
    cache_dir: Path
    repo_dir: Path  # <cache_dir>/models--ORG--NAME
    file_path: Path  # the snapshot entry
    blob_path: Path
    card_path: Path | None  # README.md of the same snapshot, when cached


def _repo_dir_above(path: Path) -> Path | None:
    """The `<type>s--<org>--<name>` folder holding `path` in its snapshots/ or blobs/, if any.

    Only parents are looked at (no directory listing), so a path outside any cache costs a few
    string comparisons and at most a stat or two.
    """
    for parent in path.parents:
        if parent.name in ("snapshots", "blobs"):
            repo_dir = parent.parent
            if "--" in repo_dir.name and (repo_dir / "snapshots").is_dir():
                return repo_dir
    return None


def _scan_repo(repo_dir: Path) -> CachedRepoInfo | None:
    """huggingface_hub's scan of the cache holding `repo_dir`, that repo's part; a corrupted repo
    counts as not recognised (the scan reports it among its warnings, not its repos)."""
    from huggingface_hub import CorruptedCacheException, scan_cache_dir

    try:
        info = scan_cache_dir(repo_dir.parent)
    except (OSError, ValueError, CorruptedCacheException):
        return None
    return next((r for r in info.repos if r.repo_path == repo_dir), None)


def recognise_cached(path: str | Path) -> CachedFile | None:
    """Repo id, commit and filename of a file under a Hugging Face cache, else None.

    Accepts the snapshot path, a blob path, or a symlink elsewhere that resolves into a cache.
    A blob shared by several snapshots is attributed to one that a ref (e.g. `main`) points at,
    else to the most recent one.
    """
    given = Path(os.path.abspath(path))
    for candidate in dict.fromkeys((given, Path(os.path.realpath(given)))):
        repo_dir = _repo_dir_above(candidate)
        if repo_dir is None:
            continue
        repo = _scan_repo(repo_dir)
        if repo is None:
            continue
        hits = [
            (rev, f)
            for rev in repo.revisions
            for f in rev.files
            if f.file_path == candidate or f.blob_path == candidate
        ]
        if not hits:
            continue
        rev, f = max(hits, key=lambda h: (bool(h[0].refs), h[0].last_modified, h[0].commit_hash))
        card = rev.snapshot_path / CARD_FILENAME
        return CachedFile(
            repo_id=repo.repo_id,
            repo_type=repo.repo_type,
            revision=rev.commit_hash,
            filename=f.file_path.relative_to(rev.snapshot_path).as_posix(),
            refs=tuple(sorted(rev.refs)),
            cache_dir=repo_dir.parent,
            repo_dir=repo_dir,
            file_path=f.file_path,
            blob_path=f.blob_path,
            card_path=card if any(x.file_path == card for x in rev.files) else None,
        )
    return None


def discard_cached(path: str | Path) -> None:
    """Remove a cached file whose bytes are wrong: its blob and every snapshot entry pointing at it
    (a dangling entry would make huggingface_hub's scan reject the whole repo)."""
    cached = recognise_cached(path)
    if cached is None:
        return
    repo = _scan_repo(cached.repo_dir)
    revisions = repo.revisions if repo else ()
    pointers = [f.file_path for r in revisions for f in r.files if f.blob_path == cached.blob_path]
    for p in dict.fromkeys([*pointers, cached.file_path, cached.blob_path]):
        with suppress(FileNotFoundError):
            os.unlink(p)


def cached_card(repo_id: str, revision: str, cache_dir: Path) -> Path | None:
    """The model card of `repo_id` at commit `revision` if the cache holds it (no network)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, CARD_FILENAME, cache_dir=cache_dir, revision=revision)
    except ValueError:  # an invalid repo id cannot be in the cache
        return None
    return Path(found) if isinstance(found, str) else None


# -- the hub -------------------------------------------------------------------------------------


def check_revision(revision: str | None) -> None:
    """Refuse a revision that is neither a commit hash nor a plain ref name, before any request:
    huggingface_hub writes `refs/<revision>` in the cache, so `../x` would write outside it."""
    from specreg.text import escape_control

    if revision is None or COMMIT.fullmatch(revision):
        return
    parts = revision.split("/")
    bad = ".." in revision or any(p.endswith((".", ".lock")) for p in parts)
    if len(revision) > _MAX_REF or not _REF.fullmatch(revision) or bad:
        raise UsageError(
            f"revision '{escape_control(revision, limit=80)}' is not a commit hash or a branch/tag name",
            hint="use a 40-character commit hash or a name like main, v1.0 or refs/pr/1",
        )


def check_commit(value: object, where: str) -> str:
    """A commit hash the hub sent (it names cache folders): exactly 40 lowercase hex digits."""
    from specreg.text import escape_control

    if isinstance(value, str) and COMMIT.fullmatch(value):
        return value
    raise HubError(
        f"{where}: the hub answered commit '{escape_control(value, limit=60)}', not a 40-hex commit hash; "
        "nothing downloaded or registered",
        hint="the hub (or HF_ENDPOINT's mirror) is misbehaving; check HF_ENDPOINT",
    )


def _check_headers(response: object) -> None:
    """httpx response hook: the headers huggingface_hub turns into cache paths must be plain
    names (X-Repo-Commit -> snapshots/<commit>, ETag -> blobs/<etag>); a hostile hub's
    `../` would otherwise write a file of its choosing outside the cache."""
    from specreg.text import escape_control

    headers = response.headers  # type: ignore[attr-defined]
    where = str(response.request.url.copy_with(query=None))  # type: ignore[attr-defined]
    commit = headers.get("X-Repo-Commit")
    if commit is not None:
        check_commit(commit, where)
    for name in ("X-Linked-Etag", "ETag"):
        value = headers.get(name)
        if value is None:
            continue
        tag = value.lstrip("W/").strip('"')  # huggingface_hub's _normalize_etag
        if not _ETAG.fullmatch(tag) or tag in (".", ".."):
            raise HubError(
                f"{escape_control(where, limit=120)}: the hub sent {name} '{escape_control(value, limit=60)}', "
                "which is not a plain name; nothing downloaded or registered",
                hint="the hub (or HF_ENDPOINT's mirror) is misbehaving; check HF_ENDPOINT",
            )


def _hub_client() -> object:
    """The client huggingface_hub shares for every request, as specreg makes it: redirects followed
    and no library timeout, as huggingface_hub's own default (specreg.remote's deadline bounds each
    operation instead), specreg.remote's bounds, and the check of the headers that become cache
    paths."""
    import httpx2

    from specreg import remote

    return remote.hub_client(httpx2, _check_headers)


_bound = False


def bound_hub_client() -> None:
    """Make huggingface_hub's shared client specreg's (`_hub_client`), once per process, through its
    public `set_client_factory`: every request it sends from then on is bounded and checked."""
    global _bound
    if _bound:
        return
    from huggingface_hub import set_client_factory

    set_client_factory(_hub_client)  # type: ignore[arg-type]
    _bound = True


def cache_ref(settings: HubSettings, repo_id: str, revision: str | None, commit: str) -> None:
    """Record `revision -> commit` in the cache like huggingface_hub's resolve_revision does, but
    only after both were checked (it writes whatever the hub answered, before anyone looks)."""
    try:
        from huggingface_hub.file_download import _cache_commit_hash_for_specific_revision, repo_folder_name
    except ImportError:  # best effort, as in huggingface_hub
        return
    check_revision(revision)
    check_commit(commit, repo_id)
    try:
        folder = settings.cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")
        _cache_commit_hash_for_specific_revision(str(folder), revision or "main", commit)
    except OSError:
        pass


def check_repo_id(repo_id: str) -> None:
    """Refuse a malformed repo id before any request (huggingface_hub's own validator)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise UsageError(
            f"{repo_id!r} is not a hub repo id: {str(exc).splitlines()[0]}",
            hint="use ORG/NAME, e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF",
        ) from exc


@contextmanager
def hub_errors(settings: HubSettings, repo_id: str, revision: str | None, filename: str | None) -> Iterator[None]:
    """Turn whatever huggingface_hub or the network raises into one HubError line with a hint;
    with huggingface_hub's client bounded (specreg.remote), whatever fails because the operation
    ran out of time is the deadline's line, however huggingface_hub wrapped it."""
    from specreg import remote

    bound_hub_client()
    try:
        with _hub_error_lines(settings, repo_id, revision, filename):
            yield
    except Exception as exc:
        if (over := remote.failure(exc)) is not None:
            raise over from None
        raise


@contextmanager
def _hub_error_lines(settings: HubSettings, repo_id: str, revision: str | None, filename: str | None) -> Iterator[None]:
    import logging

    import httpx2
    from huggingface_hub import errors as hf

    where = repo_id + (f"@{revision}" if revision else "") + (f" {filename}" if filename else "")
    # huggingface_hub logs each retry of a broken download as a warning; the outcome is our one
    # line. SPECREG_DEBUG=1 keeps its log (and the CLI then prints the traceback too).
    hf_logger = logging.getLogger("huggingface_hub")
    level = hf_logger.level
    if os.environ.get("SPECREG_DEBUG") != "1":
        hf_logger.setLevel(logging.ERROR)
    try:
        yield
    except HubError:
        raise
    except hf.GatedRepoError as exc:
        raise HubError(
            f"{repo_id} is gated: the hub refused access ({_status(exc)})",
            hint="accept the model's licence on its hub page, then log in (hf auth login or HF_TOKEN)",
        ) from exc
    except hf.RepositoryNotFoundError as exc:
        raise HubError(
            f"{repo_id}: repository not found on {settings.endpoint} ({_status(exc)})",
            hint="check the repo id; a private repo needs a login (hf auth login or HF_TOKEN)",
        ) from exc
    except hf.RevisionNotFoundError as exc:
        raise HubError(
            f"{repo_id}: revision {revision!r} not found on the hub",
            hint="use a branch, tag or full 40-character commit hash that exists",
        ) from exc
    except hf.RemoteEntryNotFoundError as exc:
        raise HubError(
            f"{where}: no such file in the repo at that revision",
            hint="list the repo's files on its hub page; names are case-sensitive",
        ) from exc
    except hf.OfflineModeIsEnabled as exc:
        settings.require_online(f"{where}")
        raise HubError(f"{where}: offline mode is enabled") from exc
    except hf.HfHubHTTPError as exc:
        raise HubError(f"{where}: the hub answered {_status(exc)}", hint="try again later") from exc
    except httpx2.TooManyRedirects as exc:
        raise HubError(
            f"{where}: the hub redirected too many times ({_cause(exc)})",
            hint="the hub (or HF_ENDPOINT's mirror) is misbehaving; check HF_ENDPOINT",
        ) from exc
    except (httpx2.RemoteProtocolError, httpx2.ReadError) as exc:  # the server hung up mid-answer
        raise HubError(
            f"{where}: the connection to the hub was lost ({_cause(exc)})", hint="try again; nothing was registered"
        ) from exc
    except (hf.LocalEntryNotFoundError, hf.RevisionResolutionError, httpx2.TransportError) as exc:
        raise HubError(
            f"{where}: cannot reach the hub at {settings.endpoint} ({_cause(exc)})",
            hint="check the network (or HF_ENDPOINT); local files still register offline",
        ) from exc
    except OSError as exc:  # huggingface_hub's size consistency check on a short download, disk full, ...
        raise HubError(f"{where}: download failed ({_cause(exc)})", hint="try again") from exc
    except ValueError as exc:  # invalid filename / revision strings, caught by huggingface_hub's validators
        raise HubError(f"{where}: {str(exc).splitlines()[0]}") from exc
    finally:
        hf_logger.setLevel(level)


def _status(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return f"HTTP {code}" if code else type(exc).__name__


def _cause(exc: BaseException) -> str:
    """The innermost message, on one line (huggingface_hub wraps network errors)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
