"""Helpers of the Airflow tests (fixtures in conftest.py): the DAG-running site, and real
Airflow components for the end-to-end test (api-server, scheduler with LocalExecutor,
dag-processor), each its own process group, polled with deadlines, stopped by their ids.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RUNNER = HERE / "dag_runner.py"


def clean_environment() -> dict[str, str]:
    """This process's environment without Airflow or broker settings (tests add theirs)."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "TXN_BROKER_", "_AIRFLOW"))}


@dataclass
class DagResult:
    state: str
    run_id: str
    tasks: dict[str, dict[str, Any]]
    xcom: dict[str, Any]
    output: str = field(repr=False, default="")

    def task_state(self, key: str) -> str:
        return str(self.tasks[key]["state"])

    def tail(self, lines: int = 120) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


@dataclass
class AirflowSite:
    home: Path
    dags: Path
    env: dict[str, str]

    def environment(self, backend_env: dict[str, str] | None = None, broker_home: Path | None = None,
                    **extra: str) -> dict[str, str]:
        env = {**clean_environment(), **self.env, **(backend_env or {}),
               "TXN_BROKER_SPARK_KEEP_SESSION": "1"}  # one SparkContext per dag.test process
        if broker_home is not None:
            env["TXN_BROKER_HOME"] = str(broker_home)
        env.update(extra)
        return env

    def run_dag(self, dag_id: str, *, backend_env: dict[str, str] | None = None,
                broker_home: Path | None = None, extra_env: dict[str, str] | None = None,
                conf: dict[str, Any] | None = None, logical_date: str | None = None,
                timeout: float = 300) -> DagResult:
        """Run ``dag_id`` (a file ``<dag_id>.py`` in the DAGs folder) with dag.test()."""
        (result,) = self.run_dags(dag_id, 1, backend_env=backend_env, broker_home=broker_home,
                                  extra_env=extra_env, conf=conf, logical_date=logical_date, timeout=timeout)
        return result

    def run_dags(self, dag_id: str, runs: int, *, backend_env: dict[str, str] | None = None,
                 broker_home: Path | None = None, extra_env: dict[str, str] | None = None,
                 conf: dict[str, Any] | None = None, logical_date: str | None = None,
                 timeout: float = 300, run_confs: list[dict[str, Any] | None] | None = None) -> list[DagResult]:
        """``runs`` DAG runs of ``dag_id``, one after the other in one dag.test process
        (``run_confs``: one run per conf, in order). Each result carries the whole process
        output."""
        cmd = [sys.executable, str(RUNNER), str(self.dags / f"{dag_id}.py"), dag_id, "--runs", str(runs)]
        if run_confs is not None:
            cmd += ["--run-confs", json.dumps(run_confs)]
            runs = len(run_confs)
        if conf is not None:
            cmd += ["--conf", json.dumps(conf)]
        if logical_date is not None:
            cmd += ["--logical-date", logical_date]
        env = self.environment(backend_env, broker_home, **(extra_env or {}))
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=self.home)
        output = proc.stdout + "\n" + proc.stderr
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("DAG_RESULT ")]
        if len(lines) != runs:
            raise AssertionError(f"dag.test of {dag_id} exited {proc.returncode} with {len(lines)} of {runs} "
                                 "results:\n" + "\n".join(output.splitlines()[-150:]))
        results = []
        for line in lines:
            # the result's own JSON; a log line another thread wrote meanwhile may follow it
            data, _end = json.JSONDecoder().raw_decode(line[len("DAG_RESULT "):])
            results.append(DagResult(data["state"], data["run_id"], data["tasks"], data["xcom"], output))
        return results

    def popen_dag(self, dag_id: str, *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        """Start dag.test of ``dag_id`` in the background (output to ``log``)."""
        cmd = [sys.executable, str(RUNNER), str(self.dags / f"{dag_id}.py"), dag_id]
        with log.open("wb") as out:
            return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.home)


def site_settings(home: Path, dags: Path, database_url: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO), str(REPO / "plugins"), str(HERE)])
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "PYTHONPATH": path,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "TXN_BROKER_SPARK_MASTER": "local[2]",
        "TXN_BROKER_SPARK_APPS": str(REPO / "spark_apps"),
    }


def link_dags(dags: Path, include_test_dags: bool = True) -> None:
    """Fill a DAGs folder with symlinks to the repository's DAGs (and the test DAGs)."""
    dags.mkdir(parents=True, exist_ok=True)
    sources = [*(REPO / "dags").glob("*.py"), *((HERE / "dag_files").glob("*.py") if include_test_dags else [])]
    for source in sources:
        target = dags / source.name
        if not target.exists():
            target.symlink_to(source)


# -- real Airflow components (the end-to-end test) ---------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AirflowServices:
    def __init__(self, home: Path, env: dict[str, str], components: tuple[str, ...] = (
            "api-server", "scheduler", "dag-processor")) -> None:
        self.home = home
        self.api_port = free_port()
        self.env = {
            **env,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "2",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{self.api_port}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": uuid.uuid4().hex,
            "AIRFLOW__API__SECRET_KEY": uuid.uuid4().hex,
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        }
        self.components = components
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.engine = sa.create_engine(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True,
                              text=True, timeout=timeout, cwd=self.home)
        if proc.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
        return proc

    def start(self) -> None:
        self.cli("db", "migrate", timeout=300)
        for name in self.components:
            self.start_component(name)

    def start_component(self, name: str, command: str | None = None) -> None:
        """Start one component (again, after :meth:`kill`; or a second one of ``command``
        under another ``name``); its log ``<name>.log`` is appended to."""
        command = command or name
        args = ["api-server", "--port", str(self.api_port)] if command == "api-server" else [command]
        log = (self.home / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen([sys.executable, "-m", "airflow", *args], env=self.env,
                                            stdout=log, stderr=subprocess.STDOUT, cwd=self.home,
                                            start_new_session=True)
        log.close()

    def kill(self, name: str) -> None:
        """SIGKILL one component's whole process group (no clean shutdown) and reap it."""
        proc = self.procs.pop(name)
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"airflow {name} exited with {proc.returncode}:\n{self.log_tail(name)}")

    def log_tail(self, name: str, lines: int = 60) -> str:
        path = self.home / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def query(self, sql: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.text(sql), params).all())

    def wait_for(self, what: str, check: Any, timeout: float, interval: float = 1.0) -> Any:
        """Poll ``check()`` until it returns something truthy, or fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            try:
                result = check()
            except sa.exc.OperationalError:  # SQLite busy while a component writes
                result = None
            if result:
                return result
            time.sleep(interval)
        logs = "\n".join(f"--- {n} ---\n{self.log_tail(n, 200)}" for n in self.procs)
        raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{self._state()}\n{logs}")

    def _state(self) -> str:
        """The DAG runs, task instances and asset events as the metadata database has them
        (what a timed-out wait was waiting on)."""
        try:
            runs = self.query("SELECT dag_id, run_id, state FROM dag_run ORDER BY id")
            tasks = self.query("SELECT dag_id, run_id, task_id, state, try_number FROM task_instance")
            events = self.query("SELECT e.id, a.uri, e.timestamp, e.extra FROM asset_event e "
                                "JOIN asset a ON a.id = e.asset_id ORDER BY e.id")
        except sa.exc.SQLAlchemyError as error:
            return f"(the metadata database could not be read: {error})"
        lines = ["--- dag runs ---", *map(str, runs), "--- task instances ---", *map(str, tasks),
                 "--- asset events ---", *map(str, events)]
        return "\n".join(lines)

    def stop(self) -> None:
        """SIGTERM each component's process group (it includes the task processes it
        started), then SIGKILL what is left after a deadline."""
        for proc in self.procs.values():
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait(10)
        self.engine.dispose()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group has exited
        pass
