"""Remote GGUFs: `https://...` and `hf://ORG/REPO/FILE.gguf[@REV]`, read by HTTP range requests.

An `hf://` reference is resolved through huggingface_hub (its endpoint, token and offline
settings): the revision to a commit, and the hub's LFS SHA-256 of the file at that commit,
which is the artifact's identity. A plain URL has an identity only when its server announces
the content hash (a hub resolve URL's X-Linked-Etag). Remote artifacts are recorded as
"metadata only": checked, never benchmarked until fetched.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from specreg.errors import RemoteError, UsageError
from specreg.text import escape_control

if TYPE_CHECKING:  # the records only where one is made: `specreg inspect URL` needs no pydantic
    from specreg.gguf.reader import GGUFFile
    from specreg.registry.store import Registry
    from specreg.schemas.registry import ArtifactRecord

SCHEMES = ("https://", "http://", "hf://")
REMOTE_KEY = "remote"  # Provenance.extra key holding the facts below


def is_remote(ref: object) -> bool:
    return isinstance(ref, str) and ref.startswith(SCHEMES)


@dataclass
class RemoteFile:
    """Where a remote GGUF is, who vouches for its bytes, and what reading its header cost."""

    ref: str
    url: str
    size: int
    bytes_fetched: int
    requests: int
    repo: str | None = None
    requested_revision: str | None = None
    revision: str | None = None  # the commit, for hf://
    filename: str | None = None
    sha256: str | None = None  # the hub's LFS SHA-256 (or a resolve URL's X-Linked-Etag)
    metadata_only: bool = True

    def facts(self) -> dict[str, Any]:
        return asdict(self)


def parse_hf(ref: str) -> tuple[str, str, str | None]:
    """hf://ORG/REPO/PATH/FILE.gguf[@REV] -> (repo id, file path in the repo, revision or None)."""
    rest = ref[len("hf://") :]
    rev = None
    if "@" in rest:
        rest, rev = rest.rsplit("@", 1)
    parts = [p for p in rest.split("/") if p]
    if len(parts) < 3 or (not rev and rev is not None):
        raise UsageError(
            f"{ref}: expected hf://ORG/REPO/FILE.gguf[@REVISION]", hint="e.g. hf://acme/m-GGUF/m.gguf@main"
        )
    return "/".join(parts[:2]), "/".join(parts[2:]), rev


def _hf_headers() -> dict[str, str]:
    """huggingface_hub's headers (user agent and the token it finds: HF_TOKEN or a login)."""
    from huggingface_hub.utils import build_hf_headers

    return dict(build_hf_headers())


def _hub_path(url: str, endpoint: str) -> tuple[str | None, str | None]:
    """(repo, filename) of a `{endpoint}/ORG/REPO/resolve/REV/FILE` URL, else (None, None)."""
    if not url.startswith(endpoint + "/"):
        return None, None
    parts = [unquote(p) for p in urlsplit(url).path.split("/") if p]
    if len(parts) >= 5 and parts[2] == "resolve":
        return "/".join(parts[:2]), "/".join(parts[4:])
    return None, None


def open_remote(ref: str) -> tuple[GGUFFile, RemoteFile]:
    """Read a remote GGUF's header by range requests (same bounds as a local file, a cap on bytes),
    as one remote operation: the hub's answer and every range read share one deadline."""
    from specreg import remote

    with remote.operation(f"reading the header of {escape_control(ref, limit=120)}"):
        return _open_remote(ref)


def _open_remote(ref: str) -> tuple[GGUFFile, RemoteFile]:
    from specreg.gguf.http_source import HttpSource
    from specreg.gguf.reader import read_gguf
    from specreg.sources.hub import HubSettings, check_repo_id
    from specreg.sources.provenance import _hub_file

    settings = HubSettings.from_env()
    hub = None
    repo: str | None
    filename: str | None
    if ref.startswith("hf://"):
        repo, filename, rev = parse_hf(ref)
        check_repo_id(repo)
        settings.require_online(f"reading {ref}")
        from huggingface_hub import hf_hub_url

        hub = _hub_file(settings, repo, rev, filename)
        url = hf_hub_url(repo, hub.filename, revision=hub.commit, endpoint=settings.endpoint)
        headers = _hf_headers()
    else:
        url = ref
        repo, filename = _hub_path(url, settings.endpoint)
        headers = _hf_headers() if repo else {}  # the hub's token goes to the hub only
    source = HttpSource(url, headers=headers)
    try:
        gf = read_gguf(source, reopen=partial(HttpSource, url, headers=headers, first=1))
    finally:
        source.close()
    remote = RemoteFile(
        ref=ref,
        url=url,
        size=source.size,
        bytes_fetched=source.bytes_fetched,
        requests=source.requests,
        repo=hub.repo_id if hub else repo,
        requested_revision=hub.requested_revision if hub else None,
        revision=hub.commit if hub else source.response_headers.get("x-repo-commit"),
        filename=hub.filename if hub else filename or urlsplit(url).path.rsplit("/", 1)[-1],
        sha256=hub.sha256 if hub else source.linked_sha256,
    )
    if hub is not None and hub.size != source.size:
        raise RemoteError(f"{ref}: the hub lists {hub.size} bytes, the server has {source.size}")
    return gf, remote


def record_remote(reg: Registry, gf: GGUFFile, remote: RemoteFile) -> ArtifactRecord:
    """Record the artifact under its hub SHA-256, marked metadata only; no SHA-256: refused."""
    from specreg.gguf.summary import summarize
    from specreg.schemas.registry import Provenance

    if remote.sha256 is None:
        raise RemoteError(
            f"{remote.ref}: the server gives no SHA-256 for this file, so a verdict cannot name it",
            hint="use hf://ORG/REPO/FILE.gguf (the hub's LFS hash), or download it and check the local copy",
        )
    prov = Provenance(
        repo=remote.repo,
        revision=remote.revision,
        filename=remote.filename,
        source="remote",
        extra={REMOTE_KEY: remote.facts()},
    )
    return reg.add_remote_artifact(remote.sha256, summarize(gf), prov)


def metadata_only(rec: ArtifactRecord) -> bool:
    """Known only from a remote header: no file on disk to serve or hash."""
    return not rec.paths and bool(rec.provenance.extra.get(REMOTE_KEY))
