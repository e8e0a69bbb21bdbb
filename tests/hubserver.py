"""A loopback stand-in for the part of the Hugging Face hub HTTP API that huggingface_hub calls.

The only fake the house rules allow: the real `huggingface_hub` client talks to it through
`HF_ENDPOINT=http://127.0.0.1:PORT`. It answers what the client asks for `model_info`
(`/api/models/...[/revision/REV]`, `?blobs=true` for sibling LFS metadata), `resolve_revision` and
`hf_hub_download` (HEAD/GET `/{repo}/resolve/{rev}/{file}`), with the headers the client reads
(`X-Repo-Commit`, `ETag`, `X-Linked-Etag`, `X-Linked-Size`, `Content-Length`, `Location`,
`X-Error-Code`), as learned from huggingface_hub's `file_download.py` and `utils/_http.py`.

LFS files are served the way the hub does it: HEAD on `resolve` answers 302 with the LFS
metadata on the redirect itself and a `Location` on another host (the "CDN", here a second
server on 127.0.0.2), which the client does not follow for metadata and then downloads from.
Knobs per file / repo produce the failures tests need: a CDN that serves other bytes than the
hub's SHA-256 says (`FakeFile.serve`), a gated repo, a CDN that hangs up mid-body and is gone.
Hostile answers for the bounds of specreg.remote (`HOSTILE`): a model list (`FakeHub.listing`)
or a model-info answer (`FakeRepo.info_mode`) that never ends, trickles, announces 10 GB, links
its next page to itself or to new pages forever, or redirects to itself; a file the CDN sends
in part and then trickles (`FakeFile.trickle_after`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from _cli_helpers import run_specreg


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's bytes (the hub's ETag for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FakeFile:
    """One file at one commit; `serve` replaces the bytes the CDN sends (a tampered mirror);
    `path` serves a file on disk instead of `data` (a sparse file stands in for a big model)."""

    data: bytes = b""
    lfs: bool = True
    serve: bytes | None = None
    etag: str | None = None  # a lying hub: this X-Linked-Etag instead of the SHA-256
    path: Path | None = None
    trickle_after: int | None = None  # the CDN sends this many bytes at once, then a byte every trickle_s

    @property
    def size(self) -> int:
        return self.path.stat().st_size if self.path is not None else len(self.data)

    @property
    def sha256(self) -> str:
        if self.path is None:
            return hashlib.sha256(self.data).hexdigest()
        return _file_sha256(self.path)

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) as the CDN serves them."""
        if self.serve is not None:
            return self.serve[start:end]
        if self.path is None:
            return self.data[start:end]
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def pointer(self) -> bytes:
        return f"version https://git-lfs.github.com/spec/v1\noid sha256:{self.sha256}\nsize {self.size}\n".encode()


@cache
def _file_sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@dataclass
class FakeRepo:
    repo_id: str
    commits: dict[str, dict[str, FakeFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    drop_downloads: bool = False  # the CDN sends half a body, hangs up, then refuses to answer
    # a lying hub: model_info's "sha" / the X-Repo-Commit header say this instead of the commit
    # (and the hub then answers for it as if it were that commit)
    info_sha: str | None = None
    header_commit: str | None = None
    redirect_loop: bool = False  # every API answer is a redirect to itself
    no_ranges: bool = False  # the CDN ignores Range and starts sending the whole file
    hang_s: float = 0.0  # the CDN waits this long before answering
    redirect_to: str | None = None  # the CDN redirects every download there (e.g. another scheme)
    info_edit: Callable[[dict], object] | None = None  # rewrites model_info's answer (the fuzzer's lies);
    # returning bytes sends those bytes as the body instead
    tags: list[str] = field(default_factory=list)  # model_info's and the search's `tags` (e.g. gguf, base_model:X)
    card_license: str | None = None  # model_info's cardData.license
    info_mode: str | None = None  # one of HOSTILE: how model_info's answer misbehaves

    def resolve(self, rev: str) -> str | None:
        if rev in self.refs:
            return self.refs[rev]
        if rev in (self.info_sha, self.header_commit) and self.commits:
            return next(iter(self.commits))
        return rev if rev in self.commits else None


@dataclass
class Request:
    method: str
    path: str
    host: str
    at: float = field(default_factory=time.monotonic)  # when it arrived


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (specreg stopping a read at its limit) is what several
    tests do on purpose; socketserver would print its traceback to sys.stderr, which belongs to
    the CLI when the CLI runs in this process. Handler errors are counted instead."""

    handler_errors = 0

    def handle_error(self, request: object, client_address: object) -> None:
        type(self).handler_errors += 1


class FakeHub:
    """Start with `with FakeHub() as hub:`; `hub.endpoint` goes into HF_ENDPOINT."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._hub = _QuietServer(("127.0.0.1", 0), _handler(self, cdn=False))
        self._cdn = _QuietServer(("127.0.0.2", 0), _handler(self, cdn=True))
        self._threads = [
            threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True) for s in (self._hub, self._cdn)
        ]
        self._dropped: set[str] = set()
        self.bytes_sent = 0  # body bytes the CDN and the resolve route sent, over all requests
        self.listing: str | None = None  # one of HOSTILE: how the model list (/api/models) misbehaves
        self.trickle_s = 2.0  # a trickled answer: one byte this often
        self.listing_entries = 100_000  # the "huge" listing's length

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def cdn(self) -> str:
        return f"http://127.0.0.2:{self._cdn.server_address[1]}"

    def add_commit(
        self, repo_id: str, files: dict[str, bytes | FakeFile], *, ref: str = "main", gated: bool = False
    ) -> str:
        """Add a commit holding exactly `files` (bytes are LFS unless named *.md/*.json); move `ref` to it."""
        repo = self.repos.setdefault(repo_id, FakeRepo(repo_id))
        repo.gated = repo.gated or gated
        tree = {
            name: f if isinstance(f, FakeFile) else FakeFile(f, lfs=not name.endswith((".md", ".json")))
            for name, f in files.items()
        }
        commit = hashlib.sha1(f"{repo_id}/{len(repo.commits)}/{sorted(tree)}".encode()).hexdigest()
        repo.commits[commit] = tree
        repo.refs[ref] = commit
        return commit

    def paths(self, method: str | None = None) -> list[str]:
        return [r.path for r in self.requests if method is None or r.method == method]

    def __enter__(self) -> FakeHub:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for s in (self._hub, self._cdn):
            s.shutdown()
            s.server_close()

    def _blob(self, sha256: str) -> tuple[FakeRepo, FakeFile] | None:
        for repo in self.repos.values():
            for tree in repo.commits.values():
                for f in tree.values():
                    if f.lfs and f.sha256 == sha256:
                        return repo, f
        return None


def _handler(hub: FakeHub, *, cdn: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        # --- plumbing -----------------------------------------------------------------
        def _send(self, status: int, headers: dict[str, str], body: bytes = b"", *, head: bool = False) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", headers.get("Content-Length", str(len(body))))
            self.end_headers()
            if not head and body:
                self.wfile.write(body)

        def _hostile(self, mode: str, body: bytes, *, head: bool) -> None:
            """`body` (a JSON answer) sent the way `mode` says (one of HOSTILE)."""
            self.close_connection = True
            if mode == "redirect-loop":
                return self._send(302, {"Location": self.path}, head=head)
            here = f"{hub.endpoint}{self.path}"  # the hub's Link header carries whole URLs
            if mode == "self-link":
                return self._send(200, {"Content-Type": "application/json", "Link": f'<{here}>; rel="next"'}, b"[]")
            if mode == "next-pages":
                nxt = f"{here}{'&' if '?' in here else '?'}p=1"
                return self._send(200, {"Content-Type": "application/json", "Link": f'<{nxt}>; rel="next"'}, b"[]")
            if mode == "huge":
                entries = ",".join(f'{{"id":"acme/m{i}"}}' for i in range(hub.listing_entries))
                return self._send(200, {"Content-Type": "application/json"}, f"[{entries}]".encode(), head=head)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if mode == "announce-10gb":
                self.send_header("Content-Length", str(10 * 10**9))
            elif mode == "trickle":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if head:
                return
            stop = time.monotonic() + 60  # whatever the client does, this thread ends
            with contextlib.suppress(OSError):
                if mode == "endless":
                    self.wfile.write(body[:-1])
                    piece = b',{"id":"acme/more","tags":["gguf"]}' * 2000
                    while time.monotonic() < stop:
                        self.wfile.write(piece)
                elif mode == "trickle":
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        if time.monotonic() > stop:
                            break
                        time.sleep(hub.trickle_s)
                else:
                    self.wfile.write(body)

        def _error(self, status: int, code: str, message: str, *, head: bool, commit: str | None = None) -> None:
            headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
            if commit:
                headers["X-Repo-Commit"] = commit
            self._send(status, headers, json.dumps({"error": message}).encode(), head=head)

        def _route(self, *, head: bool) -> None:
            url = urlsplit(self.path)
            with hub._lock:
                hub.requests.append(Request(self.command, url.path, "cdn" if cdn else "hub"))
            parts = [unquote(p) for p in url.path.split("/")[1:]]
            if cdn:
                return self._cdn_get(parts, head=head)
            if parts[:2] == ["api", "models"] and len(parts) >= 4:
                return self._model_info(parts[2:], parse_qs(url.query), head=head)
            if parts == ["api", "models"]:
                return self._search(parse_qs(url.query), head=head)
            if len(parts) >= 5 and parts[2] == "resolve":
                return self._resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]), head=head)
            self._error(404, "NotFound", "no such route", head=head)

        # --- /api/models/{repo}[/revision/{rev}] ------------------------------------------
        def _model_info(self, parts: list[str], query: dict[str, list[str]], *, head: bool) -> None:
            repo_id = "/".join(parts[:2])
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found", head=head)
            if repo.redirect_loop:
                return self._send(302, {"Location": self.path}, head=head)
            rev = parts[3] if len(parts) >= 4 and parts[2] == "revision" else "main"
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for name, f in sorted(repo.commits[commit].items()):
                entry: dict[str, object] = {"rfilename": name}
                if blobs:
                    stored = f.pointer() if f.lfs else f.data
                    entry.update(size=f.size, blobId=git_blob_sha1(stored))
                    if f.lfs:
                        entry["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": len(stored)}
                siblings.append(entry)
            body = {
                "_id": commit[:24],
                "id": repo_id,
                "modelId": repo_id,
                "author": repo_id.split("/")[0],
                "sha": repo.info_sha or commit,
                "lastModified": "2025-01-01T00:00:00.000Z",
                "private": False,
                "gated": "manual" if repo.gated else False,
                "disabled": False,
                "tags": list(repo.tags),
                "siblings": siblings,
            }
            if repo.card_license is not None:
                body["cardData"] = {"license": repo.card_license}
            edited = repo.info_edit(body) if repo.info_edit is not None else None
            raw = edited if isinstance(edited, bytes) else json.dumps(body).encode()
            if repo.info_mode is not None:
                return self._hostile(repo.info_mode, raw, head=head)
            self._send(200, {"Content-Type": "application/json"}, raw, head=head)

        # --- /api/models?search=...&filter=...&limit=... (list_models) ----------------------
        def _search(self, query: dict[str, list[str]], *, head: bool) -> None:
            """Repos whose id holds `search` (case-insensitive) and whose tags hold every `filter`."""
            words = [w.lower() for w in query.get("search", [])]
            wanted = set(query.get("filter", []))
            limit = int(query.get("limit", ["1000"])[0])
            found = [
                {"id": r.repo_id, "modelId": r.repo_id, "tags": list(r.tags), "private": False}
                for r in sorted(hub.repos.values(), key=lambda r: r.repo_id)
                if all(w in r.repo_id.lower() for w in words) and wanted <= set(r.tags)
            ]
            raw = json.dumps(found[:limit]).encode()
            if hub.listing is not None:
                return self._hostile(hub.listing, raw, head=head)
            self._send(200, {"Content-Type": "application/json"}, raw, head=head)

        # --- /{repo}/resolve/{rev}/{file} ---------------------------------------------------
        def _resolve(self, repo_id: str, rev: str, filename: str, *, head: bool) -> None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found", head=head)
            commit = repo.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}", head=head)
            if repo.gated:
                msg = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated."
                return self._error(401, "GatedRepo", msg, head=head)
            f = repo.commits[commit].get(filename)
            if f is None:
                return self._error(404, "EntryNotFound", f"{filename} does not exist", head=head, commit=commit)
            if f.lfs:
                headers = {
                    "X-Repo-Commit": repo.header_commit or commit,
                    "ETag": f'"{git_blob_sha1(f.pointer())}"',
                    "X-Linked-Etag": f'"{f.etag or f.sha256}"',
                    "X-Linked-Size": str(f.size),
                    "Location": f"{hub.cdn}/blobs/{f.sha256}?repo={repo_id}",
                }
                return self._send(302, headers, head=head)
            self._ranged(
                f,
                {"X-Repo-Commit": repo.header_commit or commit, "ETag": f'"{f.etag or git_blob_sha1(f.data)}"'},
                head=head,
            )

        # --- the CDN: /blobs/{sha256} -------------------------------------------------------
        def _cdn_get(self, parts: list[str], *, head: bool) -> None:
            found = hub._blob(parts[1]) if len(parts) == 2 and parts[0] == "blobs" else None
            if found is None:
                return self._error(404, "NotFound", "no such blob", head=head)
            repo, f = found
            if repo.drop_downloads:
                return self._drop(f.sha256, f.read(0, f.size))
            if repo.hang_s:
                time.sleep(repo.hang_s)
            if repo.redirect_to is not None:
                return self._send(302, {"Location": repo.redirect_to}, head=head)
            self._ranged(f, {"ETag": f'"{f.sha256}"'}, head=head, ranges=not repo.no_ranges)

        def _ranged(self, f: FakeFile, headers: dict[str, str], *, head: bool, ranges: bool = True) -> None:
            """200 with the whole file, or 206 for `Range: bytes=a-b` / `bytes=a-` (416 outside it)."""
            size = f.size
            headers = {"Content-Type": "application/octet-stream", **headers}
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "").strip())
            start, end, status = 0, size, 200
            if ranges:
                headers["Accept-Ranges"] = "bytes"
                if m:
                    start, end, status = int(m.group(1)), min(size, int(m.group(2) or size - 1) + 1), 206
                    if start >= size or end <= start:
                        return self._send(416, {"Content-Range": f"bytes */{size}"}, head=head)
                    headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(end - start))
            self.end_headers()
            if head:
                return
            pos = start
            stop = time.monotonic() + 60
            while pos < end:
                if f.trickle_after is not None and pos >= start + f.trickle_after:
                    if time.monotonic() > stop:
                        return
                    with contextlib.suppress(OSError):
                        self.wfile.write(f.read(pos, pos + 1))
                        self.wfile.flush()
                        time.sleep(hub.trickle_s)
                        pos += 1
                        continue
                    return
                chunk = f.read(
                    pos, min(end, pos + (1 << 20), start + f.trickle_after if f.trickle_after is not None else end)
                )
                with hub._lock:  # counted before the client can have it: a test reads the count
                    hub.bytes_sent += len(chunk)  # as soon as its client returns
                try:
                    self.wfile.write(chunk)
                except OSError:  # a client that stops reading (no Range support) hangs up
                    with hub._lock:
                        hub.bytes_sent -= len(chunk)
                    return
                pos += len(chunk)

        def _drop(self, key: str, body: bytes) -> None:
            """First request: headers promise the whole body, half of it comes, the socket closes.
            Every later request: the connection closes before any answer (the server is gone)."""
            self.close_connection = True
            first = key not in hub._dropped
            hub._dropped.add(key)
            if first:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

    return Handler


# -- test data and pytest fixtures (import them into a test module by name) ----------------------

REPO = "acme/tiny-GGUF"
# what FakeHub.listing and FakeRepo.info_mode may be set to (FakeHub._hostile)
HOSTILE = ("endless", "trickle", "announce-10gb", "self-link", "next-pages", "huge", "redirect-loop")
CARD = b"---\nlicense: other\nlicense_name: llama3.1\nlicense_link: https://example.org/LICENSE\n---\n# tiny\n"


@cache
def gguf_bytes(seed: int = 0, license: str | None = "apache-2.0") -> bytes:
    """A tiny real GGUF's bytes (written once per spec and session)."""
    from specreg.testing import ModelSpec, write_model

    with tempfile.TemporaryDirectory() as d:
        return write_model(Path(d) / "m.gguf", ModelSpec(seed=seed, license=license)).read_bytes()


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    """A running loopback hub (and CDN) with no repos yet."""
    with FakeHub() as h:
        yield h


def set_online(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    from huggingface_hub import constants

    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "3")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; this process may have imported it
    # while conftest had set it. The CLI is a fresh process and reads its environment.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1 from here on, for this process and the subprocesses it starts."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def online(hub: FakeHub, monkeypatch: pytest.MonkeyPatch) -> FakeHub:
    """The loopback hub, with this process (and its subprocesses) pointed at it and online."""
    set_online(monkeypatch, hub.endpoint)
    return hub


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real entry point `specreg.cli.main` with this process's environment, answering as a
    fresh process would (tests/_cli_helpers.py)."""
    return run_specreg(args, timeout=timeout, env=dict(os.environ, COLUMNS="200"))


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, one `error:` line (plus an optional hint) naming every needle."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and all(ln.startswith(("error:", "hint:")) for ln in lines), proc.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
