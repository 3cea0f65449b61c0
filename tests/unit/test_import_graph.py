"""The import graph keeps the layers apart (docs/api.md, "What is public").

Every import counts: module level, inside functions and under ``if TYPE_CHECKING:``.

* The front ends (the CLI in txn_broker/cli, the Airflow plugins and UI in plugins/, the
  example DAGs in dags/, the Spark apps in spark_apps/) import only the public API of
  txn_broker: the names in ``txn_broker.__all__``, ``txn_broker.errors``, and the names in
  the ``__all__`` of ``txn_broker.spark`` and ``txn_broker.kafka``. A front end importing
  its own package (the CLI its modules, a plugin another plugin module) is fine.
* txn_broker never imports Airflow (nor the plugins).
* pyspark is imported only under txn_broker/spark.
* txn_broker/storage and txn_broker/database.py never import each other.
* No import circle inside txn_broker.
* The partition log (txn_broker/log) imports from the rest of txn_broker only errors, the
  retry policy, and the database's and the store's interfaces (:data:`LOG_MAY_IMPORT`).

The checker is a pure function of a set of modules (name, path, source), so each rule is
also shown failing on a tiny synthetic set.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: the public modules of txn_broker and whether all their names are public (errors) or only
#: those in their ``__all__``
PUBLIC_MODULES = {"txn_broker": "__all__", "txn_broker.errors": "*", "txn_broker.spark": "__all__",
                  "txn_broker.kafka": "__all__", "txn_broker.metrics": "__all__"}
FRONT_ENDS = ("txn_broker/cli/", "plugins/", "dags/", "spark_apps/")

#: what the partition log (txn_broker/log) may import from the rest of txn_broker, and
#: which names (None: any): it sits below the clients and the coordinator
LOG_MAY_IMPORT: dict[str, frozenset[str] | None] = {
    "txn_broker.errors": None,
    "txn_broker.retry": None,
    "txn_broker.database": frozenset({"Database", "Tx"}),
    "txn_broker.storage": frozenset({"ObjectStore", "ObjectNotFoundError"}),
}


@dataclass(frozen=True)
class Module:
    name: str  # dotted, as imported
    path: str  # relative to the repository, "/" separated
    source: str

    @property
    def is_package(self) -> bool:
        return self.path.endswith("__init__.py")


@dataclass(frozen=True)
class Import:
    module: str  # the module imported from (absolute)
    name: str | None  # the name taken from it (None: the module itself)
    line: int


def _resolve(module: Module, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, *([target] if target else [])])


def imports_of(module: Module, known: set[str]) -> Iterator[Import]:
    """Every import of ``module`` (anywhere in it), absolute; ``from package import
    submodule`` counts as importing the submodule."""
    for node in ast.walk(ast.parse(module.source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, None, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield Import(sub, None, node.lineno)
                else:
                    yield Import(base, alias.name, node.lineno)


def _dunder_all(module: Module) -> set[str]:
    for node in ast.parse(module.source).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {ast.literal_eval(e) for e in node.value.elts}  # type: ignore[attr-defined]
    return set()


def _front_end_package(module: Module) -> str | None:
    """The package a front-end module may import freely (its own), or None when the module
    is no front end."""
    if not module.path.startswith(FRONT_ENDS):
        return None
    return "txn_broker.cli" if module.path.startswith("txn_broker/cli/") else ""


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or with a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def violations(modules: Iterable[Module]) -> list[str]:
    """What breaks the rules of this module's docstring, one line each."""
    modules = list(modules)
    by_name = {m.name: m for m in modules}
    known = set(by_name)
    public = {name: (None if kind == "*" else _dunder_all(by_name[name]))
              for name, kind in PUBLIC_MODULES.items() if name in by_name}
    out: list[str] = []
    graph: dict[str, set[str]] = {}
    for m in modules:
        own_package = _front_end_package(m)
        internal = m.name == "txn_broker" or m.name.startswith("txn_broker.")
        for imp in imports_of(m, known):
            top = imp.module.split(".")[0]
            where = f"{m.path}:{imp.line}"
            shown = imp.module + (f".{imp.name}" if imp.name else "")
            if own_package is not None and top == "txn_broker":
                if own_package and (imp.module == own_package or imp.module.startswith(own_package + ".")):
                    pass
                elif imp.module in public:
                    names = public[imp.module]
                    if imp.name is not None and names is not None and imp.name not in names:
                        out.append(f"{where}: {shown} is not public (not in {imp.module}.__all__)")
                else:
                    out.append(f"{where}: {shown}: {imp.module} is internal to txn_broker")
            if internal and top in ("airflow", "txn_broker_airflow"):
                out.append(f"{where}: txn_broker imports Airflow ({shown})")
            if top == "pyspark" and not m.path.startswith("txn_broker/spark/") and internal:
                out.append(f"{where}: pyspark outside txn_broker/spark ({shown})")
            if internal:
                storage = ("txn_broker.storage", "txn_broker.database")
                for a, b in (storage, storage[::-1]):
                    if (m.name == a or m.name.startswith(a + ".")) and (
                            imp.module == b or imp.module.startswith(b + ".")):
                        out.append(f"{where}: {m.name} imports {imp.module} (storage and database are apart)")
                if imp.module in known and imp.module != m.name:
                    graph.setdefault(m.name, set()).add(imp.module)
                in_log = m.name == "txn_broker.log" or m.name.startswith("txn_broker.log.")
                if in_log and imp.module in known and not imp.module.startswith("txn_broker.log"):
                    allowed = LOG_MAY_IMPORT.get(imp.module, frozenset())
                    if allowed is not None and (imp.name is None or imp.name not in allowed):
                        out.append(f"{where}: the partition log imports {shown}")
    out += [f"import circle: {' <-> '.join(c)}" for c in _cycles(graph)]
    return out


def repository_modules() -> list[Module]:
    out = []
    roots = {"txn_broker": REPO, "plugins": REPO / "plugins", "dags": REPO, "spark_apps": REPO}
    for top, base in roots.items():
        for path in sorted((REPO / top).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            rel = path.relative_to(base).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out.append(Module(".".join(parts), path.relative_to(REPO).as_posix(), path.read_text()))
    # the repository's sql/ ships as txn_broker.sql (pyproject.toml)
    out.append(Module("txn_broker.sql", "sql/__init__.py", (REPO / "sql" / "__init__.py").read_text()))
    return out


# -- the repository --------------------------------------------------------------------


def test_the_repository_keeps_its_layers() -> None:
    modules = repository_modules()
    assert {"txn_broker", "txn_broker.cli.main", "txn_broker_airflow.ui.views", "dags.orders_pipeline",
            "spark_apps.pipeline"} <= {m.name for m in modules}
    assert {"txn_broker.log.appends", "txn_broker.producer.client"} <= {m.name for m in modules}
    assert violations(modules) == []


# -- each rule can fail ------------------------------------------------------------------

_BASE = [
    Module("txn_broker", "txn_broker/__init__.py",
           "from .broker import Broker\nfrom . import errors\n__all__ = ['Broker', 'errors']\n"),
    Module("txn_broker.broker", "txn_broker/broker.py", "from .errors import TxnBrokerError\n"),
    Module("txn_broker.errors", "txn_broker/errors.py", "class TxnBrokerError(Exception): ...\n"),
    Module("txn_broker.database", "txn_broker/database.py", "import sqlalchemy\n"),
    Module("txn_broker.storage", "txn_broker/storage/__init__.py", "from .base import ObjectStore\n"),
    Module("txn_broker.storage.base", "txn_broker/storage/base.py", "class ObjectStore: ...\n"),
    Module("txn_broker.spark", "txn_broker/spark/__init__.py",
           "from .stage import txn_stage\n__all__ = ['txn_stage']\n"),
    Module("txn_broker.spark.stage", "txn_broker/spark/stage.py", "import pyspark\ndef txn_stage(): ...\n"),
    Module("txn_broker.cli", "txn_broker/cli/__init__.py", ""),
    Module("txn_broker.cli.common", "txn_broker/cli/common.py", "from .. import Broker\n"),
    Module("txn_broker.cli.main", "txn_broker/cli/main.py",
           "from .common import Broker\nfrom ..errors import TxnBrokerError\n"),
    Module("txn_broker_airflow", "plugins/txn_broker_airflow/__init__.py", ""),
    Module("txn_broker_airflow.hook", "plugins/txn_broker_airflow/hook.py",
           "import airflow\nfrom txn_broker import Broker\nfrom txn_broker.spark import txn_stage\n"),
    Module("txn_broker_airflow.op", "plugins/txn_broker_airflow/op.py", "from .hook import Broker\n"),
]


def _with(*extra: Module) -> list[Module]:
    replaced = {m.name for m in extra}
    return [m for m in _BASE if m.name not in replaced] + list(extra)


def test_the_synthetic_base_passes() -> None:
    assert violations(_BASE) == []


def test_a_front_end_importing_an_internal_module_fails() -> None:
    for path, name in [("txn_broker/cli/x.py", "txn_broker.cli.x"), ("plugins/txn_broker_airflow/x.py",
                                                                    "txn_broker_airflow.x"),
                       ("dags/x.py", "x"), ("spark_apps/x.py", "spark_apps.x")]:
        bad = Module(name, path, "def f():\n    from txn_broker.database import Database\n")
        assert violations(_with(bad)) == [f"{path}:2: txn_broker.database.Database: txn_broker.database "
                                          "is internal to txn_broker"]
    relative = Module("txn_broker.cli.x", "txn_broker/cli/x.py", "from ..database import Database\n")
    assert len(violations(_with(relative))) == 1
    typing_only = Module("txn_broker_airflow.x", "plugins/txn_broker_airflow/x.py",
                         "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                         "    from txn_broker.broker import Broker\n")
    assert len(violations(_with(typing_only))) == 1


def test_a_front_end_importing_a_name_outside_all_fails() -> None:
    bad = Module("txn_broker_airflow.x", "plugins/txn_broker_airflow/x.py",
                 "from txn_broker import Broker, Secret\nfrom txn_broker.spark import stage\n")
    assert violations(_with(bad)) == [
        "plugins/txn_broker_airflow/x.py:1: txn_broker.Secret is not public (not in txn_broker.__all__)",
        "plugins/txn_broker_airflow/x.py:2: txn_broker.spark.stage: txn_broker.spark.stage is internal to "
        "txn_broker"]


def test_txn_broker_importing_airflow_fails() -> None:
    bad = Module("txn_broker.broker", "txn_broker/broker.py", "def f():\n    import airflow.sdk\n")
    assert violations(_with(bad)) == ["txn_broker/broker.py:2: txn_broker imports Airflow (airflow.sdk)"]


def test_pyspark_outside_txn_broker_spark_fails() -> None:
    bad = Module("txn_broker.broker", "txn_broker/broker.py", "from pyspark.sql import SparkSession\n")
    assert violations(_with(bad)) == [
        "txn_broker/broker.py:1: pyspark outside txn_broker/spark (pyspark.sql.SparkSession)"]


def test_storage_and_database_importing_each_other_fails() -> None:
    bad = Module("txn_broker.storage.base", "txn_broker/storage/base.py", "from ..database import Database\n")
    assert violations(_with(bad)) == ["txn_broker/storage/base.py:1: txn_broker.storage.base imports "
                                      "txn_broker.database (storage and database are apart)"]
    bad = Module("txn_broker.database", "txn_broker/database.py", "from . import storage\n")
    assert violations(_with(bad)) == ["txn_broker/database.py:1: txn_broker.database imports "
                                      "txn_broker.storage (storage and database are apart)"]


def test_an_import_circle_fails_even_under_type_checking() -> None:
    bad = Module("txn_broker.errors", "txn_broker/errors.py",
                 "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .broker import Broker\n")
    assert violations(_with(bad)) == ["import circle: txn_broker.broker <-> txn_broker.errors"]


def test_the_partition_log_importing_above_itself_fails() -> None:
    log = Module("txn_broker.log", "txn_broker/log/__init__.py",
                 "from ..errors import TxnBrokerError\nfrom ..storage import ObjectStore\n")
    assert violations(_with(log)) == []
    bad = Module("txn_broker.log", "txn_broker/log/__init__.py",
                 "from ..broker import Broker\nfrom ..storage.base import ObjectStore\n")
    assert violations(_with(bad)) == [
        "txn_broker/log/__init__.py:1: the partition log imports txn_broker.broker.Broker",
        "txn_broker/log/__init__.py:2: the partition log imports txn_broker.storage.base.ObjectStore"]
