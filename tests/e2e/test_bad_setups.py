"""Bad set-ups of the distributed topology get a clear error, not a traceback deep in a task:

* no Redis: the stack's start-up (``docker/airflow/airflow-init.sh``, which the topology
  runner also runs) and the runner itself say which broker is unreachable and what to do;
* a worker without the ``txn-broker`` package: importing the Airflow layer (what every DAG
  file does, on the dag-processor and on the worker before the task runs) fails with a
  message naming the package and how to install it;
* a Spark executor that cannot reach the object storage (its S3 traffic goes through a
  proxy that does not exist): the stage fails on the driver with the broker's typed
  ``StorageUnavailableError`` (retriable), raised in the executor, not a Py4J error.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from _servers import AWS_TEST_ENV, free_port
from topology import BIN, REPO, Settings, SetupError, Topology, check_redis

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

HERE = Path(__file__).resolve().parent


def test_missing_redis_is_named_by_the_runner() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(SetupError, match=rf"Celery broker \(Redis\) at 127.0.0.1:{port} is not reachable.*"
                                         "redis-server"):
        check_redis(f"redis://127.0.0.1:{port}/0")


@pytest.mark.slow
def test_missing_redis_stops_the_stack_at_start_up(tmp_path: Path) -> None:
    """airflow-init (a one-shot every Airflow service waits on) fails in seconds, before
    it migrates anything, with one line saying which broker is missing."""
    runner = Topology(tmp_path, Settings.load())
    runner.bind(free_port(), "http://127.0.0.1:9")  # nothing is started: the check comes first
    cmd, env = runner.process("airflow-init")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    assert f"the Celery broker (Redis) at 127.0.0.1:{runner.redis_port} is not reachable" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "migrating" not in proc.stdout


@pytest.mark.slow
def test_worker_without_the_package_names_it(tmp_path: Path) -> None:
    """A DAG file parsed where ``txn_broker`` is not installed (a ``sitecustomize`` hides
    the module and its distribution, as on a worker image built without it): Airflow
    reports the DAG's import error with our message."""
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'txn_broker' or name.startswith('txn_broker.'):\n"
        "            raise ModuleNotFoundError(f\"No module named '{name}'\", name=name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Hide())\n"
        # ...and its distribution, whose entry points (the provider) a worker without it lacks
        "import importlib.metadata, importlib_metadata\n"
        "for _m in (importlib.metadata, importlib_metadata):\n"
        "    def _dists(*a, _orig=_m.distributions, **k):\n"
        "        return (d for d in _orig(*a, **k) if (d.metadata['Name'] or '').replace('_', '-') != 'txn-broker')\n"
        "    _m.distributions = _dists\n")
    code = ("from airflow.dag_processing.dagbag import DagBag\n"
            f"bag = DagBag(dag_folder={str(REPO / 'dags' / 'orders_pipeline.py')!r})\n"
            "print('DAGS', sorted(bag.dag_ids))\n"
            "for path, error in bag.import_errors.items():\n"
            "    print('IMPORT_ERROR', error)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "TXN_BROKER_"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(hide), str(REPO / "plugins")]), "AIRFLOW_HOME": str(tmp_path),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path / 'airflow.db'}"})
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "DAGS []" in proc.stdout, out[-3000:]
    assert "txn_broker_airflow needs the txn-broker package" in out, out[-3000:]
    assert "pip install 'txn-broker[airflow]'" in out


@pytest.mark.slow
@pytest.mark.spark
def test_executor_without_storage_gets_a_typed_error(tmp_path: Path, pg_server, s3_server) -> None:  # type: ignore[no-untyped-def]
    from txn_broker.migrations import upgrade

    database = pg_server.new_database(f"bad_{uuid.uuid4().hex[:8]}")
    upgrade(database)
    storage = f"s3://{s3_server.new_bucket()}/segments"
    master_port, master_ui = free_port(), free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TXN_BROKER_", "SPARK_", "PYSPARK_"))}
    base.update({**AWS_TEST_ENV, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                 "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"})
    dead_proxy = f"http://127.0.0.1:{free_port()}"
    # the worker (so its executors) reaches S3 only through a proxy that is not there
    worker_env = {**base, "HTTP_PROXY": dead_proxy, "HTTPS_PROXY": dead_proxy, "http_proxy": dead_proxy,
                  "https_proxy": dead_proxy, "SPARK_WORKER_DIR": str(tmp_path / "work")}
    worker_env.pop("NO_PROXY", None)
    worker_env.pop("no_proxy", None)
    procs = []
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        for name, cmd, env in (
            ("master", [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(master_port), "--webui-port", str(master_ui)], base),
            ("worker", [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", "1", "--memory", "1g", f"spark://127.0.0.1:{master_port}"], worker_env),
        ):
            with (logs / f"{name}.log").open("wb") as out:
                procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                              start_new_session=True))
        deadline = time.monotonic() + 180
        while True:
            try:
                status = requests.get(f"http://127.0.0.1:{master_ui}/json/", timeout=5).json()
                if any(w.get("state") == "ALIVE" for w in status.get("workers", [])):
                    break
            except (requests.RequestException, ValueError):
                pass
            assert time.monotonic() < deadline, (logs / "worker.log").read_text()[-3000:]
            time.sleep(1)
        driver_env = {**base, "TXN_BROKER_DATABASE_URL": database, "TXN_BROKER_STORAGE_URL": storage,
                      "TXN_BROKER_S3_ENDPOINT_URL": s3_server.endpoint_url}
        proc = subprocess.run([sys.executable, str(HERE / "storage_driver.py"), f"spark://127.0.0.1:{master_port}"],
                              env=driver_env, capture_output=True, text=True, timeout=600)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(30)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BROKER_ERROR ")]
    assert proc.returncode == 3 and lines, proc.stdout[-2000:] + proc.stderr[-4000:]
    _, cls, handling, message = lines[0].split(" ", 3)
    assert cls == "StorageUnavailableError" and handling == "retry", lines[0]
    assert "S3 put" in message and "failed" in message
