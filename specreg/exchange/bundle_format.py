"""The result bundle file: a zip whose `bundle.json` lists every member with its size and SHA-256.

Why zip and not tar: a zip ends in a central directory, so a truncated copy is recognised at
once (a tar cut at a 512-byte boundary reads as a shorter valid archive); members are read by
name in any order (the manifest first, the request rows only after every digest checked out),
each member is compressed on its own, and Python, `unzip` and every object store browser open it.

Integrity, not authenticity: each member's SHA-256 is in the manifest, and the manifest's own
digest covers all of it (format, schema, origin, run digests, member list). A changed, missing,
extra or truncated member, or an edited manifest, is refused before anything is written. Whoever
can rewrite the whole file can forge it: authenticity is what the signatures add (exchange/bundle_signatures.py),
DSSE envelopes stored as `signatures/<key id>.intoto.json`, outside the manifest they sign.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import zipfile
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from specreg.errors import BundleError
from specreg.exchange.portable import canonical
from specreg.paths import open_regular
from specreg.signing.dsse import MAX_ENVELOPE_BYTES

FORMAT: Literal["specreg-bundle"] = "specreg-bundle"
FORMAT_VERSION = 1
HEADER = "bundle.json"
RUN_PARTS = ("run.json", "conditions.jsonl", "prompts.jsonl", "requests.jsonl", "summaries.jsonl")
LOG_IDX = re.compile(r"[0-9]{1,6}")  # a condition's index: ASCII digits only (int() takes other scripts' too)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
MAX_MANIFEST_BYTES = 64 << 20
SIGNATURE = re.compile(r"signatures/[0-9a-f]{64}\.intoto\.json")  # one envelope per key (exchange/bundle_signatures.py)
MAX_SIGNATURES = 64
# how a refusal of a bundle ends: what the command reading it did not do
NOTHING_IMPORTED = "nothing was imported"
NOTHING_SIGNED = "nothing was signed"
MAX_TOTAL_BYTES = 16 << 30  # what one import may decompress (a million request rows is ~0.5 GB)
MAX_BUNDLE_BYTES = 16 << 30  # the bundle file itself (compressed)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed member times: the same records give the same bytes
# what zipfile raises on a damaged archive or member: a bad CRC or header (BadZipFile), a broken
# deflate stream (zlib.error, which is no OSError), a cut file (EOFError), an unknown compression
# method or an encrypted member (NotImplementedError, RuntimeError), a lying offset (ValueError)
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, NotImplementedError, RuntimeError)


class Origin(BaseModel):
    """Who wrote something: the host name and the specreg version."""

    host: str
    specreg_version: str


class Member(BaseModel):
    name: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class RunEntry(BaseModel):
    """One run in the bundle: its content digest, where it was measured, where its logs are."""

    run_id: str
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    origin: Origin
    hardware: str | None = None
    logs: dict[str, str] = Field(default_factory=dict)  # condition idx -> member name


class BundleHeader(BaseModel):
    """`bundle.json`: what the bundle holds and the digests that prove it is whole."""

    format: Literal["specreg-bundle"] = FORMAT
    format_version: int = FORMAT_VERSION
    created_at: str
    origin: Origin
    schema_migrations: list[str]
    counts: dict[str, int] = Field(default_factory=dict)
    runs: list[RunEntry] = Field(default_factory=list)
    members: list[Member]
    digest: str = ""

    def body_digest(self) -> str:
        return hashlib.sha256(canonical(self.model_dump(mode="json", exclude={"digest"}))).hexdigest()


def run_member(run_id: str, part: str) -> str:
    return f"runs/{run_id}/{part}"


def run_digest(parts: dict[str, bytes]) -> str:
    """A run's content digest: its five record members, in order, each with its name and length."""
    h = hashlib.sha256()
    for part in RUN_PARTS:
        data = parts.get(part, b"")
        h.update(f"{part}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def jsonl(records: Any) -> bytes:
    """Records as canonical JSON lines."""
    return b"".join(canonical(r) + b"\n" for r in records)


class BundleWriter:
    """Writes members into a temporary file beside `path`; `close()` adds the manifest and renames."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        self.tmp = Path(tmp)
        self.zf = zipfile.ZipFile(self.tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6)
        self.members: list[Member] = []

    def add(self, name: str, data: bytes) -> None:
        info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        self.zf.writestr(info, data)
        self.members.append(Member(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest()))

    def close(self, header: BundleHeader) -> BundleHeader:
        header = header.model_copy(update={"members": list(self.members)})
        header.digest = header.body_digest()
        info = zipfile.ZipInfo(HEADER, date_time=_ZIP_TIME)
        info.external_attr = 0o644 << 16
        self.zf.writestr(info, json.dumps(header.model_dump(mode="json"), indent=1, sort_keys=True) + "\n")
        self.zf.close()
        with open(self.tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(self.tmp, self.path)
        return header

    def abort(self) -> None:
        self.zf.close()
        self.tmp.unlink(missing_ok=True)


def new_header(origin: Origin, migrations: list[str]) -> BundleHeader:
    return BundleHeader(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        origin=origin,
        schema_migrations=migrations,
        members=[],
    )


class Bundle:
    """A bundle whose every byte was checked against its manifest; members are held in memory."""

    def __init__(
        self,
        path: Path,
        header: BundleHeader,
        data: dict[str, bytes],
        envelopes: dict[str, bytes] | None = None,
        then: str = NOTHING_IMPORTED,
    ) -> None:
        self.path, self.header, self._data = path, header, data
        self.envelopes = envelopes or {}  # signature member -> its bytes (unverified: exchange/bundle_signatures.py)
        self.then = then  # what a refusal says happened: what the command reading it did not do

    def read(self, name: str) -> bytes:
        return self._data.get(name, b"")

    def records(self, name: str) -> list[dict[str, Any]]:
        """The JSON lines of a member (each one an object)."""
        data = self.read(name).strip()
        if not data:
            return []
        try:  # one parse of all lines as an array: JSON text holds no raw newline inside a value
            values = strict_json(b"[" + data.replace(b"\n", b",") + b"]")
        except RecursionError:
            raise BundleError(f"{self.path}: {name} is nested too deeply; {self.then}") from None
        except ValueError as exc:
            raise BundleError(f"{self.path}: {name} is not JSON lines ({exc}); {self.then}") from None
        if not all(isinstance(v, dict) for v in values):
            raise BundleError(f"{self.path}: {name} holds a line that is not a JSON object; {self.then}")
        return values


def _not_json(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: Python reads it as infinity
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def strict_json(data: bytes | str) -> Any:
    """JSON as the standard defines it: NaN, Infinity and numbers past a double's range are
    refused, not read as floats no statistic can hold (every number in a bundle is finite)."""
    return json.loads(data, parse_constant=_not_json, parse_float=_finite)


def _damage(exc: BaseException) -> str:
    """zipfile's and zlib's own words for the damage, on one line and short."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:120] + "..."


class _Refuse:
    """A refusal of one bundle, ending in what the command reading it did not do."""

    def __init__(self, then: str) -> None:
        self.then = then

    def __call__(self, path: Path, why: str, hint: str | None = None) -> BundleError:
        return BundleError(f"{path}: {why}; {self.then}", hint=hint)


def _header(path: Path, zf: zipfile.ZipFile, known_migrations: list[str], _refuse: _Refuse) -> BundleHeader:
    try:
        info = zf.getinfo(HEADER)
    except KeyError:
        raise _refuse(path, f"not a specreg bundle (no {HEADER})") from None
    if info.file_size > MAX_MANIFEST_BYTES:
        raise _refuse(path, f"{HEADER} is {info.file_size} bytes, more than a manifest can be")
    try:
        with zf.open(info) as f:
            text = f.read(MAX_MANIFEST_BYTES + 1)
    except _ZIP_DAMAGE as exc:
        raise _refuse(path, f"{HEADER} cannot be read ({_damage(exc)})") from None
    try:
        raw = json.loads(text)
    except RecursionError:
        raise _refuse(path, f"{HEADER} is nested too deeply to be a manifest") from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise _refuse(path, f"{HEADER} is not JSON ({_damage(exc)})") from None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise _refuse(path, "not a specreg bundle (wrong format name)")
    version = raw.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise _refuse(
            path,
            f"bundle format {version} is newer than this specreg reads (up to {FORMAT_VERSION})",
            hint="upgrade specreg here (pip install -U specreg), then import again",
        )
    stated = raw.get("schema_migrations")
    if not isinstance(stated, list) or not all(isinstance(m, str) for m in stated):
        raise _refuse(path, f"{HEADER} is malformed (schema_migrations: not a list of names)")
    newer = [m for m in stated if m not in known_migrations]
    if newer:
        raise _refuse(
            path,
            f"bundle comes from a newer registry schema ({', '.join(map(str, newer[:3]))})",
            hint="upgrade specreg here (pip install -U specreg), then import again",
        )
    try:
        header = BundleHeader.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise _refuse(path, f"{HEADER} is malformed ({where}: {first['msg']})") from None
    if header.digest != header.body_digest():
        raise _refuse(path, f"{HEADER} was altered (its digest does not match its content)")
    return header


def open_bundle(path: str | Path, known_migrations: list[str], *, then: str = NOTHING_IMPORTED) -> Bundle:
    """Read and verify a whole bundle: structure, manifest digest, every member's size and SHA-256,
    every run's digest. Anything wrong raises BundleError naming it and ending in `then` (what the
    command did not do: import, sign); nothing is written here."""
    p = Path(path)
    _refuse = _Refuse(then)
    try:  # a regular file of bounded size before anything reads it: /dev/zero, a FIFO are refused here
        fh = open_regular(p, MAX_BUNDLE_BYTES)
    except FileNotFoundError:
        raise BundleError(f"{p}: no such file") from None
    except ValueError as exc:
        raise _refuse(p, f"{exc}, not a bundle") from None
    except OSError as exc:
        raise _refuse(p, f"cannot be read ({_damage(exc)})") from None
    try:
        zf = zipfile.ZipFile(fh)
    except _ZIP_DAMAGE as exc:
        fh.close()
        raise _refuse(p, f"not a readable bundle, or truncated ({_damage(exc)})") from None
    with fh, zf:
        names = [i.filename for i in zf.infolist()]
        if len(names) != len(set(names)):
            raise _refuse(p, "a member name occurs twice")
        header = _header(p, zf, known_migrations, _refuse)
        listed = {m.name: m for m in header.members}
        if any(n.startswith("signatures/") for n in listed):  # a signature signs the manifest: never in it
            raise _refuse(p, "the manifest lists a signature as a member")
        signed = sorted(n for n in names if SIGNATURE.fullmatch(n))
        extra = sorted(set(names) - set(listed) - {HEADER} - set(signed))
        missing = sorted(set(listed) - set(names))
        if extra:
            raise _refuse(p, f"member {extra[0]} is not in the manifest")
        if missing:
            raise _refuse(p, f"member {missing[0]} is missing (truncated or altered)")
        if sum(m.size for m in header.members) > MAX_TOTAL_BYTES:
            raise _refuse(p, "members add up to more than an import may read")
        if len(signed) > MAX_SIGNATURES:
            raise _refuse(p, f"{len(signed)} signatures, more than {MAX_SIGNATURES}")
        envelopes = {n: _bounded(p, zf, n, MAX_ENVELOPE_BYTES, _refuse) for n in signed}
        data: dict[str, bytes] = {}
        for m in header.members:
            info = zf.getinfo(m.name)
            if info.file_size != m.size:
                raise _refuse(p, f"member {m.name} is {info.file_size} bytes, the manifest says {m.size}")
            try:
                with zf.open(info) as f:
                    blob = f.read(m.size + 1)
            except _ZIP_DAMAGE as exc:  # CRC, truncation, bad deflate
                raise _refuse(p, f"member {m.name} cannot be read ({_damage(exc)})") from None
            if len(blob) != m.size or hashlib.sha256(blob).hexdigest() != m.sha256:
                raise _refuse(p, f"member {m.name} does not match its SHA-256 in the manifest (altered)")
            data[m.name] = blob
    seen: set[str] = set()
    for run in header.runs:
        if not RUN_ID.fullmatch(run.run_id) or run.run_id in seen:
            raise _refuse(p, f"run id {run.run_id[:80]!r} is not valid or occurs twice")
        seen.add(run.run_id)
        parts = {part: data.get(run_member(run.run_id, part), b"") for part in RUN_PARTS}
        if run_member(run.run_id, "run.json") not in data:
            raise _refuse(p, f"run {run.run_id} has no run.json")
        if run_digest(parts) != run.digest:
            raise _refuse(p, f"run {run.run_id}: content does not match its digest")
        for idx, member in run.logs.items():
            if not LOG_IDX.fullmatch(idx) or member not in data or not member.startswith(f"runs/{run.run_id}/logs/"):
                raise _refuse(p, f"run {run.run_id}: log member {member[:80]!r} is missing or misplaced")
    return Bundle(p, header, data, envelopes, then)


def _bounded(path: Path, zf: zipfile.ZipFile, name: str, limit: int, _refuse: _Refuse) -> bytes:
    """One member read no further than `limit` bytes, whatever its zip entry claims."""
    info = zf.getinfo(name)
    if info.file_size > limit:
        raise _refuse(path, f"{name} is {info.file_size} bytes, more than a signature can be")
    try:
        with zf.open(info) as f:
            blob = f.read(limit + 1)
    except _ZIP_DAMAGE as exc:
        raise _refuse(path, f"{name} cannot be read ({_damage(exc)})") from None
    if len(blob) > limit:
        raise _refuse(path, f"{name} is more than {limit >> 20} MiB, more than a signature can be")
    return blob
