"""The partition log's layering, read from the source (every import counts: module level,
inside functions and under TYPE_CHECKING): no import circle inside txn_broker, and
txn_broker/log depends on nothing above it and only on the database's and the store's
public faces."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "txn_broker"
#: packages of txn_broker that live elsewhere in the repository and hold no Python
DATA_PACKAGES = {"txn_broker.sql"}  # the top-level sql/ directory


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in ``path`` that names a
    txn_broker module; ``from pkg import submodule`` counts as importing the submodule."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "txn_broker"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "txn_broker":
                continue
            names = [a.name for a in node.names]
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            found += [(s, []) for s in subs]
            rest = [n for n in names if f"{target}.{n}" not in modules]
            if rest or not subs:
                found.append((target, rest))
    return found


def import_graph() -> dict[str, list[tuple[str, list[str]]]]:
    files = [p for p in ROOT.rglob("*.py") if "__pycache__" not in p.parts]
    modules = {_module_name(p) for p in files} | DATA_PACKAGES
    return {_module_name(p): [(m, n) for m, n in _imports(p, modules) if m in modules] for p in files}


def _cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """One import circle of ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_inside_txn_broker():
    graph = {m: sorted({t for t, _ in deps if t != m}) for m, deps in import_graph().items()}
    assert "txn_broker.log.partition" in graph["txn_broker.consumer"]  # the graph sees imports
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert _cycle({"a": ["b"], "b": []}) is None


#: what txn_broker/log may import from outside itself, and which names (None: any)
LOG_MAY_IMPORT: dict[str, set[str] | None] = {
    "txn_broker.errors": None,
    "txn_broker.retry": None,
    "txn_broker.database": {"Database", "Tx"},
    "txn_broker.storage": {"ObjectStore", "ObjectNotFoundError"},
}


def test_the_log_imports_only_the_faces_of_what_it_needs():
    graph = import_graph()
    log_modules = [m for m in graph if m == "txn_broker.log" or m.startswith("txn_broker.log.")]
    assert len(log_modules) >= 8
    wrong = []
    for module in log_modules:
        for target, names in graph[module]:
            if target.startswith("txn_broker.log"):
                continue
            if target not in LOG_MAY_IMPORT:
                wrong.append(f"{module} imports {target}")
                continue
            allowed = LOG_MAY_IMPORT[target]
            if allowed is not None and set(names) - allowed:
                wrong.append(f"{module} takes {sorted(set(names) - allowed)} from {target}")
    assert not wrong, wrong
