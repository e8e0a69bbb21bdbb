"""Where a GGUF file came from and what licence it is under: local cache, model card, hub.

Three ways in, one record out (`Provenance` + the model card's `LicenceSource`):
- `local_facts` — looked up on every registration (`register`, which hands them to the store):
  a file under a Hugging Face cache names its repo, commit and filename, and the README.md of
  the same snapshot is its model card. No network, ever; a path outside any cache costs a walk
  over its parents. The store never imports this module: provenance -> store, one way.
- `fetch` — `hf_hub_download` at a commit resolved once, the bytes checked against the hub's LFS
  SHA-256 for that commit, the card fetched at the same commit, then registered.
- `verify` — the same check for a file already on disk (`register --verify`).
Provenance.source says how much we know: "user" (flags only), "hf_cache" (the cache says so),
"hub" (SHA-256 verified against the hub's metadata at that commit).
A mismatch or any hub failure raises before the registry is touched: nothing half-registered.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specreg.allowance import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S
from specreg.errors import HubError, SpecregError, UsageError
from specreg.registry import licence
from specreg.registry.artifacts import stat_or_raise
from specreg.registry.hashing import sha256_with_bar
from specreg.schemas.registry import LicenceRecord, LicenceSource, Provenance
from specreg.sources.hub import (
    CARD_FILENAME,
    COMMIT,
    MODEL_INFO_BYTES,
    HubSettings,
    bound_hub_client,
    cache_ref,
    cached_card,
    check_commit,
    check_repo_id,
    check_revision,
    discard_cached,
    hub_errors,
    recognise_cached,
)
from specreg.text import escape_control

if TYPE_CHECKING:
    from specreg.registry.snapshot import Snapshot
    from specreg.registry.store import Registry
    from specreg.schemas.registry import ArtifactRecord

MAX_CARD_BYTES = 1 << 20  # a model card is text; a bigger README is not parsed (its YAML is untrusted)
MAX_CARD_YAML_CHARS = 256 << 10  # the front matter of real cards is a few KiB (model-index results: tens)
VERIFIED_KEY = "hub_verified"  # provenance extra written by fetch/verify, read back by local_facts
MAX_FILE_BYTES = 1 << 50  # an LFS size past this (a PiB) is not a model file's
CARD_BYTES = 16 << 20  # the model card's download (past MAX_CARD_BYTES it is kept but not parsed)
# A download's default deadline: the operation's default plus one second per MiB the hub declares
# (a floor of 1 MiB/s); --timeout / SPECREG_TIMEOUT replace it.
DOWNLOAD_FLOOR_BYTES_PER_S = 1 << 20


def card_source(readme: str | Path) -> LicenceSource | None:
    """The model card's YAML `license`, `license_name`, `license_link`. No metadata, broken or
    hostile YAML (aliases, deep nesting), an oversized card or a non-text licence give no
    source: the card is untrusted text and must not stop, or stall, a registration."""
    meta = _card_metadata(Path(readme))
    if meta is None:
        return None
    value = licence.normalise(meta.get("license"))
    name, link = licence.text_field(meta.get("license_name")), licence.text_field(meta.get("license_link"))
    if not (value or name or link):
        return None
    return LicenceSource(source="model_card", value=value, name=name, link=link)


def _card_metadata(path: Path) -> dict[str, Any] | None:
    """The card's YAML front matter as a dict, read with huggingface_hub's block pattern but a
    loader that refuses aliases: a few hundred bytes of nested aliases expand to gigabytes."""
    import yaml
    from huggingface_hub.repocard import REGEX_YAML_BLOCK

    class NoAliasLoader(yaml.SafeLoader):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("YAML aliases are not accepted in a model card")
            return super().compose_node(parent, index)

    try:
        with open(path, "rb", buffering=0) as fh:  # the cache's own file, or a user's README
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return None
            raw = fh.read(MAX_CARD_BYTES + 1)
        if len(raw) > MAX_CARD_BYTES:
            return None
        match = REGEX_YAML_BLOCK.search(raw.decode("utf-8-sig"))
        if match is None or len(match.group(2)) > MAX_CARD_YAML_CHARS:
            return None
        meta = yaml.load(match.group(2), Loader=NoAliasLoader)  # a SafeLoader subclass
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def describe_licence(rec: LicenceRecord) -> str:
    """One line for people: the effective licence, its source and, on conflict, every statement.

    Built from untrusted values: print it through `safe()`.
    """
    if rec.effective is None:
        return "unknown (no licence stated)"
    line = f"{rec.effective} (from {rec.effective_source})"
    if rec.conflict:
        said = "; ".join(f"{s.source}: {s.value}" + (f" [{s.name}]" if s.name else "") for s in rec.sources if s.value)
        line += f" - sources disagree: {said}"
    return line


def local_facts(
    path: str | Path, *, repo: str | None = None, revision: str | None = None, extra: dict[str, Any] | None = None
) -> tuple[Provenance, LicenceSource | None]:
    """Provenance and model-card licence of a file about to be registered.

    A cached file's repo and commit come from the cache; `--repo` / `--revision` that contradict
    them are a usage error rather than a silent override.
    """
    check_revision(revision)
    apath = os.path.abspath(path)
    extra = dict(extra or {})
    verified = extra.get(VERIFIED_KEY) or {}
    cached = recognise_cached(apath)
    card: Path | None = None
    if cached is not None:
        if repo and repo != cached.repo_id:
            raise UsageError(
                f"{apath} is in the Hugging Face cache as {cached.repo_id}, not {repo}",
                hint="drop --repo; the cache knows where this file came from",
            )
        if revision and revision not in (cached.revision, *cached.refs):
            raise UsageError(
                f"{apath} is in the cache at commit {cached.revision[:12]}, which is not revision {revision!r}",
                hint="drop --revision, or fetch that revision (specreg fetch)",
            )
        extra["hf_cache"] = {
            "cache_dir": str(cached.cache_dir),
            "repo_type": cached.repo_type,
            "refs": list(cached.refs),
        }
        prov = Provenance(
            repo=cached.repo_id, revision=cached.revision, filename=cached.filename, source="hf_cache", extra=extra
        )
        card = cached.card_path
    else:
        prov = Provenance(
            repo=repo,
            revision=revision,
            filename=os.path.basename(apath),
            source="user" if (repo or revision) else None,
            extra=extra,
        )
        if repo and revision and COMMIT.fullmatch(revision):  # only a commit pins the card's text
            card = cached_card(repo, revision, HubSettings.from_env().cache_dir)
    if verified:
        prov = replace(prov, source="hub", filename=verified.get("filename", prov.filename))
    return prov, (card_source(card) if card is not None else None)


def register(
    registry: Registry,
    path: str | Path,
    *,
    license: str | None = None,
    repo: str | None = None,
    revision: str | None = None,
    extra: dict[str, Any] | None = None,
    rehash: bool = False,
    snap: Snapshot | None = None,
) -> ArtifactRecord:
    """Register a file with its local facts: how every command registers a file.

    A path already registered and unchanged, with nothing new to record, is answered from the
    stat cache without looking anything up or writing.

    Args:
        registry: where to record it.
        path: the file.
        license: a licence the user states, kept beside the file's and the card's.
        repo: the hub repo the user says the file is from (a file in the HF cache names its own;
            a contradiction is a UsageError).
        revision: the commit or ref, likewise.
        extra: further provenance facts to keep (e.g. a verified hub download's).
        rehash: hash the bytes even when the stat cache vouches for them.
        snap: the file as the caller read it (parsed and hashed from one descriptor),
            registered under exactly that SHA-256.
    """
    if snap is not None:
        prov, card = local_facts(path, repo=repo, revision=revision, extra=extra)
        return registry.add_artifact(path, license=license, provenance=prov, card=card, snap=snap)
    if not (license or repo or revision or extra or rehash):
        sha = registry.registered_unchanged(path)
        if sha is not None:
            return registry.get_artifact(sha)
    stat_or_raise(os.path.abspath(path))  # a missing file says so before any cache lookup
    prov, card = local_facts(path, repo=repo, revision=revision, extra=extra)
    return registry.add_artifact(path, license=license, provenance=prov, card=card, rehash=rehash)


# -- the hub ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubFile:
    """What the hub says about one LFS file at one commit."""

    repo_id: str
    requested_revision: str | None
    commit: str
    filename: str
    sha256: str
    size: int
    endpoint: str


def _hub_file(
    settings: HubSettings, repo: str, revision: str | None, filename: str | None, local_sha256: str | None = None
) -> HubFile:
    """Resolve `revision` to a commit (one request: the commit and its files come from the same
    answer), check the commit before it names anything in the cache, and read the LFS SHA-256 and
    size of `filename` there; with only `local_sha256`, find the file that has it. Writes nothing:
    whoever keeps a file records the ref (`cache_ref`) once the file is verified."""
    from huggingface_hub import HfApi

    from specreg import remote

    check_revision(revision)
    api = HfApi(endpoint=settings.endpoint)
    with (
        hub_errors(settings, repo, revision, filename),
        remote.expect(f"the hub's answer about {repo}", MODEL_INFO_BYTES),
    ):
        try:
            info = api.model_info(repo, revision=revision, files_metadata=True)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as exc:
            # huggingface_hub builds its ModelInfo from the answer as it comes: a sibling that is
            # not an object, a missing name, JSON that is a list or nested past the parser's depth
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:120]
            raise HubError(f"{repo}: the hub's answer about the repo is malformed ({why})") from None
    commit = check_commit(info.sha, f"{repo}@{revision or 'main'}")
    lfs = {s.rfilename: s.lfs for s in info.siblings or [] if s.lfs is not None}
    plain = {s.rfilename for s in info.siblings or []}
    name = filename
    if name is None or (name not in plain and local_sha256):
        name = next((n for n, entry in sorted(lfs.items()) if entry.sha256 == local_sha256), name)
    where = f"{repo}@{commit[:12]}"
    if name is None or name not in plain:
        hint = "pass the file's name in the repo" if name is None else "names are case-sensitive; see the repo's files"
        raise HubError(f"{where}: no file {name or 'with this SHA-256'} in the repo at that revision", hint=hint)
    if name not in lfs:
        raise HubError(
            f"{where}/{name}: the hub lists no LFS SHA-256 for this file, so it cannot be verified",
            hint="GGUF files on the hub are stored with LFS; is this the right file?",
        )
    size = lfs[name].size
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_FILE_BYTES:
        raise HubError(
            f"{where}/{name}: the hub lists the LFS size {escape_control(size, limit=40)}, not a file size",
            hint="the hub (or HF_ENDPOINT's mirror) is misbehaving; check HF_ENDPOINT",
        )
    return HubFile(repo, revision, commit, name, lfs[name].sha256, size, settings.endpoint)


def _inside_cache(path: Path, settings: HubSettings) -> None:
    """The file huggingface_hub returned must lie in the cache (and resolve into it)."""
    for norm in (os.path.abspath, os.path.realpath):
        root = Path(norm(settings.cache_dir))
        if root not in Path(norm(path)).parents:
            raise HubError(f"{path}: the download landed outside the Hugging Face cache {root}; nothing registered")


def _verified_extra(hf: HubFile, how: str) -> dict[str, Any]:
    facts = asdict(hf) | {"how": how, "verified_at": datetime.now(UTC).isoformat(timespec="seconds")}
    return {VERIFIED_KEY: facts}


def _download_card(settings: HubSettings, hf: HubFile) -> None:
    """Put the model card of that very commit into the cache (absent card: fine, no statement)."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import RemoteEntryNotFoundError

    from specreg import remote

    # an absent card: no statement
    with (
        remote.operation(f"the download of {hf.repo_id}'s model card"),
        remote.expect("the model card", CARD_BYTES),
        hub_errors(settings, hf.repo_id, hf.commit, CARD_FILENAME),
        suppress(RemoteEntryNotFoundError),
    ):
        hf_hub_download(
            hf.repo_id, CARD_FILENAME, revision=hf.commit, cache_dir=settings.cache_dir, endpoint=settings.endpoint
        )


def fetch(
    registry: Registry,
    repo: str,
    filename: str,
    *,
    revision: str | None = None,
    license: str | None = None,
    settings: HubSettings | None = None,
) -> tuple[ArtifactRecord, Path]:
    """Download REPO/FILENAME at a pinned commit, verify it against the hub's LFS SHA-256,
    read the card of the same commit, then register it with all of that. Returns the record
    and the file's path in the Hugging Face cache."""
    from specreg import remote

    s = settings or HubSettings.from_env()
    s.require_online("specreg fetch")
    check_repo_id(repo)
    check_revision(revision)
    bound_hub_client()
    with remote.operation(f"asking the hub about {repo}"):
        hf = _hub_file(s, repo, revision, filename)
    path = _download(s, hf)
    _inside_cache(path, s)
    actual, _ = sha256_with_bar(path)
    if actual != hf.sha256:
        discard_cached(path)
        raise HubError(
            f"{repo}@{hf.commit[:12]}/{hf.filename}: downloaded bytes have SHA-256 {actual[:16]}..., the hub says "
            f"{hf.sha256[:16]}...; removed from the cache, nothing registered",
            hint="a proxy or mirror altered the file; check HF_ENDPOINT and try again",
        )
    if revision != hf.commit:
        cache_ref(s, repo, revision, hf.commit)
    _download_card(s, hf)
    return register(registry, path, license=license, extra=_verified_extra(hf, "fetch")), path


def _download(s: HubSettings, hf: HubFile) -> Path:
    """huggingface_hub's download of the pinned file into the cache, as one remote operation:
    by plain HTTP (not hf_xet, whose connections are its own) so every byte passes specreg.remote's
    bounds - never more than the size the hub declared at that commit, within the deadline. On
    any failure nothing of it stays in the cache: huggingface_hub removes its temporary file,
    and what else it began here (a lock, an `.incomplete` file, empty folders) is removed too."""
    from huggingface_hub import hf_hub_download

    from specreg import remote

    where = f"{hf.repo_id}@{hf.commit[:12]}/{hf.filename}"
    before = _cache_paths(s, hf.repo_id)
    default = DEFAULT_TIMEOUT_S + min(hf.size / DOWNLOAD_FLOOR_BYTES_PER_S, MAX_TIMEOUT_S)
    try:
        with (
            remote.operation(f"the download of {escape_control(where, limit=160)}", default=default),
            remote.expect(
                f"the download of {escape_control(hf.filename, limit=80)}",
                hf.size,
                why=f"the size the hub declares for it at {hf.commit[:12]}",
            ),
            _plain_http(),
            hub_errors(s, hf.repo_id, hf.commit, hf.filename),
        ):
            return Path(
                hf_hub_download(hf.repo_id, hf.filename, revision=hf.commit, cache_dir=s.cache_dir, endpoint=s.endpoint)
            )
    except SpecregError as exc:
        _remove_new_partials(s, hf.repo_id, before)
        exc.message += "; nothing of the download was kept in the cache"
        raise


@contextmanager
def _plain_http() -> Iterator[None]:
    """Inside: huggingface_hub downloads by HTTP even what is stored with Xet (HF_HUB_DISABLE_XET,
    its documented setting, which it reads from its constants module at each download)."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = True
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = saved


def _cache_paths(s: HubSettings, repo_id: str) -> set[Path]:
    """Every path under the repo's cache folder and its lock folder."""
    from huggingface_hub.file_download import repo_folder_name

    folder = repo_folder_name(repo_id=repo_id, repo_type="model")
    found: set[Path] = set()
    for root in (s.cache_dir / folder, s.cache_dir / ".locks" / folder):
        if root.is_dir():
            found.add(root)
        for dirpath, dirs, files in os.walk(root):
            found.update(Path(dirpath) / name for name in (*dirs, *files))
    return found


def _remove_new_partials(s: HubSettings, repo_id: str, before: set[Path]) -> None:
    """After a failed download: remove the partial files, locks and (empty) folders that were not
    in the cache before it; a complete file another process put there meanwhile stays."""
    for path in sorted(_cache_paths(s, repo_id) - before, key=lambda p: len(p.parts), reverse=True):
        with suppress(OSError):
            if path.is_dir() and not path.is_symlink():
                path.rmdir()  # only when empty
            elif path.name.endswith((".incomplete", ".lock")):
                path.unlink()


def verify(
    registry: Registry,
    path: str | Path,
    *,
    repo: str | None = None,
    revision: str | None = None,
    license: str | None = None,
    settings: HubSettings | None = None,
) -> ArtifactRecord:
    """Check a file on disk against the hub's LFS SHA-256 at REPO@REVISION, then register it.

    A file in the HF cache is checked at its snapshot's commit under its repo filename; any other
    file under its own name, else under whichever file at that commit has its SHA-256.
    """
    from specreg import remote

    s = settings or HubSettings.from_env()
    local_facts(path, repo=repo, revision=revision)  # flags that contradict the cache fail here
    cached = recognise_cached(path)
    if cached is not None:
        repo, revision, name = cached.repo_id, cached.revision, cached.filename
    elif not repo:
        raise UsageError(f"{path}: --verify needs --repo ORG/NAME (the file is not in a Hugging Face cache)")
    else:
        name = os.path.basename(path)
    s.require_online("register --verify")
    check_repo_id(repo)
    actual, _ = sha256_with_bar(path)
    bound_hub_client()
    with remote.operation(f"asking the hub about {repo}"):
        hf = _hub_file(s, repo, revision, name, local_sha256=actual)
    if actual != hf.sha256:
        raise HubError(
            f"{path}: SHA-256 {actual[:16]}... does not match {repo}@{hf.commit[:12]}/{hf.filename} on the hub "
            f"({hf.sha256[:16]}...); nothing registered",
            hint="the file differs from the hub's; re-download it (specreg fetch) or check --repo/--revision",
        )
    if revision != hf.commit:
        cache_ref(s, repo, revision, hf.commit)
    _download_card(s, hf)
    extra = _verified_extra(hf, "verify")
    if cached:  # the cache names repo and commit itself
        return register(registry, path, license=license, extra=extra)
    return register(registry, path, license=license, repo=repo, revision=hf.commit, extra=extra)
