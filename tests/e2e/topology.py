"""The production topology as processes on loopback: what ``docker compose up`` deploys,
started without a Docker engine.

The settings come from the same place as the compose stack's: ``docker-compose.yml`` and
``.env.example``. Each service's environment is the compose file's, interpolated with
``.env.example``; only what differs between containers and processes on one host is
changed, and it is listed here (``LOCAL_VARIABLES``, ``Topology.relocate``):

* addresses: a container reaches ``postgres:5432`` or ``spark-master:7077``; here every
  service listens on 127.0.0.1 on a free port, so ``service:port`` becomes
  ``127.0.0.1:<port>`` (``ADDRESSES``);
* paths: the compose file's bind mounts (``./dags:/opt/airflow/dags``) map the container
  paths back to the repository;
* the interpreter: ``PYSPARK_PYTHON`` is this virtualenv's Python;
* test tuning (``TEST_TUNING``): heartbeat thresholds low enough to see a zombie in seconds.

The number of Airflow workers and Spark workers, their sizes, and the executor are the
``.env.example`` values compose scales to (``AIRFLOW_WORKERS``, ``SPARK_WORKERS``, ...);
tests/unit/test_compose.py checks that compose and this runner agree.

Processes: PostgreSQL (provisioned by ``docker/postgres/init-databases.sh``, the broker
schema migrated by the owner role), moto's S3 server, ``redis-server``, the broker and
Airflow one-shots (``txn-broker db upgrade``, ``docker/airflow/airflow-init.sh``), a Spark
standalone master and workers (``spark-class``), and Airflow's api-server, scheduler,
dag-processor, triggerer and Celery workers. Each long-running process is its own process
group, stopped by its id.

    python tests/e2e/topology.py        # start it all, print the addresses, Ctrl-C stops it
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for _path in (REPO, REPO / "plugins", HERE.parent):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from _compose import interpolate, tokens  # noqa: E402
from _servers import PostgresServer, S3Server, free_port  # noqa: E402

COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_FILE = REPO / ".env.example"
BIN = Path(sys.executable).parent

#: compose services and the processes they become here
AIRFLOW_COMPONENTS = {
    "airflow-api-server": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
AIRFLOW_WORKER = "airflow-worker"
SPARK_MASTER = "spark-master"
SPARK_WORKER = "spark-worker"
#: the container addresses (service, port) the compose file names in its values
ADDRESSES = (("airflow-api-server", 8080), ("spark-master", 7077), ("redis", 6379))
#: .env.example variables that name where things are: here, loopback and free ports
LOCAL_VARIABLES = ("POSTGRES_HOST", "POSTGRES_PORT", "BROKER_S3_ENDPOINT_URL", "POSTGRES_SSLMODE")
#: compose services started here as servers of their own, not from their compose entry
REPLACED = {
    "postgres": "a PostgreSQL server (tests/_servers.py) provisioned by docker/postgres/init-databases.sh",
    "minio": "moto's S3 server",
    "minio-init": "the bucket, created with boto3 (moto accepts any credentials)",
    "redis": "Debian's redis-server",
    "broker-metrics": "not started: tests/observability/test_alerts_e2e.py runs the exporter under a real Prometheus",
    "prometheus": "not started: tests/observability/test_alerts_e2e.py runs Debian's prometheus with the same rules",
}
#: environment variables whose value is this machine's, not the image's
LOCAL_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
#: the test's own settings (never the stack's): a zombie is detected in seconds
TEST_TUNING = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "2",
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
    "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    # runs come from the test's triggers only, not from the DAGs' schedules
    "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
}


class SetupError(RuntimeError):
    """The topology cannot start: a missing program or an unreachable service."""


# -- settings: docker-compose.yml and .env.example ------------------------------------------


def parse_env_file(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.removeprefix("export ").partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


@dataclass(frozen=True)
class Settings:
    """What the stack deploys: the compose file and its variables."""

    compose: dict[str, Any]
    variables: dict[str, str]

    @classmethod
    def load(cls, compose_file: Path = COMPOSE_FILE, env_file: Path = ENV_FILE) -> Settings:
        return cls(yaml.safe_load(compose_file.read_text()), parse_env_file(env_file.read_text()))

    def service(self, name: str) -> dict[str, Any]:
        return dict(self.compose["services"][name])

    def count(self, name: str) -> int:
        """How many replicas of ``name`` the stack starts (``deploy.replicas``)."""
        replicas = (self.service(name).get("deploy") or {}).get("replicas", 1)
        return int(interpolate(str(replicas), self.variables))

    def environment(self, name: str, variables: dict[str, str]) -> dict[str, str]:
        env = self.service(name).get("environment") or {}
        if isinstance(env, list):
            env = dict(item.partition("=")[::2] for item in env)
        return {k: interpolate("" if v is None else str(v), variables) for k, v in env.items()}

    def command(self, name: str, variables: dict[str, str]) -> list[str]:
        return [interpolate(t, variables) for t in tokens(self.service(name).get("command"))]

    def mounts(self, name: str) -> dict[str, Path]:
        """{container path: repository path} of the service's bind mounts."""
        found = {}
        for volume in self.service(name).get("volumes") or []:
            source, _, rest = str(volume).partition(":")
            if source.startswith((".", "/")):
                found[rest.split(":")[0]] = (REPO / source).resolve()
        return found

    @property
    def airflow_workers(self) -> int:
        return self.count(AIRFLOW_WORKER)

    @property
    def spark_workers(self) -> int:
        return self.count(SPARK_WORKER)


# -- processes ------------------------------------------------------------------------------


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    env: dict[str, str] = field(repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def members(self) -> list[int]:
        """Every process of the service's session: it and everything it started (a task
        process and its Spark driver JVM have process groups of their own, not sessions)."""
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == self.proc.pid:
                        found.append(int(entry))
                except (ProcessLookupError, PermissionError):
                    continue
        return found

    def signal(self, sig: int) -> None:
        """Signal the service and everything it started (its whole session)."""
        for pid in [self.proc.pid, *self.members()]:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _wait(what: str, check: Callable[[], Any], timeout: float, service: Service | None = None,
          interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if service is not None and not service.alive():
            raise SetupError(f"{service.name} exited with {service.proc.returncode} before {what}:\n"
                             f"{service.tail()}")
        try:
            result = check()
            if result:
                return result
        except Exception as error:  # not up yet
            last = error
        time.sleep(interval)
    tail = f"\n{service.tail()}" if service is not None else ""
    raise SetupError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last}){tail}")


def check_redis(url: str, timeout: float = 5.0) -> None:
    """Fail with a clear message when the Celery broker (Redis) cannot be reached."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "localhost", parts.port or 6379
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
    except OSError as error:
        raise SetupError(f"the Celery broker (Redis) at {host}:{port} is not reachable ({error.strerror or error}): "
                         "start redis-server (scripts/system-deps.sh installs it) or fix "
                         "AIRFLOW__CELERY__BROKER_URL") from None
    if not reply.startswith(b"+PONG"):
        raise SetupError(f"{host}:{port} does not answer like Redis (PING -> {reply[:40]!r}): "
                         "check AIRFLOW__CELERY__BROKER_URL")


def require_program(path: str | None, name: str, package: str) -> str:
    if not path or not Path(path).exists():
        raise SetupError(f"{name} not found: install Debian's {package} (scripts/system-deps.sh does)")
    return path


class Topology:
    """Start with ``start()``, stop with ``stop()`` (or use ``running()``)."""

    def __init__(self, root: Path, settings: Settings | None = None, *,
                 extra_env: dict[str, dict[str, str]] | None = None,
                 redis: bool = True) -> None:
        self.root = root
        self.settings = settings or Settings.load()
        self.extra_env = extra_env or {}  # {service name: variables} for fault injection
        self.with_redis = redis
        self.services: dict[str, Service] = {}
        self.timings: dict[str, float] = {}
        self.pg: PostgresServer | None = None
        self.s3: S3Server | None = None
        self.ports = {address: free_port() for address in ADDRESSES}
        self.spark_master_ui = free_port()
        self.home = root / "airflow"
        self.home.mkdir(parents=True, exist_ok=True)
        self.variables: dict[str, str] = {}

    # -- addresses and environments ---------------------------------------------------------

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports[('airflow-api-server', 8080)]}"

    @property
    def spark_master_url(self) -> str:
        return f"spark://127.0.0.1:{self.ports[('spark-master', 7077)]}"

    @property
    def redis_port(self) -> int:
        return self.ports[("redis", 6379)]

    def relocate(self, value: str, mounts: dict[str, Path]) -> str:
        """A compose value as it reads for processes on this host."""
        for (host, port), local in self.ports.items():
            value = re.sub(rf"(?<=//){re.escape(host)}:{port}\b", f"127.0.0.1:{local}", value)
        for container, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
            value = re.sub(rf"(?<![\w/]){re.escape(container)}(?=/|$|{re.escape(os.pathsep)})", str(local), value)
        return value

    def mounts(self, service: str) -> dict[str, Path]:
        """Container paths of ``service`` and where they are here: its bind mounts, the
        image's copy of the repository, the Airflow home and its auth volume."""
        return {**self.settings.mounts(service), "/opt/airflow/auth": self.home / "auth",
                "/opt/txn_broker": REPO, "/opt/airflow": REPO}

    def command(self, service: str) -> list[str]:
        mounts = self.mounts(service)
        return [self.relocate(t, mounts) for t in self.settings.command(service, self.variables)]

    def environment(self, service: str) -> dict[str, str]:
        """The compose service's environment, relocated to this host."""
        mounts = self.mounts(service)
        env = {k: self.relocate(v, mounts) for k, v in self.settings.environment(service, self.variables).items()}
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("AIRFLOW", "TXN_BROKER_", "_AIRFLOW", "SPARK_", "PYSPARK_", "AWS_"))}
        env = {**base, **env}
        env["PATH"] = f"{BIN}{os.pathsep}{base.get('PATH', '')}"
        env["HOME"] = str(self.root)
        # the Spark driver in a task and its executors talk over loopback
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        if "PYSPARK_PYTHON" in env:  # LOCAL_ENV
            env["PYSPARK_PYTHON"] = sys.executable
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if "PYTHONPATH" in env:  # the repository's plugins folder, as in the Airflow tests
            env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(REPO / "plugins")])
        if service.startswith("airflow"):
            env["AIRFLOW_HOME"] = str(self.home)
            env.update(TEST_TUNING)
        env.update(self.extra_env.get(service, {}))
        return env

    # -- start and stop -----------------------------------------------------------------------

    def spawn(self, name: str, cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> Service:
        log = self.root / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=cwd or self.home,
                                    start_new_session=True)
        service = Service(name, proc, log, env)
        self.services[name] = service
        return service

    def one_shot(self, name: str, cmd: list[str], env: dict[str, str], timeout: float = 300) -> None:
        log = self.root / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.home,
                                  timeout=timeout, start_new_session=True)
        if proc.returncode != 0:
            raise SetupError(f"{name} ({' '.join(cmd[:3])}) exited with {proc.returncode}:\n"
                             + "\n".join(log.read_text(errors="replace").splitlines()[-40:]))

    @contextmanager
    def timed(self, what: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        self.timings[what] = time.monotonic() - start

    def start(self) -> None:
        started = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.timings["start-up"] = time.monotonic() - started

    def _start(self) -> None:
        with self.timed("postgres"):
            self.pg = PostgresServer()
        with self.timed("s3"):
            self.s3 = S3Server()
        self.bind(self.pg.port, self.s3.endpoint_url)
        v = self.variables
        if self.with_redis:
            redis = require_program(shutil.which("redis-server"), "redis-server", "redis-server")
            data = self.root / "redis"
            data.mkdir(exist_ok=True)
            service = self.spawn("redis", [redis, "--bind", "127.0.0.1", "--port", str(self.redis_port),
                                           "--save", "", "--appendonly", "no", "--dir", str(data)], dict(os.environ))
            _wait("redis", lambda: check_redis(f"redis://127.0.0.1:{self.redis_port}") or True, 30, service)
        with self.timed("provisioning"):
            # the databases, roles and logins: the compose stack's own script
            init_env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "POSTGRES_"))}
            init_env.update({key: v[key] for key in (
                "AIRFLOW_DB_USER", "AIRFLOW_DB_PASSWORD", "BROKER_OWNER_USER", "BROKER_OWNER_PASSWORD",
                "BROKER_CLIENT_USER", "BROKER_CLIENT_PASSWORD", "BROKER_MONITOR_USER", "BROKER_MONITOR_PASSWORD",
                "WAREHOUSE_DB_USER", "WAREHOUSE_DB_PASSWORD")})
            init_env.update({"PGHOST": "127.0.0.1", "PGPORT": str(self.pg.port), "PGUSER": self.pg.user,
                             "PGPASSWORD": self.pg.password, "PGDATABASE": "postgres",
                             "BROKER_SQL_DIR": str(REPO / "sql")})
            self.one_shot("postgres-init", ["bash", str(REPO / "docker/postgres/init-databases.sh")], init_env)
            self.s3.client().create_bucket(Bucket=v["BROKER_S3_BUCKET"])
            self.one_shot("broker-init", *self.process("broker-init"))
        with self.timed("spark cluster"):
            self._start_spark()
        with self.timed("airflow"):
            self.one_shot("airflow-init", *self.process("airflow-init"))
            self._start_airflow()

    def bind(self, postgres_port: int, s3_endpoint: str) -> None:
        """The .env.example variables, with where PostgreSQL and S3 listen here."""
        self.variables = {
            **self.settings.variables,
            "POSTGRES_HOST": "127.0.0.1", "POSTGRES_PORT": str(postgres_port), "POSTGRES_SSLMODE": "disable",
            "BROKER_S3_ENDPOINT_URL": s3_endpoint,
        }

    def process(self, name: str) -> tuple[list[str], dict[str, str]]:
        """The command and environment of process ``name`` (a compose service, or
        ``<service>-<i>`` for a replica of airflow-worker or spark-worker)."""
        service, _, replica = name.rpartition("-") if name.rpartition("-")[2].isdigit() else (name, "", "")
        env = self.environment(service)
        if service == "broker-init":
            return [str(BIN / "txn-broker"), *self.command(service)], env
        if service == "airflow-init":
            return self.command(service), env
        if service == SPARK_MASTER:
            env["SPARK_LOG_DIR"] = str(self.root / "logs")
            return [str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.ports[("spark-master", 7077)]), "--webui-port", str(self.spark_master_ui)], env
        if service == SPARK_WORKER:
            env["SPARK_WORKER_DIR"] = str(self.root / name)
            return [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                    "--webui-port", str(free_port()), self.spark_master_url], env
        cmd = [str(BIN / "airflow"), *self.command(service)]
        if service == AIRFLOW_WORKER:
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(free_port())
            return [*cmd, "--celery-hostname", f"{name}@127.0.0.1"], env
        component = AIRFLOW_COMPONENTS[service]
        if component == "api-server":
            cmd += ["--port", str(self.ports[("airflow-api-server", 8080)]), "--host", "127.0.0.1"]
        if component == "scheduler":
            env["AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT"] = str(free_port())
        if component == "triggerer":
            env["AIRFLOW__TRIGGERER__TRIGGERER_LOG_SERVER_PORT"] = str(free_port())
        return cmd, env

    def plan(self) -> dict[str, str]:
        """{process: compose service} of everything the runner starts from the compose file
        (PostgreSQL, MinIO and Redis are started as servers of their own: ``REPLACED``)."""
        names = {n: n for n in ("broker-init", "airflow-init", SPARK_MASTER, *AIRFLOW_COMPONENTS)}
        names |= {f"{SPARK_WORKER}-{i}": SPARK_WORKER for i in range(1, self.settings.spark_workers + 1)}
        names |= {f"{AIRFLOW_WORKER}-{i}": AIRFLOW_WORKER for i in range(1, self.settings.airflow_workers + 1)}
        return names

    def _start_spark(self) -> None:
        s = self.settings
        master = self.spawn(SPARK_MASTER, *self.process(SPARK_MASTER))
        _wait("the Spark master", lambda: self.spark_status() is not None, 90, master)
        for i in range(1, s.spark_workers + 1):
            self.start_spark_worker(i)
        _wait(f"{s.spark_workers} Spark workers to register",
              lambda: len(self.alive_spark_workers()) == s.spark_workers, 120, master)

    def start_spark_worker(self, i: int) -> Service:
        name = f"{SPARK_WORKER}-{i}"
        return self.spawn(name, *self.process(name))

    def spark_status(self) -> dict[str, Any] | None:
        try:
            reply = requests.get(f"http://127.0.0.1:{self.spark_master_ui}/json/", timeout=5)
            return dict(reply.json()) if reply.ok else None
        except requests.RequestException:
            return None

    def alive_spark_workers(self) -> list[dict[str, Any]]:
        status = self.spark_status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def _start_airflow(self) -> None:
        s = self.settings
        env = self.environment("airflow-api-server")
        check_redis(env["AIRFLOW__CELERY__BROKER_URL"])
        for service in AIRFLOW_COMPONENTS:
            self.spawn(service, *self.process(service))
        for i in range(1, s.airflow_workers + 1):
            self.start_airflow_worker(i)
        api = self.services["airflow-api-server"]
        _wait("the api-server", lambda: requests.get(f"{self.api_url}/api/v2/version", timeout=5).ok, 180, api)
        _wait(f"{s.airflow_workers} Celery workers", lambda: len(self.celery_workers()) == s.airflow_workers,
              180, api)

    def start_airflow_worker(self, i: int) -> Service:
        name = f"{AIRFLOW_WORKER}-{i}"
        return self.spawn(name, *self.process(name))

    def celery_workers(self) -> list[str]:
        """Hostnames of the Celery workers that answer a ping through Redis."""
        out = subprocess.run([str(BIN / "celery"), "-b", f"redis://127.0.0.1:{self.redis_port}/0", "inspect",
                              "ping", "--json", "--timeout", "3"], capture_output=True, text=True, timeout=60)
        try:
            return sorted(json.loads(out.stdout or "{}"))
        except ValueError:
            return []

    def stop(self) -> None:
        for service in reversed(list(self.services.values())):
            service.signal(signal.SIGCONT)  # a paused one must be able to exit
            service.signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for service in self.services.values():
            try:
                service.proc.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                pass
            service.signal(signal.SIGKILL)
            try:
                service.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.s3 is not None:
            self.s3.close()
            self.s3 = None
        if self.pg is not None:
            try:
                self.pg.stop("immediate")
            except Exception:
                pass
            shutil.rmtree(self.pg.root, ignore_errors=True)
            self.pg = None

    def logs(self, *names: str, lines: int = 60) -> str:
        chosen = names or tuple(self.services)
        return "\n".join(f"--- {n} ---\n{self.services[n].tail(lines)}" for n in chosen if n in self.services)

    # -- broker access (checks) -----------------------------------------------------------

    def broker_url(self, role: str = "CLIENT") -> str:
        v = self.variables
        return (f"postgresql://{v[f'BROKER_{role}_USER']}:{v[f'BROKER_{role}_PASSWORD']}@127.0.0.1:"
                f"{v['POSTGRES_PORT']}/txn_broker")

    @property
    def storage_url(self) -> str:
        return f"s3://{self.variables['BROKER_S3_BUCKET']}/segments"

    def connect(self, role: str = "CLIENT"):  # type: ignore[no-untyped-def]
        import txn_broker

        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
            os.environ.setdefault(key, self.environment(SPARK_WORKER)[key])
        os.environ["TXN_BROKER_S3_ENDPOINT_URL"] = self.variables["BROKER_S3_ENDPOINT_URL"]
        return txn_broker.connect(self.broker_url(role), self.storage_url)

    @property
    def warehouse_url(self) -> str:
        v = self.variables
        return (f"postgresql://{v['WAREHOUSE_DB_USER']}:{v['WAREHOUSE_DB_PASSWORD']}@127.0.0.1:"
                f"{v['POSTGRES_PORT']}/warehouse")


# -- Airflow's REST API, as a user calls it ------------------------------------------------


class AirflowAPI:
    def __init__(self, base: str, username: str, password: str) -> None:
        self.base = base
        reply = requests.post(f"{base}/auth/token", json={"username": username, "password": password}, timeout=30)
        if not reply.ok:
            raise SetupError(f"POST /auth/token: {reply.status_code} {reply.text[:300]}")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {reply.json()['access_token']}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        reply = self.session.request(method, f"{self.base}/api/v2{path}", timeout=30, **kwargs)
        if not reply.ok:
            raise AssertionError(f"{method} {path}: {reply.status_code} {reply.text[:500]}")
        return reply.json() if reply.content else None

    def dag_exists(self, dag_id: str) -> bool:
        reply = self.session.get(f"{self.base}/api/v2/dags/{dag_id}", timeout=30)
        return reply.ok

    def unpause(self, dag_id: str) -> None:
        self.call("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        return str(run["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        data = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti for ti in data["task_instances"]}

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        data = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
        return list(data["task_instances"])

    def xcom(self, dag_id: str, run_id: str, task_id: str) -> Any:
        data = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/return_value",
                         params={"deserialize": "true", "stringify": "false"})
        value = data["value"]
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        return value


if __name__ == "__main__":
    root = Path(tempfile.mkdtemp(prefix="txnb-topology-"))
    topology = Topology(root)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # stop() runs either way
    topology.start()
    try:
        print(json.dumps({"api": topology.api_url, "spark_master": topology.spark_master_url,
                          "spark_ui": f"http://127.0.0.1:{topology.spark_master_ui}", "logs": str(root / "logs"),
                          "timings": topology.timings}, indent=2), flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        topology.stop()
