"""A remote GGUF as a byte source: HTTP Range requests, only the bytes the header walk asks for.

The walk is the same bounded walk as for a local file (`read_gguf` over a `ByteSource`); this
source adds what the network needs: the size from the first answer's Content-Range, redirects
followed by hand (http/https only; credentials never follow to another host), a cap on the
bytes fetched, and one `RemoteError` line for a server without Range support, a 401/403/404.
Its requests go through specreg.remote (the operation's deadline, a body never longer than
the range asked for); `bytes_fetched` counts every body byte received.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from specreg import remote
from specreg.errors import RemoteError

if TYPE_CHECKING:
    import httpx

FIRST_FETCH = 1 << 20  # the first request: the whole header of most models, and the file size
MAX_FETCH_BYTES = 64 << 20  # the most one remote file may cost (real headers: up to ~16 MiB)
MAX_REDIRECTS = 5
_SLACK = 64 << 10  # a range answer may run this far past the bytes asked for (they are cut there)
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_SHA256 = re.compile(r'^(?:W/)?"?([0-9a-f]{64})"?$')


class HttpSource:
    """`ByteSource` over one URL; reads [offset, offset + n) with `Range: bytes=...`."""

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        max_bytes: int = MAX_FETCH_BYTES,
        first: int = FIRST_FETCH,
    ) -> None:
        scheme = urlsplit(url).scheme
        if scheme not in ("http", "https"):
            raise RemoteError(f"{url}: only http:// and https:// URLs can be read remotely, not {scheme}://")
        self.path = url
        self.url = url  # where the bytes really are, once redirects are followed
        self.max_bytes = max_bytes
        self.bytes_fetched = 0
        self.requests = 0
        self.response_headers: dict[str, str] = {}
        self._headers = dict(headers or {})
        self._client = remote.client()
        self._prefix = b""
        try:
            self._prefix, total = self._get(0, first)
        except BaseException:
            self.close()
            raise
        self.size = total

    # -- ByteSource ------------------------------------------------------------------------------
    def read(self, offset: int, n: int) -> bytes:
        """Up to `n` bytes at `offset` (short only at the end of the file)."""
        n = max(0, min(n, self.size - offset))
        if n == 0:
            return b""
        if offset + n <= len(self._prefix):
            return self._prefix[offset : offset + n]
        data, total = self._get(offset, n)
        if total != self.size:
            raise RemoteError(f"{self.path}: the file changed on the server ({total} bytes, was {self.size})")
        return data

    def close(self) -> None:
        self._client.close()

    # -- what the server said --------------------------------------------------------------------
    @property
    def linked_sha256(self) -> str | None:
        """The content SHA-256 a Hugging Face resolve URL announces (X-Linked-Etag), if any."""
        m = _SHA256.match(self.response_headers.get("x-linked-etag", "").strip())
        return m.group(1) if m else None

    # -- HTTP ------------------------------------------------------------------------------------
    def _get(self, offset: int, n: int) -> tuple[bytes, int]:
        """GET one range; (its bytes, the file's total size)."""
        if self.bytes_fetched + n > self.max_bytes:
            raise RemoteError(
                f"{self.path}: reading the header would fetch more than {self.max_bytes >> 20} MiB",
                hint="real GGUF headers are a few MiB; is this a GGUF file?",
            )
        import httpx

        url, headers = self.url, {**self._headers, "Range": f"bytes={offset}-{offset + n - 1}"}
        try:
            for _ in range(MAX_REDIRECTS + 1):
                self.requests += 1
                with (
                    remote.expect(f"the byte range of {self.path}", n + _SLACK, why=f"{n} bytes were asked for"),
                    self._client.stream("GET", url, headers=headers) as r,
                ):
                    if self.requests <= MAX_REDIRECTS + 1:  # the first request's chain: the hub's own headers
                        for k, v in r.headers.items():
                            self.response_headers.setdefault(k.lower(), v)
                    if r.is_redirect:
                        url, headers = self._redirect(url, r, headers)
                        continue
                    self._check(r, url)
                    if r.status_code == 416:  # an empty file: nothing to range over
                        return b"", self._total(r.headers.get("content-range", ""), url, empty=True)
                    total = self._total(r.headers.get("content-range", ""), url, start=offset)
                    body = self._body(r, n)
                    self.url = url
                    return body, total
        except httpx.TransportError as exc:
            raise remote.failure(exc, remote.host_of(url)) or RemoteError(
                f"{self.path}: cannot reach the server ({_cause(exc)})"
            ) from None
        raise RemoteError(f"{self.path}: more than {MAX_REDIRECTS} redirects")

    def _redirect(self, url: str, r: Any, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        target = urljoin(url, r.headers.get("location", ""))
        scheme = urlsplit(target).scheme
        if scheme not in ("http", "https"):
            raise RemoteError(f"{self.path}: the server redirects to a {scheme or 'relative'}:// URL, not http(s)")
        if urlsplit(target).netloc != urlsplit(url).netloc:  # credentials stay with the host they are for
            headers = {k: v for k, v in headers.items() if k.lower() not in ("authorization", "cookie")}
        return target, headers

    def _check(self, r: httpx.Response, url: str) -> None:
        code = r.status_code
        if code in (206, 416):
            return
        if code == 200:
            raise RemoteError(
                f"{self.path}: the server does not support range requests (HTTP 200 for a byte range)",
                hint="download the file (specreg fetch for the Hugging Face hub) and check the local copy",
            )
        why = r.headers.get("x-error-code")  # the hub names its refusals (GatedRepo, RepoNotFound, ...)
        status = f"HTTP {code}: {why}" if why else f"HTTP {code}"
        if code in (401, 403):
            raise RemoteError(
                f"{self.path}: the server refused access ({status})",
                hint="a gated or private file needs a login (hf auth login or HF_TOKEN for hf://)",
            )
        if code == 404:
            raise RemoteError(f"{self.path}: not found ({status})", hint="check the URL, its revision and file name")
        raise RemoteError(f"{self.path}: the server answered {status}")

    def _total(self, content_range: str, url: str, *, start: int | None = None, empty: bool = False) -> int:
        if empty:
            m = re.fullmatch(r"bytes \*/(\d+)", content_range.strip())
            return int(m.group(1)) if m else 0
        m = _RANGE.fullmatch(content_range.strip())
        if not m or int(m.group(1)) != start:
            raise RemoteError(f"{self.path}: the server answered a byte range with Content-Range {content_range!r}")
        return int(m.group(3))

    def _body(self, r: httpx.Response, n: int) -> bytes:
        """At most `n` body bytes (a server that sends more is cut off, and that is counted)."""
        parts: list[bytes] = []
        got = 0
        for chunk in r.iter_bytes():
            self.bytes_fetched += len(chunk)
            parts.append(chunk)
            got += len(chunk)
            if got >= n:
                break
        return b"".join(parts)[:n]


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
