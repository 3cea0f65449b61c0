"""The Airflow layer installed like a user installs it: ``pip install 'txn-broker[airflow]'``.

The wheel is built from a clean copy of the sources (``pip wheel --no-deps .``) and
installed with the constraints into a separate virtualenv that has Airflow and nothing of
this repository on its path: no ``PYTHONPATH``, no plugins folder, the working directory
and ``AIRFLOW_HOME`` outside the repository, a DAGs folder outside it holding copies of the
example DAGs and of ``spark_apps/`` (as docs/airflow.md tells users to deploy them). Then,
through Airflow's own CLI: the provider is listed, the plugin is registered once, the
connection form knows the ``txn_broker`` fields, the example DAGs parse, and
``airflow dags test orders_pipeline`` runs the pipeline (Spark ``local[2]``, the embedded
broker) to success with its output in the topics and the warehouse. The same virtualenv with
the repository's ``plugins/`` as plugins folder as well (the compose stack's layout) still
registers the plugin and its listener once.

The virtualenv's dependencies take minutes to install, so it is cached in
``.venv-provider-test/<key>`` (``make clean`` removes it), keyed by the constraints, the
package's declared dependencies and the Python version: a change to any of them builds a
fresh one. Each run then installs the newly built wheel into it (``--no-deps
--force-reinstall``) and ``pip check`` proves the cached dependencies still satisfy it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".venv-provider-test"
#: what a built wheel needs from the source tree (everything else stays behind)
SOURCES = ("pyproject.toml", "README.md", "txn_broker", "sql", "plugins/txn_broker_airflow")
PLUGIN = "txn_broker_airflow"
ROWS = 300


@dataclass
class Site:
    """The user's machine: a virtualenv with the wheel, an Airflow home, a DAGs folder."""

    root: Path
    venv: Path
    wheel: Path
    home: Path
    dags: Path
    broker_home: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """A user's environment, built from nothing: no PYTHONPATH, no TXN_BROKER_*
        settings, no plugins folder unless given."""
        env = {
            "PATH": os.pathsep.join([str(self.venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "TXN_BROKER_HOME": str(self.broker_home),
            # Spark's Python workers: this virtualenv (the default is the task's interpreter too)
            "PYSPARK_PYTHON": str(self.python),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        if os.environ.get("JAVA_HOME"):
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        env.update(extra)
        return env

    def run(self, args: list[str], what: str, timeout: float = 240, **extra: str) -> str:
        """Run a command of the virtualenv in its own process group (killed afterwards, so no
        JVM or Airflow child outlives it); returns stdout, fails with the output's tail."""
        started = time.monotonic()
        proc = subprocess.Popen(args, cwd=self.root, env=self.env(**extra), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            raise AssertionError(f"{what}: timed out after {timeout:.0f}s\n{out[-3000:]}\n{err[-3000:]}") from None
        finally:
            _kill_group(proc)
            self.timings[what] = round(time.monotonic() - started, 1)
        assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{out[-4000:]}\n{err[-4000:]}"
        return out

    def airflow_json(self, args: list[str], what: str = "", **extra: str) -> object:
        out = self.run([str(self.venv / "bin" / "airflow"), *args, "-o", "json"],
                       what or f"airflow {' '.join(args)}", **extra)
        return parse_cli_json(out)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def parse_cli_json(text: str) -> object:
    """The JSON document an Airflow CLI command printed, after whatever warnings it printed
    first: the first line that opens a JSON value and parses to the end."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(("[", "{")):
            try:
                return json.loads("\n".join(lines[i:]))
            except json.JSONDecodeError:
                continue
    raise AssertionError(f"no JSON in the command's output:\n{text[-3000:]}")


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps .`` on a clean copy of the sources (a stale ``build/`` in the
    worktree can hold files deleted since)."""
    src = out / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in SOURCES:
        source, target = REPO / name, src / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=ignore)
        else:
            shutil.copy2(source, target)
    wheels = out / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", ".", "-w", str(wheels)],
                          cwd=src, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (wheel,) = wheels.glob("txn_broker-*.whl")
    return wheel


def venv_key() -> str:
    """What the cached virtualenv's contents depend on: the constraints, the package's
    declared dependencies (core, ``airflow``, ``spark``) and the Python version."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {"dependencies": project["dependencies"],
                "extras": {k: project["optional-dependencies"][k] for k in ("airflow", "spark")}}
    digest = hashlib.sha256()
    digest.update((REPO / "constraints.txt").read_bytes())
    digest.update(json.dumps(declared, sort_keys=True).encode())
    digest.update(sys.version.encode())
    return digest.hexdigest()[:16]


def pip(python: Path, *args: str, timeout: float = 900) -> None:
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
                          cwd=CACHE)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def provider_venv(wheel: Path, timings: dict[str, float]) -> Path:
    """The cached virtualenv with the wheel's dependencies, the new wheel installed into it."""
    CACHE.mkdir(exist_ok=True)
    venv = CACHE / venv_key()
    started = time.monotonic()
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time (parallel test workers)
        if not ((venv / ".complete").exists() and (venv / "bin" / "python").exists()):
            for old in CACHE.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
            # a virtualenv of the base interpreter: nothing of the repository's .venv
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            python = venv / "bin" / "python"
            # --no-compile: Python compiles what is imported; compiling every file of
            # Airflow and pyspark up front is most of an install's CPU time
            pip(python, "install", "--quiet", "--no-compile", "-c", str(REPO / "constraints.txt"),
                f"{wheel}[airflow,spark]")
            (venv / ".complete").write_text(wheel.name)
            timings["virtualenv built (cache miss)"] = round(time.monotonic() - started, 1)
        else:
            pip(venv / "bin" / "python", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel))
            timings["wheel installed (cached virtualenv)"] = round(time.monotonic() - started, 1)
        pip(venv / "bin" / "python", "check")
    return venv


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("user")
    assert not root.resolve().is_relative_to(REPO)
    timings: dict[str, float] = {}
    started = time.monotonic()
    wheel = build_wheel(root / "build")
    timings["wheel built"] = round(time.monotonic() - started, 1)
    venv = provider_venv(wheel, timings)
    # the deployment: the example DAGs and their stage files, copied (not linked) out of the repo
    dags = root / "dags"
    dags.mkdir()
    for dag in (REPO / "dags").glob("*.py"):
        shutil.copy2(dag, dags / dag.name)
    shutil.copytree(REPO / "spark_apps", dags / "spark_apps", ignore=shutil.ignore_patterns("__pycache__"))
    s = Site(root=root, venv=venv, wheel=wheel, home=root / "airflow", dags=dags, broker_home=root / "broker",
             timings=timings)
    s.home.mkdir()
    s.run([str(venv / "bin" / "airflow"), "db", "migrate"], "airflow db migrate")
    yield s
    print("\nprovider install timings (s):", json.dumps(s.timings, indent=1))


# -- the provider description (no virtualenv needed) ------------------------------------------


def test_provider_info_is_valid_for_the_installed_airflow() -> None:
    """``get_provider_info()`` against the ``provider_info.schema.json`` of the Airflow we
    pin, and consistent with the package: its version, importable classes and modules."""
    import importlib
    import importlib.metadata

    import airflow
    import jsonschema
    from txn_broker_airflow.provider_info import get_provider_info

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "txn-broker"
    assert info["versions"][0] == importlib.metadata.version("txn-broker")
    integrations = {i["integration-name"] for i in info["integrations"]}
    for kind in ("hooks", "operators", "sensors", "triggers"):
        for group in info[kind]:
            assert group["integration-name"] in integrations
            for module in group["python-modules"]:
                importlib.import_module(module)
    (conn,) = info["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    hook = getattr(importlib.import_module(module), name)
    assert hook.conn_type == conn["connection-type"] == "txn_broker"
    assert set(conn["conn-fields"]) <= set(hook.connection_extras())
    for handler in info["asset-uris"]:
        for dotted in (handler["handler"], handler["factory"]):
            module, _, name = dotted.rpartition(".")
            assert callable(getattr(importlib.import_module(module), name))
    assert "plugins" not in info  # the airflow.plugins entry point registers it (see provider_info.py)


# -- installed like a user installs it ---------------------------------------------------------

#: run by the virtualenv's Python: what Airflow registered, from Airflow's own managers
INSPECT = r"""
import json, sys
import txn_broker_airflow as top  # first: what the package alone loads
lazy = sorted(m for m in sys.modules if m.startswith(("txn_broker_airflow.", "pyspark", "airflow")))
top_level = {name: getattr(top, name).__module__ for name in top.__all__ if name != "__version__"}
from pathlib import Path
from airflow import plugins_manager
from airflow.listeners.listener import get_listener_manager
from airflow.providers_manager import ProvidersManager
from airflow.sdk import Asset

import txn_broker, txn_broker_airflow
from txn_broker_airflow.hooks.txn_broker import TxnBrokerHook
from txn_broker_airflow.operators.produce import ProduceToTopicOperator
from txn_broker_airflow.operators.topic_to_postgres import TopicToPostgresOperator
from txn_broker_airflow.operators.transactional_spark import TransactionalSparkOperator
from txn_broker_airflow.sensors.topic_records import TopicRecordsSensor
from txn_broker_airflow.sensors.transaction_timeout import TransactionTimeoutSensor
from txn_broker_airflow.triggers.topic_records import TopicRecordsTrigger
from txn_broker_airflow.triggers.transaction_timeout import TransactionTimeoutTrigger
from txn_broker_airflow.assets import topic_asset
from txn_broker_airflow.ui.app import create_app

create_app()  # the Transactions page: templates and static files come with the wheel
plugins = [p.name for p in plugins_manager._get_plugins()[0]]
manager = get_listener_manager()
listeners = [type(p).__name__ for p in manager.pm.get_plugins() if type(p).__module__.startswith("txn_broker_airflow")]
failed_impls = [i for i in manager.pm.hook.on_task_instance_failed.get_hookimpls()
                if type(i.plugin).__module__.startswith("txn_broker_airflow")]
providers = ProvidersManager()
try:
    Asset("txn-topic://txn_broker_default/a/b")
    bad_asset = "accepted"
except Exception as error:
    bad_asset = type(error).__name__
print(json.dumps({
    "files": [txn_broker.__file__, txn_broker_airflow.__file__],
    "loaded_by_package": lazy,
    "top_level": top_level,
    "sys_path": sys.path,
    "plugins": plugins,
    "import_errors": plugins_manager.get_import_errors(),
    "listeners": listeners,
    "failed_hookimpls": len(failed_impls),
    "hook": [(h.hook_class_name, h.package_name) for h in [providers.hooks.get("txn_broker")] if h],
    "widgets": sorted(k for k in providers.connection_form_widgets if "txn_broker" in k),
    "behaviour": providers.field_behaviours.get("txn_broker"),
    "asset_handler": "txn-topic" in providers.asset_uri_handlers,
    "bad_asset": bad_asset,
    "topic_asset": topic_asset("orders_clean").uri,
}))
"""


def inspect(site: Site, what: str, **extra: str) -> dict[str, object]:
    result = parse_cli_json(site.run([str(site.python), "-c", INSPECT], what, **extra))
    assert isinstance(result, dict)
    return result


def test_installed_like_a_user(site: Site, tmp_path: Path) -> None:
    """One test, so parallel workers never build the site twice: each step below fails with
    its own message."""
    check_wheel_and_registration(site)
    check_plugins_folder_and_package_register_once(site, tmp_path)
    check_example_dags_parse_and_orders_pipeline_runs(site)


def check_wheel_and_registration(site: Site) -> None:
    """The wheel's files and entry points; the provider, the plugin (once, from the entry
    point), the hook and the connection form as Airflow's CLI shows them; everything
    imported from the virtualenv, nothing from the repository."""
    with zipfile.ZipFile(site.wheel) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for expected in ("txn_broker_airflow/plugin.py", "txn_broker_airflow/provider_info.py",
                     "txn_broker_airflow/hooks/txn_broker.py", "txn_broker_airflow/triggers/topic_records.py",
                     "txn_broker_airflow/ui/templates/transactions.html", "txn_broker_airflow/ui/static/txn_ui.js",
                     "txn_broker/sql/schema.sql"):
        assert expected in names, f"{expected} missing from {site.wheel.name}"
    assert not [n for n in names if n.startswith(("dags/", "tests/", "spark_apps/", "plugins/"))]
    assert "txn_broker_airflow.provider_info:get_provider_info" in entry_points
    assert "txn_broker_airflow.plugin:TxnBrokerAirflowPlugin" in entry_points

    providers = site.airflow_json(["providers", "list"])
    ours = [p for p in providers if p["package_name"] == "txn-broker"]  # type: ignore[union-attr,index]
    assert len(ours) == 1 and ours[0]["version"] == "0.1.0", providers
    plugins = site.airflow_json(["plugins"])
    mine = [p for p in plugins if p["name"] == PLUGIN]  # type: ignore[union-attr,index]
    assert len(mine) == 1, plugins
    assert mine[0]["listeners"] == ["txn_broker_airflow.listeners.TxnBrokerFailureListener"]
    assert "txn-broker==0.1.0" in mine[0]["source"]  # the entry point, not a plugins folder
    assert [v["name"] for v in mine[0]["external_views"]] == ["Transactions", "Transaction", "Events"]

    # the connection type and its form (what `airflow providers hooks` / `widgets` print and
    # the UI renders), from the providers manager itself, in one process
    seen = inspect(site, "inspect: package only")
    site_packages = str(site.venv)
    assert all(f.startswith(site_packages) for f in seen["files"]), seen["files"]  # type: ignore[union-attr]
    # the cached virtualenv lives under the repository (.venv-provider-test); nothing else may
    assert not [p for p in seen["sys_path"]  # type: ignore[union-attr]
                if p.startswith(str(REPO)) and not p.startswith(site_packages)], seen["sys_path"]
    # ours, beside those of Airflow's own providers the extra brings (OpenLineage's)
    assert ours_only(seen["plugins"]) == [PLUGIN]
    assert seen["import_errors"] == {}
    # DAG files import from the package itself (docs/first-pipeline.md); importing it loads
    # none of its submodules and no Spark until a name is used
    assert seen["loaded_by_package"] == [], seen["loaded_by_package"]
    top_level = seen["top_level"]
    assert isinstance(top_level, dict)
    for name in ("TxnBrokerHook", "ProduceToTopicOperator", "TransactionalSparkOperator", "TopicToPostgresOperator",
                 "TopicRecordsSensor", "TransactionTimeoutSensor", "TopicRecordsTrigger", "TopicSpec"):
        assert top_level.get(name, "").startswith(("txn_broker_airflow.", "txn_broker.")), (name, top_level)
    assert seen["hook"] == [["txn_broker_airflow.hooks.txn_broker.TxnBrokerHook", "txn-broker"]], seen["hook"]
    assert seen["listeners"] == ["TxnBrokerFailureListener"] and seen["failed_hookimpls"] == 1
    assert {"extra__txn_broker__database_url", "extra__txn_broker__storage_url",
            "extra__txn_broker__aws_secret_access_key"} <= set(seen["widgets"])  # type: ignore[arg-type]
    assert set(seen["behaviour"]["hidden_fields"]) == {"host", "schema", "login", "password", "port"}  # type: ignore[index]
    assert seen["asset_handler"] and seen["bad_asset"] != "accepted"
    assert seen["topic_asset"] == "txn-topic://txn_broker_default/orders_clean"


def check_plugins_folder_and_package_register_once(site: Site, tmp_path: Path) -> None:
    """The compose stack's layout: the repository's plugins/ mounted as the plugins folder
    while the package is installed too. The folder file defers to the entry point, so the
    plugin is listed once, with no 'already registered' import error, and its listener is
    registered once (a listener registered twice would abort, or log, everything twice).
    Also with lazy_discover_providers off, when Airflow loads providers' plugins as well."""
    plugins_folder = tmp_path / "plugins"
    shutil.copytree(REPO / "plugins", plugins_folder, ignore=shutil.ignore_patterns("__pycache__"))
    for lazy in ("True", "False"):
        extra = {"AIRFLOW__CORE__PLUGINS_FOLDER": str(plugins_folder), "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": lazy}
        if lazy == "True":  # Airflow's default
            plugins = site.airflow_json(["plugins"], "airflow plugins (plugins folder too)", **extra)
            assert [p["name"] for p in plugins].count(PLUGIN) == 1, plugins  # type: ignore[union-attr,index]
        seen = inspect(site, f"inspect: plugins folder too, lazy={lazy}", **extra)
        assert ours_only(seen["plugins"]) == [PLUGIN], seen
        # with lazy discovery off, Airflow registers the OpenLineage provider's plugin twice and
        # says so: that provider's own matter, not an error of ours
        assert ours_only(seen["import_errors"]) == [], seen["import_errors"]
        assert ours_only(seen["listeners"]) == ["TxnBrokerFailureListener"] and seen["failed_hookimpls"] == 1, seen


def check_example_dags_parse_and_orders_pipeline_runs(site: Site) -> None:
    """The copied example DAGs parse in the user's Airflow, and ``airflow dags test`` runs
    orders_pipeline end to end: generate, ingest, two Spark stages (local[2], one JVM for
    both with TXN_BROKER_SPARK_KEEP_SESSION), warehouse load, on the embedded broker."""
    dags = site.airflow_json(["dags", "list", "--local"])
    parsed = {d["dag_id"] for d in dags}  # type: ignore[union-attr,index]
    expected = {path.stem for path in (REPO / "dags").glob("*.py")}  # one DAG per file, named after it
    if parsed != expected:
        errors = site.airflow_json(["dags", "list-import-errors", "--local"])
        raise AssertionError(f"the example DAGs did not all parse: {sorted(parsed)}; import errors: {errors}")
    out = site.run([str(site.venv / "bin" / "airflow"), "dags", "test", "orders_pipeline",
                    "-c", json.dumps({"rows": ROWS})], "airflow dags test orders_pipeline", timeout=600,
                   TXN_BROKER_SPARK_KEEP_SESSION="1")
    assert "state=success" in out or "DagRun Finished" in out, out[-3000:]

    import txn_broker

    broker = txn_broker.connect(f"sqlite:///{site.broker_home / 'broker.db'}",
                                (site.broker_home / "segments").as_uri())
    try:
        counts = {}
        for topic in ("orders_raw", "orders_clean", "revenue_daily"):
            consumer = broker.consumer(group_id=f"check.{topic}", isolation_level="read_committed")
            consumer.subscribe([topic])
            total = 0
            while (batch := consumer.poll(max_records=10_000)).num_rows:
                total += batch.num_rows
            counts[topic] = total
    finally:
        broker.close()
    assert counts["orders_raw"] >= ROWS and 0 < counts["orders_clean"] <= counts["orders_raw"], counts
    assert counts["revenue_daily"] > 0, counts
    with sqlite3.connect(site.broker_home / "warehouse.db") as warehouse:
        (loaded,) = warehouse.execute("SELECT count(*) FROM revenue_daily").fetchone()
    assert loaded == counts["revenue_daily"], (loaded, counts)


def ours_only(names: object) -> list[str]:
    """``names`` without those of Airflow's OpenLineage provider, which the ``airflow`` extra
    brings (its plugin and listener are registered beside ours)."""
    return [n for n in names if not str(n).startswith("OpenLineage")]  # type: ignore[union-attr]
